package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"sort"
	"time"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// Row is one line of the kernel benchmark. Its JSON field names are a
// contract: scripts read them.
type Row struct {
	Device     string `json:"device"`
	Layer      string `json:"layer"` // "mamba2" or "gdn"
	Shape      string `json:"shape"`
	Mode       string `json:"mode"` // baseline, replay, replay-nvfp4, replay-fp8, verify, verify-baseline, verify-nvfp4, verify-fp8
	StateDtype string `json:"state_dtype"`
	Batch      int    `json:"batch"`
	Window     int    `json:"window"`
	Drafts     int    `json:"t,omitempty"`
	Threads    int    `json:"threads,omitempty"`

	// UsPerStep is the mean time of one step of the whole batch; for replay
	// modes, averaged over a window with every slot at its own flush phase.
	UsPerStep  float64 `json:"us_per_step"`
	UsNonflush float64 `json:"us_nonflush"`
	UsFlush    float64 `json:"us_flush"`
	// BytesPerStep counts state traffic (docs/DESIGN.md 3): what the step must
	// read and write of checkpoints, read copies and state buffers.
	BytesPerStep float64 `json:"bytes_per_step"`
	// RingBytesPerStep is the ring traffic on top (replay only).
	RingBytesPerStep float64 `json:"ring_bytes_per_step,omitempty"`
	GBps             float64 `json:"gbps"`
	CopyGBps         float64 `json:"copy_gbps"`
	ReadGBps         float64 `json:"read_gbps,omitempty"` // read-only bandwidth, same run
	PctCopy          float64 `json:"pct_copy"`
	// PctCopyWithRing is PctCopy counting the ring's traffic too (replay
	// rows): what the step moves in all, against the copy bandwidth. The
	// issue's targets count state bytes alone; this says how far from the
	// copy bandwidth a row is on everything it reads and writes.
	PctCopyWithRing   float64 `json:"pct_copy_with_ring,omitempty"`
	SpeedupVsBaseline float64 `json:"speedup_vs_baseline"`
	// NonflushVsReplay, on replay-nvfp4 and replay-fp8 rows, is the plain
	// replay row's non-flush time over this row's (same checkpoint dtype).
	NonflushVsReplay float64 `json:"nonflush_vs_replay,omitempty"`
	// RingDtype is a replay row's ring format where it is not fp32
	// (KernelConfig.Ring).
	RingDtype string `json:"ring_dtype,omitempty"`
	// Kernels names the GPU kernels of a replay row's step, verify and
	// folds ("step group, verify pipelined, folds items";
	// backend/cuda/KERNELS.md).
	Kernels string `json:"kernels,omitempty"`
}

// KernelConfig selects what RunKernels measures.
type KernelConfig struct {
	Shapes  []LayerShape
	Batches []int
	Modes   []string
	Dtypes  []numeric.Format
	Window  int
	Drafts  int // T for verify rows
	Threads int
	// Ring is the replay rows' ring format (replay.Options.Ring): fp32
	// (the zero value) or bf16. Baseline rows keep no ring.
	Ring numeric.Format
	// MinTime is the least time spent timing each row; more windows are
	// run until it is reached.
	MinTime time.Duration
	// Log, where set, receives notes on the run that are not rows (the
	// CUDA bench: the modules it compiled before timing, and how long
	// that took).
	Log io.Writer
}

// RunKernels measures every selected row on the CPU and calls emit for each,
// in order. The copy bandwidth is measured first, in the same run.
func RunKernels(ctx context.Context, cfg KernelConfig, emit func(Row) error) error {
	if cfg.Window == 0 {
		cfg.Window = replay.DefaultWindow
	}
	if cfg.Drafts == 0 {
		cfg.Drafts = 4
	}
	if cfg.MinTime == 0 {
		cfg.MinTime = 300 * time.Millisecond
	}
	cp, upd, rd := MemoryBandwidth(256<<20, cfg.Threads)
	copyGBps := max(cp, upd)
	for _, sh := range cfg.Shapes {
		for _, dt := range cfg.Dtypes {
			for _, batch := range cfg.Batches {
				var group ratios
				for _, mode := range Modes {
					if !slices.Contains(cfg.Modes, mode) {
						continue
					}
					if err := ctx.Err(); err != nil {
						return err
					}
					row, err := measure(ctx, sh, dt, batch, mode, cfg)
					if err != nil {
						return fmt.Errorf("%s %s batch %d %s: %w", sh.Name, dt, batch, mode, err)
					}
					row.Device = "cpu"
					row.CopyGBps = copyGBps
					row.ReadGBps = rd
					group.fill(&row, copyGBps)
					if err := emit(row); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// ratios fills a row's derived figures from the rows measured before it in
// the same (shape, dtype, batch) group, on any device: bandwidth, % of the
// copy bandwidth, the speedup over the group's baseline (the in-place one,
// or the per-draft-state one for verify rows) and, for the nvfp4 read copy,
// its non-flush speedup over plain replay's.
type ratios struct{ base, plain Row }

func (g *ratios) fill(row *Row, copyGBps float64) {
	row.GBps = row.BytesPerStep / row.UsPerStep / 1e3
	row.PctCopy = 100 * row.GBps / copyGBps
	if row.RingBytesPerStep > 0 {
		row.PctCopyWithRing = 100 * (row.BytesPerStep + row.RingBytesPerStep) / row.UsPerStep / 1e3 / copyGBps
	}
	m, _ := ParseMode(row.Mode)
	switch {
	case m.State == replay.Baseline:
		g.base = *row
		row.SpeedupVsBaseline = 1
	case g.base.UsPerStep > 0:
		row.SpeedupVsBaseline = g.base.UsPerStep / row.UsPerStep
	}
	switch {
	case m == Mode{State: replay.Replay}:
		g.plain = *row
	case m.State == replay.Replay && !m.Verify && m.ReadCopy != numeric.F32 && g.plain.UsNonflush > 0:
		row.NonflushVsReplay = g.plain.UsNonflush / row.UsNonflush
	}
}

func measure(ctx context.Context, sh LayerShape, dt numeric.Format, batch int, mode string, cfg KernelConfig) (Row, error) {
	if _, err := ParseMode(mode); err != nil {
		return Row{}, err
	}
	opt := kernelOptions(mode, dt, cfg)
	opt.Threads = cfg.Threads
	T := opt.MaxDraft
	lc, err := NewDriver(sh, batch, batch*max(1, T), opt, 0, newRand(uint64(batch)))
	if err != nil {
		return Row{}, err
	}
	defer lc.Close()
	slots := make([]replay.Slot, batch)
	for i := range slots {
		if slots[i], err = lc.Admit(); err != nil {
			return Row{}, err
		}
	}
	// The previous rows' caches are garbage now: collect them before the
	// clock starts, so no concurrent mark phase takes one of the workers'
	// cores during this row (seen as 20-30% jumps on a 2-core machine).
	runtime.GC()
	row := Row{Layer: sh.Layer, Shape: sh.Name, Mode: mode, StateDtype: dt.String(), Batch: batch, Window: cfg.Window, Drafts: T,
		Threads: opt.Threads, RingDtype: ringDtype(opt)}
	if opt.Mode == replay.Baseline {
		row.Window = 1
	}
	L := cfg.Window
	set := 0
	next := func() int { set = (set + 1) % inputSets; return set }
	timed := func(fn func() error) (float64, error) {
		start := time.Now()
		err := fn()
		return float64(time.Since(start).Nanoseconds()) / 1e3, err
	}
	before := lc.Stats()
	switch {
	case T > 0:
		// Each verify carries T drafts; all are accepted, so replay slots
		// walk through early flushes at their own pace.
		acc := make([]int, batch)
		for i := range acc {
			acc[i] = T
		}
		var times []float64
		deadline := time.Now().Add(cfg.MinTime)
		for len(times) < 3 || time.Now().Before(deadline) {
			if err := ctx.Err(); err != nil {
				return row, err
			}
			us, err := timed(func() error {
				if err := lc.Verify(slots, next(), T); err != nil {
					return err
				}
				return lc.Commit(slots, acc)
			})
			if err != nil {
				return row, err
			}
			times = append(times, us)
		}
		row.UsPerStep = mean(times)
		row.UsNonflush, row.UsFlush = row.UsPerStep, row.UsPerStep
		st := lc.Stats()
		row.BytesPerStep = float64(st.StateBytesRead+st.StateBytesWritten-before.StateBytesRead-before.StateBytesWritten) / float64(len(times))
	case opt.Mode == replay.Baseline:
		var times []float64
		deadline := time.Now().Add(cfg.MinTime)
		for len(times) < 3 || time.Now().Before(deadline) {
			if err := ctx.Err(); err != nil {
				return row, err
			}
			us, err := timed(func() error { return lc.Step(slots, next()) })
			if err != nil {
				return row, err
			}
			times = append(times, us)
		}
		row.UsPerStep = median(times)
		row.UsNonflush, row.UsFlush = row.UsPerStep, row.UsPerStep
		st := lc.Stats()
		row.BytesPerStep = float64(st.StateBytesRead+st.StateBytesWritten-before.StateBytesRead-before.StateBytesWritten) / float64(len(times))
	default:
		// Aligned phases: every slot flushes on the window's last step, so
		// non-flush and flush steps can be timed apart.
		perIndex := make([][]float64, L)
		deadline := time.Now().Add(cfg.MinTime / 2)
		for rounds := 0; rounds < 2 || time.Now().Before(deadline); rounds++ {
			for k := 0; k < L; k++ {
				us, err := timed(func() error { return lc.Step(slots, next()) })
				if err != nil {
					return row, err
				}
				perIndex[k] = append(perIndex[k], us)
			}
		}
		var nonflush []float64
		for k := 0; k < L-1; k++ {
			nonflush = append(nonflush, median(perIndex[k]))
		}
		row.UsFlush = median(perIndex[L-1])
		row.UsNonflush = row.UsFlush
		if L > 1 {
			row.UsNonflush = mean(nonflush)
		}
		// Staggered phases, as in serving: slot i sits i steps into its
		// window, so each step flushes about batch/L slots.
		for k := 1; k < L; k++ {
			var sub []replay.Slot
			for i, s := range slots {
				if i%L >= k {
					sub = append(sub, s)
				}
			}
			if len(sub) > 0 {
				if err := lc.Step(sub, 0); err != nil {
					return row, err
				}
			}
		}
		before = lc.Stats()
		var windows []float64
		deadline = time.Now().Add(cfg.MinTime / 2)
		for len(windows) < 2 || time.Now().Before(deadline) {
			if err := ctx.Err(); err != nil {
				return row, err
			}
			us, err := timed(func() error {
				for k := 0; k < L; k++ {
					if err := lc.Step(slots, next()); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return row, err
			}
			windows = append(windows, us/float64(L))
		}
		row.UsPerStep = median(windows)
		st := lc.Stats()
		steps := float64(len(windows) * L)
		row.BytesPerStep = float64(st.StateBytesRead+st.StateBytesWritten-before.StateBytesRead-before.StateBytesWritten) / steps
		row.RingBytesPerStep = float64(batch) * ringOf(sh).perStep(L)
	}
	return row, nil
}

const inputSets = 3

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

func fill(r *rand.Rand, x []float32, scale, shift float32) {
	for i := range x {
		x[i] = float32(r.NormFloat64())*scale + shift
	}
}

func mean(x []float64) float64 {
	s := 0.0
	for _, v := range x {
		s += v
	}
	return s / float64(len(x))
}

func median(x []float64) float64 {
	y := slices.Clone(x)
	sort.Float64s(y)
	n := len(y)
	if n%2 == 1 {
		return y[n/2]
	}
	return (y[n/2-1] + y[n/2]) / 2
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/replayssm/replayssm/backend/cuda"
	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// BandwidthCUDA measures the first GPU's memory bandwidth over a buffer of
// bytes (several times its L2 cache: 1 GiB on an H200): the copy, counting
// bytes read + written, and the read-only pass over the same buffer, in
// GB/s, with the device's name.
func BandwidthCUDA(ctx context.Context, bytes int) (device string, copyGBps, readGBps float64, err error) {
	dev, err := cuda.Open(ctx, cuda.Options{})
	if err != nil {
		return "", 0, 0, err
	}
	defer dev.Close()
	copyGBps, readGBps, err = dev.MeasureBandwidth(ctx, bytes)
	return dev.Name(), copyGBps, readGBps, err
}

// RunKernelsCUDA measures the GPU state caches of package cuda on the first
// GPU, row by row like RunKernels, and calls emit for each. The copy
// bandwidth is measured first, in the same run (1 GiB device-to-device copy,
// bytes read + written), with the read-only bandwidth over the same GiB. Every timing is the median of event-timed replays of
// a CUDA graph of whole steps (a window of L steps, or 4 verify+commit
// rounds), so launch overheads stay out of the numbers; inputs rotate among
// three sets, and at batch ≥ 64 the states are far larger than the L2 cache.
// Replay rows are timed twice: with every slot at the same phase (the
// non-flush and flush columns) and with slot i at phase i mod L, as in
// serving (us_per_step, the window average).
func RunKernelsCUDA(ctx context.Context, cfg KernelConfig, emit func(Row) error) error {
	if cfg.Window == 0 {
		cfg.Window = replay.DefaultWindow
	}
	if cfg.Drafts == 0 {
		cfg.Drafts = 4
	}
	if cfg.MinTime == 0 {
		cfg.MinTime = 100 * time.Millisecond
	}
	dev, err := cuda.Open(ctx, cuda.Options{})
	if err != nil {
		return err
	}
	defer dev.Close()
	copyGBps, readGBps, err := dev.MeasureBandwidth(ctx, 1<<30)
	if err != nil {
		return err
	}
	s, err := dev.NewStream()
	if err != nil {
		return err
	}
	defer s.Close()
	timer, err := dev.NewTimer(s)
	if err != nil {
		return err
	}
	defer timer.Close()
	b := &cudaBench{dev: dev, s: s, timer: timer, cfg: cfg}
	start := time.Now()
	if err := b.prewarm(ctx); err != nil {
		return err
	}
	warm := dev.CompileStats()
	if cfg.Log != nil {
		fmt.Fprintf(cfg.Log, "cuda: modules built in %.1f s: %v\n", time.Since(start).Seconds(), warm)
		defer func() {
			// Rows whose modules the prewarm missed compiled their own.
			if all := dev.CompileStats(); all.Compiled > warm.Compiled {
				fmt.Fprintf(cfg.Log, "cuda: %d more modules compiled while timing (NVRTC %.1f s)\n",
					all.Compiled-warm.Compiled, (all.NVRTC - warm.NVRTC).Seconds())
			}
		}()
	}
	defer func() {
		for _, e := range b.events {
			e.Close()
		}
	}()
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
					row, err := b.measure(ctx, sh, dt, batch, mode)
					if err != nil {
						return fmt.Errorf("cuda %s %s batch %d %s: %w", sh.Name, dt, batch, mode, err)
					}
					row.Device = "cuda"
					row.CopyGBps = copyGBps
					row.ReadGBps = readGBps
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

type cudaBench struct {
	dev    *cuda.Device
	s      *cuda.Stream
	timer  *cuda.Timer
	cfg    KernelConfig
	events [3]*cuda.Event
}

// gpuLayer is one GPU cache behind the operations the benchmark times.
type gpuLayer struct {
	admit     func() error
	step      func(batch, set int, slots cuda.Buffer) error
	verify    func(batch, set, T int, slots cuda.Buffer) error
	commit    func(batch int, slots, acc cuda.Buffer) error
	close     func() error
	stateSize func() (state, read int)
	ring      ringTraffic // the ring's bytes per entry (as the CPU bench counts them)
	// kernels names the step's, the verify's and the folds' kernels at a
	// batch ("step group, verify group, folds pipelined").
	kernels func(batch int) string
}

// kernelNames is gpuLayer.kernels for a cache of either layer.
func kernelNames(c interface {
	StepKernel(batch int) string
	VerifyKernel(batch int) string
	FoldKernel() (kernel, why string)
}) func(int) string {
	return func(batch int) string {
		fold, _ := c.FoldKernel()
		return "step " + c.StepKernel(batch) + ", verify " + c.VerifyKernel(batch) + ", folds " + fold
	}
}

// measure times one row.
func (b *cudaBench) measure(ctx context.Context, sh LayerShape, dt numeric.Format, batch int, mode string) (Row, error) {
	cfg := b.cfg
	L := cfg.Window
	opt := modeOptions(mode, dt, cfg)
	T := opt.MaxDraft
	row := Row{Layer: sh.Layer, Shape: sh.Name, Mode: mode, StateDtype: dt.String(), Batch: batch, Window: L, Drafts: T,
		RingDtype: ringDtype(opt)}
	if opt.Mode == replay.Baseline {
		row.Window = 1
	}
	var allocs []cuda.Buffer
	defer func() {
		b.s.Synchronize()
		for _, a := range allocs {
			b.dev.Free(a)
		}
	}()
	alloc := func(n int) (cuda.Buffer, error) {
		a, err := b.dev.Alloc(n)
		if err == nil {
			allocs = append(allocs, a)
		}
		return a, err
	}
	rows := batch * max(1, T)
	lc, err := b.newLayer(ctx, sh, batch, rows, opt, alloc)
	if err != nil {
		return row, err
	}
	defer lc.close()
	for range batch {
		if err := lc.admit(); err != nil {
			return row, err
		}
	}
	slots, err := alloc(4 * batch)
	if err != nil {
		return row, err
	}
	acc, err := alloc(4 * batch)
	if err != nil {
		return row, err
	}
	ids, accs := make([]int32, batch), make([]int32, batch)
	for i := range ids {
		ids[i], accs[i] = int32(i), int32(T)
	}
	if err := b.s.CopyToDevice(slots, i32Bytes(ids)); err != nil {
		return row, err
	}
	if err := b.s.CopyToDevice(acc, i32Bytes(accs)); err != nil {
		return row, err
	}
	stateB, readB := lc.stateSize()
	row.Kernels = lc.kernels(batch)
	if opt.Mode != replay.Replay { // the baseline has one step kernel
		row.Kernels = strings.SplitN(row.Kernels, ",", 2)[0]
	}
	graph := func(enqueue func() error) (*cuda.GraphExec, error) {
		if err := b.s.BeginCapture(); err != nil {
			return nil, err
		}
		err := enqueue()
		g, cerr := b.s.EndCapture()
		if err != nil {
			return nil, err
		}
		if cerr != nil {
			return nil, cerr
		}
		defer g.Close()
		return g.Instantiate()
	}
	timeGraph := func(x *cuda.GraphExec) (time.Duration, error) {
		probe, err := b.timer.Median(ctx, 3, func() error { return x.Launch(b.s) })
		if err != nil {
			return 0, err
		}
		runs := int(cfg.MinTime / max(probe.Median, time.Microsecond))
		runs = min(max(runs, 5), 200)
		t, err := b.timer.Median(ctx, runs, func() error { return x.Launch(b.s) })
		return t.Median, err
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	// stagger puts slot i at phase i mod period: for k = 1..period-1 it
	// advances the slots with i mod period >= k once (n of them, in sub).
	stagger := func(period int, advance func(n int, sub cuda.Buffer) error) error {
		sub, err := alloc(4 * batch)
		if err != nil {
			return err
		}
		for k := 1; k < period; k++ {
			var part []int32
			for i := range ids {
				if i%period >= k {
					part = append(part, int32(i))
				}
			}
			if len(part) == 0 {
				continue
			}
			if err := b.s.CopyToDevice(sub, i32Bytes(part)); err != nil {
				return err
			}
			if err := advance(len(part), sub); err != nil {
				return err
			}
		}
		return nil
	}

	switch {
	case T > 0:
		// Each round verifies T drafts per slot and accepts all of them;
		// replay slots fold their history early every period verifies,
		// each at its own phase, as in serving (slot i starts i mod period
		// verifies into its walk), so that every verify folds the same
		// share of the slots.
		const rounds = 4
		if opt.Mode == replay.Replay {
			err := stagger(foldPeriod(L+T, T), func(n int, sub cuda.Buffer) error {
				if err := lc.verify(n, 0, T, sub); err != nil {
					return err
				}
				return lc.commit(n, sub, acc)
			})
			if err != nil {
				return row, err
			}
		}
		x, err := graph(func() error {
			for r := 0; r < rounds; r++ {
				if err := lc.verify(batch, r%inputSets, T, slots); err != nil {
					return err
				}
				if err := lc.commit(batch, slots, acc); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return row, err
		}
		defer x.Close()
		d, err := timeGraph(x)
		if err != nil {
			return row, err
		}
		row.UsPerStep = us(d) / rounds
		row.UsNonflush, row.UsFlush = row.UsPerStep, row.UsPerStep
		if opt.Mode == replay.Baseline {
			row.BytesPerStep = float64(batch) * float64(stateB) * float64(1+T)
		} else {
			// Every slot folds once a period (the cursor walk).
			f := 1 / float64(foldPeriod(L+T, T))
			row.BytesPerStep = float64(batch) * (float64(readB) + f*float64(2*stateB+copyBytes(readB, stateB)))
		}
	case opt.Mode == replay.Baseline:
		x, err := graph(func() error {
			for k := 0; k < L; k++ {
				if err := lc.step(batch, k%inputSets, slots); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return row, err
		}
		defer x.Close()
		d, err := timeGraph(x)
		if err != nil {
			return row, err
		}
		row.UsPerStep = us(d) / float64(L)
		row.UsNonflush, row.UsFlush = row.UsPerStep, row.UsPerStep
		row.BytesPerStep = 2 * float64(batch) * float64(stateB)
	default:
		// Aligned phases: L-1 non-flush steps, then one flush step of every
		// slot, as two graphs timed apart.
		nonflush, err := graph(func() error {
			for k := 0; k < L-1; k++ {
				if err := lc.step(batch, k%inputSets, slots); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return row, err
		}
		defer nonflush.Close()
		flush, err := graph(func() error { return lc.step(batch, (L-1)%inputSets, slots) })
		if err != nil {
			return row, err
		}
		defer flush.Close()
		// The first window writes real checkpoints and read copies.
		if err := nonflush.Launch(b.s); err != nil {
			return row, err
		}
		if err := flush.Launch(b.s); err != nil {
			return row, err
		}
		var nf, fl []float64
		deadline := time.Now().Add(cfg.MinTime)
		for len(nf) < 3 || time.Now().Before(deadline) {
			dn, df, err := b.timePair(nonflush, flush)
			if err != nil {
				return row, err
			}
			nf = append(nf, us(dn)/float64(max(1, L-1)))
			fl = append(fl, us(df))
			if len(nf) >= 200 {
				break
			}
		}
		row.UsFlush = median(fl)
		row.UsNonflush = row.UsFlush
		if L > 1 {
			row.UsNonflush = median(nf)
		}
		// Staggered phases: slot i sits i mod L steps into its window.
		if err := stagger(L, func(n int, sub cuda.Buffer) error { return lc.step(n, 0, sub) }); err != nil {
			return row, err
		}
		window, err := graph(func() error {
			for k := 0; k < L; k++ {
				if err := lc.step(batch, k%inputSets, slots); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return row, err
		}
		defer window.Close()
		d, err := timeGraph(window)
		if err != nil {
			return row, err
		}
		row.UsPerStep = us(d) / float64(L)
		fL := float64(L)
		row.BytesPerStep = float64(batch) * ((fL-1)/fL*float64(readB) + (2*float64(stateB)+float64(copyBytes(readB, stateB)))/fL)
		row.RingBytesPerStep = float64(batch) * lc.ring.perStep(L)
	}
	return row, b.s.Synchronize()
}

// foldPeriod is how many verifies of T drafts, all accepted, a replay slot
// makes per early fold of its history over a ring of R entries: the history
// grows by T a verify and folds when it and twice the drafts overflow the
// ring (replay_common.cu FOLDS_EARLY), then restarts with the drafts.
func foldPeriod(R, T int) int {
	n, last := 0, -1
	for v := 0; v < 4*R; v++ {
		if n > 0 && n+2*T > R {
			if last >= 0 {
				return v - last
			}
			last = v
			n = 0
		}
		n += T
	}
	return 1 // T alone overflows: every verify folds
}

// copyBytes is what a flush writes of the read copy: nothing when the
// outputs read the checkpoint itself.
func copyBytes(read, state int) int {
	if read == state {
		return 0
	}
	return read
}

// timePair launches x then y once each, back to back, and returns their
// device times (events between them), leaving the caches' phases exactly
// one x and one y further on.
func (b *cudaBench) timePair(x, y *cuda.GraphExec) (dx, dy time.Duration, err error) {
	if b.events[0] == nil {
		for i := range b.events {
			if b.events[i], err = b.dev.NewEvent(); err != nil {
				return 0, 0, err
			}
		}
	}
	e := b.events
	for _, f := range []func() error{
		func() error { return e[0].Record(b.s) }, func() error { return x.Launch(b.s) },
		func() error { return e[1].Record(b.s) }, func() error { return y.Launch(b.s) },
		func() error { return e[2].Record(b.s) }, e[2].Synchronize,
	} {
		if err := f(); err != nil {
			return 0, 0, err
		}
	}
	if dx, err = e[1].Since(e[0]); err != nil {
		return 0, 0, err
	}
	dy, err = e[2].Since(e[1])
	return dx, dy, err
}

func i32Bytes(v []int32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		u := uint32(x)
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return out
}

// newLayer builds the GPU cache of one shape with random constants and
// inputSets sets of random device inputs of rows rows.
func (b *cudaBench) newLayer(ctx context.Context, sh LayerShape, capacity, rows int, opt replay.Options, alloc func(int) (cuda.Buffer, error)) (*gpuLayer, error) {
	r := newRand(uint64(capacity))
	fill := func(n int, seed uint32, lo, hi float32) (cuda.Buffer, error) {
		buf, err := alloc(4 * n)
		if err != nil {
			return buf, err
		}
		return buf, b.dev.FillUniform(ctx, b.s, buf, cuda.Float32, seed, lo, hi)
	}
	// Uniform on [-a, a] has standard deviation a/√3.
	sd := func(std float64) float32 { return float32(std * math.Sqrt(3)) }
	switch sh.Layer {
	case "mamba2":
		s := sh.Mamba2
		H, P, N, G := s.Heads, s.HeadDim, s.StateSize, s.Groups
		prm := randomMamba2Params(r, H)
		c, err := cuda.NewMamba2Cache(ctx, b.s, s, prm, replay.ConvWeights{}, capacity, opt)
		if err != nil {
			return nil, err
		}
		var sets []cuda.Mamba2Input
		for i := 0; i < inputSets; i++ {
			var in cuda.Mamba2Input
			seed := uint32(10 * (i + 1))
			for _, f := range []struct {
				dst    *cuda.Buffer
				n      int
				lo, hi float32
			}{
				{&in.X, rows * H * P, -sd(1), sd(1)},
				{&in.B, rows * G * N, -sd(1 / math.Sqrt(float64(N))), sd(1 / math.Sqrt(float64(N)))},
				{&in.C, rows * G * N, -sd(1 / math.Sqrt(float64(N))), sd(1 / math.Sqrt(float64(N)))},
				{&in.Dt, rows * H, -sd(1), sd(1)},
			} {
				seed++
				if *f.dst, err = fill(f.n, seed, f.lo, f.hi); err != nil {
					c.Close()
					return nil, err
				}
			}
			sets = append(sets, in)
		}
		y, err := alloc(4 * rows * H * P)
		if err != nil {
			c.Close()
			return nil, err
		}
		return &gpuLayer{
			admit: func() error { _, err := c.Admit(); return err },
			step: func(batch, set int, slots cuda.Buffer) error {
				return c.QueueStep(slots, batch, sets[set], y)
			},
			verify: func(batch, set, T int, slots cuda.Buffer) error {
				return c.QueueVerify(slots, cuda.Buffer{}, batch, T, sets[set], y)
			},
			commit:    func(batch int, slots, acc cuda.Buffer) error { return c.QueueCommit(slots, acc, batch) },
			close:     func() error { b.s.Synchronize(); return c.Close() },
			stateSize: c.StateBytes,
			ring:      mamba2Ring(H, P, G, N, ringElemBytes(opt.Ring)),
			kernels:   kernelNames(c),
		}, nil
	case "gdn":
		s := sh.GDN
		Hk, Hv, dk, dv := s.KeyHeads, s.ValueHeads, s.KeyDim, s.ValueDim
		prm := randomGDNParams(r, Hv)
		c, err := cuda.NewGDNCache(ctx, b.s, s, prm, replay.ConvWeights{}, capacity, opt)
		if err != nil {
			return nil, err
		}
		var sets []cuda.GDNInput
		for i := 0; i < inputSets; i++ {
			var in cuda.GDNInput
			seed := uint32(10 * (i + 1))
			for _, f := range []struct {
				dst *cuda.Buffer
				n   int
			}{{&in.Q, rows * Hk * dk}, {&in.K, rows * Hk * dk}, {&in.V, rows * Hv * dv}, {&in.A, rows * Hv}, {&in.B, rows * Hv}} {
				seed++
				if *f.dst, err = fill(f.n, seed, -sd(1), sd(1)); err != nil {
					c.Close()
					return nil, err
				}
			}
			sets = append(sets, in)
		}
		o, err := alloc(4 * rows * Hv * dv)
		if err != nil {
			c.Close()
			return nil, err
		}
		return &gpuLayer{
			admit: func() error { _, err := c.Admit(); return err },
			step: func(batch, set int, slots cuda.Buffer) error {
				return c.QueueStep(slots, batch, sets[set], o)
			},
			verify: func(batch, set, T int, slots cuda.Buffer) error {
				return c.QueueVerify(slots, cuda.Buffer{}, batch, T, sets[set], o)
			},
			commit:    func(batch int, slots, acc cuda.Buffer) error { return c.QueueCommit(slots, acc, batch) },
			close:     func() error { b.s.Synchronize(); return c.Close() },
			stateSize: c.StateBytes,
			ring:      gdnRing(Hk, Hv, dk, dv),
			kernels:   kernelNames(c),
		}, nil
	}
	return nil, fmt.Errorf("unknown layer kind %q", sh.Layer)
}

// modeOptions are the cache options of a benchmark mode.
func modeOptions(mode string, dt numeric.Format, cfg KernelConfig) replay.Options {
	return kernelOptions(mode, dt, cfg)
}

// prewarm compiles every module the run needs concurrently (NVRTC runs on
// the host, one program per goroutine), so that the rows find them in the
// kernel cache instead of compiling one after another. The baseline modes'
// modules are their own (no pipeline, group step or folds planned, and
// only the baseline kernels: CACHE_MODE in replay_common.cu).
func (b *cudaBench) prewarm(ctx context.Context) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, sh := range b.cfg.Shapes {
		for _, dt := range b.cfg.Dtypes {
			for _, mode := range b.cfg.Modes {
				opt := modeOptions(mode, dt, b.cfg)
				wg.Add(1)
				go func() {
					defer wg.Done()
					var err error
					switch sh.Layer {
					case "mamba2":
						prm := replay.Mamba2Params{ALog: make([]float32, sh.Mamba2.Heads), DtBias: make([]float32, sh.Mamba2.Heads), D: make([]float32, sh.Mamba2.Heads)}
						var c *cuda.Mamba2Cache
						if c, err = cuda.NewMamba2Cache(ctx, b.s, sh.Mamba2, prm, replay.ConvWeights{}, 1, opt); err == nil {
							err = c.Close()
						}
					case "gdn":
						prm := replay.GDNParams{ALog: make([]float32, sh.GDN.ValueHeads), DtBias: make([]float32, sh.GDN.ValueHeads)}
						var c *cuda.GDNCache
						if c, err = cuda.NewGDNCache(ctx, b.s, sh.GDN, prm, replay.ConvWeights{}, 1, opt); err == nil {
							err = c.Close()
						}
					}
					if err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("compile %s %s %s: %w", sh.Name, dt, mode, err))
						mu.Unlock()
					}
				}()
			}
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

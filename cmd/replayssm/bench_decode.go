package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/replayssm/replayssm/backend/cuda"
	"github.com/replayssm/replayssm/bench"
	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/models"
	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// decodeRow is one line of bench decode. Its JSON field names are a
// contract: scripts read them.
type decodeRow struct {
	Kind       string `json:"kind"` // "decode"
	Device     string `json:"device"`
	Model      string `json:"model"`
	Layers     int    `json:"layers"` // SSM layers
	Batch      int    `json:"batch"`
	Mode       string `json:"mode"` // baseline, replay, replay-nvfp4
	StateDtype string `json:"state_dtype"`
	Window     int    `json:"window"`

	// TokensPerS is the median over the repeats of decoded tokens per second
	// (every request decodes the same number of tokens, one per step).
	TokensPerS     float64   `json:"tokens_per_s"`
	TokensPerSRuns []float64 `json:"tokens_per_s_runs"`
	// MsPerStep is one decode step of the whole batch (the median run's).
	MsPerStep float64 `json:"ms_per_step"`
	// StateBytesPerToken is the SSM state read plus written per token and
	// sequence, summed over the layers (the cache's own count over prefill
	// and decode); BaselineBytesPerToken is what the in-place baseline in
	// the same format would move for the same tokens.
	StateBytesPerToken    float64 `json:"state_bytes_per_token"`
	BaselineBytesPerToken float64 `json:"baseline_bytes_per_token"`
	// SpeedupVsBaseline is this row's tokens/s over the baseline row's (so
	// it never contradicts the two rows); SpeedupMin and SpeedupMax are the
	// least and greatest of the same ratio within each repeat (modes
	// interleaved): its spread.
	SpeedupVsBaseline float64 `json:"speedup_vs_baseline,omitempty"`
	SpeedupMin        float64 `json:"speedup_min,omitempty"`
	SpeedupMax        float64 `json:"speedup_max,omitempty"`

	// SSMMsPerStep is the device time of the SSM state kernels (conv and
	// state update) in one decode step, timed by events in a separate run;
	// RestMsPerStep is MsPerStep less it. GPU only.
	SSMMsPerStep  float64 `json:"ssm_ms_per_step,omitempty"`
	RestMsPerStep float64 `json:"rest_ms_per_step,omitempty"`
	// Ops splits one decode step's device time by operation, from events
	// around each operation in a separate run that queues every kernel at
	// once (no graphs); an operation's time then includes any wait for the
	// host to queue its kernel, so where the host is behind the sum exceeds
	// the step. IdleMsPerStep is MsPerStep less their sum, when positive:
	// device time no operation accounts for. GPU only.
	Ops           []opShare `json:"ops,omitempty"`
	IdleMsPerStep float64   `json:"idle_ms_per_step,omitempty"`
	// GraphFrac is the share of the backend's operations (prefill and
	// decode) that ran inside CUDA graphs; 0 with --eager. GPU only.
	GraphFrac float64 `json:"graph_frac"`
	// Bytes a decode step must move: every weight once (all experts of a
	// mixture), the keys and values each sequence attends over (read) and
	// appends, and the SSM state traffic of the batch.
	WeightBytes int64 `json:"weight_bytes"`
	KVBytes     int64 `json:"kv_bytes"`
	StateBytes  int64 `json:"state_bytes"`
	// RooflineMs is those bytes at CopyGBps, the copy bandwidth measured
	// in the same run (GPU only); RooflineFrac is RooflineMs / MsPerStep.
	RooflineMs   float64 `json:"roofline_ms,omitempty"`
	RooflineFrac float64 `json:"roofline_frac,omitempty"`
	CopyGBps     float64 `json:"copy_gbps,omitempty"`

	Threads int `json:"threads"`
	Repeats int `json:"repeats"`
}

// opShare is one operation's part of a decode step.
type opShare struct {
	Op           string  `json:"op"`
	CallsPerStep float64 `json:"calls_per_step"`
	MsPerStep    float64 `json:"ms_per_step"`
}

// prefillRow is a prompt's prefill, one sequence, in one forward.
type prefillRow struct {
	Kind       string  `json:"kind"` // "prefill"
	Device     string  `json:"device"`
	Model      string  `json:"model"`
	Tokens     int     `json:"tokens"`
	Mode       string  `json:"mode"`
	StateDtype string  `json:"state_dtype"`
	Ms         float64 `json:"ms"`
	TokensPerS float64 `json:"tokens_per_s"`
	// Ops splits the prefill by operation (calls and milliseconds of the
	// whole prompt), from a further run with the GPU's profile on.
	Ops []opShare `json:"ops,omitempty"`
}

// decodeModes lists the bench decode modes (bench.Mode names) in the order
// rows are printed.
var decodeModes = []string{"baseline", "replay", "replay-nvfp4"}

// runBenchDecode times whole decode steps of a model (the forward pass and
// its state cache) in each state mode: what ReplaySSM buys a model's decode,
// next to the in-place baseline measured in the same run; then the prefill
// of long prompts.
func runBenchDecode(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "bench decode", "bench decode [flags]")
	model := fs.String("model", "", "model directory, or a shipped config ("+strings.Join(models.Configs(), ", ")+") run with random weights (default: the built-in model)")
	random := fs.Bool("random-weights", false, "seeded random weights at the model's shapes instead of its checkpoint")
	layers := fs.Int("layers", 0, "with random weights, keep only the first N layers (0: all)")
	device := deviceFlags(fs)
	batches := fs.String("batch", "1,16,64", "batch sizes, comma-separated (up to 512)")
	modes := fs.String("modes", "baseline,replay,replay-nvfp4", fmt.Sprintf("modes, comma-separated, of %v", decodeModes))
	dtype := fs.String("state-dtype", "fp32", "state (checkpoint) format: fp32, fp16, bf16 or fp8")
	window := fs.Int("window", replay.DefaultWindow, "replay window L")
	maxTokens := fs.Int("max-tokens", 64, "tokens decoded per request")
	promptLen := fs.Int("prompt-len", 32, "prompt length (a random 8-token phrase, repeated)")
	prefill := fs.String("prefill", "", "prompt lengths whose prefill (one sequence, replay mode) is timed, comma-separated, e.g. 1024,4096,16384")
	repeat := fs.Int("repeat", 3, "measurements per row (modes interleaved); the median is reported")
	threads := fs.Int("threads", runtime.GOMAXPROCS(0), "worker threads of the state caches")
	asJSON := fs.Bool("json", false, "print one JSON object per row")
	profile := fs.Bool("profile", false, "on a GPU, print each row's decode step and each prefill split by operation (decode JSON rows always carry it)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	bs, err := intList(*batches, 1, 512, "batch")
	if err != nil {
		return err
	}
	var prefills []int
	if *prefill != "" {
		if prefills, err = intList(*prefill, 2, 1<<20, "prefill"); err != nil {
			return err
		}
	}
	ms := splitList(*modes)
	if len(ms) == 0 {
		return fmt.Errorf("%w: --modes is empty", errUsage)
	}
	for _, m := range ms {
		if !slices.Contains(decodeModes, m) {
			return fmt.Errorf("%w: unknown mode %q (want %v)", errUsage, m, decodeModes)
		}
	}
	st, err := numeric.ParseFormat(*dtype)
	if err != nil {
		return fmt.Errorf("%w: --state-dtype: %v", errUsage, err)
	}
	if *repeat < 1 || *maxTokens < 2 || *promptLen < 1 || *window < 1 || *threads < 1 || *layers < 0 {
		return fmt.Errorf("%w: --repeat ≥ 1, --max-tokens ≥ 2, --prompt-len ≥ 1, --window ≥ 1, --threads ≥ 1, --layers ≥ 0", errUsage)
	}
	name, d, err := openBenchModel(ctx, e, *model, *random, *layers, *device)
	if err != nil {
		return err
	}
	base := replay.Options{Window: *window, State: st, Threads: *threads}
	m := decodeMeasure{d: d, name: name, device: d.Backend().Name(), weightBytes: d.WeightBytes(d.Embed.DType().Size())}
	if be, ok := d.Backend().(*cuda.NNBackend); ok {
		m.gpu = be
		m.weightBytes = be.WeightBytes()
		if m.copyGBps, err = be.Device().MeasureCopyBandwidth(ctx, 1<<30); err != nil {
			return fmt.Errorf("measuring the copy bandwidth: %w", err)
		}
		fmt.Fprintf(e.stderr, "copy bandwidth %.0f GB/s\n", m.copyGBps)
	}
	emit := decodePrinter(e, *asJSON, *profile)
	for _, B := range bs {
		rows, err := m.batch(ctx, B, ms, base, *maxTokens, *promptLen, *repeat)
		if err != nil {
			return err
		}
		for _, r := range rows {
			if err := emit(r); err != nil {
				return err
			}
		}
	}
	emitPrefill := prefillPrinter(e, *asJSON, *profile)
	for _, n := range prefills {
		r, err := m.prefill(ctx, n, base, *profile)
		if err != nil {
			return err
		}
		if err := emitPrefill(r); err != nil {
			return err
		}
	}
	return nil
}

// openBenchModel loads --model: a directory's checkpoint, or with random
// weights a directory's or shipped config (a shipped config has no
// weights, so its name implies --random-weights), placed on the device.
func openBenchModel(ctx context.Context, e *env, flagValue string, random bool, layers int, device deviceChoice) (string, *nn.Decoder, error) {
	shipped, cfgErr := models.Config(flagValue)
	if flagValue == "" || (cfgErr != nil && !random) {
		if layers > 0 {
			return "", nil, fmt.Errorf("%w: --layers needs random weights (--random-weights or a shipped config)", errUsage)
		}
		_, name, d, _, err := openModel(ctx, e, flagValue, device)
		return name, d, err
	}
	var cfg *hfconfig.Config
	var err error
	name := flagValue
	if cfgErr == nil {
		cfg, err = hfconfig.Parse(shipped)
	} else {
		cfg, err = hfconfig.LoadDir(flagValue)
		name = filepath.Base(filepath.Clean(flagValue))
	}
	if err != nil {
		return "", nil, err
	}
	dt, err := device.products()
	if err != nil {
		return "", nil, err
	}
	start := time.Now()
	d, err := model.LoadRandom(cfg, 1, layers, dt)
	if err != nil {
		return "", nil, err
	}
	if layers > 0 && layers < len(cfg.Layers) {
		name = fmt.Sprintf("%s[:%d]", name, layers)
	}
	fmt.Fprintf(e.stderr, "%s: random weights, %d layers, %.2fB parameters in %s (%.1f s)\n", name, len(d.Layers), float64(d.Params())/1e9, dt, time.Since(start).Seconds())
	if err := place(ctx, e, d, device); err != nil {
		return "", nil, err
	}
	return name, d, nil
}

// decodeMeasure runs bench decode's measurements of one placed model.
type decodeMeasure struct {
	d           *nn.Decoder
	name        string
	device      string
	gpu         *cuda.NNBackend // nil on the CPU
	weightBytes int64
	copyGBps    float64
}

// batch measures one batch size in every mode, the modes of one repeat
// back to back so that paired ratios cancel the machine's drifts; on a GPU
// one more run per mode times the SSM kernels with events.
func (m *decodeMeasure) batch(ctx context.Context, B int, modes []string, base replay.Options, maxTokens, promptLen, repeat int) ([]decodeRow, error) {
	d := m.d
	reqs := syntheticRequests(uint64(B)<<8|29, B, d.Vocab, promptLen, maxTokens)
	nLayers := d.SSMLayers()
	rows := make([]decodeRow, len(modes))
	steps := make([][]float64, len(modes)) // ms per step, per repeat
	opts := make([]replay.Options, len(modes))
	for i, name := range modes {
		mode, err := bench.ParseMode(name)
		if err != nil {
			return nil, err
		}
		opts[i] = mode.Options(base, 0)
		if err := fitsState(d, B, promptLen+maxTokens, opts[i]); err != nil {
			return nil, fmt.Errorf("batch %d, %s: %w", B, name, err)
		}
	}
	for rep := 0; rep < repeat; rep++ {
		for i, name := range modes {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			opt := opts[i]
			eng, err := engine.New(d, B, opt)
			if err != nil {
				return nil, err
			}
			var before cuda.TapeStats
			if m.gpu != nil {
				before = m.gpu.Graphs()
			}
			_, tm, err := eng.Generate(ctx, reqs)
			graphFrac := 0.0
			if m.gpu != nil {
				after := m.gpu.Graphs()
				if n := after.Ops - before.Ops; n > 0 {
					graphFrac = float64(after.GraphedOps-before.GraphedOps) / float64(n)
				}
			}
			stats := eng.Stats()
			eng.Close()
			if err != nil {
				return nil, err
			}
			r := &rows[i]
			if rep == 0 {
				*r = decodeRow{Kind: "decode", Device: m.device, Model: m.name, Layers: nLayers, Batch: B, Mode: name, StateDtype: precision(opt),
					Window: opt.Window, Threads: opt.Threads, Repeats: repeat}
				if opt.Mode == replay.Baseline {
					r.Window = 1
				}
			}
			r.GraphFrac = graphFrac
			r.TokensPerSRuns = append(r.TokensPerSRuns, rate(tm.DecodeTokens, tm.Decode))
			nSteps := max(1, tm.DecodeTokens/B)
			steps[i] = append(steps[i], float64(tm.Decode)/float64(time.Millisecond)/float64(nSteps))
			if tok := float64(tm.PromptTokens + tm.DecodeTokens); tok > 0 {
				r.StateBytesPerToken = float64(stats.StateBytesRead+stats.StateBytesWritten) / tok
				r.BaselineBytesPerToken = float64(stats.BaselineBytes) / tok
			}
		}
	}
	bi := slices.Index(modes, "baseline")
	for i := range rows {
		r := &rows[i]
		r.TokensPerS = median(r.TokensPerSRuns)
		r.MsPerStep = median(steps[i])
		if bi >= 0 && i != bi {
			base := median(rows[bi].TokensPerSRuns)
			if base > 0 {
				r.SpeedupVsBaseline = r.TokensPerS / base
			}
			for k, v := range r.TokensPerSRuns {
				if b := rows[bi].TokensPerSRuns[k]; b > 0 {
					if q := v / b; k == 0 || q < r.SpeedupMin {
						r.SpeedupMin = q
					}
					r.SpeedupMax = max(r.SpeedupMax, v/b)
				}
			}
		}
		// The average decode step attends over the prompt and half the
		// generated tokens, and appends one position.
		ctxLen := int64(promptLen + maxTokens/2 + 1)
		r.WeightBytes = m.weightBytes
		r.KVBytes = int64(B) * ctxLen * d.KVBytesPerToken()
		r.StateBytes = int64(float64(B) * r.StateBytesPerToken)
		if m.copyGBps > 0 {
			r.CopyGBps = m.copyGBps
			r.RooflineMs = float64(r.WeightBytes+r.KVBytes+r.StateBytes) / (m.copyGBps * 1e9) * 1e3
			r.RooflineFrac = r.RooflineMs / r.MsPerStep
		}
		if m.gpu != nil {
			ops, err := m.opsPerStep(ctx, B, reqs, opts[i])
			if err != nil {
				return nil, err
			}
			busy := 0.0
			for _, o := range ops {
				busy += o.MsPerStep
				if cuda.IsStateOp(o.Op) {
					r.SSMMsPerStep += o.MsPerStep
				}
			}
			r.Ops = ops
			r.RestMsPerStep = r.MsPerStep - r.SSMMsPerStep
			r.IdleMsPerStep = max(0, r.MsPerStep-busy)
		}
	}
	return rows, nil
}

// opsPerStep runs the requests once more with the GPU's profile on and
// returns each operation's calls and milliseconds per decode step: the
// profile is read and reset when the first tokens arrive (the prefill's
// share), and read again at the end.
func (m *decodeMeasure) opsPerStep(ctx context.Context, B int, reqs []engine.Request, opt replay.Options) ([]opShare, error) {
	eng, err := engine.New(m.d, B, opt)
	if err != nil {
		return nil, err
	}
	defer eng.Close()
	be := m.gpu
	be.Profile(true)
	defer be.Profile(false)
	if _, err := be.OpTimes(); err != nil {
		return nil, err
	}
	reqs = slices.Clone(reqs)
	var clockErr error
	first := true
	reqs[0].OnToken = func(int) bool {
		if first {
			first = false
			_, clockErr = be.OpTimes()
		}
		return true
	}
	_, tm, err := eng.Generate(ctx, reqs)
	if err != nil {
		return nil, err
	}
	times, err := be.OpTimes()
	if err = errors.Join(clockErr, err); err != nil {
		return nil, err
	}
	return opShares(times, float64(max(1, tm.DecodeTokens/B))), nil
}

// opShares divides each operation's calls and device time by steps.
func opShares(times []cuda.OpTime, steps float64) []opShare {
	ops := make([]opShare, len(times))
	for i, t := range times {
		ops[i] = opShare{Op: t.Op, CallsPerStep: float64(t.Calls) / steps, MsPerStep: float64(t.Time) / float64(time.Millisecond) / steps}
	}
	return ops
}

// prefill times one forward of an n-token prompt into a fresh sequence
// (after one untimed forward of the same length, which sizes the scratch),
// and with profile on a GPU splits a third by operation.
func (m *decodeMeasure) prefill(ctx context.Context, n int, base replay.Options, profile bool) (prefillRow, error) {
	mode, err := bench.ParseMode("replay")
	if err != nil {
		return prefillRow{}, err
	}
	opt := mode.Options(base, 0)
	if err := fitsState(m.d, 1, n, opt); err != nil {
		return prefillRow{}, fmt.Errorf("prefill of %d tokens: %w", n, err)
	}
	prompt := syntheticRequests(uint64(n)<<8|31, 1, m.d.Vocab, n, 1)[0].Prompt
	once := func() (time.Duration, error) {
		st, err := m.d.NewState(1, opt)
		if err != nil {
			return 0, err
		}
		defer st.Close()
		q, err := st.Admit()
		if err != nil {
			return 0, err
		}
		rows := make([]nn.Row, n)
		for i, id := range prompt {
			rows[i] = nn.Row{Seq: q, Token: id, Logits: i == n-1}
		}
		start := time.Now()
		if err := m.d.Greedy(ctx, st, rows, make([]int32, 1)); err != nil {
			return 0, fmt.Errorf("prefill of %d tokens: %w", n, err)
		}
		return time.Since(start), nil
	}
	var elapsed time.Duration
	for range 2 {
		if elapsed, err = once(); err != nil {
			return prefillRow{}, err
		}
	}
	r := prefillRow{Kind: "prefill", Device: m.device, Model: m.name, Tokens: n, Mode: "replay", StateDtype: precision(opt),
		Ms: float64(elapsed) / float64(time.Millisecond), TokensPerS: rate(n, elapsed)}
	if profile && m.gpu != nil {
		be := m.gpu
		be.Profile(true)
		defer be.Profile(false)
		_, err := be.OpTimes()
		if err == nil {
			_, err = once()
		}
		var times []cuda.OpTime
		if err == nil {
			times, err = be.OpTimes()
		}
		if err != nil {
			return prefillRow{}, err
		}
		r.Ops = opShares(times, 1)
	}
	return r, nil
}

func prefillPrinter(e *env, asJSON, profile bool) func(prefillRow) error {
	return rowPrinter(e, asJSON, func(prefillRow) {
		fmt.Fprintf(e.stdout, "\n%-24s %8s %-8s %-16s %11s %10s\n", "prefill", "tokens", "mode", "state", "ms", "tokens/s")
	}, func(r prefillRow) error {
		_, err := fmt.Fprintf(e.stdout, "%-24s %8d %-8s %-16s %11.1f %10.0f\n", r.Model, r.Tokens, r.Mode, r.StateDtype, r.Ms, r.TokensPerS)
		if err != nil || !profile || len(r.Ops) == 0 {
			return err
		}
		return printOps(e, "    whole prompt:", r.Ops, 0)
	})
}

func decodePrinter(e *env, asJSON, profile bool) func(decodeRow) error {
	return rowPrinter(e, asJSON, func(r decodeRow) {
		fmt.Fprintf(e.stdout, "device: %s\n", r.Device)
		if r.CopyGBps > 0 {
			fmt.Fprintf(e.stdout, "roofline: weights + KV + state bytes of a step at the copy bandwidth measured in this run, %.0f GB/s\n", r.CopyGBps)
		}
		fmt.Fprintf(e.stdout, "%-24s %6s %5s %-13s %-16s %11s %9s %8s %8s %9s %9s %9s %9s %6s %6s %12s %18s\n",
			"model", "layers", "batch", "mode", "state", "tokens/s", "ms/step", "ssm ms", "rest ms",
			"weights", "kv", "state", "roofline", "of it", "graphs", "state B/tok", "vs base (spread)")
	}, func(r decodeRow) error {
		vs := "-"
		if r.SpeedupVsBaseline > 0 {
			vs = fmt.Sprintf("%.2fx (%.2f-%.2f)", r.SpeedupVsBaseline, r.SpeedupMin, r.SpeedupMax)
		}
		opt := func(v float64, f string) string {
			if v <= 0 {
				return "-"
			}
			return fmt.Sprintf(f, v)
		}
		_, err := fmt.Fprintf(e.stdout, "%-24s %6d %5d %-13s %-16s %11.1f %9.3f %8s %8s %9s %9s %9s %9s %6s %6s %12s %18s\n",
			r.Model, r.Layers, r.Batch, r.Mode, r.StateDtype, r.TokensPerS, r.MsPerStep,
			opt(r.SSMMsPerStep, "%.3f"), opt(r.RestMsPerStep, "%.3f"),
			bytesString(r.WeightBytes), bytesString(r.KVBytes), bytesString(r.StateBytes),
			opt(r.RooflineMs, "%.3f"), opt(100*r.RooflineFrac, "%.0f%%"), opt(100*r.GraphFrac, "%.0f%%"),
			bytesString(int64(r.StateBytesPerToken)), vs)
		if err != nil || !profile || len(r.Ops) == 0 {
			return err
		}
		return printOps(e, "    per step:", r.Ops, r.IdleMsPerStep)
	})
}

// printOps prints a row's operations, the costliest first: device
// milliseconds and calls, then the device time no operation accounts for;
// when the parts add to more than the whole, the host was behind and its
// waits are inside them.
func printOps(e *env, label string, ops []opShare, idleMs float64) error {
	ops = slices.Clone(ops)
	slices.SortStableFunc(ops, func(a, b opShare) int { return cmp.Compare(b.MsPerStep, a.MsPerStep) })
	var sb strings.Builder
	sb.WriteString(label)
	for _, o := range ops {
		fmt.Fprintf(&sb, " %s %.3f ms ×%.0f ·", o.Op, o.MsPerStep, o.CallsPerStep)
	}
	if idleMs > 0 {
		fmt.Fprintf(&sb, " idle %.3f ms", idleMs)
	} else {
		sb.WriteString(" (each part includes waits for the host)")
	}
	sb.WriteString("\n")
	_, err := io.WriteString(e.stdout, sb.String())
	return err
}

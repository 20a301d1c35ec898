package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/replayssm/replayssm/bench"
	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// decodeRow is one line of bench decode. Its JSON field names are a
// contract: scripts read them.
type decodeRow struct {
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
	// SpeedupVsBaseline is the median over the repeats of this mode's
	// tokens/s over the baseline's in the same repeat (modes interleaved).
	SpeedupVsBaseline float64 `json:"speedup_vs_baseline,omitempty"`

	Threads int `json:"threads"`
	Repeats int `json:"repeats"`
}

// decodeModes lists the bench decode modes (bench.Mode names) in the order
// rows are printed.
var decodeModes = []string{"baseline", "replay", "replay-nvfp4"}

// runBenchDecode times whole decode steps of a model (the forward pass and
// its state cache) in each state mode: what ReplaySSM buys a model's decode,
// next to the in-place baseline measured in the same run.
func runBenchDecode(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "bench decode", "bench decode [flags]")
	model := fs.String("model", "", "model directory (default: the built-in model)")
	device := deviceFlag(fs)
	batches := fs.String("batch", "1,16,64", "batch sizes, comma-separated (up to 512)")
	modes := fs.String("modes", "baseline,replay,replay-nvfp4", fmt.Sprintf("modes, comma-separated, of %v", decodeModes))
	dtype := fs.String("state-dtype", "fp32", "state (checkpoint) format: fp32, fp16, bf16 or fp8")
	window := fs.Int("window", replay.DefaultWindow, "replay window L")
	maxTokens := fs.Int("max-tokens", 64, "tokens decoded per request")
	promptLen := fs.Int("prompt-len", 32, "prompt length (a random 8-token phrase, repeated)")
	repeat := fs.Int("repeat", 3, "measurements per row (modes interleaved); the median is reported")
	threads := fs.Int("threads", runtime.GOMAXPROCS(0), "worker threads of the state caches")
	asJSON := fs.Bool("json", false, "print one JSON object per row")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	bs, err := intList(*batches, 1, 512, "batch")
	if err != nil {
		return err
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
	if *repeat < 1 || *maxTokens < 2 || *promptLen < 1 || *window < 1 || *threads < 1 {
		return fmt.Errorf("%w: --repeat ≥ 1, --max-tokens ≥ 2, --prompt-len ≥ 1, --window ≥ 1, --threads ≥ 1", errUsage)
	}
	_, name, d, _, err := openModel(ctx, e, *model, *device)
	if err != nil {
		return err
	}
	base := replay.Options{Window: *window, State: st, Threads: *threads}
	emit := decodePrinter(e, *asJSON)
	for _, B := range bs {
		rows, err := benchDecodeBatch(ctx, d, name, B, ms, base, *maxTokens, *promptLen, *repeat)
		if err != nil {
			return err
		}
		for _, r := range rows {
			if err := emit(r); err != nil {
				return err
			}
		}
	}
	return nil
}

// benchDecodeBatch measures one batch size in every mode, the modes of one
// repeat back to back so that paired ratios cancel the machine's drifts.
func benchDecodeBatch(ctx context.Context, d *nn.Decoder, name string, B int, modes []string, base replay.Options, maxTokens, promptLen, repeat int) ([]decodeRow, error) {
	reqs := syntheticRequests(uint64(B)<<8|29, B, d.Vocab, promptLen, maxTokens)
	nLayers := d.SSMLayers()
	rows := make([]decodeRow, len(modes))
	steps := make([][]float64, len(modes)) // ms per step, per repeat
	for rep := 0; rep < repeat; rep++ {
		for i, m := range modes {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			mode, err := bench.ParseMode(m)
			if err != nil {
				return nil, err
			}
			opt := mode.Options(base, 0)
			eng, err := engine.New(d, B, opt)
			if err != nil {
				return nil, err
			}
			_, tm, err := eng.Generate(ctx, reqs)
			stats := eng.Stats()
			eng.Close()
			if err != nil {
				return nil, err
			}
			r := &rows[i]
			if rep == 0 {
				*r = decodeRow{Device: "cpu", Model: name, Layers: nLayers, Batch: B, Mode: m, StateDtype: precision(opt),
					Window: opt.Window, Threads: opt.Threads, Repeats: repeat}
				if opt.Mode == replay.Baseline {
					r.Window = 1
				}
			}
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
			var ratios []float64
			for k, v := range r.TokensPerSRuns {
				if b := rows[bi].TokensPerSRuns[k]; b > 0 {
					ratios = append(ratios, v/b)
				}
			}
			r.SpeedupVsBaseline = median(ratios)
		}
	}
	return rows, nil
}

func decodePrinter(e *env, asJSON bool) func(decodeRow) error {
	return rowPrinter(e, asJSON, func(decodeRow) {
		fmt.Fprintf(e.stdout, "%-20s %6s %5s %-13s %-16s %11s %9s %12s %12s %8s\n",
			"model", "layers", "batch", "mode", "state", "tokens/s", "ms/step", "state B/tok", "base B/tok", "vs base")
	}, func(r decodeRow) error {
		vs := "-"
		if r.SpeedupVsBaseline > 0 {
			vs = fmt.Sprintf("%.2fx", r.SpeedupVsBaseline)
		}
		_, err := fmt.Fprintf(e.stdout, "%-20s %6d %5d %-13s %-16s %11.1f %9.3f %12s %12s %8s\n",
			r.Model, r.Layers, r.Batch, r.Mode, r.StateDtype, r.TokensPerS, r.MsPerStep,
			bytesString(int64(r.StateBytesPerToken)), bytesString(int64(r.BaselineBytesPerToken)), vs)
		return err
	})
}

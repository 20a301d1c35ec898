package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"github.com/replayssm/replayssm/bench"
	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/engine/spec"
	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/models"
	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// specRow is one line of bench spec. Its JSON field names are a contract:
// scripts read them.
type specRow struct {
	Device  string `json:"device"`
	Model   string `json:"model"`           // model directory name, or layer shape name
	Layer   string `json:"layer,omitempty"` // shape runs: mamba2 or gdn
	Layers  int    `json:"layers"`          // SSM layers whose state is counted (and, for shape runs, timed)
	Batch   int    `json:"batch"`
	T       int    `json:"t"`    // draft tokens per step (0 for nospec)
	Mode    string `json:"mode"` // nospec, nospec-baseline, spec-baseline, spec-replay
	Drafter string `json:"drafter,omitempty"`

	// TokensPerS is the median over the repeats of generated tokens per
	// second (decode only). Shape runs time the SSM state cache alone (conv,
	// verify or step, commit) for one layer and divide by Layers.
	TokensPerS     float64   `json:"tokens_per_s"`
	TokensPerSRuns []float64 `json:"tokens_per_s_runs"`
	// MeanAccepted is the mean number of drafts accepted per sequence and
	// step; TokensPerStep = MeanAccepted + 1.
	MeanAccepted   float64 `json:"mean_accepted"`
	AcceptanceRate float64 `json:"acceptance_rate"`
	TokensPerStep  float64 `json:"tokens_per_step"`
	UsPerStep      float64 `json:"us_per_step,omitempty"` // shape runs: one layer, whole batch (median)

	// StateBytesPerRequest is the SSM state one request needs, summed over
	// the layers: replay = checkpoint + ring (+ read copy) + conv window;
	// baseline = 1+T full states (the vLLM/SGLang layout) + conv window.
	// StateBytesAllocated is what package replay allocates (its baseline
	// keeps 1+MaxDraft = T+2 states, since a verify carries T+1 positions).
	StateBytesPerRequest int64   `json:"state_bytes_per_request"`
	StateBytesAllocated  int64   `json:"state_bytes_allocated"`
	MemoryGB             float64 `json:"memory_gb"`
	MaxConcurrent        int64   `json:"max_concurrent"` // ⌊memory_gb·10⁹ / state_bytes_per_request⌋

	// SpeedupVsNospec and SpeedupVsBaseline are medians of per-repeat
	// ratios (pairedSpeedup), not ratios of the medians.
	SpeedupVsNospec      float64 `json:"speedup_vs_nospec,omitempty"`
	SpeedupVsBaseline    float64 `json:"speedup_vs_spec_baseline,omitempty"`
	ConcurrentVsBaseline float64 `json:"concurrent_vs_spec_baseline,omitempty"`

	Window     int    `json:"window"`
	StateDtype string `json:"state_dtype"`
	Threads    int    `json:"threads"`
	Repeats    int    `json:"repeats"`
	Skipped    string `json:"skipped,omitempty"`
}

// specModes lists the bench spec modes in the order rows are printed.
var specModes = []string{"nospec", "nospec-baseline", "spec-baseline", "spec-replay"}

type specBenchConfig struct {
	batches, drafts []int
	modes           []string
	opt             replay.Options // window, formats, threads
	memGB, maxAlloc float64
	repeat          int
	minTime         time.Duration
	// model runs
	drafter, draftModel  string
	device               deviceChoice
	maxTokens, promptLen int
	// shape runs
	acceptRate float64
	layers     int
}

func runBenchSpec(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "bench spec", "bench spec [--model DIR | --shape NAMES] [flags]")
	dir := fs.String("model", "", "model directory: end-to-end generation with real drafts (default, without --shape: the built-in "+models.Default+" model)")
	device := deviceFlags(fs)
	shapes := fs.String("shape", "", "layer shapes with random weights, state cache only: nemotron-3-nano-4b, nemotron-3-super, qwen3.5-4b, qwen3.5-122b, mamba2, gdn or all")
	batches := fs.String("batch", "1,16,64", "batch sizes, comma-separated (up to 512)")
	drafts := fs.String("draft-tokens", "4", fmt.Sprintf("draft tokens T per step, comma-separated (1..%d)", engine.MaxDrafts))
	modes := fs.String("modes", "nospec,spec-baseline,spec-replay", fmt.Sprintf("modes, comma-separated, of %v", specModes))
	drafter := fs.String("speculative", "ngram", "model runs: drafter, ngram, draft (--draft-model) or mtp (the model's MTP head)")
	draftModel := fs.String("draft-model", "", "model runs: draft model directory")
	maxTokens := fs.Int("max-tokens", 64, "model runs: tokens generated per request")
	promptLen := fs.Int("prompt-len", 32, "model runs: prompt length (a random 8-token phrase, repeated)")
	acceptRate := fs.Float64("accept-rate", 0.7, "shape runs: probability that a draft is accepted given the ones before it were (one seeded pattern for every mode)")
	layers := fs.Int("layers", 0, "shape runs: SSM layers to count (0: the target model's)")
	window := fs.Int("window", replay.DefaultWindow, "replay window L")
	dtype := fs.String("state-dtype", "fp32", "state (checkpoint) format")
	readCopy := fs.String("read-copy", "none", "replay read copy: none, bf16, fp8 or nvfp4")
	memGB := fs.Float64("memory-gb", 0, "state memory budget for max_concurrent, in GB (10⁹ bytes); 0: the free memory of the device the state lives on (model runs: once the model is placed; shape runs: this machine's)")
	maxAlloc := fs.Float64("max-alloc-gb", 12, "skip shape rows whose caches would allocate more than this (GB)")
	repeat := fs.Int("repeat", 3, "measurements per row (modes interleaved); the median is reported")
	minTime := fs.Duration("min-time", time.Second, "shape runs: least time per measurement")
	threads := fs.Int("threads", runtime.GOMAXPROCS(0), "worker threads of the state caches")
	asJSON := fs.Bool("json", false, "print one JSON object per row")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir != "" && *shapes != "" {
		return fmt.Errorf("%w: give one of --model DIR and --shape NAMES", errUsage)
	}
	cfg := specBenchConfig{device: *device, modes: splitList(*modes), memGB: *memGB, maxAlloc: *maxAlloc, repeat: *repeat, minTime: *minTime,
		drafter: *drafter, draftModel: *draftModel, maxTokens: *maxTokens, promptLen: *promptLen, acceptRate: *acceptRate, layers: *layers}
	var err error
	if cfg.batches, err = intList(*batches, 1, 512, "batch"); err != nil {
		return err
	}
	if cfg.drafts, err = intList(*drafts, 1, engine.MaxDrafts, "draft-tokens"); err != nil {
		return err
	}
	for _, m := range cfg.modes {
		if !slices.Contains(specModes, m) {
			return fmt.Errorf("%w: unknown mode %q (want %v)", errUsage, m, specModes)
		}
	}
	st, err := numeric.ParseFormat(*dtype)
	if err != nil {
		return fmt.Errorf("%w: --state-dtype: %v", errUsage, err)
	}
	rc := numeric.F32
	if *readCopy != "none" {
		if rc, err = numeric.ParseFormat(*readCopy); err != nil {
			return fmt.Errorf("%w: --read-copy: %v", errUsage, err)
		}
	}
	cfg.opt = replay.Options{Window: *window, State: st, ReadCopy: rc, Threads: *threads}
	if *repeat < 1 || *acceptRate < 0 || *acceptRate > 1 || *memGB < 0 || *maxTokens < 2 || *promptLen < 1 {
		return fmt.Errorf("%w: --repeat ≥ 1, --accept-rate in [0, 1], --memory-gb ≥ 0, --max-tokens ≥ 2, --prompt-len ≥ 1", errUsage)
	}
	emit := specPrinter(e, *asJSON)
	if *shapes == "" {
		if *dir, err = modelDir(*dir); err != nil {
			return err
		}
		if cfg.drafter != "ngram" && cfg.drafter != "draft" && cfg.drafter != "mtp" {
			return fmt.Errorf("%w: --speculative %q (want ngram, draft or mtp)", errUsage, cfg.drafter)
		}
		return benchSpecModel(ctx, e, *dir, cfg, emit)
	}
	sel, err := bench.SelectShapes(splitList(*shapes))
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if cfg.memGB == 0 { // the shape runs' caches run on this machine's CPU
		free, err := hostFreeMemory()
		if err != nil {
			return fmt.Errorf("%w (give --memory-gb)", err)
		}
		cfg.memGB = float64(free) / 1e9
	}
	return benchSpecShapes(ctx, sel, cfg, emit)
}

func intList(s string, lo, hi int, name string) ([]int, error) {
	var out []int
	for _, f := range splitList(s) {
		n, err := strconv.Atoi(f)
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%w: --%s %q: want integers in [%d, %d]", errUsage, name, f, lo, hi)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: --%s is empty", errUsage, name)
	}
	return out, nil
}

// specMode is the benchmark mode a bench spec mode runs: nospec steps
// replay caches, nospec-baseline baseline ones, spec-baseline and
// spec-replay verify T drafts and the last token (T+1 positions).
func specMode(name string) bench.Mode {
	kernel := map[string]string{"nospec": "replay", "nospec-baseline": "baseline", "spec-baseline": "verify-baseline", "spec-replay": "verify"}[name]
	m, _ := bench.ParseMode(kernel) // names come from specModes
	return m
}

// modeOptions returns the state options of a bench spec mode with T drafts.
func modeOptions(base replay.Options, mode string, T int) replay.Options {
	return specMode(mode).Options(base, T+1)
}

// requestBytes returns what one request needs and what replay allocates:
// the baseline's speculative layout needs 1+T states where replay.Baseline
// allocates 1+MaxDraft.
func requestBytes(sb nn.StateBytes, opt replay.Options, mode string, T int) (need, alloc int64) {
	alloc = sb.Total()
	if m := specMode(mode); m.Verify && m.State == replay.Baseline {
		sb.States = sb.States / int64(1+opt.MaxDraft) * int64(1+T)
	}
	return sb.Total(), alloc
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// pairedSpeedup is the median over the repeats of a's throughput over b's
// in the same repeat: the modes of one repeat run back to back, so the
// ratio cancels most of a shared machine's slow drifts.
func pairedSpeedup(a, b *specRow) float64 {
	if a == nil || b == nil || a.Skipped != "" || b.Skipped != "" || len(a.TokensPerSRuns) != len(b.TokensPerSRuns) {
		return 0
	}
	var r []float64
	for i := range a.TokensPerSRuns {
		if b.TokensPerSRuns[i] > 0 {
			r = append(r, a.TokensPerSRuns[i]/b.TokensPerSRuns[i])
		}
	}
	return median(r)
}

// finishRows fills the comparisons of one batch's rows and emits them.
func finishRows(rows []*specRow, emit func(specRow) error) error {
	var nospec *specRow
	base := map[int]*specRow{}
	for _, r := range rows {
		if r.Mode == "nospec" {
			nospec = r
		}
		if r.Mode == "spec-baseline" {
			base[r.T] = r
		}
	}
	for _, r := range rows {
		if r.Skipped != "" {
			continue
		}
		if r.Mode != "nospec" {
			r.SpeedupVsNospec = pairedSpeedup(r, nospec)
		}
		if b := base[r.T]; b != nil && r.Mode == "spec-replay" && b.Skipped == "" {
			r.SpeedupVsBaseline = pairedSpeedup(r, b)
			r.ConcurrentVsBaseline = float64(r.MaxConcurrent) / float64(max(1, b.MaxConcurrent))
		}
	}
	for _, r := range rows {
		if err := emit(*r); err != nil {
			return err
		}
	}
	return nil
}

func specPrinter(e *env, asJSON bool) func(specRow) error {
	return rowPrinter(e, asJSON, func(specRow) {
		fmt.Fprintf(e.stdout, "%-20s %6s %5s %2s %-15s %12s %8s %8s %9s %10s %9s %8s %8s %7s\n",
			"model", "layers", "batch", "T", "mode", "tokens/s", "accepted", "tok/step", "us/step", "state/req", "max conc", "vs nospec", "vs base", "conc x")
	}, func(r specRow) error {
		if r.Skipped != "" {
			_, err := fmt.Fprintf(e.stdout, "%-20s %6d %5d %2d %-15s skipped: %s\n", r.Model, r.Layers, r.Batch, r.T, r.Mode, r.Skipped)
			return err
		}
		us := "-"
		if r.UsPerStep > 0 {
			us = fmt.Sprintf("%.0f", r.UsPerStep)
		}
		ratio := func(x float64) string {
			if x == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2fx", x)
		}
		_, err := fmt.Fprintf(e.stdout, "%-20s %6d %5d %2d %-15s %12.1f %8.2f %8.2f %9s %10s %9d %8s %8s %7s\n",
			r.Model, r.Layers, r.Batch, r.T, r.Mode, r.TokensPerS, r.MeanAccepted, r.TokensPerStep, us,
			bytesString(r.StateBytesPerRequest), r.MaxConcurrent, ratio(r.SpeedupVsNospec), ratio(r.SpeedupVsBaseline), ratio(r.ConcurrentVsBaseline))
		return err
	})
}

// benchKey is one row of a batch: a mode and its T (0 without speculation).
type benchKey struct {
	mode string
	T    int
}

// benchKeys lists a batch's rows in the order they are measured within a
// repeat: the modes without speculation (independent of T), then for each T
// the baseline and replay rows back to back.
func benchKeys(cfg specBenchConfig) []benchKey {
	var keys []benchKey
	for _, m := range specModes {
		if !specMode(m).Verify && slices.Contains(cfg.modes, m) {
			keys = append(keys, benchKey{m, 0})
		}
	}
	for _, T := range cfg.drafts {
		for _, m := range specModes {
			if specMode(m).Verify && slices.Contains(cfg.modes, m) {
				keys = append(keys, benchKey{m, T})
			}
		}
	}
	return keys
}

// syntheticRequests returns n requests whose prompts repeat a random 8-token
// phrase (seeded) up to promptLen tokens, each decoding maxTokens tokens
// (no end token: every decode step carries the whole batch).
func syntheticRequests(seed uint64, n, vocab, promptLen, maxTokens int) []engine.Request {
	rng := rand.New(rand.NewPCG(seed>>8, seed&0xff))
	reqs := make([]engine.Request, n)
	for i := range reqs {
		phrase := make([]int, 8)
		for j := range phrase {
			phrase[j] = rng.IntN(vocab)
		}
		p := make([]int, promptLen)
		for j := range p {
			p[j] = phrase[j%len(phrase)]
		}
		reqs[i] = engine.Request{Prompt: p, MaxTokens: maxTokens}
	}
	return reqs
}

// benchSpecModel generates with the model in dir: synthetic repetitive
// prompts, greedy sampling, every request admitted at once.
func benchSpecModel(ctx context.Context, e *env, dir string, cfg specBenchConfig, emit func(specRow) error) error {
	d, err := loadModel(e.stderr, dir)
	if err != nil {
		return err
	}
	if err := place(ctx, e, d, cfg.device); err != nil {
		return err
	}
	if cfg.memGB == 0 {
		free, err := freeMemory(d)
		if err != nil {
			return fmt.Errorf("%w (give --memory-gb)", err)
		}
		cfg.memGB = float64(free) / 1e9
	}
	var draft *nn.Decoder
	if cfg.drafter == "draft" {
		if cfg.draftModel == "" {
			return fmt.Errorf("%w: --speculative draft needs --draft-model DIR", errUsage)
		}
		if draft, err = loadModel(e.stderr, cfg.draftModel); err != nil {
			return err
		}
		if draft.Vocab != d.Vocab {
			return fmt.Errorf("draft model vocabulary %d differs from the target's %d", draft.Vocab, d.Vocab)
		}
		draft.Place(d.Backend())
	}
	var head *nn.MTP
	if cfg.drafter == "mtp" {
		if head, err = model.LoadMTP(dir, d); err != nil {
			return err
		}
	}
	name := filepath.Base(filepath.Clean(dir))
	nLayers := d.SSMLayers()
	for _, B := range cfg.batches {
		reqs := syntheticRequests(uint64(B)<<8|17, B, d.Vocab, cfg.promptLen, cfg.maxTokens)
		keys := benchKeys(cfg)
		rows := make([]*specRow, len(keys))
		for rep := 0; rep < cfg.repeat; rep++ {
			for i, k := range keys {
				if err := ctx.Err(); err != nil {
					return err
				}
				opt := modeOptions(cfg.opt, k.mode, k.T)
				eng, err := engine.New(d, B, opt)
				if err != nil {
					return err
				}
				var tm engine.Timing
				var ss engine.SpecStats
				if k.T == 0 {
					_, tm, err = eng.Generate(ctx, reqs)
				} else {
					var dr spec.Drafter = &spec.NGram{}
					if head != nil {
						if dr, err = spec.NewMTP(head, d, eng.State(), B, k.T); err != nil {
							eng.Close()
							return err
						}
					} else if draft != nil {
						if dr, err = spec.NewDraftModel(draft, B, k.T, replay.Options{Mode: opt.Mode, Window: opt.Window, Threads: opt.Threads}); err != nil {
							eng.Close()
							return err
						}
					}
					_, tm, ss, err = eng.GenerateSpeculative(ctx, reqs, engine.Speculation{Drafter: dr, Drafts: k.T, Accept: spec.Greedy})
					dr.Close()
				}
				eng.Close()
				if err != nil {
					return err
				}
				if rows[i] == nil {
					need, alloc := requestBytes(d.StateBytes(opt), opt, k.mode, k.T)
					rows[i] = &specRow{Device: "cpu", Model: name, Layers: nLayers, Batch: B, T: k.T, Mode: k.mode,
						StateBytesPerRequest: need, StateBytesAllocated: alloc, MemoryGB: cfg.memGB,
						MaxConcurrent: int64(cfg.memGB * 1e9 / float64(max(1, need))),
						Window:        opt.Window, StateDtype: precision(opt), Threads: opt.Threads, Repeats: cfg.repeat}
					if k.T > 0 {
						rows[i].Drafter = cfg.drafter
					}
				}
				r := rows[i]
				r.TokensPerSRuns = append(r.TokensPerSRuns, rate(tm.DecodeTokens, tm.Decode))
				r.TokensPerS = median(r.TokensPerSRuns)
				r.MeanAccepted, r.AcceptanceRate, r.TokensPerStep = ss.MeanAccepted(), ss.AcceptanceRate(), ss.MeanAccepted()+1
			}
		}
		if err := finishRows(rows, emit); err != nil {
			return err
		}
	}
	return nil
}

// benchSpecShapes measures the SSM state cache of each shape alone: conv
// plus step (nospec), or conv verify, verify and commit of T+1 positions per
// request with a seeded acceptance pattern shared by every mode.
func benchSpecShapes(ctx context.Context, shapes []bench.LayerShape, cfg specBenchConfig, emit func(specRow) error) error {
	for _, sh := range shapes {
		nLayers := cfg.layers
		if nLayers == 0 {
			nLayers = sh.SSMLayers
		}
		for _, B := range cfg.batches {
			keys := benchKeys(cfg)
			rows := make([]*specRow, len(keys))
			for i, k := range keys {
				opt := modeOptions(cfg.opt, k.mode, k.T)
				sb := shapeStateBytes(sh, opt)
				need, alloc := requestBytes(sb, opt, k.mode, k.T)
				rows[i] = &specRow{Device: "cpu", Model: sh.Name, Layer: sh.Layer, Layers: nLayers, Batch: B, T: k.T, Mode: k.mode,
					StateBytesPerRequest: need * int64(nLayers), StateBytesAllocated: alloc * int64(nLayers), MemoryGB: cfg.memGB,
					MaxConcurrent: int64(cfg.memGB * 1e9 / float64(max(1, need*int64(nLayers)))),
					Window:        opt.Window, StateDtype: precision(opt), Threads: opt.Threads, Repeats: cfg.repeat}
				if k.T > 0 {
					rows[i].Drafter = fmt.Sprintf("simulated (accept %.2f)", cfg.acceptRate)
				}
				if gb := float64(alloc) * float64(B) / 1e9; gb > cfg.maxAlloc {
					rows[i].Skipped = fmt.Sprintf("one layer's caches would take %.1f GB > --max-alloc-gb %.0f", gb, cfg.maxAlloc)
				}
			}
			for rep := 0; rep < cfg.repeat; rep++ {
				for i, k := range keys {
					if rows[i].Skipped != "" {
						continue
					}
					if err := ctx.Err(); err != nil {
						return err
					}
					m, err := measureShape(ctx, sh, B, k.T, modeOptions(cfg.opt, k.mode, k.T), cfg)
					if err != nil {
						return fmt.Errorf("%s batch %d %s T=%d: %w", sh.Name, B, k.mode, k.T, err)
					}
					r := rows[i]
					r.TokensPerSRuns = append(r.TokensPerSRuns, m.tokensPerS/float64(max(1, nLayers)))
					r.TokensPerS = median(r.TokensPerSRuns)
					r.UsPerStep = m.usPerStep // the last repeat's median
					r.MeanAccepted, r.TokensPerStep = m.meanAccepted, m.meanAccepted+1
					if k.T > 0 {
						r.AcceptanceRate = m.meanAccepted / float64(k.T)
					}
				}
			}
			if err := finishRows(rows, emit); err != nil {
				return err
			}
		}
	}
	return nil
}

// shapeStateBytes is one layer's per-request state for the shape, with the
// target models' conv width 4.
func shapeStateBytes(sh bench.LayerShape, opt replay.Options) nn.StateBytes {
	if sh.Layer == "mamba2" {
		s := sh.Mamba2
		return nn.Mamba2StateBytes(s, s.Heads*s.HeadDim+2*s.Groups*s.StateSize, 4, opt)
	}
	s := sh.GDN
	return nn.GDNStateBytes(s, 2*s.KeyHeads*s.KeyDim+s.ValueHeads*s.ValueDim, 4, opt)
}

type shapeResult struct {
	tokensPerS   float64 // one layer
	usPerStep    float64
	meanAccepted float64
}

// acceptPattern is a seeded table of accepted draft counts [step][slot]:
// each draft is accepted with probability p given the ones before it.
func acceptPattern(steps, batch, T int, p float64) [][]int {
	rng := rand.New(rand.NewPCG(uint64(batch), uint64(T)))
	out := make([][]int, steps)
	for s := range out {
		out[s] = make([]int, batch)
		for i := range out[s] {
			a := 0
			for a < T && rng.Float64() < p {
				a++
			}
			out[s][i] = a
		}
	}
	return out
}

func measureShape(ctx context.Context, sh bench.LayerShape, B, T int, opt replay.Options, cfg specBenchConfig) (shapeResult, error) {
	defer func() {
		runtime.GC()
		debug.FreeOSMemory()
	}()
	// The caches of the target models: conv width 4, every slot in each call.
	lc, err := bench.NewDriver(sh, B, B*(T+1), opt, 4, rand.New(rand.NewPCG(uint64(B), 99)))
	if err != nil {
		return shapeResult{}, err
	}
	defer lc.Close()
	slots := make([]replay.Slot, B)
	for i := range slots {
		if slots[i], err = lc.Admit(); err != nil {
			return shapeResult{}, err
		}
	}
	// Timed steps come in whole cycles of the pattern, so every mode
	// accepts exactly the same drafts.
	const patternSteps = 16
	var pattern [][]int
	if T > 0 {
		pattern = acceptPattern(patternSteps, B, T, cfg.acceptRate)
	}
	commit := make([]int, B)
	var times []float64
	var tokens int64
	var accepted, verifies int64
	warm := 2 * replay.DefaultWindow / (T + 1)
	var elapsed time.Duration
	for step := 0; ; step++ {
		if err := ctx.Err(); err != nil {
			return shapeResult{}, err
		}
		timed := step >= warm
		if timed && len(times) >= 3 && elapsed >= cfg.minTime && (T == 0 || len(times)%patternSteps == 0) {
			break
		}
		start := time.Now()
		n := int64(B)
		set := step % bench.InputSets
		if T == 0 {
			if err = lc.Conv(slots, set); err == nil {
				err = lc.Step(slots, set)
			}
		} else {
			acc := pattern[step%patternSteps]
			for i, a := range acc {
				commit[i] = a + 1
			}
			if err = lc.ConvVerify(slots, set, T+1); err == nil {
				err = lc.Verify(slots, set, T+1)
			}
			if err == nil {
				err = lc.Commit(slots, commit)
			}
			n = 0
			for _, a := range acc {
				n += int64(a + 1)
				if timed {
					accepted += int64(a)
					verifies++
				}
			}
		}
		if err != nil {
			return shapeResult{}, err
		}
		if timed {
			d := time.Since(start)
			elapsed += d
			times = append(times, float64(d.Microseconds()))
			tokens += n
		}
	}
	r := shapeResult{tokensPerS: float64(tokens) / elapsed.Seconds(), usPerStep: median(times)}
	if verifies > 0 {
		r.meanAccepted = float64(accepted) / float64(verifies)
	}
	return r, nil
}

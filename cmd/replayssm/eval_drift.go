package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/replayssm/replayssm/backend/cuda"
	"github.com/replayssm/replayssm/drift"
	"github.com/replayssm/replayssm/models"
	"github.com/replayssm/replayssm/replay"
)

// runEvalDrift compares state modes against the float32 recurrence over one
// long text: the measurement behind choosing a state mode (docs/FIDELITY.md).
func runEvalDrift(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "eval drift", "eval drift [--model DIR] [flags] FILE | --ids FILE")
	dir := fs.String("model", "", "model directory; default: the built-in "+models.Default+" model")
	device := deviceFlags(fs)
	idsFile := fs.String("ids", "", "run this file of token ids (comma or white-space separated) instead of text")
	modes := fs.String("modes", strings.Join(drift.DefaultModes, ","), "state modes, comma-separated: naive-FMT (the recurrence rounded to FMT every step), FMT (a replay checkpoint), FMT+READ (and a read copy), any with -sr (stochastic rounding)")
	windows := fs.String("windows", "16,8", "replay windows, comma-separated: each replay mode runs at each")
	maxTokens := fs.Int("max-tokens", 0, "compare at most this many positions (0: the whole text)")
	chunk := fs.Int("chunk", 512, "tokens per forward")
	plotPath := fs.String("plot", "", "write the KL against position, log-log, to this file (.png, .svg or .pdf)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if (*idsFile == "") == (len(pos) != 1) {
		return fmt.Errorf("%w: give one text FILE or --ids FILE", errUsage)
	}
	if *chunk < 1 || *maxTokens < 0 {
		return fmt.Errorf("%w: --chunk must be positive and --max-tokens not negative", errUsage)
	}
	ws, err := intList(*windows, 1, 1<<16, "window")
	if err != nil {
		return err
	}
	var ms []drift.Mode
	for _, name := range splitList(*modes) {
		for i, w := range ws {
			m, err := drift.ParseMode(name, w)
			if err != nil {
				return fmt.Errorf("%w: --modes: %v", errUsage, err)
			}
			if m.Options.Mode == replay.Baseline && i > 0 {
				break // a naive state has no window: once
			}
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		return fmt.Errorf("%w: --modes is empty", errUsage)
	}
	modelDir, name, d, tok, err := openModel(ctx, e, *dir, *device)
	if err != nil {
		return err
	}
	if _, ok := d.Backend().(*cuda.NNBackend); ok {
		// The GPU caches take fewer formats (no naive nvfp4 state, no
		// stochastic rounding): say which modes are left out.
		kept := ms[:0]
		for _, m := range ms {
			if _, err := m.Options.Check("", cuda.Capabilities()); err != nil {
				fmt.Fprintf(e.stderr, "skipping %s on the GPU: %v\n", m.Name, err)
				continue
			}
			kept = append(kept, m)
		}
		if ms = kept; len(ms) == 0 {
			return fmt.Errorf("%w: no mode of --modes runs on the GPU", errUsage)
		}
	}
	ids, err := readTokens(modelDir, tok, d.Vocab, *idsFile, pos)
	if err != nil {
		return err
	}
	if *maxTokens > 0 && len(ids) > *maxTokens+1 {
		ids = ids[:*maxTokens+1]
	}
	if len(ids) < 2 {
		return fmt.Errorf("%w: need at least two tokens", errUsage)
	}
	bar := newCountProgress(e.stderr, fmt.Sprintf("positions, %d modes", len(ms)), 2048)
	start := time.Now()
	r, err := drift.Measure(ctx, d, ids, ms, *chunk, func(done, total int) { bar.update(int64(done), int64(total)) })
	bar.done()
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "%d positions, %d modes and the reference in %.1f s\n", r.Positions, len(ms), time.Since(start).Seconds())
	if *plotPath != "" {
		title := fmt.Sprintf("%s: state drift from the fp32 recurrence", name)
		if err := drift.Plot(r, title, *plotPath); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "plot: %s\n", *plotPath)
	}
	if *asJSON {
		return json.NewEncoder(e.stdout).Encode(struct {
			Model string `json:"model"`
			*drift.Result
		}{name, r})
	}
	return printDrift(e, name, r)
}

// printDrift prints one table: a row per mode and position bucket, the
// whole stream last.
func printDrift(e *env, model string, r *drift.Result) error {
	fmt.Fprintf(e.stdout, "%s, %d positions, reference: baseline fp32 state\n", model, r.Positions)
	fmt.Fprintf(e.stdout, "%-16s %6s %9s %11s %11s %11s %11s %8s\n", "mode", "window", "positions", "mean KL", "p95 KL", "mean |Δlp|", "p95 |Δlp|", "top-1")
	row := func(s drift.Series, span string, st drift.Stats) error {
		w := "-"
		if s.Window > 0 {
			w = fmt.Sprint(s.Window)
		}
		_, err := fmt.Fprintf(e.stdout, "%-16s %6s %9s %11.3e %11.3e %11.3e %11.3e %7.2f%%\n",
			s.Mode, w, span, st.MeanKL, st.P95KL, st.MeanDLogP, st.P95DLogP, 100*st.Top1)
		return err
	}
	for _, s := range r.Series {
		lo := 0
		for i, b := range s.Buckets {
			if err := row(s, fmt.Sprintf("%s-%s", count(lo+1), count(r.Ends[i])), b); err != nil {
				return err
			}
			lo = r.Ends[i]
		}
		if len(s.Buckets) > 1 {
			if err := row(s, "all", s.All); err != nil {
				return err
			}
		}
	}
	return nil
}

// count writes a position compactly: 512, 2K, 128K.
func count(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%dK", n/1024)
	}
	return fmt.Sprint(n)
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/replayssm/replayssm/bench"
	"github.com/replayssm/replayssm/numeric"
)

func runBench(ctx context.Context, e *env, args []string) error {
	if len(args) == 0 || wantsHelp(args[:1]) {
		fmt.Fprintln(e.stderr, `Usage: replayssm bench <what> [flags]

What:
  kernels   SSM state-cache kernels: baseline vs replay vs replay with a read
            copy (nvfp4, fp8), verify
  copy      this machine's memory copy bandwidth
  decode    whole decode steps of a model (default: the built-in one):
            tokens/s and state bytes per token, baseline vs replay vs
            replay-nvfp4
  spec      speculative decoding: tokens/s, acceptance, state memory and max
            concurrency (nospec, spec-baseline, spec-replay)
  serve     load an OpenAI-compatible server (ours or another) as vLLM's
            serving benchmark does: TTFT, TPOT, ITL, latency, throughput`)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	switch args[0] {
	case "kernels":
		return runBenchKernels(ctx, e, args[1:])
	case "copy":
		return runBenchCopy(ctx, e, args[1:])
	case "spec":
		return runBenchSpec(ctx, e, args[1:])
	case "decode":
		return runBenchDecode(ctx, e, args[1:])
	case "serve":
		return runBenchServe(ctx, e, args[1:])
	}
	return fmt.Errorf("%w: unknown benchmark %q (want kernels, copy, decode, spec or serve)", errUsage, args[0])
}

// rowPrinter returns the emit function of a benchmark's rows: one JSON
// object per line, or a text table whose header (printed from the first
// row) comes before the first line.
func rowPrinter[T any](e *env, asJSON bool, header func(T), line func(T) error) func(T) error {
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		return func(r T) error { return enc.Encode(r) }
	}
	first := true
	return func(r T) error {
		if first {
			header(r)
			first = false
		}
		return line(r)
	}
}

func runBenchCopy(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "bench copy", "bench copy [flags]")
	device := fs.String("device", "cpu", "device: cpu or cuda")
	threads := fs.Int("threads", runtime.GOMAXPROCS(0), "worker threads (cpu)")
	size := fs.Int("mib", 0, "buffer size in MiB (0: 256 on the cpu, 1024 on a GPU, several times its L2 cache)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *size < 0 || *size > 1<<16 {
		return fmt.Errorf("%w: --mib %d: want 0 (the default) to 65536", errUsage, *size)
	}
	switch *device {
	case "cpu":
		if *size == 0 {
			*size = 256
		}
	case "cuda":
		if *size == 0 {
			*size = 1024
		}
		name, c, r, err := bench.BandwidthCUDA(ctx, *size<<20)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "cuda %s memory bandwidth (%d MiB): copy %.1f GB/s (read+write), read-only %.1f GB/s\n", name, *size, c, r)
		return nil
	default:
		return fmt.Errorf("%w: device %q (want cpu or cuda)", errUsage, *device)
	}
	c, u, r := bench.MemoryBandwidth(*size<<20, *threads)
	fmt.Fprintf(e.stdout, "cpu memory bandwidth (%d threads, %d MiB): copy %.1f GB/s and in-place update %.1f GB/s (read+write), read-only %.1f GB/s\n", *threads, *size, c, u, r)
	return nil
}

func runBenchKernels(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "bench kernels", "bench kernels [flags]")
	device := fs.String("device", "cpu", "device: cpu or cuda")
	shapes := fs.String("shapes", "all", "layer shapes: all, mamba2, gdn, or names such as nemotron-3-nano-4b,qwen3.5-4b")
	batches := fs.String("batch", "1,16,64", "batch sizes, comma-separated")
	modes := fs.String("modes", "baseline,replay,replay-nvfp4,verify-baseline,verify", "modes, comma-separated, of "+strings.Join(bench.Modes, ","))
	dtypes := fs.String("state-dtype", "fp32,bf16", "state (checkpoint) dtypes, comma-separated")
	window := fs.Int("window", 16, "replay window L")
	drafts := fs.Int("drafts", 4, "draft tokens T for verify rows")
	threads := fs.Int("threads", runtime.GOMAXPROCS(0), "worker threads")
	minTime := fs.Duration("min-time", 300*time.Millisecond, "least time spent timing each row")
	asJSON := fs.Bool("json", false, "print one JSON object per row")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile to this file")
	ring := fs.String("ring-dtype", "fp32", "replay rows' ring inputs: fp32 or bf16 (cuda: Mamba-2 shapes only)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	run := bench.RunKernels
	switch *device {
	case "cpu":
	case "cuda":
		run = bench.RunKernelsCUDA
	default:
		return fmt.Errorf("%w: device %q (want cpu or cuda)", errUsage, *device)
	}
	cfg := bench.KernelConfig{Window: *window, Drafts: *drafts, Threads: *threads, MinTime: *minTime, Modes: splitList(*modes), Log: e.stderr}
	var err error
	if cfg.Ring, err = numeric.ParseFormat(*ring); err != nil || cfg.Ring != numeric.F32 && cfg.Ring != numeric.BF16 {
		return fmt.Errorf("%w: --ring-dtype %s: want fp32 or bf16", errUsage, *ring)
	}
	if cfg.Shapes, err = bench.SelectShapes(splitList(*shapes)); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	for _, b := range splitList(*batches) {
		n, err := strconv.Atoi(b)
		if err != nil || n < 1 || n > 4096 {
			return fmt.Errorf("%w: batch %q: want an integer in [1, 4096]", errUsage, b)
		}
		cfg.Batches = append(cfg.Batches, n)
	}
	for _, d := range splitList(*dtypes) {
		f, err := numeric.ParseFormat(d)
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		cfg.Dtypes = append(cfg.Dtypes, f)
	}
	for _, m := range cfg.Modes {
		if _, err := bench.ParseMode(m); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
	}
	if *window < 1 || *window > 256 {
		return fmt.Errorf("%w: window %d out of range [1, 256]", errUsage, *window)
	}
	if *drafts < 1 || *drafts > 8 {
		return fmt.Errorf("%w: drafts %d out of range [1, 8]", errUsage, *drafts)
	}
	return run(ctx, cfg, rowPrinter(e, *asJSON, func(r bench.Row) {
		fmt.Fprint(e.stdout, kernelsHeader(r, *window, *drafts, cfg.Ring))
	}, func(r bench.Row) error {
		_, err := fmt.Fprintln(e.stdout, kernelsLine(r))
		return err
	}))
}

// kernelsHeader is the text table's heading: the machine, the bandwidths
// measured in the same run (read-only where it was measured), and the
// column names.
func kernelsHeader(r bench.Row, window, drafts int, ring numeric.Format) string {
	where := fmt.Sprintf("cpu (%d threads)", r.Threads)
	if r.Device != "cpu" {
		where = r.Device
	}
	read := ""
	if r.ReadGBps > 0 {
		read = fmt.Sprintf(", read-only %.1f GB/s", r.ReadGBps)
	}
	rings := ""
	if ring != numeric.F32 {
		rings = fmt.Sprintf(", replay rings in %v", ring)
	}
	return fmt.Sprintf("device %s, copy bandwidth %.1f GB/s (read+write)%s, window L=%d, verify T=%d%s\n", where, r.CopyGBps, read, window, drafts, rings) +
		fmt.Sprintf("%-20s %-5s %5s %-16s %9s %9s %9s %8s %7s %6s %8s\n",
			"shape", "dtype", "batch", "mode", "us/step", "nonflush", "flush", "MB/step", "GB/s", "%copy", "vs base")
}

// kernelsLine is one row of the text table. Times under 100 us keep a
// decimal (a GPU step at batch 1 takes 4-25 us); a ratio to a baseline that
// was not measured in the run prints as "-".
func kernelsLine(r bench.Row) string {
	us := func(v float64) string {
		if v < 100 {
			return fmt.Sprintf("%9.1f", v)
		}
		return fmt.Sprintf("%9.0f", v)
	}
	vs := "       -"
	if r.SpeedupVsBaseline > 0 {
		vs = fmt.Sprintf("%7.2fx", r.SpeedupVsBaseline)
	}
	extra := ""
	if r.PctCopyWithRing > 0 {
		extra = fmt.Sprintf("  %.0f%% with the ring", r.PctCopyWithRing)
	}
	if r.NonflushVsReplay > 0 {
		extra += fmt.Sprintf("  non-flush %.2fx faster than replay", r.NonflushVsReplay)
	}
	return fmt.Sprintf("%-20s %-5s %5d %-16s %s %s %s %8.1f %7.1f %5.0f%% %s%s",
		r.Shape, r.StateDtype, r.Batch, r.Mode, us(r.UsPerStep), us(r.UsNonflush), us(r.UsFlush),
		r.BytesPerStep/1e6, r.GBps, r.PctCopy, vs, extra)
}

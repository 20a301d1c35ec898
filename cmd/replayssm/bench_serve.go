package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/replayssm/replayssm/bench/loadgen"
)

// runBenchServe is `bench serve`: a load generator against any
// OpenAI-compatible server, in the manner of vLLM's serving benchmark
// (docs/BENCH_SERVE.md).
func runBenchServe(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "bench serve", "bench serve [--base-url URL] [flags]")
	baseURL := fs.String("base-url", "http://127.0.0.1:8080", "the OpenAI-compatible server, with or without /v1 (replayssm serve listens here by default)")
	endpoint := fs.String("endpoint", "completions", "API: completions (/v1/completions) or chat (/v1/chat/completions)")
	model := fs.String("model", "", "model named in each request (default: the first that GET /v1/models lists)")
	apiKey := fs.String("api-key", "", "bearer token sent to the server (default: $OPENAI_API_KEY)")
	numPrompts := fs.Int("num-prompts", 1000, "requests to send")
	rateFlag := fs.String("request-rate", "inf", "mean requests per second, Poisson arrivals; inf sends all at once")
	maxConc := fs.Int("max-concurrency", 0, "most requests in flight; more wait for a free place (0: no cap)")
	seed := fs.Uint64("seed", 0, "seed of the workload and the arrival times")
	dataset := fs.String("dataset", "random", "workload: random, jsonl or shared-prefix")
	inputLen := fs.Int("input-len", 1024, "random: words of each prompt; shared-prefix: words of each question")
	outputLen := fs.Int("output-len", 128, "max_tokens of each request (jsonl: of a line without output_len)")
	rangeRatio := fs.Float64("range-ratio", 0, "random, shared-prefix: draw lengths uniformly in [len·(1−r), len·(1+r)], r in [0, 1)")
	path := fs.String("dataset-path", "", `jsonl: a file of {"prompt": "...", "output_len": N} lines`)
	prefixLen := fs.Int("prefix-len", 512, "shared-prefix: words of the shared system prompt")
	prefixes := fs.Int("num-prefixes", 1, "shared-prefix: distinct system prompts; request i shares prefix i mod N")
	ignoreEOS := fs.Bool("ignore-eos", false, "ask for exactly max_tokens tokens: sends ignore_eos and min_tokens")
	stream := fs.Bool("stream", true, "stream the answers with SSE (TTFT, TPOT and ITL need it)")
	temperature := fs.Float64("temperature", 0, "sampling temperature (0: greedy)")
	timeout := fs.Duration("timeout", 10*time.Minute, "most time one request may take")
	asJSON := fs.Bool("json", false, "print one JSON object with every figure (vLLM's key names)")
	pctFlag := fs.String("percentiles", "50,90,99", "latency percentiles to report, comma-separated")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}

	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["api-key"] {
		// Read here, not as the flag's default, so that --help does not print it.
		*apiKey = os.Getenv("OPENAI_API_KEY")
	}
	applies := map[string][]string{
		"random":        {"input-len", "range-ratio"},
		"jsonl":         {"dataset-path"},
		"shared-prefix": {"input-len", "range-ratio", "prefix-len", "num-prefixes"},
	}
	own, ok := applies[*dataset]
	if !ok {
		return fmt.Errorf("%w: --dataset %q: want random, jsonl or shared-prefix", errUsage, *dataset)
	}
	for _, name := range []string{"input-len", "range-ratio", "dataset-path", "prefix-len", "num-prefixes"} {
		if set[name] && !slices.Contains(own, name) {
			return fmt.Errorf("%w: --%s does not apply to --dataset %s", errUsage, name, *dataset)
		}
	}
	base, err := url.Parse(*baseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return fmt.Errorf("%w: --base-url %q: want http://HOST:PORT or https://HOST[/PATH]", errUsage, *baseURL)
	}
	var ep loadgen.Endpoint
	switch *endpoint {
	case "completions":
		ep = loadgen.Completions
	case "chat":
		ep = loadgen.Chat
	default:
		return fmt.Errorf("%w: --endpoint %q: want completions or chat", errUsage, *endpoint)
	}
	rate, err := parseRate(*rateFlag)
	if err != nil {
		return fmt.Errorf("%w: --request-rate %v", errUsage, err)
	}
	ps, err := parsePercentiles(*pctFlag)
	if err != nil {
		return fmt.Errorf("%w: --percentiles %v", errUsage, err)
	}
	for _, f := range []struct {
		name string
		v    int
		min  int
	}{{"--num-prompts", *numPrompts, 1}, {"--max-concurrency", *maxConc, 0}, {"--input-len", *inputLen, 1},
		{"--output-len", *outputLen, 1}, {"--prefix-len", *prefixLen, 1}, {"--num-prefixes", *prefixes, 1}} {
		if f.v < f.min {
			return fmt.Errorf("%w: %s %d: want at least %d", errUsage, f.name, f.v, f.min)
		}
	}
	if !(*rangeRatio >= 0 && *rangeRatio < 1) {
		return fmt.Errorf("%w: --range-ratio %v: want a value in [0, 1)", errUsage, *rangeRatio)
	}
	if *timeout <= 0 {
		return fmt.Errorf("%w: --timeout must be positive", errUsage)
	}
	if !(*temperature >= 0) || math.IsInf(*temperature, 1) {
		return fmt.Errorf("%w: --temperature %v: want a finite value ≥ 0", errUsage, *temperature)
	}
	if *dataset == "jsonl" && *path == "" {
		return fmt.Errorf("%w: --dataset jsonl needs --dataset-path", errUsage)
	}

	// The workload first: a bad file is reported before the server is asked.
	reqs, described, err := serveWorkload(workloadFlags{
		dataset: *dataset, path: *path, n: *numPrompts, seed: *seed, prefixLen: *prefixLen, prefixes: *prefixes,
		lengths: loadgen.Lengths{Input: *inputLen, Output: *outputLen, RangeRatio: *rangeRatio},
	})
	if err != nil {
		return err
	}
	c := &loadgen.Client{
		BaseURL: *baseURL, Endpoint: ep, Model: *model, APIKey: *apiKey, Stream: *stream,
		IgnoreEOS: *ignoreEOS, Temperature: *temperature, Timeout: *timeout,
		HTTP: loadgen.NewHTTPClient(cmp.Or(*maxConc, min(*numPrompts, 1024))),
	}
	if err := probeServer(ctx, e, c); err != nil {
		return err
	}

	sched := loadgen.Schedule{Rate: rate, MaxConcurrency: *maxConc, Seed: *seed}
	conc := "no concurrency cap"
	if *maxConc > 0 {
		conc = fmt.Sprintf("at most %d in flight", *maxConc)
	}
	arrivals := "all at once"
	if !math.IsInf(rate, 1) {
		arrivals = fmt.Sprintf("%v req/s (Poisson)", rate)
	}
	fmt.Fprintf(e.stderr, "bench serve: %d requests to %s, model %s; %s; %s, %s\n",
		len(reqs), strings.TrimRight(*baseURL, "/"), c.Model, described, arrivals, conc)
	results, d := loadgen.Run(ctx, c, reqs, sched)
	s := loadgen.Summarize(results, d, ps)
	s.BaseURL, s.Endpoint, s.Model, s.Dataset = *baseURL, ep, c.Model, described
	s.RequestRate, s.MaxConcurrency, s.Stream, s.IgnoreEOS, s.Seed = rate, *maxConc, *stream, *ignoreEOS, *seed
	if ctx.Err() != nil {
		s.Interrupted = true
		fmt.Fprintf(e.stderr, "bench serve: interrupted; reporting the %d requests that completed\n", s.Completed)
	}
	if *asJSON {
		if err := json.NewEncoder(e.stdout).Encode(s); err != nil {
			return err
		}
	} else if err := s.WriteText(e.stdout); err != nil {
		return err
	}
	if s.Completed == 0 && s.Failed > 0 {
		return fmt.Errorf("all %d requests sent failed, the first with: %s", s.Failed, s.Errors[0].Message)
	}
	return nil
}

// workloadFlags are the flags that choose a workload.
type workloadFlags struct {
	dataset, path       string
	n                   int
	seed                uint64
	lengths             loadgen.Lengths
	prefixLen, prefixes int
}

// serveWorkload builds the workload w names and describes it in words.
func serveWorkload(w workloadFlags) (reqs []loadgen.Request, described string, err error) {
	rng := rand.New(rand.NewPCG(w.seed, 1))
	l := w.lengths
	switch w.dataset {
	case "random":
		reqs, err = loadgen.Random(rng, w.n, l)
		described = fmt.Sprintf("random, %s words in, %s tokens out", spread(l.Input, l.RangeRatio), spread(l.Output, l.RangeRatio))
	case "shared-prefix":
		reqs, err = loadgen.SharedPrefix(rng, w.n, w.prefixLen, w.prefixes, l)
		described = fmt.Sprintf("shared-prefix, %d shared prompt(s) of %d words, questions of %s words, %s tokens out",
			w.prefixes, w.prefixLen, spread(l.Input, l.RangeRatio), spread(l.Output, l.RangeRatio))
	case "jsonl":
		var f *os.File
		if f, err = os.Open(w.path); err != nil {
			return nil, "", err
		}
		defer f.Close()
		if reqs, err = loadgen.ParseJSONL(f, l.Output); err != nil {
			return nil, "", fmt.Errorf("%s: %w", w.path, err)
		}
		described = fmt.Sprintf("jsonl %s (%d prompts)", w.path, len(reqs))
		reqs = loadgen.Cycle(reqs, w.n)
	default:
		err = fmt.Errorf("unknown dataset %q", w.dataset)
	}
	return reqs, described, err
}

// probeServer asks GET /v1/models once before the run, so that a server
// that cannot be reached fails here in one line rather than as every
// request's error, and names c's model when none was given: the first
// listed. A server without the endpoint will do if the model is named.
func probeServer(ctx context.Context, e *env, c *loadgen.Client) error {
	probeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ids, err := c.Models(probeCtx)
	cancel()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, loadgen.ErrUnreachable):
		return err
	case err != nil && c.Model == "":
		return fmt.Errorf("%v (name the model with --model)", err)
	case err != nil:
		fmt.Fprintf(e.stderr, "bench serve: %v; going on with --model %s\n", err, c.Model)
	case c.Model == "" && len(ids) == 0:
		return errors.New("GET /v1/models lists no model: name one with --model")
	case c.Model == "":
		c.Model = ids[0]
	}
	return nil
}

// parseRate reads --request-rate: "inf" or a positive number of requests
// per second.
func parseRate(s string) (float64, error) {
	if strings.EqualFold(s, "inf") {
		return math.Inf(1), nil
	}
	r, err := strconv.ParseFloat(s, 64)
	if err != nil || !(r > 0) || math.IsInf(r, 0) {
		return 0, fmt.Errorf("%q: want a positive number of requests per second, or inf", s)
	}
	return r, nil
}

// parsePercentiles reads --percentiles: numbers in [0, 100].
func parsePercentiles(s string) ([]float64, error) {
	var ps []float64
	for _, f := range splitList(s) {
		p, err := strconv.ParseFloat(f, 64)
		if err != nil || !(p >= 0 && p <= 100) {
			return nil, fmt.Errorf("%q: want numbers in [0, 100], comma-separated", f)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// spread writes a length and the range it is drawn from.
func spread(n int, ratio float64) string {
	if ratio == 0 {
		return strconv.Itoa(n)
	}
	lo, hi := loadgen.LengthRange(n, ratio)
	return fmt.Sprintf("%d (%d-%d)", n, lo, hi)
}

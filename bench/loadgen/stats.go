package loadgen

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"
)

// Percentile is the p-th percentile (0 ≤ p ≤ 100) of sorted values,
// interpolated linearly between the two nearest ranks as NumPy's default
// (and so vLLM's): the value at rank p/100·(n−1). NaN for no values.
func Percentile(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	r := p / 100 * float64(n-1)
	lo := int(math.Floor(r))
	if lo >= n-1 {
		return sorted[n-1]
	}
	return sorted[lo] + (r-float64(lo))*(sorted[lo+1]-sorted[lo])
}

// Dist summarises one latency over a run, in milliseconds. With no
// samples (Count 0) every figure is NaN.
type Dist struct {
	Count                int
	Mean, Median, Stddev float64
	// Percentiles are the values at the run's requested percentiles, in
	// their order.
	Percentiles []float64
}

// NewDist summarises values (any order; it sorts them) at percentiles ps.
// Stddev is the population standard deviation, as NumPy's default.
func NewDist(values []float64, ps []float64) Dist {
	d := Dist{Count: len(values), Mean: math.NaN(), Median: math.NaN(), Stddev: math.NaN(), Percentiles: make([]float64, len(ps))}
	sorted := slices.Sorted(slices.Values(values))
	for i, p := range ps {
		d.Percentiles[i] = Percentile(sorted, p)
	}
	if len(values) == 0 {
		return d
	}
	var sum float64
	for _, v := range values {
		sum += v
	}
	d.Mean = sum / float64(len(values))
	var ss float64
	for _, v := range values {
		ss += (v - d.Mean) * (v - d.Mean)
	}
	d.Stddev = math.Sqrt(ss / float64(len(values)))
	d.Median = Percentile(sorted, 50)
	return d
}

// TPOT is a request's time per output token after the first: the time
// from its first output to its end over the tokens that came after the
// first, (latency − TTFT) / (tokens − 1). ok is false for a request with
// fewer than two tokens or no TTFT (not streamed), which has none.
func TPOT(r Result) (tpot time.Duration, ok bool) {
	if r.TTFT <= 0 || r.OutputTokens < 2 {
		return 0, false
	}
	return (r.Latency - r.TTFT) / time.Duration(r.OutputTokens-1), true
}

// ErrorCount is how many requests failed with one message, numbers
// aside: "HTTP 400: the prompt has 5641 tokens" and "... 5665 tokens" are
// one group, shown by the first of its messages. The status of an HTTP
// error is kept apart (a 429 is not a 500).
type ErrorCount struct {
	Message string `json:"message"`
	Count   int    `json:"count"`
}

// errorKey is the group of an error message: its numbers replaced, but
// for an HTTP status at its start.
func errorKey(msg string) string {
	var b strings.Builder
	keep := 0
	if strings.HasPrefix(msg, "HTTP ") {
		keep = len("HTTP 000")
	}
	digits := false
	for i, r := range msg {
		switch {
		case i < keep:
			b.WriteRune(r)
		case r >= '0' && r <= '9':
			if !digits {
				b.WriteByte('#')
			}
			digits = true
			continue
		default:
			b.WriteRune(r)
		}
		digits = false
	}
	return b.String()
}

// Summary is a run's figures, with what was run. Summarize fills the
// figures; the caller fills the description.
type Summary struct {
	// What was run.
	BaseURL        string
	Endpoint       Endpoint
	Model          string
	Dataset        string  // the workload, in words
	RequestRate    float64 // +Inf: all at once
	MaxConcurrency int     // 0: none
	Stream         bool
	IgnoreEOS      bool
	Seed           uint64

	// Percentiles are the percentiles every Dist reports.
	Percentiles []float64

	// NumPrompts is the requests the run was to send; Completed, Failed
	// and Cancelled count those sent (Cancelled: cut short by an
	// interruption), NotSent the rest.
	NumPrompts, Completed, Failed, Cancelled, NotSent int
	Interrupted                                       bool
	Duration                                          time.Duration

	// InputTokens and OutputTokens sum the completed requests' usage;
	// EstimatedUsage counts those whose server reported none, whose
	// prompt is counted in words and output in chunks.
	InputTokens, OutputTokens, EstimatedUsage int

	// Throughputs, per second of Duration: completed requests, output
	// tokens, and input plus output tokens.
	RequestThroughput, OutputThroughput, TotalThroughput float64

	// TTFT, TPOT, ITL and E2E are over the completed requests: time to
	// first token; time per output token after the first (one value per
	// request of at least two tokens); inter-token latency (every gap
	// between output chunks of every request); end-to-end latency.
	TTFT, TPOT, ITL, E2E Dist

	// Errors groups the failures by message (ErrorCount), most frequent
	// first, ties in the order they first failed; at most MaxErrorGroups,
	// with OtherErrors counting the failures left out.
	Errors      []ErrorCount
	OtherErrors int
}

// MaxErrorGroups bounds Summary.Errors.
const MaxErrorGroups = 10

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Summarize computes a run's figures from its results (Run's), its
// duration and the percentiles to report. The description fields of the
// returned Summary are left for the caller.
func Summarize(results []Result, d time.Duration, ps []float64) Summary {
	s := Summary{NumPrompts: len(results), Duration: d, Percentiles: slices.Clone(ps)}
	var ttft, tpot, itl, e2e []float64
	errs := map[string]*ErrorCount{} // by errorKey
	var order []string
	for _, r := range results {
		switch {
		case !r.Sent:
			s.NotSent++
			continue
		case r.Cancelled:
			s.Cancelled++
			continue
		case r.Err != "":
			s.Failed++
			k := errorKey(r.Err)
			if errs[k] == nil {
				errs[k] = &ErrorCount{Message: r.Err}
				order = append(order, k)
			}
			errs[k].Count++
			continue
		}
		s.Completed++
		s.InputTokens += r.PromptTokens
		s.OutputTokens += r.OutputTokens
		if !r.Usage {
			s.EstimatedUsage++
		}
		if r.TTFT > 0 {
			ttft = append(ttft, ms(r.TTFT))
		}
		if t, ok := TPOT(r); ok {
			tpot = append(tpot, ms(t))
		}
		for _, g := range r.ITL {
			itl = append(itl, ms(g))
		}
		e2e = append(e2e, ms(r.Latency))
	}
	s.Interrupted = s.Cancelled+s.NotSent > 0
	if sec := d.Seconds(); sec > 0 {
		s.RequestThroughput = float64(s.Completed) / sec
		s.OutputThroughput = float64(s.OutputTokens) / sec
		s.TotalThroughput = float64(s.InputTokens+s.OutputTokens) / sec
	}
	s.TTFT, s.TPOT, s.ITL, s.E2E = NewDist(ttft, ps), NewDist(tpot, ps), NewDist(itl, ps), NewDist(e2e, ps)
	for _, k := range order {
		s.Errors = append(s.Errors, *errs[k])
	}
	slices.SortStableFunc(s.Errors, func(a, b ErrorCount) int { return cmp.Compare(b.Count, a.Count) })
	if len(s.Errors) > MaxErrorGroups {
		for _, e := range s.Errors[MaxErrorGroups:] {
			s.OtherErrors += e.Count
		}
		s.Errors = s.Errors[:MaxErrorGroups]
	}
	return s
}

package loadgen

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// TestPercentile checks the interpolation against values worked by hand
// (NumPy's np.percentile gives the same).
func TestPercentile(t *testing.T) {
	tests := []struct {
		values []float64
		p      float64
		want   float64
	}{
		{[]float64{1, 2, 3, 4}, 0, 1},
		{[]float64{1, 2, 3, 4}, 50, 2.5},     // rank 1.5
		{[]float64{1, 2, 3, 4}, 90, 3.7},     // rank 2.7
		{[]float64{1, 2, 3, 4}, 99, 3.97},    // rank 2.97
		{[]float64{1, 2, 3, 4}, 100, 4},      // the last
		{[]float64{10, 20}, 25, 12.5},        // rank 0.25
		{[]float64{5}, 99, 5},                // one value is every percentile
		{[]float64{1, 2, 4, 8, 16}, 50, 4},   // an odd count: the middle
		{[]float64{1, 2, 4, 8, 16}, 75, 8},   // rank 3 exactly
		{[]float64{1, 2, 4, 8, 16}, 80, 9.6}, // rank 3.2: 8 + 0.2·8
	}
	for _, tt := range tests {
		if got := Percentile(tt.values, tt.p); math.Abs(got-tt.want) > 1e-12 {
			t.Errorf("Percentile(%v, %v) = %v, want %v", tt.values, tt.p, got, tt.want)
		}
	}
	if got := Percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("Percentile(nil, 50) = %v, want NaN", got)
	}
}

func TestNewDist(t *testing.T) {
	d := NewDist([]float64{4, 1, 3, 2}, []float64{50, 90}) // unsorted on purpose
	want := Dist{Count: 4, Mean: 2.5, Median: 2.5, Stddev: math.Sqrt(1.25), Percentiles: []float64{2.5, 3.7}}
	if d.Count != want.Count || !near(d.Mean, want.Mean) || !near(d.Median, want.Median) || !near(d.Stddev, want.Stddev) ||
		!near(d.Percentiles[0], 2.5) || !near(d.Percentiles[1], 3.7) {
		t.Errorf("NewDist = %+v, want %+v", d, want)
	}
	empty := NewDist(nil, []float64{99})
	if empty.Count != 0 || !math.IsNaN(empty.Mean) || !math.IsNaN(empty.Median) || !math.IsNaN(empty.Percentiles[0]) {
		t.Errorf("NewDist(nil) = %+v, want NaNs", empty)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestTPOT: the first token's wait is TTFT's, not TPOT's, so TPOT divides
// the rest of the latency by the tokens after the first.
func TestTPOT(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name string
		r    Result
		want time.Duration
		ok   bool
	}{
		{"ten tokens", Result{TTFT: 10 * ms, Latency: 100 * ms, OutputTokens: 10}, 10 * ms, true},
		{"two tokens", Result{TTFT: 30 * ms, Latency: 50 * ms, OutputTokens: 2}, 20 * ms, true},
		{"one token has none", Result{TTFT: 30 * ms, Latency: 30 * ms, OutputTokens: 1}, 0, false},
		{"not streamed has none", Result{Latency: 100 * ms, OutputTokens: 10}, 0, false},
	}
	for _, tt := range tests {
		got, ok := TPOT(tt.r)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: TPOT = %v, %v; want %v, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

// TestSummarize checks every figure of a hand-built run: which requests
// count, the token sums, throughputs over the duration, TTFT and E2E per
// request, ITL pooled over requests, and the errors grouped.
func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	results := []Result{
		{Sent: true, TTFT: 10 * ms, ITL: []time.Duration{5 * ms, 7 * ms}, Latency: 22 * ms, PromptTokens: 100, OutputTokens: 3, Usage: true},
		{Sent: true, TTFT: 20 * ms, ITL: []time.Duration{9 * ms}, Latency: 29 * ms, PromptTokens: 50, OutputTokens: 2, Usage: true},
		{Sent: true, TTFT: 30 * ms, Latency: 30 * ms, PromptTokens: 7, OutputTokens: 1}, // no usage: estimated
		{Sent: true, Err: "HTTP 500: boom", Latency: time.Second},
		{Sent: true, Err: "HTTP 500: boom"},
		{Sent: true, Err: "stream broken: unexpected EOF", PromptTokens: 1000},
		{Sent: true, Cancelled: true, Err: "cancelled"},
		{}, // never sent
	}
	s := Summarize(results, 2*time.Second, []float64{50, 99})
	ints := []struct {
		name      string
		got, want int
	}{
		{"NumPrompts", s.NumPrompts, 8}, {"Completed", s.Completed, 3}, {"Failed", s.Failed, 3},
		{"Cancelled", s.Cancelled, 1}, {"NotSent", s.NotSent, 1}, {"InputTokens", s.InputTokens, 157},
		{"OutputTokens", s.OutputTokens, 6}, {"EstimatedUsage", s.EstimatedUsage, 1},
		{"TTFT.Count", s.TTFT.Count, 3}, {"TPOT.Count", s.TPOT.Count, 2}, {"ITL.Count", s.ITL.Count, 3}, {"E2E.Count", s.E2E.Count, 3},
	}
	for _, c := range ints {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	floats := []struct {
		name      string
		got, want float64
	}{
		{"RequestThroughput", s.RequestThroughput, 1.5}, {"OutputThroughput", s.OutputThroughput, 3},
		{"TotalThroughput", s.TotalThroughput, 81.5},
		{"TTFT.Mean", s.TTFT.Mean, 20}, {"TTFT.P99", s.TTFT.Percentiles[1], 29.8},
		{"TPOT.Mean", s.TPOT.Mean, 7.5}, // (22−10)/2 = 6 and (29−20)/1 = 9
		{"ITL.Mean", s.ITL.Mean, 7}, {"ITL.Median", s.ITL.Median, 7},
		{"E2E.Mean", s.E2E.Mean, 27}, {"E2E.P50", s.E2E.Percentiles[0], 29},
	}
	for _, c := range floats {
		if !near(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if !s.Interrupted {
		t.Error("a run with cancelled requests is not marked interrupted")
	}
	wantErrs := []ErrorCount{{"HTTP 500: boom", 2}, {"stream broken: unexpected EOF", 1}}
	if !slices.Equal(s.Errors, wantErrs) || s.OtherErrors != 0 {
		t.Errorf("Errors = %v (+%d), want %v", s.Errors, s.OtherErrors, wantErrs)
	}
}

func TestErrorKey(t *testing.T) {
	tests := []struct{ a, b string }{ // a and b are in one group
		{"HTTP 400: the prompt has 5641 tokens; the context is 4096", "HTTP 400: the prompt has 5665 tokens; the context is 4096"},
		{"dial tcp 10.0.0.1:8000: connection refused", "dial tcp 10.0.0.2:8001: connection refused"},
		{"timed out after 30s", "timed out after 30s"},
	}
	for _, tt := range tests {
		if errorKey(tt.a) != errorKey(tt.b) {
			t.Errorf("%q and %q are apart: %q, %q", tt.a, tt.b, errorKey(tt.a), errorKey(tt.b))
		}
	}
	for _, apart := range [][2]string{
		{"HTTP 500: overloaded", "HTTP 503: overloaded"},
		{"HTTP 429: slow down", "HTTP 4: slow down"},
		{"stream broken: unexpected EOF", "stream ended before its last chunk"},
	} {
		if errorKey(apart[0]) == errorKey(apart[1]) {
			t.Errorf("%q and %q are grouped", apart[0], apart[1])
		}
	}
	if got := errorKey("HTTP 400: 12 of 3.5"); got != "HTTP 400: # of #.#" {
		t.Errorf("errorKey = %q", got)
	}
}

func TestSummarizeErrorGroups(t *testing.T) {
	var results []Result
	for i := range MaxErrorGroups + 3 {
		for j := range i + 1 { // message i fails i+1 times, with numbers of its own
			results = append(results, Result{Sent: true, Err: fmt.Sprintf("error %c at %d", 'a'+i, 100+j)})
		}
	}
	s := Summarize(results, time.Second, nil)
	if len(s.Errors) != MaxErrorGroups || s.Errors[0] != (ErrorCount{"error m at 100", 13}) || s.OtherErrors != 1+2+3 {
		t.Errorf("Errors = %v, other %d; want the %d most frequent first and 6 others", s.Errors, s.OtherErrors, MaxErrorGroups)
	}
	if s.RequestThroughput != 0 || s.Completed != 0 || s.Interrupted {
		t.Errorf("a run of failures: %+v", s)
	}
}

func ExamplePercentile() {
	ttft := []float64{12, 15, 21, 40} // ms, sorted
	fmt.Printf("p50 %.1f ms, p90 %.1f ms\n", Percentile(ttft, 50), Percentile(ttft, 90))
	// Output: p50 18.0 ms, p90 34.3 ms
}

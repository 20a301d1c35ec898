package loadgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// metric names a Dist in the report: its JSON key (vLLM's) and its text
// heading.
type metric struct {
	key, label, heading string
	dist                func(*Summary) Dist
}

var metrics = []metric{
	{"ttft", "TTFT", "Time to First Token", func(s *Summary) Dist { return s.TTFT }},
	{"tpot", "TPOT", "Time per Output Token (excl. 1st token)", func(s *Summary) Dist { return s.TPOT }},
	{"itl", "ITL", "Inter-token Latency", func(s *Summary) Dist { return s.ITL }},
	{"e2el", "E2EL", "End-to-end Latency", func(s *Summary) Dist { return s.E2E }},
}

// percentileName is p as vLLM writes it in keys and labels: 99, 99.9.
func percentileName(p float64) string { return strconv.FormatFloat(p, 'f', -1, 64) }

// MarshalJSON writes the summary as one flat object whose keys are those
// of vLLM's benchmark results (duration, completed, total_input_tokens,
// mean_ttft_ms, p99_itl_ms, ...) where a figure has one, so that scripts
// reading vLLM's results read these. Latencies are in milliseconds, the
// duration in seconds; a latency without samples is null, an infinite
// request rate "inf".
func (s Summary) MarshalJSON() ([]byte, error) {
	var rate any = s.RequestRate
	if math.IsInf(s.RequestRate, 1) {
		rate = "inf"
	}
	var conc any
	if s.MaxConcurrency > 0 {
		conc = s.MaxConcurrency
	}
	errs := s.Errors
	if errs == nil {
		errs = []ErrorCount{}
	}
	type field struct {
		key string
		v   any
	}
	fields := []field{
		{"base_url", s.BaseURL}, {"endpoint", "/v1/" + string(s.Endpoint)}, {"model_id", s.Model},
		{"dataset", s.Dataset}, {"num_prompts", s.NumPrompts}, {"request_rate", rate},
		{"max_concurrency", conc}, {"stream", s.Stream}, {"ignore_eos", s.IgnoreEOS}, {"seed", s.Seed},
		{"duration", s.Duration.Seconds()}, {"completed", s.Completed}, {"failed", s.Failed},
		{"cancelled", s.Cancelled}, {"not_sent", s.NotSent}, {"interrupted", s.Interrupted},
		{"total_input_tokens", s.InputTokens}, {"total_output_tokens", s.OutputTokens},
		{"estimated_usage", s.EstimatedUsage},
		{"request_throughput", s.RequestThroughput}, {"output_throughput", s.OutputThroughput},
		{"total_token_throughput", s.TotalThroughput},
	}
	num := func(v float64) any {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil
		}
		return v
	}
	for _, m := range metrics {
		d := m.dist(&s)
		fields = append(fields, field{"mean_" + m.key + "_ms", num(d.Mean)},
			field{"median_" + m.key + "_ms", num(d.Median)}, field{"std_" + m.key + "_ms", num(d.Stddev)})
		for i, p := range s.Percentiles {
			v := math.NaN()
			if i < len(d.Percentiles) {
				v = d.Percentiles[i]
			}
			fields = append(fields, field{"p" + percentileName(p) + "_" + m.key + "_ms", num(v)})
		}
		fields = append(fields, field{m.key + "_count", d.Count})
	}
	fields = append(fields, field{"error_counts", errs}, field{"other_errors", s.OtherErrors})

	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.key)
		v, err := json.Marshal(f.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.key, err)
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// WriteText writes the summary as vLLM's benchmark prints its result: a
// table of one figure per line, then the failures grouped by message. A
// latency without samples (TTFT without streaming) prints as "-"; the
// 50th percentile is the median's line.
func (s *Summary) WriteText(w io.Writer) error {
	var b strings.Builder
	line := func(label, format string, args ...any) {
		fmt.Fprintf(&b, "%-40s %s\n", label+":", fmt.Sprintf(format, args...))
	}
	// rule centres title in a line of fill, as Python's "{:-^50}" does.
	rule := func(title, fill string) {
		const width = 50
		left := max((width-len(title))/2, 0)
		b.WriteString(strings.Repeat(fill, left) + title + strings.Repeat(fill, max(width-left-len(title), 0)) + "\n")
	}
	rule(" Serving Benchmark Result ", "=")
	line("Endpoint", "%s/v1/%s", strings.TrimSuffix(strings.TrimRight(s.BaseURL, "/"), "/v1"), s.Endpoint)
	line("Model", "%s", s.Model)
	line("Dataset", "%s", s.Dataset)
	rate := "inf (all at once)"
	if !math.IsInf(s.RequestRate, 1) {
		rate = fmt.Sprintf("%s req/s (Poisson)", percentileName(s.RequestRate))
	}
	line("Request rate", "%s", rate)
	conc := "none"
	if s.MaxConcurrency > 0 {
		conc = strconv.Itoa(s.MaxConcurrency)
	}
	line("Max request concurrency", "%s", conc)
	line("Successful requests", "%d", s.Completed)
	line("Failed requests", "%d", s.Failed)
	if s.Interrupted {
		line("Cancelled requests (interrupted)", "%d", s.Cancelled)
		line("Requests not sent (interrupted)", "%d", s.NotSent)
	}
	line("Benchmark duration (s)", "%.2f", s.Duration.Seconds())
	line("Total input tokens", "%d", s.InputTokens)
	line("Total generated tokens", "%d", s.OutputTokens)
	if s.EstimatedUsage > 0 {
		line("Requests without usage (estimated)", "%d", s.EstimatedUsage)
	}
	line("Request throughput (req/s)", "%.2f", s.RequestThroughput)
	line("Output token throughput (tok/s)", "%.2f", s.OutputThroughput)
	line("Total Token throughput (tok/s)", "%.2f", s.TotalThroughput)
	for _, m := range metrics {
		d := m.dist(s)
		rule(m.heading, "-")
		value := func(v float64) string {
			if math.IsNaN(v) {
				return "-"
			}
			return fmt.Sprintf("%.2f", v)
		}
		line("Mean "+m.label+" (ms)", "%s", value(d.Mean))
		line("Median "+m.label+" (ms)", "%s", value(d.Median))
		for i, p := range s.Percentiles {
			if p == 50 {
				continue // the median's line
			}
			v := math.NaN()
			if i < len(d.Percentiles) {
				v = d.Percentiles[i]
			}
			line("P"+percentileName(p)+" "+m.label+" (ms)", "%s", value(v))
		}
	}
	rule("", "=")
	if len(s.Errors) > 0 {
		fmt.Fprintf(&b, "Errors (%d failed requests):\n", s.Failed)
		for _, e := range s.Errors {
			fmt.Fprintf(&b, "  %5d  %s\n", e.Count, e.Message)
		}
		if s.OtherErrors > 0 {
			fmt.Fprintf(&b, "  %5d  (other messages)\n", s.OtherErrors)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

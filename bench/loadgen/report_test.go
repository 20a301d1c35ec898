package loadgen

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden reports in testdata")

// goldenSummary is a run with every kind of outcome: two completed
// requests, failures of two messages, one request cancelled.
func goldenSummary(rate float64, stream bool) Summary {
	ms := time.Millisecond
	results := []Result{
		{Sent: true, TTFT: 12 * ms, ITL: []time.Duration{4 * ms, 6 * ms, 5 * ms}, Latency: 27 * ms, PromptTokens: 40, OutputTokens: 4, Usage: true},
		{Sent: true, TTFT: 20 * ms, ITL: []time.Duration{8 * ms, 7 * ms, 9 * ms}, Latency: 44 * ms, PromptTokens: 38, OutputTokens: 4, Usage: true},
		{Sent: true, Err: "HTTP 500: injected failure"},
		{Sent: true, Err: "HTTP 500: injected failure"},
		{Sent: true, Err: "stream broken: unexpected EOF"},
		{Sent: true, Cancelled: true, Err: "cancelled"},
	}
	if !stream {
		for i := range results {
			results[i].TTFT, results[i].ITL = 0, nil
		}
	}
	s := Summarize(results, 1500*time.Millisecond, []float64{50, 90, 99.9})
	s.BaseURL, s.Endpoint, s.Model, s.Dataset = "http://127.0.0.1:8080", Completions, "qwen35-kjv", "random, 32 words in, 4 tokens out"
	s.RequestRate, s.MaxConcurrency, s.Stream, s.Seed = rate, 4, stream, 1
	return s
}

// TestReportGolden fixes both outputs, the table a person reads and the
// JSON a script does, against testdata/report.{txt,json} (go test -update
// rewrites them).
func TestReportGolden(t *testing.T) {
	var text, js bytes.Buffer
	for _, s := range []Summary{goldenSummary(10, true), goldenSummary(math.Inf(1), false)} {
		if err := s.WriteText(&text); err != nil {
			t.Fatal(err)
		}
		text.WriteString("\n")
		b, err := json.MarshalIndent(s, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		js.Write(append(b, '\n'))
	}
	for name, got := range map[string][]byte{"testdata/report.txt": text.Bytes(), "testdata/report.json": js.Bytes()} {
		if *update {
			if err := os.WriteFile(name, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("%v (go test -update writes it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs (go test -update rewrites it); got:\n%s", name, got)
		}
	}
}

// TestReportJSONKeys: the keys scripts reading vLLM's results look for,
// with their values' types, and nulls for latencies never measured.
func TestReportJSONKeys(t *testing.T) {
	var m map[string]any
	b, _ := json.Marshal(goldenSummary(math.Inf(1), false))
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]any{
		"completed": 2.0, "failed": 3.0, "cancelled": 1.0, "total_input_tokens": 78.0, "total_output_tokens": 8.0,
		"duration": 1.5, "request_rate": "inf", "max_concurrency": 4.0, "mean_ttft_ms": nil, "p99.9_itl_ms": nil,
		"mean_e2el_ms": 35.5, "median_e2el_ms": 35.5, "endpoint": "/v1/completions", "model_id": "qwen35-kjv",
	} {
		if got, ok := m[key]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, want)
		}
	}
	for _, key := range []string{"request_throughput", "output_throughput", "total_token_throughput", "std_e2el_ms", "p90_tpot_ms", "error_counts"} {
		if _, ok := m[key]; !ok {
			t.Errorf("no %s", key)
		}
	}
	if !strings.Contains(string(b), `"error_counts":[{"message":"HTTP 500: injected failure","count":2}`) {
		t.Errorf("error_counts: %s", b)
	}
}

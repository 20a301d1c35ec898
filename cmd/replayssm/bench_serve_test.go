package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestBenchServeFlags: a bad command line is one line naming the flag,
// exit status 2, before any request is sent.
func TestBenchServeFlags(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--endpoint", "embeddings"}, `--endpoint "embeddings": want completions or chat`},
		{[]string{"--dataset", "sharegpt"}, `--dataset "sharegpt": want random, jsonl or shared-prefix`},
		{[]string{"--dataset", "jsonl"}, "--dataset jsonl needs --dataset-path"},
		{[]string{"--dataset-path", "x.jsonl"}, "--dataset-path does not apply to --dataset random"},
		{[]string{"--dataset", "jsonl", "--dataset-path", "x", "--input-len", "5"}, "--input-len does not apply to --dataset jsonl"},
		{[]string{"--prefix-len", "5"}, "--prefix-len does not apply to --dataset random"},
		{[]string{"--request-rate", "0"}, `--request-rate "0": want a positive number of requests per second, or inf`},
		{[]string{"--request-rate", "fast"}, `--request-rate "fast"`},
		{[]string{"--percentiles", "50,101"}, `--percentiles "101": want numbers in [0, 100]`},
		{[]string{"--num-prompts", "0"}, "--num-prompts 0: want at least 1"},
		{[]string{"--max-concurrency", "-1"}, "--max-concurrency -1: want at least 0"},
		{[]string{"--range-ratio", "1"}, "--range-ratio 1: want a value in [0, 1)"},
		{[]string{"--timeout", "0s"}, "--timeout must be positive"},
		{[]string{"--temperature", "-1"}, "--temperature -1"},
		{[]string{"--base-url", "127.0.0.1:8080"}, `--base-url "127.0.0.1:8080": want http://HOST:PORT`},
		{[]string{"--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{[]string{"extra"}, `unexpected argument "extra"`},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), &env{stdout: &stdout, stderr: &stderr}, append([]string{"bench", "serve"}, tt.args...))
		msg := stderr.String()
		if code != 2 || !strings.Contains(msg, tt.want) || strings.Count(msg, "\n") != 1 || stdout.Len() > 0 {
			t.Errorf("bench serve %s: exit %d, %q; want exit 2 and one line with %q", strings.Join(tt.args, " "), code, msg, tt.want)
		}
	}
}

// TestBenchServeUnreachable: no server at the address fails at once, in
// one line that says so.
func TestBenchServeUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := run(context.Background(), &env{stdout: &stdout, stderr: &stderr}, []string{"bench", "serve", "--base-url", url})
	msg := stderr.String()
	if code != 1 || !strings.Contains(msg, "server unreachable") || !strings.Contains(msg, "connection refused") ||
		strings.Count(msg, "\n") != 1 || time.Since(start) > 5*time.Second {
		t.Errorf("exit %d after %v: %q", code, time.Since(start), msg)
	}
}

// TestBenchServe loads `replayssm serve` with the built-in model through
// each endpoint and workload: every request completes with exactly its
// budget of tokens (--ignore-eos), and the streamed latencies are there.
func TestBenchServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, _ := startServe(t, ctx, "--max-batch", "4", "--log-requests=false")
	jsonl := filepath.Join(t.TempDir(), "prompts.jsonl")
	err := os.WriteFile(jsonl, []byte(`{"prompt": "In the beginning God created the heaven and the earth.", "output_len": 7}
{"prompt": "And the LORD spake unto Moses, saying,", "max_tokens": 3}
{"prompt": "Blessed are the meek"}
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		tokens int // the completions' tokens in all; 0: not checked (the lengths are drawn)
	}{
		{"random completions", []string{"--dataset", "random", "--input-len", "12", "--output-len", "6", "--range-ratio", "0.5"}, 0},
		{"shared-prefix chat", []string{"--endpoint", "chat", "--dataset", "shared-prefix", "--prefix-len", "24",
			"--num-prefixes", "2", "--input-len", "6", "--output-len", "5"}, 6 * 5},
		{"jsonl", []string{"--dataset", "jsonl", "--dataset-path", jsonl, "--output-len", "4"}, 2 * (7 + 3 + 4)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"bench", "serve", "--base-url", url, "--num-prompts", "6", "--request-rate", "50",
				"--max-concurrency", "3", "--ignore-eos", "--json"}, tt.args...)
			if code := run(ctx, &env{stdout: &stdout, stderr: &stderr}, args); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			var s map[string]any
			if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
				t.Fatalf("%v: %s", err, stdout.String())
			}
			if s["completed"] != 6.0 || s["failed"] != 0.0 || s["model_id"] != "qwen35-kjv" || s["estimated_usage"] != 0.0 ||
				s["ttft_count"] != 6.0 || s["mean_itl_ms"] == nil || s["total_input_tokens"].(float64) < 6 {
				t.Errorf("summary %s", stdout.String())
			}
			if tt.tokens > 0 && s["total_output_tokens"] != float64(tt.tokens) {
				t.Errorf("%v output tokens, want %d", s["total_output_tokens"], tt.tokens)
			}
		})
	}
}

// TestBenchServeOtherServer runs against a minimal server that lists no
// models: without --model that is one line of error, with it a warning;
// a server failing every request prints the report and exits 1.
func TestBenchServeOtherServer(t *testing.T) {
	var fail atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/completions" {
			http.NotFound(w, r)
			return
		}
		if fail.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error": {"message": "overloaded"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"text\":\" a\"}]}\n\ndata: {\"choices\":[{\"text\":\" b\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	bench := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), &env{stdout: &stdout, stderr: &stderr},
			append([]string{"bench", "serve", "--base-url", srv.URL, "--num-prompts", "3", "--input-len", "4", "--output-len", "2"}, args...))
		return code, stdout.String(), stderr.String()
	}
	if code, _, msg := bench(); code != 1 || !strings.Contains(msg, "HTTP 404") || !strings.Contains(msg, "name the model with --model") {
		t.Errorf("no model: exit %d, %q", code, msg)
	}
	code, out, msg := bench("--model", "m")
	if code != 0 || !strings.Contains(msg, "going on with --model m") || !strings.Contains(out, "Successful requests:                     3\n") ||
		!strings.Contains(out, "Requests without usage (estimated):      3\n") || !strings.Contains(out, "Total generated tokens:                  6\n") {
		t.Errorf("--model m: exit %d, stderr %q, stdout:\n%s", code, msg, out)
	}
	fail.Store(true)
	code, out, msg = bench("--model", "m")
	if code != 1 || !strings.HasSuffix(msg, "all 3 requests sent failed, the first with: HTTP 503: overloaded\n") ||
		!strings.Contains(out, "      3  HTTP 503: overloaded\n") {
		t.Errorf("failing server: exit %d, stderr %q, stdout:\n%s", code, msg, out)
	}
}

package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServe starts `replayssm serve` on a free loopback port, asks it for a
// completion and its metrics, then interrupts it: it must exit cleanly
// within the grace period. Speculating, it answers the same completion and
// its metrics count the drafts.
func TestServe(t *testing.T) {
	for _, tt := range []struct {
		flags   []string
		metrics int    // the status of GET /metrics
		series  string // a series GET /metrics must hold
	}{
		{nil, 200, ""},
		{[]string{"--metrics=false"}, 404, ""},
		{[]string{"--speculative", "ngram", "--draft-tokens", "3"}, 200, "replayssm_spec_decode_num_draft_tokens_total{model_name="},
		{[]string{"--speculative", "mtp", "--spec-mode", "baseline"}, 200, "replayssm_spec_decode_num_accepted_tokens_total{model_name="},
	} {
		t.Run(strings.Join(append([]string{"serve"}, tt.flags...), " "), func(t *testing.T) {
			testServe(t, tt.flags, tt.metrics, tt.series)
		})
	}
}

func testServe(t *testing.T, flags []string, metricsStatus int, series string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, code := startServe(t, ctx, append([]string{"--max-batch", "2"}, flags...)...)
	rsp, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"In the beginning","max_tokens":4,"temperature":0}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(rsp.Body)
	rsp.Body.Close()
	if rsp.StatusCode != 200 || !strings.Contains(string(body), `"completion_tokens":4`) {
		t.Errorf("completion: %d %s", rsp.StatusCode, body)
	}
	if rsp, err = http.Get(url + "/metrics"); err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(rsp.Body)
	rsp.Body.Close()
	if rsp.StatusCode != metricsStatus ||
		(metricsStatus == 200 && !strings.Contains(string(body), `replayssm_generation_tokens_total{model_name=`)) ||
		!strings.Contains(string(body), series) {
		t.Errorf("GET /metrics: %d, want %d: %.300s", rsp.StatusCode, metricsStatus, body)
	}
	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit %d after interrupt", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop after the interrupt")
	}
}

// startServe runs `replayssm serve` on a free loopback port with flags
// until ctx ends, and returns its URL and, when it has ended, its exit
// code.
func startServe(t *testing.T, ctx context.Context, flags ...string) (string, <-chan int) {
	t.Helper()
	out, outW := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, &env{stdout: outW, stderr: io.Discard}, append([]string{"serve", "--addr", "127.0.0.1:0"}, flags...))
		outW.Close()
	}()
	return servedURL(t, out), code
}

// servedURL reads serve's first line of output, which names its URL, and
// drains the rest.
func servedURL(t *testing.T, out io.Reader) string {
	t.Helper()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no address printed: %v", err)
	}
	go io.Copy(io.Discard, out)
	i := strings.Index(line, "http://")
	if i < 0 {
		t.Fatalf("no address in %q", line)
	}
	return strings.TrimSpace(line[i:])
}

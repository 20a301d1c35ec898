package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSoak sends a seeded random mix of streaming and plain completions,
// chats, clients that give up mid-stream or while queued, and bad bodies
// from 16 clients at a server with few sequences and a short queue, then
// shuts the engine down under running streams. Every answer must be
// well-formed (a stream ends in one [DONE] after a finish reason or an
// error event; a refusal is a 4xx in OpenAI's shape), and afterwards no
// request is pending, the counters balance, and neither goroutines nor the
// heap have grown.
func TestSoak(t *testing.T) {
	f := newFixture(t, Config{MaxBatch: 4, MaxQueue: 6, MaxTokens: 24})
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()

	var outcomes sync.Map // outcome → *atomic.Int64
	count := func(o string) {
		v, _ := outcomes.LoadOrStore(o, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 99))
			for range 12 {
				if err := soakRequest(f, client, rng, count); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, "every request to leave the engine", func() bool { return f.s.pending.Load() == 0 && f.s.queue.len() == 0 })
	var summary []string
	outcomes.Range(func(k, v any) bool {
		summary = append(summary, fmt.Sprintf("%v %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	t.Logf("outcomes: %s", strings.Join(summary, ", "))
	for _, o := range []string{"completed", "stream-completed", "refused", "bad", "cancelled"} {
		if _, ok := outcomes.Load(o); !ok {
			t.Errorf("the mix had no %q outcome: %v", o, summary)
		}
	}
	fams := f.scrape(t)
	var received, finished float64
	for _, ep := range []string{epCompletions, epChat} {
		v, _ := value(fams, "replayssm_requests_received_total", map[string]string{"endpoint": ep})
		received += v
		for _, r := range []string{"stop", "length", reasonError, reasonCancelled} {
			v, _ := value(fams, "replayssm_requests_finished_total", map[string]string{"endpoint": ep, "finish_reason": r})
			finished += v
		}
	}
	if received == 0 || received != finished {
		t.Errorf("%v generation requests received, %v finished", received, finished)
	}

	// A shutdown under running streams ends each with an error event and
	// [DONE].
	var streams []*bufio.Scanner
	for range 4 {
		rsp, err := client.Post(f.url+"/v1/completions", "application/json",
			strings.NewReader(`{"prompt":"And the LORD spake","max_tokens":2000,"temperature":1,"seed":5,"stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		defer rsp.Body.Close()
		sc := bufio.NewScanner(rsp.Body)
		if !sc.Scan() {
			t.Fatal("no first event")
		}
		streams = append(streams, sc)
	}
	f.stop()
	for i, sc := range streams {
		var last []string
		for sc.Scan() {
			if l := sc.Text(); l != "" {
				last = append(last[max(0, len(last)-1):], l)
			}
		}
		if len(last) != 2 || !strings.Contains(last[0], `"error"`) || last[1] != "data: [DONE]" {
			t.Errorf("stream %d ended with %q at shutdown, want an error event and [DONE]", i, last)
		}
	}

	tr.CloseIdleConnections()
	waitFor(t, "the goroutines to end", func() bool { return runtime.NumGoroutine() <= goroutines+4 })
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 64<<20 {
		t.Errorf("the heap grew by %d MiB", grown>>20)
	}
}

// soakRequest sends one random request and checks its answer.
func soakRequest(f *fixture, client *http.Client, rng *rand.Rand, count func(string)) error {
	prompts := []string{"In the beginning", "And Jesus said unto them,", "Blessed are the", mosesPrompt}
	prompt := prompts[rng.IntN(len(prompts))]
	maxTokens := 1 + rng.IntN(24)
	switch kind := rng.IntN(6); kind {
	case 0, 1: // plain completion or chat
		path, body := "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"temperature":0.8,"seed":%d}`, prompt, maxTokens, rng.IntN(100))
		if kind == 1 {
			path, body = "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":%q}],"max_tokens":%d}`, prompt, maxTokens)
		}
		rsp, err := client.Post(f.url+path, "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer rsp.Body.Close()
		b, _ := io.ReadAll(rsp.Body)
		switch {
		case rsp.StatusCode == http.StatusTooManyRequests && rsp.Header.Get("Retry-After") != "" && strings.Contains(string(b), `"queue_full"`):
			count("refused")
		case rsp.StatusCode == http.StatusOK:
			var c completion
			if err := json.Unmarshal(b, &c); err != nil || len(c.Choices) != 1 || c.Choices[0].FinishReason == nil || c.Usage == nil {
				return fmt.Errorf("POST %s: malformed answer %s", path, b)
			}
			count("completed")
		default:
			return fmt.Errorf("POST %s: %d %s", path, rsp.StatusCode, b)
		}
	case 2, 3: // stream, read to the end or given up after the first event
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		body := fmt.Sprintf(`{"prompt":%q,"max_tokens":%d,"stream":true,"stream_options":{"include_usage":true}}`, prompt, maxTokens)
		req, _ := http.NewRequestWithContext(ctx, "POST", f.url+"/v1/completions", strings.NewReader(body))
		rsp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer rsp.Body.Close()
		if rsp.StatusCode == http.StatusTooManyRequests {
			count("refused")
			return nil
		}
		if rsp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(rsp.Body)
			return fmt.Errorf("stream: %d %s", rsp.StatusCode, b)
		}
		sc := bufio.NewScanner(rsp.Body)
		if kind == 3 {
			sc.Scan()
			cancel()
			count("cancelled")
			return nil
		}
		finished, done := false, 0
		for sc.Scan() {
			l := sc.Text()
			switch {
			case l == "":
			case l == "data: [DONE]":
				done++
			case done > 0:
				return fmt.Errorf("stream: %q after [DONE]", l)
			case strings.Contains(l, `"finish_reason":"`) || strings.Contains(l, `"error"`):
				finished = true
			}
		}
		if done != 1 || !finished {
			return fmt.Errorf("stream: %d [DONE], finish reason seen %v", done, finished)
		}
		count("stream-completed")
	case 4: // a client that gives up while its request waits or runs
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(20))*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", f.url+"/v1/completions", strings.NewReader(fmt.Sprintf(`{"prompt":%q,"max_tokens":24}`, prompt)))
		if rsp, err := client.Do(req); err == nil {
			io.Copy(io.Discard, rsp.Body)
			rsp.Body.Close()
		}
		count("cancelled")
	default: // a bad body
		bad := []string{`{"prompt":`, `{"prompt":[[[1]]]}`, `{"prompt":"a","max_tokens":-3}`, `{"prompt":"a","logprobs":9}`,
			`{"prompt":"a","model":"gpt-4"}`, `[1,2]`, `{"prompt":"a","top_p":7}`}
		body := bad[rng.IntN(len(bad))]
		rsp, err := client.Post(f.url+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer rsp.Body.Close()
		var e struct {
			Error struct {
				Message string `json:"message"`
				Type    string `json:"type"`
			} `json:"error"`
		}
		if err := json.NewDecoder(rsp.Body).Decode(&e); err != nil || rsp.StatusCode < 400 || rsp.StatusCode >= 500 || e.Error.Message == "" {
			return fmt.Errorf("bad body %s: %d %+v (%v)", body, rsp.StatusCode, e, err)
		}
		count("bad")
	}
	return nil
}

package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake is an OpenAI-compatible server on loopback whose answers are
// scripted by the prompt's first word: "fail" is a 500, "drop" streams two
// chunks and breaks the connection, "error" streams a chunk and then an
// error event, "slow" waits a minute; any other prompt is answered with
// tokens words, the first after ttft and the next every itl, then usage
// (unless noUsage) and [DONE].
type fake struct {
	ttft, itl time.Duration
	tokens    int
	noUsage   bool

	inFlight, most atomic.Int64
	mu             sync.Mutex
	bodies         []map[string]any
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		fmt.Fprint(w, `{"object":"list","data":[{"id":"fake-model","object":"model"},{"id":"other"}]}`)
		return
	}
	// A request leaves the count just before its last write: once the
	// client has read that, it may send the next one while this handler
	// is still returning.
	n := f.inFlight.Add(1)
	var leave sync.Once
	last := func() { leave.Do(func() { f.inFlight.Add(-1) }) }
	defer last()
	for m := f.most.Load(); n > m && !f.most.CompareAndSwap(m, n); m = f.most.Load() {
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, `{"error":{"message":"bad body"}}`, 400)
		return
	}
	f.mu.Lock()
	f.bodies = append(f.bodies, body)
	f.mu.Unlock()
	chat := strings.HasSuffix(r.URL.Path, "/chat/completions")
	prompt, _ := body["prompt"].(string)
	if chat {
		msgs := body["messages"].([]any)
		prompt = msgs[len(msgs)-1].(map[string]any)["content"].(string)
	}
	stream, _ := body["stream"].(bool)
	word, _, _ := strings.Cut(prompt, " ")
	switch word {
	case "fail":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(500)
		last()
		fmt.Fprint(w, `{"error":{"message":"injected failure","type":"server_error","param":null,"code":null}}`)
		return
	case "slow":
		select {
		case <-time.After(time.Minute):
		case <-r.Context().Done():
		}
		return
	}
	piece := func(text string, finish *string) string {
		reason, _ := json.Marshal(finish)
		if chat {
			return fmt.Sprintf(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%q},"finish_reason":%s}]}`, text, reason)
		}
		return fmt.Sprintf(`{"object":"text_completion","choices":[{"index":0,"text":%q,"finish_reason":%s}]}`, text, reason)
	}
	usage := fmt.Sprintf(`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}`, len(strings.Fields(prompt)), f.tokens, len(strings.Fields(prompt))+f.tokens)
	if !stream {
		time.Sleep(f.ttft + time.Duration(f.tokens-1)*f.itl)
		last()
		text := strings.Repeat(" word", f.tokens)
		if chat {
			fmt.Fprintf(w, `{"choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"length"}],%s}`, text, usage)
		} else {
			fmt.Fprintf(w, `{"choices":[{"index":0,"text":%q,"finish_reason":"length"}],%s}`, text, usage)
		}
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(data string) {
		fmt.Fprintf(w, "data: %s\n\n", data)
		w.(http.Flusher).Flush()
	}
	if chat { // a role chunk at once: not output, so not the first token
		send(`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`)
	} else {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
	}
	time.Sleep(f.ttft)
	for i := range f.tokens {
		if i > 0 {
			time.Sleep(f.itl)
		}
		send(piece(" word", nil))
		switch {
		case word == "drop" && i == 1:
			last()
			panic(http.ErrAbortHandler) // the connection breaks mid-stream
		case word == "error" && i == 0:
			last()
			send(`{"error":{"message":"injected mid-stream error","type":"server_error"}}`)
			send("[DONE]")
			return
		}
	}
	length := "length"
	send(piece("", &length))
	if !f.noUsage {
		send(`{"choices":[],` + usage + `}`)
	}
	last()
	send("[DONE]")
}

// runAll sends reqs all at once and summarises the run.
func runAll(c *Client, reqs []Request) Summary {
	results, d := Run(context.Background(), c, reqs, Schedule{Rate: math.Inf(1)})
	return Summarize(results, d, nil)
}

func prompts(words ...string) []Request {
	reqs := make([]Request, len(words))
	for i, w := range words {
		reqs[i] = Request{Prompt: w + " a b c", InputLen: 4, OutputLen: 4}
	}
	return reqs
}

// TestRunAgainstFake runs a small benchmark against a fake server with
// known delays: TTFT and ITL are measured as the fake's delays, E2E as
// their sum, the counts and tokens exact, each injected failure counted
// with its message, and the concurrency cap held. A busy machine only
// lengthens what is measured, so every TTFT and E2E must reach the fake's
// delay, and the quickest request (the middle ITL) must come within a
// generous slack of it: a 2-core machine running other tests passes.
func TestRunAgainstFake(t *testing.T) {
	const ttft, itl, tokens = 40 * time.Millisecond, 15 * time.Millisecond, 4
	const slack = 150 * time.Millisecond // scheduling delays only add
	for _, tt := range []struct {
		endpoint Endpoint
		stream   bool
	}{{Completions, true}, {Chat, true}, {Completions, false}, {Chat, false}} {
		t.Run(fmt.Sprintf("%s stream=%v", tt.endpoint, tt.stream), func(t *testing.T) {
			f := &fake{ttft: ttft, itl: itl, tokens: tokens}
			srv := httptest.NewServer(f)
			defer srv.Close()
			c := &Client{BaseURL: srv.URL, Endpoint: tt.endpoint, Model: "fake-model", Stream: tt.stream, Timeout: 10 * time.Second, HTTP: NewHTTPClient(4)}
			words := []string{"ok", "ok", "fail", "ok", "drop", "ok", "fail", "ok", "error", "ok"}
			if !tt.stream {
				words = []string{"ok", "ok", "fail", "ok"}
			}
			results, d := Run(context.Background(), c, prompts(words...), Schedule{Rate: 1000, MaxConcurrency: 3, Seed: 1})
			s := Summarize(results, d, []float64{50, 99})
			ok := strings.Count(strings.Join(words, " "), "ok")
			if s.Completed != ok || s.Failed != len(words)-ok || s.Cancelled+s.NotSent != 0 {
				t.Fatalf("completed %d, failed %d, cancelled %d, not sent %d; want %d completed: %v",
					s.Completed, s.Failed, s.Cancelled, s.NotSent, ok, s.Errors)
			}
			if s.OutputTokens != ok*tokens || s.InputTokens != ok*4 || s.EstimatedUsage != 0 {
				t.Errorf("tokens in %d, out %d, estimated %d; want %d, %d, 0", s.InputTokens, s.OutputTokens, s.EstimatedUsage, ok*4, ok*tokens)
			}
			wantErrs := map[string]int{"HTTP 500: injected failure": strings.Count(strings.Join(words, " "), "fail")}
			if tt.stream {
				wantErrs["stream broken: unexpected EOF"] = 1
				wantErrs["injected mid-stream error"] = 1
			}
			for _, e := range s.Errors {
				if wantErrs[e.Message] != e.Count {
					t.Errorf("error %q counted %d times, want %d", e.Message, e.Count, wantErrs[e.Message])
				}
				delete(wantErrs, e.Message)
			}
			if len(wantErrs) > 0 {
				t.Errorf("errors not reported: %v (reported %v)", wantErrs, s.Errors)
			}
			if m := f.most.Load(); m > 3 {
				t.Errorf("%d requests in flight at once; the cap is 3", m)
			}
			e2e := ttft + (tokens-1)*itl
			quickest := func(name string, got []time.Duration, least time.Duration) {
				t.Helper()
				for _, v := range got {
					if v < least {
						t.Errorf("%s %v is shorter than the fake's %v", name, v, least)
					}
				}
				if m := slices.Min(got); m > least+slack {
					t.Errorf("the quickest %s is %v, want %v (+%v)", name, m, least, slack)
				}
			}
			var ttfts, e2es, tpots []time.Duration
			for _, r := range results {
				if r.Err == "" {
					ttfts, e2es = append(ttfts, r.TTFT), append(e2es, r.Latency)
					if v, ok := TPOT(r); ok {
						tpots = append(tpots, v)
					}
				}
			}
			quickest("E2E", e2es, e2e)
			if !tt.stream {
				if s.TTFT.Count+s.TPOT.Count+s.ITL.Count != 0 {
					t.Errorf("unstreamed requests have TTFT, TPOT or ITL: %+v %+v %+v", s.TTFT, s.TPOT, s.ITL)
				}
				return
			}
			quickest("TTFT", ttfts, ttft)
			if m := s.ITL.Median; m < ms(itl)/3 || m > ms(itl+slack) {
				t.Errorf("median ITL %.1f ms, want %v (+%v)", m, itl, slack)
			}
			if m := slices.Min(tpots); m < itl/3 || m > itl+slack {
				t.Errorf("the quickest TPOT is %v, want %v (+%v)", m, itl, slack)
			}
			if s.TTFT.Count != ok || s.ITL.Count != ok*(tokens-1) || s.TPOT.Count != ok {
				t.Errorf("samples: TTFT %d, ITL %d, TPOT %d; want %d, %d, %d", s.TTFT.Count, s.ITL.Count, s.TPOT.Count, ok, ok*(tokens-1), ok)
			}
		})
	}
}

// TestRunNoUsage: a server that reports no usage has its output counted
// in chunks and its input in the workload's words, and says so.
func TestRunNoUsage(t *testing.T) {
	f := &fake{tokens: 3, noUsage: true}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := &Client{BaseURL: srv.URL + "/v1/", Endpoint: Completions, Stream: true}
	s := runAll(c, prompts("ok", "ok"))
	if s.Completed != 2 || s.OutputTokens != 6 || s.InputTokens != 8 || s.EstimatedUsage != 2 {
		t.Errorf("completed %d, tokens in %d out %d, estimated %d; want 2, 8, 6, 2", s.Completed, s.InputTokens, s.OutputTokens, s.EstimatedUsage)
	}
}

// TestRunNotStreamed: a server that answers JSON although asked to stream
// is read whole: the request completes, without a TTFT.
func TestRunNotStreamed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"choices":[{"text":" a b c","finish_reason":"length"}],"usage":{"prompt_tokens":4,"completion_tokens":3}}`)
	}))
	defer srv.Close()
	s := runAll(&Client{BaseURL: srv.URL, Endpoint: Completions, Stream: true}, prompts("ok"))
	if s.Completed != 1 || s.OutputTokens != 3 || s.TTFT.Count != 0 {
		t.Errorf("completed %d, %d tokens, %d TTFTs; want 1, 3, 0 (%v)", s.Completed, s.OutputTokens, s.TTFT.Count, s.Errors)
	}
}

// TestRunIgnoreEOS: every request asks for its budget as max and min.
func TestRunIgnoreEOS(t *testing.T) {
	f := &fake{tokens: 1}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := &Client{BaseURL: srv.URL, Endpoint: Chat, Stream: true, IgnoreEOS: true}
	runAll(c, prompts("ok"))
	b := f.bodies[0]
	if b["ignore_eos"] != true || b["min_tokens"] != 4.0 || b["max_completion_tokens"] != 4.0 ||
		b["stream_options"].(map[string]any)["include_usage"] != true {
		t.Errorf("request body %v", b)
	}
}

// TestRunCancel interrupts a run: it returns at once, counting requests in
// flight as cancelled and the rest as not sent, none as failed.
func TestRunCancel(t *testing.T) {
	srv := httptest.NewServer(&fake{tokens: 1})
	defer srv.Close()
	c := &Client{BaseURL: srv.URL, Endpoint: Completions, Stream: true}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	start := time.Now()
	// Two requests that hang, then more than a run of a second sends.
	results, d := Run(ctx, c, prompts("slow", "slow", "ok", "ok", "ok", "ok"), Schedule{Rate: 0.01, MaxConcurrency: 1})
	if time.Since(start) > 2*time.Second || d > 2*time.Second {
		t.Fatalf("Run took %v after its interruption", time.Since(start))
	}
	s := Summarize(results, d, nil)
	if s.Cancelled != 1 || s.NotSent != 5 || s.Failed != 0 || s.Completed != 0 || !s.Interrupted {
		t.Errorf("cancelled %d, not sent %d, failed %d, completed %d, interrupted %v; want 1, 5, 0, 0, true",
			s.Cancelled, s.NotSent, s.Failed, s.Completed, s.Interrupted)
	}
}

// TestRunTimeout: a request over the client's timeout fails with the
// timeout as its error; a server that cannot be reached fails each request
// with the dial error and Models with ErrUnreachable.
func TestRunTimeout(t *testing.T) {
	srv := httptest.NewServer(&fake{tokens: 1})
	defer srv.Close()
	c := &Client{BaseURL: srv.URL, Endpoint: Completions, Stream: true, Timeout: 50 * time.Millisecond}
	s := runAll(c, prompts("slow", "ok"))
	if s.Completed != 1 || s.Failed != 1 || s.Errors[0].Message != "timed out after 50ms" {
		t.Errorf("completed %d, failed %d, errors %v", s.Completed, s.Failed, s.Errors)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	c = &Client{BaseURL: closed, Endpoint: Completions, Stream: true}
	s = runAll(c, prompts("ok", "ok"))
	if s.Failed != 2 || len(s.Errors) != 1 || !strings.Contains(s.Errors[0].Message, "connection refused") || strings.Contains(s.Errors[0].Message, "Post") {
		t.Errorf("refused: failed %d, errors %v", s.Failed, s.Errors)
	}
	if _, err := c.Models(context.Background()); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Models of a closed port: %v, want ErrUnreachable", err)
	}
}

func TestModels(t *testing.T) {
	srv := httptest.NewServer(&fake{})
	defer srv.Close()
	ids, err := (&Client{BaseURL: srv.URL}).Models(context.Background())
	if err != nil || strings.Join(ids, ",") != "fake-model,other" {
		t.Errorf("Models = %v, %v", ids, err)
	}
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	if _, err := (&Client{BaseURL: notFound.URL}).Models(context.Background()); err == nil || errors.Is(err, ErrUnreachable) ||
		!strings.Contains(err.Error(), "HTTP 404") {
		t.Errorf("Models of a server without /v1/models: %v", err)
	}
}

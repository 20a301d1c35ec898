package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/grammar"
	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/models"
	"github.com/replayssm/replayssm/tokenizer"
	"github.com/replayssm/replayssm/tokenizer/chat"
)

// fixture is the built-in model served over loopback.
type fixture struct {
	s    *Server
	url  string
	cfg  Config
	stop context.CancelFunc // stops the engine (Run), as a shutdown does
}

// newFixture serves the built-in model with cfg's limits (its Tokenizer,
// Template, Name and, unless set, Model are filled in).
func newFixture(t testing.TB, cfg Config) *fixture {
	t.Helper()
	dir, err := models.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Model == nil {
		if cfg.Model, err = model.Load(dir, model.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.Tokenizer, err = tokenizer.Load(dir); err != nil {
		t.Fatal(err)
	}
	if cfg.Template == nil {
		if cfg.Template, err = chat.Load(dir); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Name = models.Default
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- s.Run(ctx) }()
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.Close()
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
		s.Close()
	})
	return &fixture{s: s, url: hs.URL, cfg: cfg, stop: cancel}
}

// greedy is what engine.Generate makes of prompt, as the server should
// answer it: the text before any end token, the token count and the
// finish reason.
func (f *fixture) greedy(t *testing.T, prompt []int, maxTokens int) (string, int, string) {
	t.Helper()
	e, err := engine.New(f.cfg.Model, 1, f.cfg.State)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	res, _, err := e.Generate(context.Background(), []engine.Request{{Prompt: prompt, MaxTokens: maxTokens, IsEnd: f.s.isEnd}})
	if err != nil {
		t.Fatal(err)
	}
	ids := res[0].Tokens
	reason := "length"
	if res[0].Reason == engine.StopEnd {
		ids, reason = ids[:len(ids)-1], "stop"
	}
	return f.cfg.Tokenizer.Decode(ids, true), len(res[0].Tokens), reason
}

func (f *fixture) do(t *testing.T, ctx context.Context, method, path, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, f.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	rsp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return rsp
}

// post sends body and decodes a 200 JSON answer into v.
func (f *fixture) post(t *testing.T, path, body string, v any) {
	t.Helper()
	rsp := f.do(t, context.Background(), "POST", path, body)
	defer rsp.Body.Close()
	b, _ := io.ReadAll(rsp.Body)
	if rsp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s %s: %d %s", path, body, rsp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("POST %s: %v in %s", path, err, b)
	}
}

type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Created int64  `json:"created"`
	Choices []struct {
		Index   int    `json:"index"`
		Text    string `json:"text"`
		Message *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Delta *struct {
			Role      string         `json:"role"`
			Content   *string        `json:"content"`
			ToolCalls []toolCallJSON `json:"tool_calls"`
		} `json:"delta"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

// text is the choice's text or message content.
func (c *completion) text() string {
	if m := c.Choices[0].Message; m != nil {
		return m.Content
	}
	return c.Choices[0].Text
}

// stream posts body and reads the Server-Sent Events up to [DONE]: the
// concatenated text and the finish reason of choice 0, and the chunks.
func (f *fixture) stream(t *testing.T, path, body string) (string, string, []completion) {
	t.Helper()
	rsp := f.do(t, context.Background(), "POST", path, body)
	defer rsp.Body.Close()
	if rsp.StatusCode != http.StatusOK || !strings.HasPrefix(rsp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(rsp.Body)
		t.Fatalf("POST %s: %d %s %s", path, rsp.StatusCode, rsp.Header.Get("Content-Type"), b)
	}
	var (
		text, reason string // choice 0's
		chunks       []completion
		finished     = map[int]bool{}
	)
	sc := bufio.NewScanner(rsp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("not an SSE data line: %q", line)
		}
		if data == "[DONE]" {
			for sc.Scan() {
				if sc.Text() != "" {
					t.Errorf("data after [DONE]: %q", sc.Text())
				}
			}
			return text, reason, chunks
		}
		var c completion
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			t.Fatalf("chunk %q: %v", data, err)
		}
		chunks = append(chunks, c)
		if len(c.Choices) == 0 {
			continue // the usage chunk
		}
		ch := c.Choices[0]
		if finished[ch.Index] {
			t.Errorf("chunk after choice %d's finish reason: %s", ch.Index, data)
		}
		if ch.Index != 0 {
			finished[ch.Index] = ch.FinishReason != nil
			continue
		}
		if d := ch.Delta; d != nil && d.Content != nil {
			text += *d.Content
		}
		text += ch.Text
		if r := ch.FinishReason; r != nil {
			reason, finished[0] = *r, true
		}
	}
	t.Fatalf("stream ended without [DONE] (%v)", sc.Err())
	return "", "", nil
}

const mosesPrompt = "And the LORD spake unto Moses, saying,"

func TestCompletionsGreedyMatchesEngine(t *testing.T) {
	f := newFixture(t, Config{MaxBatch: 4})
	prompt := f.cfg.Tokenizer.Encode(mosesPrompt)
	want, n, reason := f.greedy(t, prompt, 24)
	if want == "" {
		t.Fatal("the engine generated no text")
	}
	ids, _ := json.Marshal(prompt)
	for _, p := range []string{fmt.Sprintf("%q", mosesPrompt), string(ids), fmt.Sprintf("[%q]", mosesPrompt)} {
		// Parameters at their neutral values are accepted.
		body := fmt.Sprintf(`{"model":%q,"prompt":%s,"max_tokens":24,"temperature":0,"logprobs":null,"echo":false,"presence_penalty":0,"tool_choice":"none","response_format":{"type":"text"}}`, models.Default, p)
		var c completion
		f.post(t, "/v1/completions", body, &c)
		if c.Object != "text_completion" || c.Model != models.Default || !strings.HasPrefix(c.ID, "cmpl-") || c.Created == 0 {
			t.Errorf("envelope: %+v", c)
		}
		if got := c.text(); got != want || *c.Choices[0].FinishReason != reason {
			t.Errorf("prompt %s: got %q (%s), want %q (%s)", p, got, *c.Choices[0].FinishReason, want, reason)
		}
		if u := c.Usage; u == nil || u.PromptTokens != len(prompt) || u.CompletionTokens != n || u.TotalTokens != len(prompt)+n {
			t.Errorf("usage %+v, want %d + %d", c.Usage, len(prompt), n)
		}
		text, sreason, chunks := f.stream(t, "/v1/completions", strings.Replace(body, `"temperature"`, `"stream":true,"stream_options":{"include_usage":true},"temperature"`, 1))
		if text != want || sreason != reason {
			t.Errorf("streamed %q (%s), want %q (%s)", text, sreason, want, reason)
		}
		if last := chunks[len(chunks)-1]; last.Usage == nil || last.Usage.CompletionTokens != n || len(last.Choices) != 0 {
			t.Errorf("usage chunk: %+v", last)
		}
	}
}

func TestChatCompletions(t *testing.T) {
	f := newFixture(t, Config{MaxBatch: 2})
	msgs := []chat.Message{{Role: "system", Content: "Thou art the scribe."}, {Role: "user", Content: "Who spake unto Moses?"}}
	rendered, err := f.cfg.Template.Render(msgs, chat.Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	prompt := f.cfg.Tokenizer.EncodeRaw(rendered)
	want, n, reason := f.greedy(t, prompt, 16)
	body := `{"messages":[{"role":"system","content":"Thou art the scribe."},
		{"role":"user","content":[{"type":"text","text":"Who spake "},{"type":"text","text":"unto Moses?"}]}],
		"max_tokens":16,"temperature":0}`
	var c completion
	f.post(t, "/v1/chat/completions", body, &c)
	if c.Object != "chat.completion" || !strings.HasPrefix(c.ID, "chatcmpl-") || c.Choices[0].Message == nil || c.Choices[0].Message.Role != "assistant" {
		t.Errorf("envelope: %+v", c)
	}
	if c.text() != want || *c.Choices[0].FinishReason != reason || c.Usage.PromptTokens != len(prompt) || c.Usage.CompletionTokens != n {
		t.Errorf("got %q (%s, %+v), want %q (%s, %d + %d)", c.text(), *c.Choices[0].FinishReason, c.Usage, want, reason, len(prompt), n)
	}
	text, sreason, chunks := f.stream(t, "/v1/chat/completions", strings.Replace(body, `"max_tokens"`, `"stream":true,"max_tokens"`, 1))
	if text != want || sreason != reason {
		t.Errorf("streamed %q (%s), want %q (%s)", text, sreason, want, reason)
	}
	if d := chunks[0].Choices[0].Delta; chunks[0].Object != "chat.completion.chunk" || d == nil || d.Role != "assistant" {
		t.Errorf("first chunk: %+v", chunks[0])
	}
}

func TestStopStrings(t *testing.T) {
	f := newFixture(t, Config{})
	full, _, _ := f.greedy(t, f.cfg.Tokenizer.Encode(mosesPrompt), 32)
	i := strings.Index(full[8:], " ")
	if i < 0 {
		t.Fatalf("no word to stop at in %q", full)
	}
	stop := full[8+i : 8+i+3] // a space and the two letters after it
	want := full[:strings.Index(full, stop)]
	for _, field := range []string{fmt.Sprintf("%q", stop), fmt.Sprintf(`["zzzz", %q]`, stop)} {
		body := fmt.Sprintf(`{"prompt":%q,"max_tokens":32,"temperature":0,"stop":%s}`, mosesPrompt, field)
		var c completion
		f.post(t, "/v1/completions", body, &c)
		if c.text() != want || *c.Choices[0].FinishReason != "stop" {
			t.Errorf("stop %s: got %q (%s), want %q (stop)", field, c.text(), *c.Choices[0].FinishReason, want)
		}
		text, reason, _ := f.stream(t, "/v1/completions", strings.Replace(body, "{", `{"stream":true,`, 1))
		if text != want || reason != "stop" {
			t.Errorf("stop %s streamed: got %q (%s), want %q (stop)", field, text, reason, want)
		}
	}
}

// TestConcurrent sends more requests than there are sequences; every one
// must get its own greedy continuation.
func TestConcurrent(t *testing.T) {
	f := newFixture(t, Config{MaxBatch: 2})
	prompts := []string{mosesPrompt, "In the beginning", "Blessed are the", "And it came to pass"}
	var wg sync.WaitGroup
	got := make([]string, len(prompts))
	for i, p := range prompts {
		wg.Go(func() {
			var c completion
			f.post(t, "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":20,"temperature":0}`, p), &c)
			got[i] = c.text()
		})
	}
	wg.Wait()
	for i, p := range prompts {
		if want, _, _ := f.greedy(t, f.cfg.Tokenizer.Encode(p), 20); got[i] != want {
			t.Errorf("%q: got %q, want %q", p, got[i], want)
		}
	}
}

// TestCancelFreesSequence disconnects a long streaming request on a
// one-sequence server: the engine must drop it, and the next request run.
func TestCancelFreesSequence(t *testing.T) {
	f := newFixture(t, Config{MaxBatch: 1})
	ctx, cancel := context.WithCancel(context.Background())
	rsp := f.do(t, ctx, "POST", "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":4000,"temperature":1,"seed":1,"stream":true}`, mosesPrompt))
	br := bufio.NewReader(rsp.Body)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event: %q, %v", line, err)
	}
	cancel()
	rsp.Body.Close()
	deadline := time.Now().Add(5 * time.Second)
	for f.s.pending.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the cancelled request still holds its sequence")
		}
		time.Sleep(time.Millisecond)
	}
	// Its handler counts it cancelled once it sees the client gone.
	cancelled := map[string]string{"endpoint": epCompletions, "finish_reason": reasonCancelled}
	for {
		if n, _ := value(f.scrape(t), "replayssm_requests_finished_total", cancelled); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the cancelled request was not counted cancelled")
		}
		time.Sleep(time.Millisecond)
	}
	var c completion
	f.post(t, "/v1/completions", `{"prompt":"In the beginning","max_tokens":4,"temperature":0}`, &c)
	if c.Usage.CompletionTokens == 0 {
		t.Errorf("no tokens after the cancellation: %+v", c)
	}
}

// occupy starts a long streamed completion under ctx and waits for its
// first event: it holds a sequence until ctx ends.
func (f *fixture) occupy(t *testing.T, ctx context.Context) *http.Response {
	t.Helper()
	rsp := f.do(t, ctx, "POST", "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":4000,"temperature":1,"seed":1,"stream":true}`, mosesPrompt))
	if line, err := bufio.NewReader(rsp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event: %q, %v", line, err)
	}
	return rsp
}

// TestQueueFull fills the one sequence and the one queue place: the next
// request is answered 429.
func TestQueueFull(t *testing.T) {
	f := newFixture(t, Config{MaxBatch: 1, MaxQueue: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer f.occupy(t, ctx).Body.Close()
	waiting := make(chan struct{})
	go func() {
		defer close(waiting)
		r, err := http.DefaultClient.Do(must(http.NewRequestWithContext(ctx, "POST", f.url+"/v1/completions", strings.NewReader(`{"prompt":"Amen","max_tokens":2}`))))
		if err == nil {
			r.Body.Close()
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for f.s.queue.len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the second request never queued")
		}
		time.Sleep(time.Millisecond)
	}
	r := f.do(t, context.Background(), "POST", "/v1/completions", `{"prompt":"Amen","max_tokens":2}`)
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusTooManyRequests || !bytes.Contains(b, []byte(`"code":"queue_full"`)) || r.Header.Get("Retry-After") == "" {
		t.Errorf("third request: %d %s (Retry-After %q), want 429 queue_full with Retry-After", r.StatusCode, b, r.Header.Get("Retry-After"))
	}
	// One request runs, one waits, the third was refused.
	check(t, f.scrape(t), []sample{
		{"replayssm_requests_received_total", lbl("endpoint", epCompletions), 3},
		{"replayssm_request_errors_total", lbl("endpoint", epCompletions, "code", "429"), 1},
		{"replayssm_requests_finished_total", lbl("endpoint", epCompletions, "finish_reason", reasonError), 1},
		{"replayssm_requests_running", nil, 1},
		{"replayssm_requests_waiting", nil, 1},
		{"replayssm_time_to_first_token_seconds", nil, 1},
		{"replayssm_e2e_request_latency_seconds", nil, 0},
		{"replayssm_request_queue_time_seconds", nil, 1}, // the running one left the queue; the waiting one not yet
		{"replayssm_request_prefill_time_seconds", nil, 1},
		{"replayssm_request_decode_time_seconds", nil, 0},
	})
	cancel()
	<-waiting
}

// TestQueueCancelLeaves fills the one sequence and the one queue place,
// then the waiting client gives up: its place is free at once, so the next
// request waits instead of being refused, and runs when the sequence frees.
func TestQueueCancelLeaves(t *testing.T) {
	f := newFixture(t, Config{MaxBatch: 1, MaxQueue: 1})
	runCtx, stopRunning := context.WithCancel(context.Background())
	defer stopRunning()
	defer f.occupy(t, runCtx).Body.Close()
	waitCtx, giveUp := context.WithCancel(context.Background())
	waited := make(chan struct{})
	go func() {
		defer close(waited)
		r, err := http.DefaultClient.Do(must(http.NewRequestWithContext(waitCtx, "POST", f.url+"/v1/completions", strings.NewReader(`{"prompt":"Amen","max_tokens":2}`))))
		if err == nil {
			r.Body.Close()
		}
	}()
	waitFor(t, "the second request to queue", func() bool { return f.s.queue.len() == 1 })
	giveUp()
	<-waited
	waitFor(t, "the cancelled request to leave the queue", func() bool { return f.s.queue.len() == 0 })
	third := make(chan int, 1)
	go func() {
		r, err := http.DefaultClient.Do(must(http.NewRequest("POST", f.url+"/v1/completions", strings.NewReader(`{"prompt":"Amen","max_tokens":2}`))))
		if err != nil {
			third <- 0
			return
		}
		r.Body.Close()
		third <- r.StatusCode
	}()
	waitFor(t, "the third request to queue", func() bool { return f.s.queue.len() == 1 })
	stopRunning() // frees the sequence
	if code := <-third; code != http.StatusOK {
		t.Errorf("third request: %d, want 200 once the sequence freed", code)
	}
}

// waitFor polls cond for up to five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func must(r *http.Request, err error) *http.Request {
	if err != nil {
		panic(err)
	}
	return r
}

func TestModelsAndHealth(t *testing.T) {
	f := newFixture(t, Config{})
	var list struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}
	rsp := f.do(t, context.Background(), "GET", "/v1/models", "")
	if err := json.NewDecoder(rsp.Body).Decode(&list); err != nil || rsp.StatusCode != 200 {
		t.Fatalf("/v1/models: %d %v", rsp.StatusCode, err)
	}
	rsp.Body.Close()
	if list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != models.Default || list.Data[0].Object != "model" || list.Data[0].MaxModelLen != 4096 {
		t.Errorf("/v1/models: %+v", list)
	}
	for path, want := range map[string]int{"/health": 200, "/v1/models/" + models.Default: 200, "/v1/models/gpt-4": 404} {
		rsp := f.do(t, context.Background(), "GET", path, "")
		rsp.Body.Close()
		if rsp.StatusCode != want || rsp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("GET %s: %d %s, want %d JSON", path, rsp.StatusCode, rsp.Header.Get("Content-Type"), want)
		}
	}
}

// TestAliases serves the model under a second name: both are listed and
// answer, and a response names the model its request asked for.
func TestAliases(t *testing.T) {
	f := newFixture(t, Config{Aliases: []string{"kjv"}})
	var list struct {
		Data []modelCard `json:"data"`
	}
	rsp := f.do(t, context.Background(), "GET", "/v1/models", "")
	err := json.NewDecoder(rsp.Body).Decode(&list)
	rsp.Body.Close()
	if err != nil || len(list.Data) != 2 || list.Data[0].ID != models.Default || list.Data[1].ID != "kjv" {
		t.Errorf("/v1/models: %+v (%v)", list, err)
	}
	var c completion
	f.post(t, "/v1/completions", `{"model":"kjv","prompt":"Amen","max_tokens":2}`, &c)
	if c.Model != "kjv" {
		t.Errorf("response names model %q, want the alias asked for", c.Model)
	}
	rsp = f.do(t, context.Background(), "GET", "/v1/models/kjv", "")
	rsp.Body.Close()
	if rsp.StatusCode != 200 {
		t.Errorf("GET /v1/models/kjv: %d", rsp.StatusCode)
	}
}

// TestLogitBiasAndStopTokens: a +100 bias makes greedy decoding repeat
// the biased token; a stop token id ends the completion at it (not shown,
// finish reason "stop").
func TestLogitBiasAndStopTokens(t *testing.T) {
	f := newFixture(t, Config{})
	tok := f.cfg.Tokenizer
	const id = 300
	var c completion
	f.post(t, "/v1/completions", fmt.Sprintf(`{"prompt":"In the beginning","max_tokens":5,"temperature":0,"logit_bias":{"%d":100}}`, id), &c)
	if want := tok.Decode([]int{id, id, id, id, id}, true); c.text() != want {
		t.Errorf("biased text %q, want %q", c.text(), want)
	}
	prompt := tok.Encode(mosesPrompt)
	first, _, _ := f.greedy(t, prompt, 1)
	firstID := tok.Encode(first)
	if len(firstID) != 1 {
		t.Skipf("the first greedy token's text %q does not encode back to one token", first)
	}
	f.post(t, "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":8,"temperature":0,"stop_token_ids":[%d]}`, mosesPrompt, firstID[0]), &c)
	if c.text() != "" || *c.Choices[0].FinishReason != "stop" || c.Usage.CompletionTokens != 1 {
		t.Errorf("stop token: text %q, reason %s, %d tokens; want an empty stop after one", c.text(), *c.Choices[0].FinishReason, c.Usage.CompletionTokens)
	}
}

// TestLogprobs asks both endpoints for log-probabilities, plain and
// streamed: one entry per completion token, each at most 0, the greedy
// token the likeliest of its alternatives, and the tokens spelling the
// text.
func TestLogprobs(t *testing.T) {
	f := newFixture(t, Config{})
	type chatLP struct {
		Content []struct {
			Token       string  `json:"token"`
			Logprob     float32 `json:"logprob"`
			Bytes       []int   `json:"bytes"`
			TopLogprobs []struct {
				Token   string  `json:"token"`
				Logprob float32 `json:"logprob"`
			} `json:"top_logprobs"`
		} `json:"content"`
	}
	type cmplLP struct {
		Tokens        []string             `json:"tokens"`
		TokenLogprobs []float32            `json:"token_logprobs"`
		TopLogprobs   []map[string]float32 `json:"top_logprobs"`
		TextOffset    []int                `json:"text_offset"`
	}
	var rsp struct {
		Choices []struct {
			Text     string          `json:"text"`
			Logprobs json.RawMessage `json:"logprobs"`
			Message  *struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage usage `json:"usage"`
	}
	f.post(t, "/v1/completions", `{"prompt":"In the beginning","max_tokens":6,"temperature":0,"logprobs":2}`, &rsp)
	var c cmplLP
	if err := json.Unmarshal(rsp.Choices[0].Logprobs, &c); err != nil {
		t.Fatal(err)
	}
	n := rsp.Usage.CompletionTokens
	if len(c.Tokens) != n || len(c.TokenLogprobs) != n || len(c.TopLogprobs) != n || len(c.TextOffset) != n ||
		strings.Join(c.Tokens, "") != rsp.Choices[0].Text {
		t.Errorf("completions logprobs %+v for %d tokens of %q", c, n, rsp.Choices[0].Text)
	}
	for i, lp := range c.TokenLogprobs {
		best := float32(-1e30)
		for _, v := range c.TopLogprobs[i] {
			best = max(best, v)
		}
		if !(lp <= 0) || len(c.TopLogprobs[i]) > 2 || lp != best {
			t.Errorf("token %d: logprob %v, alternatives %v", i, lp, c.TopLogprobs[i])
		}
	}
	f.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Who was Moses?"}],"max_tokens":6,"temperature":0,"logprobs":true,"top_logprobs":3}`, &rsp)
	var ch chatLP
	if err := json.Unmarshal(rsp.Choices[0].Logprobs, &ch); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	for i, e := range ch.Content {
		text.WriteString(e.Token)
		if len(e.TopLogprobs) != 3 || e.TopLogprobs[0].Logprob != e.Logprob || !(e.Logprob <= 0) || len(e.Bytes) != len(e.Token) {
			t.Errorf("chat token %d: %+v", i, e)
		}
	}
	if text.String() != rsp.Choices[0].Message.Content || len(ch.Content) > rsp.Usage.CompletionTokens {
		t.Errorf("chat logprobs spell %q, the answer is %q", text.String(), rsp.Choices[0].Message.Content)
	}
	// Streamed: the chunks' entries add up to the tokens.
	_, _, chunks := f.stream(t, "/v1/completions", `{"prompt":"In the beginning","max_tokens":6,"temperature":0,"logprobs":0,"stream":true}`)
	entries := 0
	for _, k := range chunks {
		if len(k.Choices) == 0 {
			continue
		}
		var lp cmplLP
		if err := json.Unmarshal(k.Choices[0].Logprobs, &lp); err != nil {
			t.Fatal(err)
		}
		entries += len(lp.Tokens)
	}
	if entries != 6 {
		t.Errorf("streamed chunks carry %d logprob entries, want 6", entries)
	}
}

// TestEcho: echo answers the prompt's text before the completion, whole
// and streamed.
func TestEcho(t *testing.T) {
	f := newFixture(t, Config{})
	var plain, echoed completion
	f.post(t, "/v1/completions", `{"prompt":"In the beginning","max_tokens":5,"temperature":0}`, &plain)
	f.post(t, "/v1/completions", `{"prompt":"In the beginning","max_tokens":5,"temperature":0,"echo":true}`, &echoed)
	if echoed.text() != "In the beginning"+plain.text() {
		t.Errorf("echo: %q, want the prompt then %q", echoed.text(), plain.text())
	}
	text, _, _ := f.stream(t, "/v1/completions", `{"prompt":"In the beginning","max_tokens":5,"temperature":0,"echo":true,"stream":true}`)
	if text != echoed.text() {
		t.Errorf("streamed echo %q, want %q", text, echoed.text())
	}
}

// TestChoices asks for n = 3 choices: each equals the single request with
// the seed that choice draws with (seed + i), whole and streamed, and the
// usage counts them all.
func TestChoices(t *testing.T) {
	f := newFixture(t, Config{MaxBatch: 2})
	const body = `{"prompt":"In the beginning","max_tokens":12,"temperature":1,"seed":%d%s}`
	var want []string
	wantTokens := 0
	for i := range 3 {
		var c completion
		f.post(t, "/v1/completions", fmt.Sprintf(body, 7+i, ""), &c)
		want = append(want, c.text())
		wantTokens += c.Usage.CompletionTokens
	}
	var c completion
	f.post(t, "/v1/completions", fmt.Sprintf(body, 7, `,"n":3`), &c)
	if len(c.Choices) != 3 || c.Usage.CompletionTokens != wantTokens {
		t.Fatalf("%d choices, %d tokens; want 3 and %d", len(c.Choices), c.Usage.CompletionTokens, wantTokens)
	}
	for i, ch := range c.Choices {
		if ch.Index != i || ch.Text != want[i] || ch.FinishReason == nil {
			t.Errorf("choice %d (index %d): %q, want %q", i, ch.Index, ch.Text, want[i])
		}
	}
	_, _, chunks := f.stream(t, "/v1/completions", fmt.Sprintf(body, 7, `,"n":3,"stream":true`))
	got := make([]string, 3)
	finished := make([]int, 3)
	for _, k := range chunks {
		for _, ch := range k.Choices {
			got[ch.Index] += ch.Text
			if ch.FinishReason != nil {
				finished[ch.Index]++
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(finished) != "[1 1 1]" {
		t.Errorf("streamed choices %q (finished %v), want %q each finished once", got, finished, want)
	}
}

// TestJSONObject asks for json_object answers from a model that has never
// seen JSON: whatever it samples, each choice is a prefix of a JSON object,
// and every choice that ends before its budget is a whole object that
// parses. A bias towards quotes and braces lets some finish.
func TestJSONObject(t *testing.T) {
	f := newFixture(t, Config{MaxBatch: 4})
	tok := f.cfg.Tokenizer
	bias := map[string]float64{}
	for _, c := range []string{`"`, "}", ":", "1"} {
		if ids := tok.Encode(c); len(ids) == 1 {
			bias[fmt.Sprint(ids[0])] = 6
		}
	}
	biasJSON, _ := json.Marshal(bias)
	whole := 0
	for seed := range 6 {
		var c completion
		f.post(t, "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"Give me JSON."}],"max_tokens":48,"temperature":1,"seed":%d,"n":2,"response_format":{"type":"json_object"},"logit_bias":%s}`, seed, biasJSON), &c)
		for _, ch := range c.Choices {
			text := ch.Message.Content
			st := grammar.JSON{ObjectOnly: true}
			for i := range len(text) {
				if !st.Feed(text[i]) {
					t.Fatalf("seed %d: %q is not a prefix of a JSON object (byte %d)", seed, text, i)
				}
			}
			if *ch.FinishReason == "stop" {
				var v map[string]any
				if err := json.Unmarshal([]byte(text), &v); err != nil {
					t.Errorf("seed %d: finished answer %q does not parse as an object: %v", seed, text, err)
				}
				whole++
			}
		}
	}
	if whole == 0 {
		t.Error("no answer finished: the end token is never allowed after a complete object")
	}
}

// TestJSONSchema asks for answers following a schema: each choice is a
// prefix the schema allows, and each that ends is an object with the
// required properties of the right types and no others.
func TestJSONSchema(t *testing.T) {
	f := newFixture(t, Config{MaxBatch: 4})
	schema := `{"type":"object","properties":{"book":{"type":"string","enum":["Genesis","Exodus"]},"chapter":{"type":"integer"},"holy":{"type":"boolean"}},"required":["book","chapter"],"additionalProperties":false}`
	compiled, err := grammar.CompileSchema([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	whole := 0
	for seed := range 4 {
		var c completion
		f.post(t, "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"Which book?"}],"max_tokens":120,"temperature":1,"seed":%d,"n":2,"response_format":{"type":"json_schema","json_schema":{"name":"ref","strict":true,"schema":%s}}}`, seed, schema), &c)
		for _, ch := range c.Choices {
			text := ch.Message.Content
			a := grammar.NewSchemaJSON(compiled)
			for i := range len(text) {
				if !a.Feed(text[i]) {
					t.Fatalf("seed %d: %q leaves the schema at byte %d", seed, text, i)
				}
			}
			if *ch.FinishReason != "stop" {
				continue
			}
			var v map[string]any
			dec := json.NewDecoder(strings.NewReader(text))
			dec.UseNumber()
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("seed %d: %q: %v", seed, text, err)
			}
			book, _ := v["book"].(string)
			chapter, _ := v["chapter"].(json.Number)
			_, holyOK := v["holy"].(bool)
			if (book != "Genesis" && book != "Exodus") || chapter == "" || strings.ContainsAny(string(chapter), ".eE") ||
				(v["holy"] != nil && !holyOK) || len(v) > 3 {
				t.Errorf("seed %d: %q does not follow the schema", seed, text)
			}
			whole++
		}
	}
	if whole == 0 {
		t.Error("no answer finished")
	}
}

// toolAnswer is a chat answer whose choices may call tools.
type toolAnswer struct {
	Choices []struct {
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Content   *string        `json:"content"`
			ToolCalls []toolCallJSON `json:"tool_calls"`
		} `json:"message"`
	} `json:"choices"`
	Usage usage `json:"usage"`
}

// TestToolCalls requires a tool call, by name and among several tools:
// each choice that ends is a call of an offered function, answered as
// OpenAI's tool_calls (arguments a JSON string following the function's
// parameters) with finish reason tool_calls; tool_choice "none" answers
// text, and a conversation holding calls and their results renders.
func TestToolCalls(t *testing.T) {
	f := newFixture(t, Config{MaxBatch: 4})
	tools := `[{"type":"function","function":{"name":"verse","description":"look up a verse","parameters":{"type":"object","properties":{"book":{"type":"string","enum":["Genesis","Exodus"]},"chapter":{"type":"integer"}},"required":["book","chapter"],"additionalProperties":false}}},{"type":"function","function":{"name":"pray","parameters":{"type":"object"}}}]`
	calls := 0
	for _, choice := range []string{`{"type":"function","function":{"name":"verse"}}`, `"required"`} {
		for seed := range 3 {
			var a toolAnswer
			f.post(t, "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"Find the verse."}],"tools":%s,"tool_choice":%s,"max_tokens":120,"temperature":1,"seed":%d,"n":2}`, tools, choice, seed), &a)
			for _, ch := range a.Choices {
				if ch.FinishReason == "length" {
					continue
				}
				if ch.FinishReason != "tool_calls" || len(ch.Message.ToolCalls) != 1 || ch.Message.Content != nil {
					t.Fatalf("%s: %+v", choice, ch)
				}
				call := ch.Message.ToolCalls[0]
				var args map[string]any
				if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil || call.Type != "function" || !strings.HasPrefix(call.ID, "call_") {
					t.Fatalf("%s: call %+v (%v)", choice, call, err)
				}
				switch call.Function.Name {
				case "verse":
					if b := args["book"]; (b != "Genesis" && b != "Exodus") || args["chapter"] == nil || len(args) != 2 {
						t.Errorf("verse arguments %s", call.Function.Arguments)
					}
				case "pray":
					if choice != `"required"` {
						t.Errorf("named verse, called pray")
					}
				default:
					t.Errorf("called %q", call.Function.Name)
				}
				calls++
			}
		}
	}
	if calls == 0 {
		t.Error("no call finished")
	}
	// Streamed, a call comes whole in its choice's last chunk.
	streamed := 0
	for seed := range 3 {
		_, _, chunks := f.stream(t, "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"Find the verse."}],"tools":%s,"tool_choice":"required","max_tokens":120,"temperature":1,"seed":%d,"stream":true}`, tools, seed))
		for _, k := range chunks {
			if len(k.Choices) == 0 || k.Choices[0].FinishReason == nil {
				if len(k.Choices) > 0 && k.Choices[0].Delta != nil && k.Choices[0].Delta.Content != nil && *k.Choices[0].Delta.Content != "" {
					t.Errorf("a required call streamed content: %q", *k.Choices[0].Delta.Content)
				}
				continue
			}
			d := k.Choices[0].Delta
			if *k.Choices[0].FinishReason == "tool_calls" {
				if len(d.ToolCalls) != 1 || d.ToolCalls[0].Index == nil || *d.ToolCalls[0].Index != 0 || !json.Valid([]byte(d.ToolCalls[0].Function.Arguments)) {
					t.Errorf("streamed call %+v", d.ToolCalls)
				}
				streamed++
			}
		}
	}
	if streamed == 0 {
		t.Error("no streamed call finished")
	}
	var a toolAnswer
	f.post(t, "/v1/chat/completions", fmt.Sprintf(`{"messages":[{"role":"user","content":"Find it."},{"role":"assistant","content":"","tool_calls":[{"id":"call_1","type":"function","function":{"name":"verse","arguments":{"book":"Genesis","chapter":1}}}]},{"role":"tool","tool_call_id":"call_1","content":"In the beginning God created the heaven and the earth."}],"tools":%s,"tool_choice":"none","max_tokens":6,"temperature":0}`, tools), &a)
	if len(a.Choices) != 1 || a.Choices[0].Message.Content == nil || a.Choices[0].Message.ToolCalls != nil {
		t.Errorf("tool_choice none: %+v", a)
	}
}

// TestBestOf: best_of 4 with n 2 answers the two of the four choices
// (seeds seed..seed+3) with the highest log-probability, likeliest first,
// as the four asked one by one rank them.
func TestBestOf(t *testing.T) {
	f := newFixture(t, Config{MaxBatch: 4})
	type ranked struct {
		text string
		sum  float64
	}
	var each []ranked
	for i := range 4 {
		var rsp struct {
			Choices []struct {
				Text     string `json:"text"`
				Logprobs struct {
					TokenLogprobs []float64 `json:"token_logprobs"`
				} `json:"logprobs"`
			} `json:"choices"`
		}
		f.post(t, "/v1/completions", fmt.Sprintf(`{"prompt":"In the beginning","max_tokens":10,"temperature":1,"seed":%d,"logprobs":0}`, 11+i), &rsp)
		r := ranked{text: rsp.Choices[0].Text}
		for _, lp := range rsp.Choices[0].Logprobs.TokenLogprobs {
			r.sum += lp
		}
		each = append(each, r)
	}
	sort.SliceStable(each, func(a, b int) bool { return each[a].sum > each[b].sum })
	var c completion
	f.post(t, "/v1/completions", `{"prompt":"In the beginning","max_tokens":10,"temperature":1,"seed":11,"n":2,"best_of":4}`, &c)
	if len(c.Choices) != 2 || c.Choices[0].Text != each[0].text || c.Choices[1].Text != each[1].text || c.Choices[1].Index != 1 {
		t.Errorf("best_of answered %+v; the likeliest two are %q and %q", c.Choices, each[0].text, each[1].text)
	}
}

// TestToolChoiceAuto serves with a template that teaches the hermes
// tool-call format: tool_choice auto (the default with tools) is accepted,
// the tools reach the prompt, and an answer without calls is plain text;
// the shipped template, which writes no calls, refuses auto by name.
func TestToolChoiceAuto(t *testing.T) {
	tmpl, err := chat.Parse(`{%- if tools %}{{- '<|im_start|>system\n<tools>' }}{%- for tool in tools %}{{- tool | tojson }}{%- endfor %}{{- '</tools>\nCall tools as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n' }}{%- endif %}{%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, Config{Template: tmpl})
	tools := `[{"type":"function","function":{"name":"verse","parameters":{"type":"object","properties":{"book":{"type":"string"}}}}}]`
	var with, without toolAnswer
	f.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Who was Moses?"}],"tools":`+tools+`,"max_tokens":8,"temperature":0}`, &with)
	f.post(t, "/v1/chat/completions", `{"messages":[{"role":"user","content":"Who was Moses?"}],"max_tokens":8,"temperature":0}`, &without)
	ch := with.Choices[0]
	if ch.Message.Content == nil || ch.Message.ToolCalls != nil || ch.FinishReason == "tool_calls" || with.Usage.PromptTokens <= without.Usage.PromptTokens {
		t.Errorf("auto: %+v (prompt %d tokens, %d without tools)", with, with.Usage.PromptTokens, without.Usage.PromptTokens)
	}
	plain := newFixture(t, Config{})
	rsp := plain.do(t, context.Background(), "POST", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"tools":`+tools+`}`)
	b, _ := io.ReadAll(rsp.Body)
	rsp.Body.Close()
	if rsp.StatusCode != 400 || !strings.Contains(string(b), `"param":"tool_choice"`) {
		t.Errorf("auto with a template that writes no calls: %d %s", rsp.StatusCode, b)
	}
}

// TestAPIKeyAndLog serves with an API key and a request log: /v1 routes
// need the bearer token (401 in OpenAI's shape without it), /health does
// not, and every request gets one log line with its outcome.
func TestAPIKeyAndLog(t *testing.T) {
	var logBuf syncBuffer
	f := newFixture(t, Config{APIKey: "sekret", Log: slog.New(slog.NewJSONHandler(&logBuf, nil))})
	send := func(method, path, key, body string) (int, string) {
		req := must(http.NewRequest(method, f.url+path, strings.NewReader(body)))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		rsp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer rsp.Body.Close()
		b, _ := io.ReadAll(rsp.Body)
		return rsp.StatusCode, string(b)
	}
	for _, tt := range []struct {
		method, path, key string
		status            int
	}{
		{"GET", "/v1/models", "", 401},
		{"GET", "/v1/models", "sekre", 401},
		{"GET", "/v1/models", "sekret", 200},
		{"GET", "/health", "", 200},
		{"POST", "/v1/completions", "", 401},
	} {
		code, body := send(tt.method, tt.path, tt.key, `{"prompt":"Amen","max_tokens":2}`)
		if code != tt.status || (code == 401 && !strings.Contains(body, `"code":"invalid_api_key"`)) {
			t.Errorf("%s %s with key %q: %d %s, want %d", tt.method, tt.path, tt.key, code, body, tt.status)
		}
	}
	code, body := send("POST", "/v1/completions", "sekret", `{"prompt":"Amen","max_tokens":2,"temperature":0}`)
	if code != 200 {
		t.Fatalf("completion with the key: %d %s", code, body)
	}
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logBuf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 6 {
		t.Fatalf("%d log lines, want one per request (6): %v", len(lines), lines)
	}
	last := lines[5]
	if last["status"] != 200.0 || last["completion_tokens"] != 2.0 || last["finish_reason"] != "length" ||
		!strings.HasPrefix(fmt.Sprint(last["id"]), "cmpl-") || last["path"] != "/v1/completions" {
		t.Errorf("completion's log line: %v", last)
	}
	if lines[0]["status"] != 401.0 {
		t.Errorf("refused request's log line: %v", lines[0])
	}
}

// syncBuffer is a bytes.Buffer safe for the handlers' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestErrors checks that bad requests get a 4xx in OpenAI's error shape,
// naming the field at fault.
func TestErrors(t *testing.T) {
	f := newFixture(t, Config{MaxBodyBytes: 1 << 10})
	const c, ch = "/v1/completions", "/v1/chat/completions"
	tests := []struct {
		method, path, body string
		status             int
		param              string
	}{
		{"POST", c, `{"prompt": "a", `, 400, ""},
		{"POST", c, ``, 400, ""},
		{"POST", c, `[1, 2]`, 400, ""},
		{"POST", c, `{"prompt": "a"} {"prompt": "b"}`, 400, ""},
		{"POST", c, `{}`, 400, "prompt"},
		{"POST", c, `{"prompt": ""}`, 400, "prompt"},
		{"POST", c, `{"prompt": 7}`, 400, "prompt"},
		{"POST", c, `{"prompt": ["a", "b"]}`, 400, "prompt"},
		{"POST", c, `{"prompt": [[[1]]]}`, 400, "prompt"},
		{"POST", c, `{"prompt": "a", "model": "gpt-4"}`, 404, "model"},
		{"POST", ch, `{"messages": [{"role": "user", "content": "hi"}], "model": "gpt-4"}`, 404, "model"},
		{"POST", c, `{"prompt": "a", "logprobs": 6}`, 400, "logprobs"},
		{"POST", c, `{"prompt": "a", "logprobs": true}`, 400, "logprobs"},
		{"POST", c, `{"prompt": "a", "top_logprobs": 2}`, 400, "top_logprobs"},
		{"POST", ch, `{"messages": [{"role": "user", "content": "hi"}], "logprobs": 3}`, 400, "logprobs"},
		{"POST", ch, `{"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 3}`, 400, "top_logprobs"},
		{"POST", ch, `{"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 21}`, 400, "top_logprobs"},
		{"POST", c, `{"prompt": "a", "echo": true, "logprobs": 1}`, 400, "echo"},
		{"POST", c, `{"prompt": "a", "echo": "yes"}`, 400, "echo"},
		{"POST", c, `{"prompt": "a", "n": 2, "best_of": 1}`, 400, "best_of"},
		{"POST", c, `{"prompt": "a", "best_of": 2, "stream": true}`, 400, "best_of"},
		{"POST", c, `{"prompt": "a", "suffix": "z"}`, 400, "suffix"},
		{"POST", c, `{"prompt": "a", "presence_penalty": 2.5}`, 400, "presence_penalty"},
		{"POST", c, `{"prompt": "a", "frequency_penalty": "x"}`, 400, "frequency_penalty"},
		{"POST", c, `{"prompt": "a", "repetition_penalty": 0}`, 400, "repetition_penalty"},
		{"POST", c, `{"prompt": "a", "logit_bias": {"99999": 1}}`, 400, "logit_bias"},
		{"POST", c, `{"prompt": "a", "logit_bias": {"5": 101}}`, 400, "logit_bias"},
		{"POST", c, `{"prompt": "a", "logit_bias": {"five": 1}}`, 400, "logit_bias"},
		{"POST", c, `{"prompt": "a", "min_tokens": -1}`, 400, "min_tokens"},
		{"POST", c, `{"prompt": "a", "max_tokens": 3, "min_tokens": 4}`, 400, "min_tokens"},
		{"POST", c, `{"prompt": "a", "stop_token_ids": [-1]}`, 400, "stop_token_ids"},
		{"POST", ch, `{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}]}`, 400, "tool_choice"},
		{"POST", ch, `{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "auto"}`, 400, "tool_choice"},
		{"POST", ch, `{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}`, 400, "tool_choice"},
		{"POST", ch, `{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "retrieval"}], "tool_choice": "required"}`, 400, "tools[0]"},
		{"POST", ch, `{"messages": [{"role": "user", "content": "hi"}], "tool_choice": "required"}`, 400, "tools"},
		{"POST", ch, `{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"pattern": "x"}}}}}], "tool_choice": "required"}`, 400, "tools"},
		{"POST", ch, `{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {}}}`, 400, "response_format"},
		{"POST", ch, `{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"anyOf": []}}}}`, 400, "response_format"},
		{"POST", ch, `{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "yaml"}}`, 400, "response_format"},
		{"POST", c, `{"prompt": ` + strings.Repeat("[", 490) + "1" + strings.Repeat("]", 490) + `}`, 400, "prompt"},
		{"POST", c, `{"prompt": [1, 99999]}`, 400, "prompt"},
		{"POST", c, `{"prompt": "a", "max_tokens": 0}`, 400, "max_tokens"},
		{"POST", c, `{"prompt": "a", "max_tokens": -5}`, 400, "max_tokens"},
		{"POST", c, `{"prompt": "a", "max_tokens": 1000000000}`, 400, "max_tokens"},
		{"POST", c, `{"prompt": "a", "max_tokens": "ten"}`, 400, "max_tokens"},
		{"POST", c, `{"prompt": "a", "max_tokens": 1.5}`, 400, "max_tokens"},
		{"POST", c, `{"prompt": "a", "temperature": -0.1}`, 400, "temperature"},
		{"POST", c, `{"prompt": "a", "temperature": "hot"}`, 400, "temperature"},
		{"POST", c, `{"prompt": "a", "top_p": 0}`, 400, "top_p"},
		{"POST", c, `{"prompt": "a", "top_p": 1.5}`, 400, "top_p"},
		{"POST", c, `{"prompt": "a", "top_k": -2}`, 400, "top_k"},
		{"POST", c, `{"prompt": "a", "n": 0}`, 400, "n"},
		{"POST", c, `{"prompt": "a", "n": 17}`, 400, "n"},
		{"POST", c, `{"prompt": "a", "stop": 3}`, 400, "stop"},
		{"POST", c, `{"prompt": "a", "stream": "yes"}`, 400, "stream"},
		{"POST", c, `{"prompt": "` + strings.Repeat("a", 2000) + `"}`, 413, ""},
		{"POST", ch, `{"messages": []}`, 400, "messages"},
		{"POST", ch, `{}`, 400, "messages"},
		{"POST", ch, `{"messages": [{"role": "wizard", "content": "hi"}]}`, 400, "messages[0].role"},
		{"POST", ch, `{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}`, 400, "content"},
		{"POST", ch, `{"messages": "hi"}`, 400, "messages"},
		{"POST", ch, `{"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 0}`, 400, "max_tokens"},
		{"GET", c, ``, 405, ""},
		{"DELETE", "/v1/models", ``, 405, ""},
		{"POST", "/health", ``, 405, ""},
		{"GET", "/v1/nothing", ``, 404, ""},
		{"GET", "/", ``, 404, ""},
	}
	for _, tt := range tests {
		rsp := f.do(t, context.Background(), tt.method, tt.path, tt.body)
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
				Code    *string `json:"code"`
			} `json:"error"`
		}
		err := json.NewDecoder(rsp.Body).Decode(&e)
		rsp.Body.Close()
		param := ""
		if e.Error.Param != nil {
			param = *e.Error.Param
		}
		body := tt.body[:min(len(tt.body), 80)]
		if rsp.StatusCode != tt.status || err != nil || e.Error.Message == "" || e.Error.Type == "" || param != tt.param {
			t.Errorf("%s %s %s: %d %+v (%v), want %d with param %q", tt.method, tt.path, body, rsp.StatusCode, e.Error, err, tt.status, tt.param)
		}
		if tt.status == 405 && rsp.Header.Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", tt.method, tt.path)
		}
	}
}

// FuzzCompletionRequest posts arbitrary bodies: the answer must be 2xx or
// 4xx, never a panic or a 5xx.
func FuzzCompletionRequest(f *testing.F) {
	fx := newFixture(f, Config{MaxBatch: 2, MaxTokens: 4, ContextLength: 64})
	for _, s := range []string{
		`{"prompt":"In the beginning","max_tokens":3}`,
		`{"prompt":[1,2,3],"max_tokens":2,"temperature":0.7,"top_p":0.9,"top_k":5,"seed":3,"stop":["\n"]}`,
		`{"prompt":"a","stream":true,"max_tokens":2,"stream_options":{"include_usage":true}}`,
		`{"prompt":["x"],"stop":"e","max_tokens":63}`,
		`{"prompt":"a","max_tokens":-1}`,
		`{"prompt":null}`,
		`{"prompt":"a","temperature":1e308,"max_tokens":2}`,
		`[]`, `{`, ``, `null`, `"x"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			w := httptest.NewRecorder()
			fx.s.ServeHTTP(w, httptest.NewRequest("POST", path, strings.NewReader(body)))
			if w.Code < 200 || w.Code >= 500 || (w.Code >= 300 && w.Code < 400) {
				t.Fatalf("POST %s %q: %d %s", path, body, w.Code, w.Body)
			}
		}
	})
}

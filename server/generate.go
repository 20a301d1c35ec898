package server

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/grammar"
	"github.com/replayssm/replayssm/tokenizer/chat"
)

// maxStops bounds the stop strings of one request.
const maxStops = 16

// generation is a validated request, ready for the engine.
type generation struct {
	prompt       []int
	maxTokens    int
	sampling     engine.SamplerOptions
	stops        []string
	stream       bool
	includeUsage bool
	chat         bool
	n            int               // choices answered
	bestOf       int               // choices generated, the n likeliest answered (≥ n)
	model        string            // the id the request named (one of the server's), echoed in responses
	isEnd        func(id int) bool // the model's end tokens and the request's stop_token_ids
	echo         string            // completions' echo: the prompt's text, answered before the completion
	json         bool              // response_format json_object: every choice a JSON object
	schema       *grammar.Schema   // response_format json_schema: every choice follows it
	toolSchema   *grammar.Schema   // a required tool call: every choice is one, decoded under this
	autoTools    toolFormat        // tool_choice auto: answers are parsed for calls in this format
	paramType    func(fn, param string) string
	logprobs     bool // answer each token's log-probability
	topLogprobs  int  // and this many alternatives'
}

// event is one piece of a generation's output, sent from the engine's
// goroutine to the request's handler.
type event struct {
	index    int // the choice
	text     string
	logprobs []engine.TokenLogprobs // of the tokens since the last event
	final    bool
	reason   string // "stop" or "length", with final
	tokens   int    // completion tokens, with final
	err      error

	cumLogprob float64 // the choice's log-probability, with final (best_of)
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if e := decodeBody(w, r, s.cfg.MaxBodyBytes, &req); e != nil {
		writeError(w, e)
		return
	}
	g, e := s.completionPrompt(&req)
	if e == nil {
		e = s.sampling(g, &req.samplingFields, req.MaxTokens)
	}
	if e == nil && req.Echo {
		if g.logprobs {
			e = invalid("echo", "echo with logprobs is not supported (the prompt's log-probabilities are not computed)")
		} else {
			g.echo = s.promptText(&req.Prompt, g.prompt)
		}
	}
	if e != nil {
		writeError(w, e)
		return
	}
	s.generate(w, r, g)
}

func (s *Server) completionPrompt(req *completionRequest) (*generation, *apiError) {
	p := &req.Prompt
	g := &generation{}
	switch {
	case !p.set:
		return nil, invalid("prompt", "prompt is required")
	case p.isIDs:
		for _, id := range p.ids {
			if id < 0 || id >= s.cfg.Model.Vocab {
				return nil, invalid("prompt", "token id %d is outside the vocabulary [0, %d)", id, s.cfg.Model.Vocab)
			}
		}
		g.prompt = p.ids
	case s.cfg.Tokenizer == nil:
		return nil, invalid("prompt", "the model has no tokenizer: give the prompt as a list of token ids")
	default:
		g.prompt = s.cfg.Tokenizer.Encode(p.text)
	}
	if len(g.prompt) == 0 {
		return nil, invalid("prompt", "the prompt is empty")
	}
	return g, nil
}

// roles are the chat roles a request may use; "developer" (OpenAI's newer
// name for system) is rendered as "system".
var roles = []string{"system", "developer", "user", "assistant", "tool"}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if e := decodeBody(w, r, s.cfg.MaxBodyBytes, &req); e != nil {
		writeError(w, e)
		return
	}
	g, e := s.chatPrompt(&req)
	if e == nil {
		budget := req.MaxTokens
		if budget == nil {
			budget = req.MaxCompletionTokens
		}
		e = s.sampling(g, &req.samplingFields, budget)
	}
	if e != nil {
		writeError(w, e)
		return
	}
	s.generate(w, r, g)
}

func (s *Server) chatPrompt(req *chatRequest) (*generation, *apiError) {
	if len(req.Messages) == 0 {
		return nil, invalid("messages", "messages must hold at least one message")
	}
	if s.cfg.Tokenizer == nil || s.cfg.Template == nil {
		return nil, invalid("messages", "the model %s has no chat template: use /v1/completions", s.cfg.Name)
	}
	msgs := make([]chat.Message, len(req.Messages))
	for i, m := range req.Messages {
		if !slices.Contains(roles, m.Role) {
			return nil, invalid(fmt.Sprintf("messages[%d].role", i), "unknown role %q (want one of %s)", m.Role, strings.Join(roles, ", "))
		}
		role := m.Role
		if role == "developer" {
			role = "system"
		}
		msgs[i] = chat.Message{Role: role, Content: string(m.Content), Name: m.Name, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID}
	}
	format := detectToolFormat(s.cfg.Template.Source())
	tools, callSchema, e := parseTools(req.Tools, req.ToolChoice, format)
	if e != nil {
		return nil, e
	}
	text, err := s.cfg.Template.Render(msgs, chat.Options{AddGenerationPrompt: true, Tools: tools})
	if err != nil {
		return nil, invalid("messages", "the chat template rejected the messages: %v", err)
	}
	g := &generation{chat: true, prompt: s.cfg.Tokenizer.EncodeRaw(text), toolSchema: callSchema}
	if tools != nil && callSchema == nil && !isToolNone(req.ToolChoice) {
		g.autoTools, g.paramType = format, paramTypes(tools)
	}
	if len(g.prompt) == 0 {
		return nil, invalid("messages", "the messages render to an empty prompt")
	}
	return g, nil
}

// sampling checks the shared fields and fills g's budget and sampler.
func (s *Server) sampling(g *generation, f *samplingFields, maxTokens *int) *apiError {
	if f.Model != "" && !s.serves(f.Model) {
		return newError(http.StatusNotFound, "invalid_request_error", "model", "model_not_found",
			"the model %q does not exist (this server serves %s)", f.Model, strings.Join(s.names(), ", "))
	}
	if e := f.unsupportedFields.check(); e != nil {
		return e
	}
	g.model = cmp.Or(f.Model, s.cfg.Name)
	limit := s.cfg.ContextLength
	if len(g.prompt) >= limit {
		return invalid("prompt", "the prompt has %d tokens; this model's context is %d", len(g.prompt), limit)
	}
	switch {
	case maxTokens == nil:
		g.maxTokens = min(s.cfg.MaxTokens, limit-len(g.prompt))
	case *maxTokens <= 0:
		return invalid("max_tokens", "max_tokens must be at least 1, not %d", *maxTokens)
	case len(g.prompt)+*maxTokens > limit:
		return invalid("max_tokens", "this model's context is %d tokens; the prompt has %d and max_tokens asks for %d more",
			limit, len(g.prompt), *maxTokens)
	default:
		g.maxTokens = *maxTokens
	}
	g.n = 1
	if f.N != nil {
		if *f.N < 1 || *f.N > maxChoices {
			return invalid("n", "n must be in [1, %d], not %d", maxChoices, *f.N)
		}
		g.n = *f.N
	}
	g.bestOf = g.n
	if f.BestOf != nil {
		switch {
		case *f.BestOf < g.n || *f.BestOf > maxChoices:
			return invalid("best_of", "best_of must be in [n = %d, %d], not %d", g.n, maxChoices, *f.BestOf)
		case *f.BestOf > g.n && f.Stream:
			return invalid("best_of", "best_of cannot be streamed: the best are known only at the end")
		}
		g.bestOf = *f.BestOf
	}
	if g.bestOf > s.cfg.MaxQueue {
		return invalid("n", "%d choices are more than the server's queue holds (%d)", g.bestOf, s.cfg.MaxQueue)
	}
	o := engine.SamplerOptions{Temperature: 1, TopP: 1}
	if f.Temperature != nil {
		if *f.Temperature < 0 {
			return invalid("temperature", "temperature must be ≥ 0, not %v", *f.Temperature)
		}
		o.Temperature = *f.Temperature
	}
	if f.TopP != nil {
		if *f.TopP <= 0 || *f.TopP > 1 {
			return invalid("top_p", "top_p must be in (0, 1], not %v", *f.TopP)
		}
		o.TopP = *f.TopP
	}
	if f.TopK != nil {
		switch {
		case *f.TopK < -1:
			return invalid("top_k", "top_k must be ≥ 0 (or -1 for all), not %d", *f.TopK)
		case *f.TopK > 0:
			o.TopK = *f.TopK
		}
	}
	if f.Seed != nil {
		o.Seed = uint64(*f.Seed)
	} else {
		o.Seed = mrand.Uint64()
	}
	if e := s.processing(&o, f, g.maxTokens); e != nil {
		return e
	}
	if err := o.Validate(); err != nil {
		return invalid("", "%v", err)
	}
	g.sampling = o
	if len(f.Stop) > maxStops {
		return invalid("stop", "at most %d stop strings", maxStops)
	}
	if e := g.parseLogprobs(f); e != nil {
		return e
	}
	if g.toolSchema != nil {
		if f.ResponseFormat != nil && f.ResponseFormat.Type != "text" {
			return invalid("response_format", "response_format and a required tool call exclude each other")
		}
		g.schema = g.toolSchema
	}
	if rf := f.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text":
		case "json_object":
			if s.cfg.Tokenizer == nil {
				return invalid("response_format", "json_object needs the model's tokenizer")
			}
			g.json = true
		case "json_schema":
			if s.cfg.Tokenizer == nil {
				return invalid("response_format", "json_schema needs the model's tokenizer")
			}
			if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 {
				return invalid("response_format", "json_schema needs json_schema.schema")
			}
			schema, err := grammar.CompileSchema(rf.JSONSchema.Schema)
			if err != nil {
				return invalid("response_format", "json_schema: %v", err)
			}
			g.schema = schema
		default:
			return invalid("response_format", "response_format type %q: want text, json_object or json_schema", rf.Type)
		}
	}
	g.stops = f.Stop
	stopIDs := slices.Clone(f.StopTokenIDs)
	g.isEnd = func(id int) bool { return s.isEnd(id) || slices.Contains(stopIDs, id) }
	g.stream = f.Stream
	g.includeUsage = f.Stream && f.StreamOptions != nil && f.StreamOptions.IncludeUsage
	return nil
}

// parseLogprobs reads logprobs (completions: the number of alternatives,
// 0 to 5; chat: true or false, with top_logprobs 0 to 20).
func (g *generation) parseLogprobs(f *samplingFields) *apiError {
	raw := f.Logprobs
	if g.chat {
		var on bool
		if len(raw) > 0 && !isNull(raw) && json.Unmarshal(raw, &on) != nil {
			return invalid("logprobs", "logprobs must be true or false")
		}
		g.logprobs = on
		if f.TopLogprobs != nil {
			if !on || *f.TopLogprobs < 0 || *f.TopLogprobs > 20 {
				return invalid("top_logprobs", "top_logprobs must be in [0, 20], with logprobs true")
			}
			g.topLogprobs = *f.TopLogprobs
		}
		return nil
	}
	if f.TopLogprobs != nil {
		return invalid("top_logprobs", "top_logprobs is a chat parameter: completions take logprobs: N")
	}
	if len(raw) == 0 || isNull(raw) {
		return nil
	}
	var n int
	if json.Unmarshal(raw, &n) != nil || n < 0 || n > 5 {
		return invalid("logprobs", "logprobs must be an integer in [0, 5]")
	}
	g.logprobs, g.topLogprobs = true, n
	return nil
}

// maxChoices bounds n, the choices of one request.
const maxChoices = 16

// processing checks the penalties, biases, minimum length and stop token
// ids of f and puts them in o.
func (s *Server) processing(o *engine.SamplerOptions, f *samplingFields, maxTokens int) *apiError {
	for _, p := range []struct {
		name string
		v    *float64
		dst  *float64
	}{{"presence_penalty", f.PresencePenalty, &o.PresencePenalty}, {"frequency_penalty", f.FrequencyPenalty, &o.FrequencyPenalty}} {
		if p.v == nil {
			continue
		}
		if !(*p.v >= -2 && *p.v <= 2) {
			return invalid(p.name, "%s must be in [-2, 2], not %v", p.name, *p.v)
		}
		*p.dst = *p.v
	}
	if v := f.RepetitionPenalty; v != nil {
		if !(*v > 0 && *v <= 100) {
			return invalid("repetition_penalty", "repetition_penalty must be in (0, 100], not %v", *v)
		}
		o.RepetitionPenalty = *v
	}
	V := s.cfg.Model.Vocab
	token := func(param, key string) (int, *apiError) {
		id, err := strconv.Atoi(key)
		if err != nil || id < 0 || id >= V {
			return 0, invalid(param, "%s names token %q: want a token id in [0, %d)", param, key, V)
		}
		return id, nil
	}
	if len(f.LogitBias) > 0 {
		if len(f.LogitBias) > 1024 {
			return invalid("logit_bias", "logit_bias names %d tokens; at most 1024", len(f.LogitBias))
		}
		o.LogitBias = make(map[int]float64, len(f.LogitBias))
		for k, b := range f.LogitBias {
			id, e := token("logit_bias", k)
			if e != nil {
				return e
			}
			if !(b >= -100 && b <= 100) {
				return invalid("logit_bias", "logit_bias of token %d is %v: want a value in [-100, 100]", id, b)
			}
			o.LogitBias[id] = b
		}
	}
	for _, id := range f.StopTokenIDs {
		if _, e := token("stop_token_ids", strconv.Itoa(id)); e != nil {
			return e
		}
	}
	if len(f.StopTokenIDs) > maxStops {
		return invalid("stop_token_ids", "at most %d stop token ids", maxStops)
	}
	if v := f.MinTokens; v != nil {
		if *v < 0 || *v > maxTokens {
			return invalid("min_tokens", "min_tokens must be in [0, max_tokens = %d], not %d", maxTokens, *v)
		}
		o.MinTokens = *v
		o.Suppress = append(slices.Clone(s.eos), f.StopTokenIDs...)
	}
	return nil
}

// decoder turns the generated ids into the text a client sees: special
// tokens dropped, stop strings cut, and the end token not shown.
type decoder struct {
	s       *Server
	stopper *engine.StopText
	piece   func(id int) string
	flush   func() string
}

func (s *Server) newDecoder(stops []string) *decoder {
	d := &decoder{s: s, stopper: engine.NewStopText(stops)}
	if t := s.cfg.Tokenizer; t != nil {
		sd := t.NewStreamDecoder()
		sd.SkipSpecial = true
		d.piece, d.flush = sd.Add, sd.Flush
	} else {
		first := true
		d.piece = func(id int) string {
			sep := " "
			if first {
				sep, first = "", false
			}
			return sep + strconv.Itoa(id)
		}
		d.flush = func() string { return "" }
	}
	return d
}

func (s *Server) isEnd(id int) bool { return slices.Contains(s.eos, id) }

// generate submits g's n choices to the engine, each a job of its own
// (seeds seed, seed+1, ...), and answers with their output, whole or as
// Server-Sent Events.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, g *generation) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel() // a handler that returns early frees its sequences
	// One event per token at most, plus the final one, per choice: the
	// engine never waits on a slow client.
	events := make(chan event, g.bestOf*(g.maxTokens+1))
	send := func(ev event) {
		select {
		case events <- ev:
		default: // unreachable by the capacity above
		}
	}
	t := trackerOf(w)
	start := time.Now()
	if t != nil {
		start = t.start
	}
	jobs := make([]*engine.Job, g.bestOf)
	for i := range jobs {
		jobs[i] = s.newJob(ctx, g, i, start, send)
	}
	select {
	case <-s.stopped:
		writeError(w, unavailable())
		return
	default:
	}
	s.pending.Add(int64(len(jobs)))
	if !s.queue.push(jobs...) {
		s.pending.Add(-int64(len(jobs)))
		w.Header().Set("Retry-After", "1")
		writeError(w, newError(http.StatusTooManyRequests, "rate_limit_error", "", "queue_full",
			"the server is busy: %d requests are waiting; retry later", s.cfg.MaxQueue))
		return
	}

	rsp := newResponder(s, w, t, g)
	if g.stream {
		rsp.startStream()
		if g.echo != "" {
			for i := range g.n {
				rsp.chunk(rsp.response(rsp.choice(i, g.echo, nil, "", nil), nil))
			}
		}
	} else {
		for i := range g.n {
			rsp.choices[i].text.WriteString(g.echo)
		}
	}
	stopped := s.stopped
	for {
		var ev event
		select {
		case ev = <-events:
		case <-r.Context().Done():
			for _, j := range jobs {
				if s.queue.remove(j) { // it never reached the engine, which would have finished it
					s.pending.Add(-1)
				}
			}
			return
		case <-stopped:
			// Run has finished every job it took: an event is there, or
			// a job never left the queue.
			select {
			case ev = <-events:
			default:
				rsp.fail(unavailable())
				return
			}
		}
		if !rsp.add(ev) {
			return
		}
	}
}

// newJob is the engine job of g's choice i, sending its events.
func (s *Server) newJob(ctx context.Context, g *generation, i int, start time.Time, send func(event)) *engine.Job {
	dec := s.newDecoder(g.stops)
	var lps []engine.TokenLogprobs // since the last event, on the engine's goroutine
	cum := new(float64)            // the choice's log-probability (best_of)
	timer := s.metrics.timer(start, len(g.prompt))
	sampling := g.sampling
	sampling.Seed += uint64(i)
	switch {
	case g.schema != nil:
		sampling.Constraint = grammar.NewJSONSchema(s.jsonVocab(), g.schema)
	case g.json:
		sampling.Constraint = grammar.NewJSONObject(s.jsonVocab())
	}
	job := &engine.Job{
		Request: engine.Request{
			Prompt:      g.prompt,
			MaxTokens:   g.maxTokens,
			Sampling:    sampling,
			IsEnd:       g.isEnd,
			TopLogprobs: g.topLogprobs,
			OnToken: func(id int) bool {
				timer.token()
				s.metrics.observeState(s.eng)
				if g.isEnd(id) {
					if len(lps) > 0 { // the end token is not part of the answer
						lps = lps[:len(lps)-1]
					}
					return true
				}
				out, stopped := dec.stopper.Add(dec.piece(id))
				if out != "" || len(lps) >= 16 {
					send(event{index: i, text: out, logprobs: lps})
					lps = nil
				}
				return !stopped
			},
		},
		Context: ctx,
		Started: timer.begin,
		Finish: func(res engine.Result, err error) {
			ev := event{index: i, final: true, tokens: len(res.Tokens), err: err, reason: "stop"}
			if res.Reason == engine.StopLength {
				ev.reason = "length"
			}
			if err == nil && res.Reason != engine.StopCallback {
				out, stopped := dec.stopper.Add(dec.flush())
				if !stopped {
					out += dec.stopper.Flush()
				}
				ev.text = out
			}
			ev.logprobs, ev.cumLogprob = lps, *cum
			timer.finish(len(res.Tokens))
			s.metrics.observeState(s.eng)
			s.pending.Add(-1)
			send(ev)
		},
	}
	if g.logprobs || g.bestOf > g.n {
		job.OnLogprobs = func(lp engine.TokenLogprobs) {
			*cum += float64(lp.Logprob)
			if g.logprobs {
				lps = append(lps, lp)
			}
		}
	}
	return job
}

func unavailable() *apiError {
	return newError(http.StatusServiceUnavailable, "server_error", "", "unavailable", "the server is shutting down")
}

// responder writes one generation's answer: its n choices, whole or as
// they come.
type responder struct {
	s       *Server
	w       http.ResponseWriter
	t       *tracker // counts the request's end; nil: not counted
	g       *generation
	id      string
	created int64
	choices []choiceState
	ended   int // choices finished
	tokens  int // completion tokens of the finished choices
	werr    error
}

// choiceState is what a choice has produced until the answer is written.
type choiceState struct {
	text   strings.Builder
	lps    []engine.TokenLogprobs
	offset int // completions' text_offset of the next token
	reason string
	cum    float64 // its log-probability (best_of)
}

func newResponder(s *Server, w http.ResponseWriter, t *tracker, g *generation) *responder {
	r := &responder{s: s, w: w, t: t, g: g, id: "cmpl-" + rand.Text(), created: time.Now().Unix(), choices: make([]choiceState, g.bestOf)}
	if g.chat {
		r.id = "chatcmpl-" + rand.Text()
	}
	if t != nil {
		t.id, t.prompt = r.id, len(g.prompt)
	}
	return r
}

func (r *responder) object() string {
	switch {
	case r.g.chat && r.g.stream:
		return "chat.completion.chunk"
	case r.g.chat:
		return "chat.completion"
	}
	return "text_completion"
}

func (r *responder) response(choices any, u *usage) response {
	return response{ID: r.id, Object: r.object(), Created: r.created, Model: r.g.model, Choices: choices, Usage: u}
}

// choice is choice i of a chunk, with the log-probabilities of its
// tokens; reason nil: not final.
func (r *responder) choice(i int, text string, reason *string, role string, lps []engine.TokenLogprobs) any {
	return []any{r.oneChoice(i, text, reason, role, lps)}
}

func (r *responder) oneChoice(i int, text string, reason *string, role string, lps []engine.TokenLogprobs) any {
	if !r.g.chat {
		return completionChoice{Index: i, Text: text, FinishReason: reason, Logprobs: r.logprobsField(i, lps)}
	}
	c := chatChoice{Index: i, FinishReason: reason, Logprobs: r.logprobsField(i, lps)}
	content := &chatContent{Role: role}
	var calls []toolCallJSON
	switch {
	case r.g.toolSchema != nil && reason != nil && *reason == "stop":
		if calls, _ = toolCalls(text); calls != nil {
			text = "" // the whole answer is the call
		}
	case r.g.autoTools != formatNone && reason != nil:
		text, calls = parseToolCalls(text, r.g.autoTools, r.g.paramType)
	}
	switch {
	case calls != nil:
		if r.g.stream {
			for k := range calls {
				calls[k].Index = &k
			}
		}
		content.ToolCalls = calls
		if text != "" { // what the model wrote besides its calls
			content.Content = &text
		}
		toolReason := "tool_calls"
		c.FinishReason = &toolReason
	case text != "" || role != "" || !r.g.stream:
		content.Content = &text
	}
	if r.g.stream {
		c.Delta = content
	} else {
		c.Message = content
	}
	return c
}

// tokenLogprob is one token of chat's logprobs.content.
type tokenLogprob struct {
	Token   string  `json:"token"`
	Logprob float32 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// logprobsField is a choice's "logprobs" in the endpoint's format (nil
// when not asked for): chat's content list, or completions' parallel
// tokens, token_logprobs, top_logprobs and text_offset.
func (r *responder) logprobsField(i int, lps []engine.TokenLogprobs) any {
	if !r.g.logprobs {
		return nil
	}
	tok := func(lp engine.TokenLogprob) tokenLogprob {
		text := r.s.tokenText(lp.ID)
		b := make([]int, len(text))
		for i := range len(text) {
			b[i] = int(text[i])
		}
		return tokenLogprob{Token: text, Logprob: lp.Logprob, Bytes: b}
	}
	if r.g.chat {
		type entry struct {
			tokenLogprob
			TopLogprobs []tokenLogprob `json:"top_logprobs"`
		}
		content := []entry{}
		for _, lp := range lps {
			e := entry{tokenLogprob: tok(lp.TokenLogprob), TopLogprobs: []tokenLogprob{}}
			for _, t := range lp.Top {
				e.TopLogprobs = append(e.TopLogprobs, tok(t))
			}
			content = append(content, e)
		}
		return map[string]any{"content": content}
	}
	tokens, logprobs, top, offsets := []string{}, []float32{}, []map[string]float32{}, []int{}
	for _, lp := range lps {
		text := r.s.tokenText(lp.ID)
		tokens = append(tokens, text)
		logprobs = append(logprobs, lp.Logprob)
		alts := map[string]float32{}
		for _, t := range lp.Top {
			alts[r.s.tokenText(t.ID)] = t.Logprob
		}
		top = append(top, alts)
		offsets = append(offsets, r.choices[i].offset)
		r.choices[i].offset += len(text)
	}
	return map[string]any{"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": top, "text_offset": offsets}
}

// promptText is the text of a completions prompt, as echo answers it.
func (s *Server) promptText(p *promptField, ids []int) string {
	switch {
	case !p.isIDs:
		return p.text
	case s.cfg.Tokenizer != nil:
		return s.cfg.Tokenizer.Decode(ids, false)
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(id)
	}
	return strings.Join(parts, " ")
}

// jsonVocab is the tokenizer's vocabulary as a trie for JSON constraints,
// built at the first request that needs it.
func (s *Server) jsonVocab() *grammar.Vocab {
	s.vocabOnce.Do(func() {
		s.vocab = grammar.NewVocab(s.cfg.Model.Vocab, s.cfg.Tokenizer.Bytes, s.eos)
	})
	return s.vocab
}

// tokenText is one token's text as a client sees it alone.
func (s *Server) tokenText(id int) string {
	if s.cfg.Tokenizer == nil {
		return strconv.Itoa(id)
	}
	return s.cfg.Tokenizer.Decode([]int{id}, false)
}

func (r *responder) startStream() {
	h := r.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	r.w.WriteHeader(http.StatusOK)
	if r.g.chat {
		for i := range r.g.n {
			r.chunk(r.response(r.choice(i, "", nil, "assistant", nil), nil))
		}
	} else {
		_ = http.NewResponseController(r.w).Flush()
	}
}

// deadline bounds the next write by the server's WriteTimeout.
func (r *responder) deadline() {
	if d := r.s.cfg.WriteTimeout; d > 0 {
		_ = http.NewResponseController(r.w).SetWriteDeadline(time.Now().Add(d))
	}
}

// chunk writes one Server-Sent Event.
func (r *responder) chunk(v any) {
	b, err := json.Marshal(v)
	if err != nil || r.werr != nil {
		return
	}
	r.deadline()
	if _, r.werr = fmt.Fprintf(r.w, "data: %s\n\n", b); r.werr == nil {
		r.werr = http.NewResponseController(r.w).Flush()
	}
}

func (r *responder) done() {
	if r.werr == nil {
		r.deadline()
		_, r.werr = r.w.Write([]byte("data: [DONE]\n\n"))
		_ = http.NewResponseController(r.w).Flush()
	}
}

// add handles one event and reports whether more are wanted.
func (r *responder) add(ev event) bool {
	if ev.err != nil {
		if isCancel(ev.err) {
			// The request's context ended: its client has gone.
			return false
		}
		e := newError(http.StatusInternalServerError, "server_error", "", "", "generation failed: %v", ev.err)
		if errors.Is(ev.err, engine.ErrStopped) {
			e = unavailable()
		}
		r.fail(e)
		return false
	}
	c := &r.choices[ev.index]
	if ev.final {
		c.reason, c.cum = ev.reason, ev.cumLogprob
		r.ended++
		r.tokens += ev.tokens
		if r.t != nil {
			r.t.completion = r.tokens
		}
	}
	all := r.ended == len(r.choices)
	if r.g.stream && (r.g.toolSchema != nil || r.g.autoTools != formatNone) {
		// A choice that may hold calls streams whole once it is decoded,
		// its calls parsed out of its text.
		c.text.WriteString(ev.text)
		c.lps = append(c.lps, ev.logprobs...)
		if ev.final {
			r.chunk(r.response([]any{r.oneChoice(ev.index, c.text.String(), &ev.reason, "", c.lps)}, nil))
		}
	} else if r.g.stream {
		if ev.text != "" || (len(ev.logprobs) > 0 && !ev.final) {
			r.chunk(r.response(r.choice(ev.index, ev.text, nil, "", ev.logprobs), nil))
			ev.logprobs = nil
		}
		if ev.final {
			r.chunk(r.response(r.choice(ev.index, "", &ev.reason, "", ev.logprobs), nil))
		}
	}
	if r.g.stream {
		if all {
			r.t.finish(ev.reason)
			if r.g.includeUsage {
				r.chunk(r.response([]any{}, r.usage(r.tokens)))
			}
			r.done()
		}
		return !all && r.werr == nil
	}
	c.text.WriteString(ev.text)
	c.lps = append(c.lps, ev.logprobs...)
	if !all {
		return true
	}
	role := ""
	if r.g.chat {
		role = "assistant"
	}
	// best_of: the n likeliest choices, in that order.
	order := make([]int, len(r.choices))
	for i := range order {
		order[i] = i
	}
	if r.g.bestOf > r.g.n {
		sort.SliceStable(order, func(a, b int) bool { return r.choices[order[a]].cum > r.choices[order[b]].cum })
	}
	choices := make([]any, r.g.n)
	for i, k := range order[:r.g.n] {
		c := &r.choices[k]
		choices[i] = r.oneChoice(i, c.text.String(), &c.reason, role, c.lps)
	}
	r.t.finish(ev.reason)
	r.deadline()
	writeJSON(r.w, http.StatusOK, r.response(choices, r.usage(r.tokens)))
	return false
}

func (r *responder) usage(completion int) *usage {
	p := len(r.g.prompt)
	return &usage{PromptTokens: p, CompletionTokens: completion, TotalTokens: p + completion}
}

// fail answers e: as the response before a stream starts, as a last event
// after.
func (r *responder) fail(e *apiError) {
	if !r.g.stream {
		writeError(r.w, e)
		return
	}
	r.t.fail(e.status)
	r.chunk(map[string]*apiError{"error": e})
	r.done()
}

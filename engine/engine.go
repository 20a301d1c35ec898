// Package engine runs generation on a model: sequences, the sampler, and the
// loop that admits requests, prefills their prompts and decodes every live
// sequence together, one token per step (continuous batching on the CPU).
//
// A request's life, top to bottom in Generate: admitted into a free
// sequence of the model state → its whole prompt runs in the next forward
// (alongside the decode tokens of the others) → each step samples one token
// from its logits and feeds it back → it stops at an end token, its token
// budget, or when its callback says so → its sequence is evicted and the next
// queued request takes it.
package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
)

// Engine drives one model and its state for up to Capacity concurrent
// sequences. It is not safe for concurrent use.
type Engine struct {
	dec *nn.Decoder
	st  *nn.State

	// PrefillChunk bounds the prompt tokens one step runs, over all the
	// prompts in it (0: no bound): a long prompt runs in chunks over
	// several steps, beside the other sequences' decode tokens, instead of
	// stalling them for the whole of it (chunked prefill; values below 3
	// count as 3). A chunk has at least two tokens, and a prompt never
	// ends in a chunk of one: one row of a sequence at a later position
	// would run as a decode step, which NemotronH computes differently
	// from its multi-token path.
	PrefillChunk int

	// next's buffers
	logits []float32
	raw    []float32
	ids    []int32
	toks   []int
}

// New builds an engine whose state holds capacity sequences, each SSM layer
// keeping its recurrent state as opt says.
func New(dec *nn.Decoder, capacity int, opt replay.Options) (*Engine, error) {
	st, err := dec.NewState(capacity, opt)
	if err != nil {
		return nil, err
	}
	return &Engine{dec: dec, st: st}, nil
}

// Close releases the state.
func (e *Engine) Close() { e.st.Close() }

// Model returns the decoder.
func (e *Engine) Model() *nn.Decoder { return e.dec }

// State returns the model state (for statistics).
func (e *Engine) State() *nn.State { return e.st }

// Stats sums the replay statistics of the SSM layers since the engine began.
func (e *Engine) Stats() replay.Stats { return e.st.Stats() }

// Request is one generation.
type Request struct {
	Prompt    []int
	MaxTokens int // 0: no limit but the callback's and the end tokens
	Sampling  SamplerOptions
	// IsEnd reports end-of-generation tokens (EOS); nil means none.
	IsEnd func(id int) bool
	// OnToken, if set, receives each generated token as soon as it is
	// sampled; returning false stops the request after it.
	OnToken func(id int) bool
	// OnLogprobs, if set, receives each generated token's log-probability
	// under the model (the raw logits: before temperature, penalties and
	// biases) and the TopLogprobs most likely tokens', just before
	// OnToken. It keeps the logits on the host.
	OnLogprobs  func(TokenLogprobs)
	TopLogprobs int
}

// TokenLogprobs is one generated token's log-probability and the most
// likely alternatives at its position, the likeliest first.
type TokenLogprobs struct {
	TokenLogprob
	Top []TokenLogprob
}

// TokenLogprob is a token and its log-probability.
type TokenLogprob struct {
	ID      int
	Logprob float32
}

// StopReason says why a request ended.
type StopReason uint8

const (
	StopLength   StopReason = iota // MaxTokens reached
	StopEnd                        // an end token was sampled (it is in Tokens)
	StopCallback                   // OnToken returned false
)

// String names the reason as the CLI prints it: length, end or stop.
func (r StopReason) String() string {
	if names := [...]string{"length", "end", "stop"}; int(r) < len(names) {
		return names[r]
	}
	return fmt.Sprintf("StopReason(%d)", uint8(r))
}

// Result is a finished request.
type Result struct {
	Tokens []int
	Reason StopReason
}

// Timing splits the wall time of a Generate call.
type Timing struct {
	Prefill, Decode time.Duration
	PromptTokens    int // tokens run through prefill
	DecodeTokens    int // tokens run through one-token decode steps
}

// sequence is a request in flight.
type sequence struct {
	req     int
	seq     nn.Seq
	sampler *Sampler
	// logprobs, if set, receives the log-probabilities of each token
	logprobs func(TokenLogprobs)
	top      int
	next     int  // the token to feed in the next step
	fresh    bool // its prompt has not run to the end yet
	done     int  // its prompt tokens run so far
	out      []int
}

// appendRows adds this sequence's rows of the next forward to rows: the
// token it sampled last, or the next chunk of its prompt, at most budget
// tokens (budget < 0: the rest of it). It returns the prompt tokens it
// added and whether its rows ask for logits (they end the prompt, or
// decode). A fresh sequence whose budget leaves no chunk adds nothing.
func (s *sequence) appendRows(rows []nn.Row, prompt []int, budget int) ([]nn.Row, int, bool) {
	if !s.fresh {
		return append(rows, nn.Row{Seq: s.seq, Token: s.next, Logits: true}), 0, true
	}
	lo, hi := s.done, len(prompt)
	if budget >= 0 && hi-lo > budget {
		hi = lo + budget
		if len(prompt)-hi == 1 {
			hi-- // the last chunk takes two tokens
		}
		if hi-lo < 2 {
			return rows, 0, false
		}
	}
	for i := lo; i < hi; i++ {
		rows = append(rows, nn.Row{Seq: s.seq, Token: prompt[i], Logits: i == len(prompt)-1})
	}
	s.done = hi
	return rows, hi - lo, hi == len(prompt)
}

// stepRows lays out one forward of the live sequences: the prompts' next
// chunks within e.PrefillChunk, one token for the others. It returns the
// rows, the prompt tokens among them and the sequences (indices into the
// live list, in row order) whose rows ask for logits.
func (e *Engine) stepRows(rows []nn.Row, asked []int, n int, seq func(k int) (*sequence, []int)) ([]nn.Row, int, []int) {
	rows, asked = rows[:0], asked[:0]
	budget, prefill := -1, 0
	if e.PrefillChunk > 0 {
		budget = max(3, e.PrefillChunk) // a chunk cut short by one keeps two
	}
	for k := range n {
		s, prompt := seq(k)
		var m int
		var logits bool
		rows, m, logits = s.appendRows(rows, prompt, budget)
		prefill += m
		if budget >= 0 {
			budget -= m
		}
		if logits {
			asked = append(asked, k)
		}
	}
	return rows, prefill, asked
}

// advance appends the sequence's next token and reports whether the
// request ends with it, and why: its callback, an end token or its token
// budget, checked in that order.
func (s *sequence) advance(req *Request, id int) (bool, StopReason) {
	s.fresh = false
	s.out = append(s.out, id)
	s.next = id
	switch {
	case req.OnToken != nil && !req.OnToken(id):
		return true, StopCallback
	case req.IsEnd != nil && req.IsEnd(id):
		return true, StopEnd
	case req.MaxTokens > 0 && len(s.out) >= req.MaxTokens:
		return true, StopLength
	}
	return false, StopLength
}

// next runs rows through the model and returns the next token of each of
// the n rows that ask for logits, drawn by the k-th live sequence's sampler
// (seq(k)). When every one decodes plainly greedily and wants no
// log-probabilities, the model takes the argmax where it runs, so that only
// token ids cross from a device, not n rows of logits.
func (e *Engine) next(ctx context.Context, rows []nn.Row, n int, seq func(k int) *sequence) ([]int, error) {
	e.toks = e.toks[:0]
	greedy := true
	for k := range n {
		s := seq(k)
		greedy = greedy && s.sampler.Greedy() && s.sampler.Plain() && s.logprobs == nil
	}
	if greedy {
		e.ids = grow(e.ids, n)
		if err := e.dec.Greedy(ctx, e.st, rows, e.ids); err != nil {
			return nil, err
		}
		for _, id := range e.ids {
			e.toks = append(e.toks, int(id))
		}
		return e.toks, nil
	}
	V := e.dec.Vocab
	e.logits = grow(e.logits, n*V)
	if err := e.dec.Forward(ctx, e.st, rows, e.logits); err != nil {
		return nil, err
	}
	for k := range n {
		s, row := seq(k), e.logits[k*V:(k+1)*V]
		for i, v := range row {
			if v-v != 0 { // NaN or ±Inf: the forward pass broke
				return nil, fmt.Errorf("row %d of logits holds a non-finite value (%v at token %d)", k, v, i)
			}
		}
		if s.logprobs == nil {
			e.toks = append(e.toks, s.sampler.Sample(row))
			continue
		}
		e.raw = append(e.raw[:0], row...) // Sample may change row
		id := s.sampler.Sample(row)
		s.logprobs(logprobsOf(e.raw, id, s.top))
		e.toks = append(e.toks, id)
	}
	return e.toks, nil
}

// Generate runs reqs to completion, at most Capacity at a time, and returns
// their results in order.
func (e *Engine) Generate(ctx context.Context, reqs []Request) ([]Result, Timing, error) {
	var tm Timing
	for i, r := range reqs {
		if len(r.Prompt) == 0 {
			return nil, tm, fmt.Errorf("request %d: empty prompt", i)
		}
		if err := e.check(r.Sampling); err != nil {
			return nil, tm, fmt.Errorf("request %d: %w", i, err)
		}
	}
	results := make([]Result, len(reqs))
	var live []*sequence
	defer func() {
		for _, s := range live {
			_ = e.st.Evict(s.seq)
		}
	}()
	var rows []nn.Row
	var asked []int
	queued := 0
	for queued < len(reqs) || len(live) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, tm, err
		}
		for queued < len(reqs) && len(live) < e.st.Capacity() {
			q, err := e.st.Admit()
			if err != nil {
				return nil, tm, err
			}
			r := &reqs[queued]
			sm := NewSampler(r.Sampling)
			sm.Prompt(r.Prompt)
			live = append(live, &sequence{req: queued, seq: q, sampler: sm, fresh: true, logprobs: r.OnLogprobs, top: r.TopLogprobs})
			queued++
		}
		// One forward: the prompts' next chunks, one token for the others.
		var prefill int
		rows, prefill, asked = e.stepRows(rows, asked, len(live), func(k int) (*sequence, []int) {
			return live[k], reqs[live[k].req].Prompt
		})
		start := time.Now()
		next, err := e.next(ctx, rows, len(asked), func(k int) *sequence { return live[asked[k]] })
		if err != nil {
			return nil, tm, err
		}
		if prefill > 0 {
			tm.Prefill += time.Since(start)
			tm.PromptTokens += prefill
		} else {
			tm.Decode += time.Since(start)
		}
		tm.DecodeTokens += len(rows) - prefill

		for k, i := range asked {
			s := live[i]
			if done, reason := s.advance(&reqs[s.req], next[k]); done {
				results[s.req] = Result{Tokens: s.out, Reason: reason}
				if err := e.st.Evict(s.seq); err != nil {
					return nil, tm, err
				}
				live[i] = nil
			}
		}
		kept := live[:0]
		for _, s := range live {
			if s != nil {
				kept = append(kept, s)
			}
		}
		live = kept
	}
	return results, tm, nil
}

// NLL returns the summed negative log-likelihood of ids[1:] given their
// prefixes (teacher forcing) and the number of tokens scored. The text runs
// through prefill forwards of up to chunk tokens (0: all at once).
func (e *Engine) NLL(ctx context.Context, ids []int, chunk int) (float64, int, error) {
	if len(ids) < 2 {
		return 0, 0, errors.New("need at least two tokens to score")
	}
	if chunk <= 0 {
		chunk = len(ids)
	}
	q, err := e.st.Admit()
	if err != nil {
		return 0, 0, err
	}
	defer e.st.Evict(q)
	V := e.dec.Vocab
	var nll float64
	var logits []float32
	n := len(ids) - 1 // the last token's logits predict nothing
	for lo := 0; lo < n; {
		hi := min(n, lo+chunk)
		if n-hi == 1 {
			// Never leave a one-token forward: it would run as a decode step,
			// which NemotronH computes differently from its scan path.
			hi = n
		}
		rows := make([]nn.Row, 0, hi-lo)
		for i := lo; i < hi; i++ {
			rows = append(rows, nn.Row{Seq: q, Token: ids[i], Logits: true})
		}
		logits = grow(logits, len(rows)*V)
		if err := e.dec.Forward(ctx, e.st, rows, logits); err != nil {
			return 0, 0, err
		}
		for i := lo; i < hi; i++ {
			nll -= logSoftmaxAt(logits[(i-lo)*V:(i-lo+1)*V], ids[i+1])
		}
		lo = hi
	}
	return nll, len(ids) - 1, nil
}

func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

func logSoftmaxAt(x []float32, i int) float64 { return tensor.LogSoftmaxAt(x, i) }

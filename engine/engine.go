// Package engine runs generation on a model: sequences, the sampler, and
// the one loop that admits requests, prefills their prompts and decodes
// every live sequence together (continuous batching), with or without
// speculative decoding.
//
// A request's life, top to bottom in scheduler.step (scheduler.go): it
// waits in the queue → it is admitted into a free sequence of the model
// state → its prompt runs in the next forwards, in chunks within
// PrefillChunk, alongside the decode tokens of the others → each step
// draws its next token from its logits and feeds it back (under
// speculation: checks a drafter's tokens against one verify forward and
// keeps an accepted prefix and one token more) → it stops at an end token,
// its token budget, or when its callback says so → its sequence is evicted
// and the next waiting request takes it. Generate feeds that loop a slice
// of requests, GenerateSpeculative the same with a speculation strategy,
// and Run a channel of jobs, with or without one.
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

	specStats SpecStats // what speculation did since the engine began
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

// Timing splits the wall time of a Generate call: a step that runs prompt
// tokens counts as prefill, the others as decode. (GenerateSpeculative
// splits its steps: the forward of the prompt chunks, then the verify.)
type Timing struct {
	Prefill, Decode time.Duration
	PromptTokens    int // tokens run through prefill
	DecodeTokens    int // tokens run through one-token decode steps (speculation: tokens generated)
}

// Generate runs reqs to completion, at most Capacity at a time, and returns
// their results in order: the scheduler's loop fed with reqs.
func (e *Engine) Generate(ctx context.Context, reqs []Request) ([]Result, Timing, error) {
	return e.generate(ctx, reqs, nil)
}

// generate runs reqs through a scheduler with speculation sp (nil: none)
// until every one has finished.
func (e *Engine) generate(ctx context.Context, reqs []Request, sp *speculator) ([]Result, Timing, error) {
	for i := range reqs {
		if err := e.checkRequest(&reqs[i]); err != nil {
			return nil, Timing{}, fmt.Errorf("request %d: %w", i, err)
		}
	}
	results := make([]Result, len(reqs))
	var failed error
	sc := e.newScheduler(sp)
	for i := range reqs {
		sc.waiting = append(sc.waiting, &Job{Request: reqs[i], Finish: func(res Result, err error) {
			results[i] = res
			if err != nil && failed == nil {
				failed = err
			}
		}})
	}
	defer sc.stop(ErrStopped) // an error return evicts what still runs
	for sc.busy() {
		if err := ctx.Err(); err != nil {
			return nil, sc.tm, err
		}
		if err := sc.step(ctx); err != nil {
			return nil, sc.tm, err
		}
		if failed != nil {
			return nil, sc.tm, failed
		}
	}
	return results, sc.tm, nil
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

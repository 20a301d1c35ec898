package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/replayssm/replayssm/model/nn"
)

// scheduler is the one generation loop behind Generate, GenerateSpeculative
// and Run: a queue of waiting jobs, the sequences running in the model
// state, and step, which moves every running sequence forward once.
//
// A step admits waiting jobs into free sequences, drops the running ones
// whose Context ended, and runs one forward of the prompts' next chunks
// (within Engine.PrefillChunk). Without speculation that forward also
// carries the newest token of every sequence past its prompt, and a token
// is drawn for each row that asks for logits. With speculation (spec) the
// sequences past their prompts advance in a verify forward of their own
// instead (speculator.step). Every generated token goes through one stop
// rule (emit); a sequence that stopped leaves the state at the step's end.
type scheduler struct {
	e       *Engine
	spec    *speculator // nil: one token per sequence and step
	waiting []*Job
	running []*sequence
	tm      Timing

	// the step's buffers
	rows   []nn.Row
	asked  []int // indices into running of the sequences whose rows ask for logits, in row order
	toks   []int
	ids    []int32
	params []nn.SampleParams
	logits []float32
	raw    []float32
}

// sequence is a job in flight: the sequence of the model state it holds,
// its sampler and how far it has come.
type sequence struct {
	job     *Job
	seq     nn.Seq
	sampler *Sampler
	hist    []int // the prompt, then the generated tokens
	done    int   // prompt tokens run so far
	ended   bool  // the stop rule ended it this step
	reason  StopReason

	// Under speculation: the logits of the prompt's last token, from
	// which the first generated token is drawn (in the step its prompt
	// ends, after the first drafts are checked against them); and the
	// sequence's drafts and first verify row in the current step.
	last  []float32
	draft int // index into the speculator's requests; −1: none
	row   int
}

func (e *Engine) newScheduler(sp *speculator) *scheduler { return &scheduler{e: e, spec: sp} }

// prefilling reports whether the sequence's prompt has not run to the end.
func (s *sequence) prefilling() bool { return s.done < len(s.job.Prompt) }

// out is what the sequence has generated.
func (s *sequence) out() []int { return s.hist[len(s.job.Prompt):] }

// busy reports whether any job is waiting or running.
func (sc *scheduler) busy() bool { return len(sc.waiting) > 0 || len(sc.running) > 0 }

// room is the number of jobs the scheduler can take before its waiting
// ones outnumber the free sequences.
func (sc *scheduler) room() int { return sc.e.st.Capacity() - len(sc.running) - len(sc.waiting) }

// admit moves waiting jobs, oldest first, into free sequences; a job that
// fails its checks finishes with the error instead.
func (sc *scheduler) admit() {
	for len(sc.waiting) > 0 && len(sc.running) < sc.e.st.Capacity() {
		j := sc.waiting[0]
		sc.waiting = sc.waiting[1:]
		if err := sc.e.checkJob(j); err != nil {
			j.Finish(Result{}, err)
			continue
		}
		q, err := sc.e.st.Admit()
		if err != nil {
			j.Finish(Result{}, err)
			continue
		}
		if j.Started != nil {
			j.Started()
		}
		sm := NewSampler(j.Sampling)
		sm.Prompt(j.Prompt)
		sc.running = append(sc.running, &sequence{job: j, seq: q, sampler: sm, hist: slices.Clone(j.Prompt), draft: -1})
	}
}

// step moves every running sequence forward once (see scheduler). An error
// leaves the running sequences' caches unknown: the caller ends them.
func (sc *scheduler) step(ctx context.Context) error {
	sc.admit()
	sc.dropCancelled()
	if len(sc.running) == 0 {
		return nil
	}
	if err := sc.forward(ctx); err != nil {
		return err
	}
	if sc.spec != nil {
		if err := sc.spec.step(ctx, sc); err != nil {
			return err
		}
	}
	return sc.retire()
}

// forward runs the step's forward: the prompts' next chunks and, without
// speculation, the newest token of every other sequence, drawing the next
// token of each that asks for logits. Under speculation a prompt that ends
// keeps its last logits for the speculator.
func (sc *scheduler) forward(ctx context.Context) error {
	prefill := sc.layout(sc.spec == nil)
	if len(sc.rows) == 0 {
		return nil
	}
	start := time.Now()
	if sc.spec != nil {
		V := sc.e.dec.Vocab
		sc.logits = grow(sc.logits, len(sc.asked)*V)
		if err := sc.e.dec.Forward(ctx, sc.e.st, sc.rows, sc.logits); err != nil {
			return err
		}
		for k, i := range sc.asked {
			s := sc.running[i]
			s.last = append(s.last[:0], sc.logits[k*V:(k+1)*V]...)
		}
		sc.tm.Prefill += time.Since(start)
		sc.tm.PromptTokens += prefill
		return nil
	}
	next, err := sc.sample(ctx)
	if err != nil {
		return err
	}
	if prefill > 0 {
		sc.tm.Prefill += time.Since(start)
		sc.tm.PromptTokens += prefill
	} else {
		sc.tm.Decode += time.Since(start)
	}
	sc.tm.DecodeTokens += len(sc.rows) - prefill
	for k, i := range sc.asked {
		sc.emit(sc.running[i], next[k])
	}
	return nil
}

// layout lays out the step's forward in sc.rows: the prompts' next chunks
// within e.PrefillChunk and, if decode is set, one token for each other
// sequence. It returns the prompt tokens among the rows and sets sc.asked.
func (sc *scheduler) layout(decode bool) int {
	sc.rows, sc.asked = sc.rows[:0], sc.asked[:0]
	budget, prefill := -1, 0
	if sc.e.PrefillChunk > 0 {
		budget = max(3, sc.e.PrefillChunk) // a chunk cut short by one keeps two
	}
	for k, s := range sc.running {
		var m int
		var logits bool
		sc.rows, m, logits = s.appendRows(sc.rows, budget, decode)
		prefill += m
		if budget >= 0 {
			budget -= m
		}
		if logits {
			sc.asked = append(sc.asked, k)
		}
	}
	return prefill
}

// appendRows adds this sequence's rows of the step's forward to rows: the
// next chunk of its prompt, at most budget tokens (budget < 0: the rest of
// it), or, past its prompt and if decode is set, its newest token. It
// returns the prompt tokens it added and whether its rows ask for logits
// (they end the prompt, or decode). A prompt whose budget leaves no chunk
// adds nothing.
func (s *sequence) appendRows(rows []nn.Row, budget int, decode bool) ([]nn.Row, int, bool) {
	prompt := s.job.Prompt
	if !s.prefilling() {
		if !decode {
			return rows, 0, false
		}
		return append(rows, nn.Row{Seq: s.seq, Token: s.hist[len(s.hist)-1], Logits: true}), 0, true
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

// sample runs sc.rows through the model and returns the next token of each
// sequence in sc.asked. When every one samples from its logits as they are
// (no penalty, bias, minimum length or grammar) and wants no
// log-probabilities, the model draws where it runs (the argmax when all
// are greedy), each sequence's uniform taken from its own generator as
// the host would take it, so that only token ids cross from a device, not
// rows of logits, and the tokens are the host's.
func (sc *scheduler) sample(ctx context.Context) ([]int, error) {
	e, n := sc.e, len(sc.asked)
	sc.toks = sc.toks[:0]
	greedy, plain := true, true
	for _, i := range sc.asked {
		s := sc.running[i]
		greedy = greedy && s.sampler.Greedy()
		plain = plain && s.sampler.Plain() && s.job.OnLogprobs == nil
	}
	if plain {
		sc.ids = grow(sc.ids, n)
		var err error
		if greedy {
			err = e.dec.Greedy(ctx, e.st, sc.rows, sc.ids)
		} else {
			sc.params = sc.params[:0]
			for _, i := range sc.asked {
				sc.params = append(sc.params, sc.running[i].sampler.next())
			}
			err = e.dec.Sample(ctx, e.st, sc.rows, sc.params, sc.ids)
		}
		if err != nil {
			return nil, err
		}
		for k, id := range sc.ids {
			sc.running[sc.asked[k]].sampler.record(int(id))
			sc.toks = append(sc.toks, int(id))
		}
		return sc.toks, nil
	}
	V := e.dec.Vocab
	sc.logits = grow(sc.logits, n*V)
	if err := e.dec.Forward(ctx, e.st, sc.rows, sc.logits); err != nil {
		return nil, err
	}
	for k, i := range sc.asked {
		row := sc.logits[k*V : (k+1)*V]
		for id, v := range row {
			if v-v != 0 { // NaN or ±Inf: the forward pass broke
				return nil, fmt.Errorf("row %d of logits holds a non-finite value (%v at token %d)", k, v, id)
			}
		}
		sc.toks = append(sc.toks, sc.draw(sc.running[i], row))
	}
	return sc.toks, nil
}

// draw samples s's next token from row, which it may change, and first
// reports the token's log-probabilities if the request asks for them.
func (sc *scheduler) draw(s *sequence, row []float32) int {
	lp := s.job.OnLogprobs
	if lp == nil {
		return s.sampler.Sample(row)
	}
	sc.raw = append(sc.raw[:0], row...) // Sample may change row
	id := s.sampler.Sample(row)
	lp(logprobsOf(sc.raw, id, s.job.TopLogprobs))
	return id
}

// emit appends a generated token to s and applies the stop rule: the
// request ends with the token if its callback says so, if it is an end
// token, or if it fills the token budget, checked in that order. It
// reports whether s has ended.
func (sc *scheduler) emit(s *sequence, id int) bool {
	s.hist = append(s.hist, id)
	r := &s.job.Request
	switch {
	case r.OnToken != nil && !r.OnToken(id):
		s.reason = StopCallback
	case r.IsEnd != nil && r.IsEnd(id):
		s.reason = StopEnd
	case r.MaxTokens > 0 && len(s.out()) >= r.MaxTokens:
		s.reason = StopLength
	default:
		return false
	}
	s.ended = true
	return true
}

// retire evicts the sequences that ended this step and finishes their jobs.
func (sc *scheduler) retire() error {
	return sc.sweep(func(s *sequence) (bool, error) { return s.ended, nil })
}

// sweep finishes the running sequences that done picks (done's error is
// the job's for one the stop rule had not ended) and keeps the rest in
// order. It returns the first eviction error.
func (sc *scheduler) sweep(done func(*sequence) (bool, error)) error {
	kept := sc.running[:0]
	var first error
	for _, s := range sc.running {
		ok, err := done(s)
		if !ok {
			kept = append(kept, s)
			continue
		}
		if e := sc.finish(s, err); e != nil && first == nil {
			first = e
		}
	}
	clear(sc.running[len(kept):])
	sc.running = kept
	return first
}

// finish evicts s and finishes its job: with its result if the stop rule
// ended it, else cut short (StopCallback) with err.
func (sc *scheduler) finish(s *sequence, err error) error {
	e := sc.evict(s)
	if s.ended {
		err = nil
	} else {
		s.reason = StopCallback
	}
	s.job.Finish(s.result(), err)
	return e
}

// result is the job's result so far.
func (s *sequence) result() Result {
	return Result{Tokens: slices.Clone(s.out()), Reason: s.reason}
}

// evict frees the sequence's place in the model state and the drafter.
func (sc *scheduler) evict(s *sequence) error {
	if sc.spec != nil {
		sc.spec.drafter.Release(int(s.seq))
	}
	return sc.e.st.Evict(s.seq)
}

// dropCancelled ends the running jobs whose Context is done.
func (sc *scheduler) dropCancelled() {
	_ = sc.sweep(func(s *sequence) (bool, error) {
		if c := s.job.Context; c != nil && c.Err() != nil {
			return true, c.Err()
		}
		return false, nil
	})
}

// fail ends every running job with err, except those the stop rule had
// already ended, which get their results.
func (sc *scheduler) fail(err error) {
	_ = sc.sweep(func(*sequence) (bool, error) { return true, err })
}

// stop ends every job, running or waiting, with err.
func (sc *scheduler) stop(err error) {
	sc.fail(err)
	for _, j := range sc.waiting {
		j.Finish(Result{}, err)
	}
	sc.waiting = nil
}

package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/replayssm/replayssm/engine/spec"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
)

// DefaultDrafts is the default number of draft tokens per step, T.
const DefaultDrafts = 4

// MaxDrafts is the largest T: a verify carries T+1 positions (the newest
// token and T drafts), and a cache verifies at most replay.MaxDraftLimit.
const MaxDrafts = replay.MaxDraftLimit - 1

// Speculation configures GenerateSpeculative.
type Speculation struct {
	Drafter spec.Drafter
	// Drafts is T, the most draft tokens per sequence and step; 0 means
	// DefaultDrafts. The engine's state needs replay.Options.MaxDraft ≥ T+1
	// (StateOptions).
	Drafts int
	Accept spec.Acceptance
}

// StateOptions returns opt with MaxDraft set for speculation with T drafts:
// T+1 positions per verify.
func StateOptions(opt replay.Options, T int) replay.Options {
	if T <= 0 {
		T = DefaultDrafts
	}
	opt.MaxDraft = max(opt.MaxDraft, T+1)
	return opt
}

// SpecStats counts what speculation did.
type SpecStats struct {
	Steps     int           // verify forwards
	Verifies  int           // sequence-verifies (one sequence in one step)
	Drafted   int           // draft tokens verified
	Accepted  int           // draft tokens accepted
	Emitted   int           // tokens produced by verifies: accepted drafts plus one each
	DraftTime time.Duration // spent in the drafter
}

// MeanAccepted is the mean number of drafts accepted per sequence-verify.
func (s SpecStats) MeanAccepted() float64 {
	if s.Verifies == 0 {
		return 0
	}
	return float64(s.Accepted) / float64(s.Verifies)
}

// AcceptanceRate is the fraction of verified drafts accepted.
func (s SpecStats) AcceptanceRate() float64 {
	if s.Drafted == 0 {
		return 0
	}
	return float64(s.Accepted) / float64(s.Drafted)
}

// specSequence is a request in flight under speculation. Between steps it
// either has a token the target has not run yet (hasNext: the last token of
// history), or, right after its prefill, the logits of its last prompt
// token (last) from which the first drafts are checked.
type specSequence struct {
	req     int
	seq     nn.Seq
	sampler *Sampler
	fresh   bool
	hist    []int // prompt, then generated tokens
	nOut    int
	hasNext bool
	last    []float32
	draft   int // index into the step's spec.Requests, -1 if none
}

// specTarget serves spec.Accept the target's distributions at one sequence's
// verified positions.
type specTarget struct {
	s     *Sampler
	first []float32 // position 0 when the step has no row for it
	rows  []float32 // logits of the sequence's verify rows
	V     int
	p     []float64
}

func (t *specTarget) logits(j int) []float32 {
	if t.first != nil {
		if j == 0 {
			return t.first
		}
		j--
	}
	return t.rows[j*t.V : (j+1)*t.V]
}

func (t *specTarget) Sample(j int) int { return t.s.Sample(t.logits(j)) }
func (t *specTarget) Float64() float64 { return t.s.Float64() }
func (t *specTarget) Probs(j int) []float64 {
	if len(t.p) < t.V {
		t.p = make([]float64, t.V)
	}
	t.s.Probs(t.logits(j), t.p)
	return t.p
}

// GenerateSpeculative runs reqs to completion like Generate, with
// speculative decoding: each step the drafter proposes up to T tokens per
// sequence, one verify forward of the target scores every sequence's newest
// token and drafts together (nn.Decoder.Verify), sp.Accept keeps a prefix of
// the drafts plus one target token, and nn.Decoder.Commit keeps exactly
// that: SSM caches move a cursor (replay) or select the accepted state
// (baseline), attention drops the rejected keys. Sequences in a batch accept
// different counts. With sp.Accept = spec.Greedy and greedy sampling the
// output is Generate's, token for token.
//
// Prompts run whole in a prefill forward; the first generated token is
// already checked against drafts (from the prefill's logits), so every token
// goes through acceptance. Timing.DecodeTokens counts the tokens generated
// by the verify steps (all of them), Timing.Decode their time, drafting
// included.
func (e *Engine) GenerateSpeculative(ctx context.Context, reqs []Request, sp Speculation) ([]Result, Timing, SpecStats, error) {
	var tm Timing
	var ss SpecStats
	T := sp.Drafts
	if T == 0 {
		T = DefaultDrafts
	}
	if T < 1 || T > MaxDrafts {
		return nil, tm, ss, fmt.Errorf("speculation: %d drafts out of range [1, %d]", T, MaxDrafts)
	}
	if sp.Drafter == nil {
		return nil, tm, ss, fmt.Errorf("speculation: no drafter")
	}
	if md := e.st.Options().MaxDraft; md < T+1 {
		return nil, tm, ss, fmt.Errorf("speculation with %d drafts verifies %d positions; the engine's state was built with MaxDraft %d (use StateOptions)", T, T+1, md)
	}
	for i, r := range reqs {
		if len(r.Prompt) == 0 {
			return nil, tm, ss, fmt.Errorf("request %d: empty prompt", i)
		}
		if err := e.check(r.Sampling); err != nil {
			return nil, tm, ss, fmt.Errorf("request %d: %w", i, err)
		}
		if r.OnLogprobs != nil {
			return nil, tm, ss, fmt.Errorf("request %d: log-probabilities are not supported with speculative decoding", i)
		}
		if !r.Sampling.plain() {
			return nil, tm, ss, fmt.Errorf("request %d: penalties, logit biases and minimum lengths are not supported with speculative decoding", i)
		}
	}
	results := make([]Result, len(reqs))
	var live []*specSequence
	defer func() {
		for _, s := range live {
			_ = e.st.Evict(s.seq)
			sp.Drafter.Release(int(s.seq))
		}
	}()
	V := e.dec.Vocab
	var (
		rows    []nn.Row
		logits  []float32
		dreqs   []spec.Request
		commitQ []nn.Seq
		commitN []int
		rowAt   []int // first logits row of each live sequence in the verify
		emitted []int
		target  = &specTarget{V: V}

		spare, finished []*specSequence
	)
	queued := 0
	for queued < len(reqs) || len(live) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, tm, ss, err
		}
		for queued < len(reqs) && len(live) < e.st.Capacity() {
			q, err := e.st.Admit()
			if err != nil {
				return nil, tm, ss, err
			}
			r := reqs[queued]
			live = append(live, &specSequence{req: queued, seq: q, sampler: NewSampler(r.Sampling), fresh: true,
				hist: append([]int(nil), r.Prompt...)})
			queued++
		}

		// Prefill the new prompts; keep each one's last logits.
		rows = rows[:0]
		nFresh := 0
		for _, s := range live {
			if s.fresh {
				for i, id := range s.hist {
					rows = append(rows, nn.Row{Seq: s.seq, Token: id, Logits: i == len(s.hist)-1})
				}
				nFresh++
			}
		}
		if nFresh > 0 {
			logits = grow(logits, nFresh*V)
			start := time.Now()
			if err := e.dec.Forward(ctx, e.st, rows, logits); err != nil {
				return nil, tm, ss, err
			}
			tm.Prefill += time.Since(start)
			tm.PromptTokens += len(rows)
			k := 0
			for _, s := range live {
				if s.fresh {
					s.last = append(s.last[:0], logits[k*V:(k+1)*V]...)
					s.fresh = false
					k++
				}
			}
		}

		// Draft.
		stepStart := time.Now()
		dreqs = dreqs[:0]
		for _, s := range live {
			r := &reqs[s.req]
			n := T
			if r.MaxTokens > 0 {
				// The step emits at most drafts+1 tokens: draft no more
				// than the budget needs.
				n = min(n, r.MaxTokens-s.nOut-1)
			}
			s.draft = -1
			if n > 0 {
				s.draft = len(dreqs)
				if len(dreqs) < cap(dreqs) {
					dreqs = dreqs[:len(dreqs)+1] // keep the element's Drafts storage
				} else {
					dreqs = append(dreqs, spec.Request{})
				}
				d := &dreqs[s.draft]
				*d = spec.Request{Seq: int(s.seq), History: s.hist, Max: n, Drafts: d.Drafts[:0]}
			}
		}
		if len(dreqs) > 0 {
			start := time.Now()
			if err := sp.Drafter.Propose(ctx, dreqs); err != nil {
				return nil, tm, ss, err
			}
			ss.DraftTime += time.Since(start)
		}

		// Verify: each sequence's unrun token (if any), then its drafts.
		rows = rows[:0]
		rowAt = rowAt[:0]
		for _, s := range live {
			rowAt = append(rowAt, len(rows))
			if s.hasNext {
				rows = append(rows, nn.Row{Seq: s.seq, Token: s.hist[len(s.hist)-1], Logits: true})
			}
			for _, d := range s.drafts(dreqs, V) {
				rows = append(rows, nn.Row{Seq: s.seq, Token: d, Logits: true})
			}
		}
		if len(rows) > 0 {
			logits = grow(logits, len(rows)*V)
			if err := e.dec.Verify(ctx, e.st, rows, logits); err != nil {
				return nil, tm, ss, err
			}
			ss.Steps++
		}

		// Accept, commit, emit.
		commitQ, commitN = commitQ[:0], commitN[:0]
		// live stays whole until the step is over, so that an error
		// return evicts every sequence (the deferred cleanup).
		kept, finished := spare[:0], finished[:0]
		for i, s := range live {
			drafts := s.drafts(dreqs, V)
			var q [][]float32
			if s.draft >= 0 {
				q = dreqs[s.draft].Probs
			}
			*target = specTarget{s: s.sampler, rows: logits[rowAt[i]*V:], V: V, p: target.p}
			if !s.hasNext {
				target.first = s.last
			}
			acc, next := spec.Accept(sp.Accept, target, drafts, q)
			if s.hasNext || len(drafts) > 0 {
				ss.Verifies++
				ss.Drafted += len(drafts)
				ss.Accepted += acc
				ss.Emitted += acc + 1
				n := acc
				if s.hasNext {
					n++
				}
				commitQ = append(commitQ, s.seq)
				commitN = append(commitN, n)
			}
			emitted = append(append(emitted[:0], drafts[:acc]...), next)
			done, reason := false, StopLength
			r := &reqs[s.req]
			for _, id := range emitted {
				s.hist = append(s.hist, id)
				s.nOut++
				tm.DecodeTokens++
				if r.OnToken != nil && !r.OnToken(id) {
					done, reason = true, StopCallback
				} else if r.IsEnd != nil && r.IsEnd(id) {
					done, reason = true, StopEnd
				} else if r.MaxTokens > 0 && s.nOut >= r.MaxTokens {
					done, reason = true, StopLength
				}
				if done {
					break
				}
			}
			s.hasNext = true
			if done {
				out := append([]int(nil), s.hist[len(r.Prompt):]...)
				results[s.req] = Result{Tokens: out, Reason: reason}
				finished = append(finished, s)
				continue
			}
			kept = append(kept, s)
		}
		if len(commitQ) > 0 {
			if err := e.dec.Commit(e.st, commitQ, commitN); err != nil {
				return nil, tm, ss, err
			}
		}
		tm.Decode += time.Since(stepStart)
		for _, s := range finished {
			if err := e.st.Evict(s.seq); err != nil {
				return nil, tm, ss, err
			}
			sp.Drafter.Release(int(s.seq))
		}
		live, spare = kept, live
	}
	return results, tm, ss, nil
}

// drafts returns the sequence's proposal for this step, at most the number
// asked for and cut before any token outside the target's vocabulary (a
// draft model with a larger one).
func (s *specSequence) drafts(dreqs []spec.Request, V int) []int {
	if s.draft < 0 {
		return nil
	}
	r := &dreqs[s.draft]
	d := r.Drafts[:min(len(r.Drafts), r.Max)]
	for i, id := range d {
		if id < 0 || id >= V {
			return d[:i]
		}
	}
	return d
}

// Package spec is speculative decoding's model-independent half: drafters
// that propose the next tokens of a sequence cheaply, and the acceptance rules
// that check the drafts against the target model's distributions so that the
// output is distributed exactly as without speculation.
//
// The engine's loop runs them as the strategy of its step
// (engine.GenerateSpeculative, engine.Engine.Run): drafters propose up to T
// tokens per sequence, one batched verify forward of the target scores
// them (nn.Decoder.Verify: SSM layers verify all drafts from one checkpoint,
// docs/DESIGN.md 2.3), Accept picks how many to keep and the token after them, and
// nn.Decoder.Commit keeps that prefix.
package spec

import (
	"context"
	"fmt"
)

// Request asks a drafter for the continuation of one sequence. Propose fills
// Drafts (and, for a sampling drafter, Probs).
type Request struct {
	// Seq identifies the sequence while it lives (a drafter with state of
	// its own keys it by Seq; Release ends it).
	Seq int
	// History is every token of the sequence so far: the prompt, then what
	// was generated. Drafts continue it. It only ever grows between
	// proposals, and what was rejected never enters it.
	History []int
	// Max is the most drafts wanted; 0 asks for none.
	Max int

	// Drafts is the proposal, at most Max tokens (possibly none). Propose
	// appends to Drafts[:0], so its storage is reused.
	Drafts []int
	// Probs, when not nil, holds for each draft the distribution q it was
	// sampled from (vocabulary-sized). nil means the drafter is
	// deterministic: q is one-hot at the draft.
	Probs [][]float32
}

// Drafter proposes draft tokens for a batch of sequences.
//
// The interface carries only tokens, so that every kind of drafter fits: a
// lookup in the sequence's own history (NGram), a small model with its own
// state (DraftModel), or the target's multi-token-prediction head (MTP),
// which reads the target's hidden states from the verify forward
// (nn.State.OnLayer) next to the tokens given here.
type Drafter interface {
	// Propose fills Drafts for each request.
	Propose(ctx context.Context, reqs []Request) error
	// Release forgets a finished sequence.
	Release(seq int)
	// Close releases the drafter's resources.
	Close()
}

// Acceptance is the rule that checks drafts against the target.
type Acceptance uint8

const (
	// Greedy accepts a draft when it equals the token the target's own
	// sampler draws at its position (the argmax, for greedy sampling). Each
	// emitted token costs the sampler one draw, exactly as without
	// speculation, so with the same seed and the same logits the output is
	// the non-speculative output token for token.
	Greedy Acceptance = iota
	// Stochastic is speculative rejection sampling (Leviathan et al. 2023,
	// Chen et al. 2023): draft d with draft probability q(d) is accepted with
	// probability min(1, p(d)/q(d)); on rejection the token is drawn from
	// norm(max(0, p−q)). Every emitted token is distributed as p. With a
	// deterministic drafter (q one-hot) a draft is accepted with probability
	// p(d) and a rejection draws from p without d.
	Stochastic
)

// String names the acceptance rule: greedy or stochastic.
func (a Acceptance) String() string {
	switch a {
	case Greedy:
		return "greedy"
	case Stochastic:
		return "stochastic"
	}
	return fmt.Sprintf("Acceptance(%d)", uint8(a))
}

// ParseAcceptance parses "greedy" or "stochastic".
func ParseAcceptance(s string) (Acceptance, error) {
	switch s {
	case "greedy":
		return Greedy, nil
	case "stochastic":
		return Stochastic, nil
	}
	return 0, fmt.Errorf("unknown acceptance %q (want greedy or stochastic)", s)
}

// Target is the target model's next-token distribution at the verified
// positions of one sequence: position j follows the history and the first j
// drafts.
type Target interface {
	// Sample draws the token at position j as the non-speculative sampler
	// would.
	Sample(j int) int
	// Probs returns the distribution Sample(j) draws from, vocabulary-sized
	// and summing to 1. Only Stochastic calls it; the slice may be reused by
	// the next call.
	Probs(j int) []float64
	// Float64 returns a uniform draw in [0, 1) from the sequence's generator.
	Float64() float64
}

// Accept checks drafts against t and returns how many of them are accepted
// (a prefix) and the token that follows them: the target's correction at
// the first rejection, or its bonus token after the last draft. q holds the
// drafts' distributions, or is nil for a deterministic drafter. t has
// positions 0..len(drafts).
func Accept(a Acceptance, t Target, drafts []int, q [][]float32) (accepted, next int) {
	for j, d := range drafts {
		switch a {
		case Greedy:
			if tok := t.Sample(j); tok != d {
				return j, tok
			}
		default:
			p := t.Probs(j)
			qd := 1.0
			if q != nil {
				qd = float64(q[j][d])
			}
			// Accept with probability min(1, p(d)/q(d)).
			if u := t.Float64(); u*qd < p[d] {
				continue
			}
			return j, residual(t, p, d, q, j)
		}
	}
	return len(drafts), t.Sample(len(drafts))
}

// residual draws from norm(max(0, p − q)) after draft d at position j was
// rejected; with q nil (one-hot at d) that is p without d.
func residual(t Target, p []float64, d int, q [][]float32, j int) int {
	w := func(i int) float64 {
		if q == nil {
			if i == d {
				return 0
			}
			return p[i]
		}
		return max(0, p[i]-float64(q[j][i]))
	}
	var total float64
	for i := range p {
		total += w(i)
	}
	if !(total > 0) {
		// p ≤ q everywhere only when p = q, where a rejection has
		// probability 0; rounding can still get here: draw from p.
		return t.Sample(j)
	}
	u := t.Float64() * total
	last := -1
	for i := range p {
		wi := w(i)
		if wi <= 0 {
			continue
		}
		last = i
		if u -= wi; u < 0 {
			return i
		}
	}
	return last
}

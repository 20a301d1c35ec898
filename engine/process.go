package engine

import (
	"fmt"
	"github.com/replayssm/replayssm/tensor"
	"math"
	"sort"
)

// Plain reports whether the sampler draws from the logits as they are: no
// penalty, bias or minimum length. Only a plain greedy sampler lets the
// model take the argmax where it runs.
func (s *Sampler) Plain() bool { return s.opt.plain() }

func (o SamplerOptions) plain() bool {
	return o.PresencePenalty == 0 && o.FrequencyPenalty == 0 && (o.RepetitionPenalty == 0 || o.RepetitionPenalty == 1) &&
		len(o.LogitBias) == 0 && (o.MinTokens == 0 || len(o.Suppress) == 0) && o.Constraint == nil
}

// Prompt tells the sampler the sequence's prompt, which the repetition
// penalty counts as seen.
func (s *Sampler) Prompt(ids []int) {
	if s.opt.RepetitionPenalty == 0 || s.opt.RepetitionPenalty == 1 {
		return
	}
	if s.seen == nil {
		s.seen = make(map[int]bool)
	}
	for _, id := range ids {
		s.seen[id] = true
	}
}

// process applies the penalties, biases, minimum length and grammar to a
// row of logits in place, as vLLM orders them: repetition, then frequency
// and presence, then the biases, then the suppressed tokens, then the
// grammar's mask.
func (s *Sampler) process(logits []float32) {
	o := &s.opt
	if rp := float32(o.RepetitionPenalty); rp != 0 && rp != 1 {
		penalize := func(id int) {
			if logits[id] > 0 {
				logits[id] /= rp
			} else {
				logits[id] *= rp
			}
		}
		for id := range s.seen {
			penalize(id)
		}
		for id := range s.counts {
			if !s.seen[id] {
				penalize(id)
			}
		}
	}
	if o.PresencePenalty != 0 || o.FrequencyPenalty != 0 {
		for id, n := range s.counts {
			logits[id] -= float32(o.PresencePenalty + o.FrequencyPenalty*float64(n))
		}
	}
	for id, b := range o.LogitBias {
		logits[id] += float32(b)
	}
	if s.produced < o.MinTokens {
		for _, id := range o.Suppress {
			logits[id] = float32(math.Inf(-1))
		}
	}
	if o.Constraint != nil {
		o.Constraint.Mask(logits)
	}
}

// record counts a drawn token for the penalties and the minimum length.
func (s *Sampler) record(id int) {
	s.produced++
	if s.opt.Constraint != nil {
		s.opt.Constraint.Accept(id)
	}
	if s.opt.PresencePenalty == 0 && s.opt.FrequencyPenalty == 0 && (s.opt.RepetitionPenalty == 0 || s.opt.RepetitionPenalty == 1) {
		return
	}
	if s.counts == nil {
		s.counts = make(map[int]int)
	}
	s.counts[id]++
}

// check validates o for requests to this engine's model.
func (e *Engine) check(o SamplerOptions) error {
	if err := o.Validate(); err != nil {
		return err
	}
	return o.validateProcessing(e.dec.Vocab)
}

// validateProcessing reports penalties, biases or lengths out of range for
// a vocabulary of vocab tokens (0: unknown, ids unchecked).
func (o SamplerOptions) validateProcessing(vocab int) error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"presence penalty", o.PresencePenalty}, {"frequency penalty", o.FrequencyPenalty}, {"repetition penalty", o.RepetitionPenalty}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("%s %v must be finite", f.name, f.v)
		}
	}
	if o.RepetitionPenalty < 0 {
		return fmt.Errorf("repetition penalty %v must be > 0 (1: none)", o.RepetitionPenalty)
	}
	if o.MinTokens < 0 {
		return fmt.Errorf("minimum length %d must be ≥ 0", o.MinTokens)
	}
	for id, b := range o.LogitBias {
		if math.IsNaN(b) || math.IsInf(b, 0) {
			return fmt.Errorf("logit bias of token %d is %v", id, b)
		}
		if id < 0 || (vocab > 0 && id >= vocab) {
			return fmt.Errorf("logit bias names token %d outside the vocabulary", id)
		}
	}
	for _, id := range o.Suppress {
		if id < 0 || (vocab > 0 && id >= vocab) {
			return fmt.Errorf("suppressed token %d is outside the vocabulary", id)
		}
	}
	return nil
}

// logprobsOf is token id's log-probability under logits and the top most
// likely tokens' (the first on ties), by a log-sum-exp in float64.
func logprobsOf(logits []float32, id, top int) TokenLogprobs {
	lse := tensor.LogSumExp(logits)
	lp := func(i int) TokenLogprob { return TokenLogprob{ID: i, Logprob: float32(float64(logits[i]) - lse)} }
	out := TokenLogprobs{TokenLogprob: lp(id)}
	if top > 0 {
		c := topK(make([]candidate, 0, top), logits, min(top, len(logits)))
		sort.Slice(c, func(a, b int) bool {
			if c[a].p != c[b].p {
				return c[a].p > c[b].p
			}
			return c[a].id < c[b].id
		})
		for _, x := range c {
			out.Top = append(out.Top, lp(x.id))
		}
	}
	return out
}

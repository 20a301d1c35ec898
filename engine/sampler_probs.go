package engine

import (
	"math"
	"sort"
)

// Probs writes into p (len(logits) values) the distribution Sample draws
// from: one-hot at the argmax when greedy, else softmax(logits/T) restricted
// to the top-k, then to the top-p nucleus, and renormalised. Ties are broken
// as Sample breaks them (the lower id first). Speculative rejection sampling
// needs it (spec.Stochastic).
func (s *Sampler) Probs(logits []float32, p []float64) {
	p = p[:len(logits)]
	clear(p)
	if s.Greedy() {
		p[argmax(logits)] = 1
		return
	}
	inv := 1 / s.opt.Temperature
	m := float64(logits[argmax(logits)])
	c := s.cand[:0]
	for id, l := range logits {
		c = append(c, candidate{id, float64(l)})
	}
	k, topP := s.opt.TopK, s.opt.TopP
	restrict := (k > 0 && k < len(logits)) || (topP > 0 && topP < 1)
	if restrict {
		sort.Slice(c, func(i, j int) bool {
			if c[i].p != c[j].p {
				return c[i].p > c[j].p
			}
			return c[i].id < c[j].id
		})
		if k > 0 && k < len(c) {
			c = c[:k]
		}
	}
	var total float64
	for i := range c {
		c[i].p = math.Exp((c[i].p - m) * inv)
		total += c[i].p
	}
	if topP > 0 && topP < 1 {
		var cum float64
		for i, x := range c {
			cum += x.p
			if cum >= topP*total {
				c = c[:i+1]
				break
			}
		}
		total = 0
		for _, x := range c {
			total += x.p
		}
	}
	for _, x := range c {
		p[x.id] = x.p / total
	}
	s.cand = c[:0]
}

// Float64 returns a uniform draw in [0, 1) from the sampler's generator.
func (s *Sampler) Float64() float64 { return s.rng.Float64() }

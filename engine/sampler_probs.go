package engine

import "github.com/replayssm/replayssm/model/nn"

// Probs writes into p (len(logits) values) the distribution Sample draws
// from (nn.SampleProbs): one-hot at the argmax when greedy, else
// softmax(logits/T) restricted to the top-k, then to the top-p nucleus,
// and renormalised, ties kept as Sample keeps them. Speculative rejection
// sampling needs it (spec.Stochastic).
func (s *Sampler) Probs(logits []float32, p []float64) {
	if !nn.SampleProbs(logits, s.prm, p) {
		p[argmax(logits)] = 1
	}
}

// Float64 returns a uniform draw in [0, 1) from the sampler's generator.
func (s *Sampler) Float64() float64 { return s.rng.Float64() }

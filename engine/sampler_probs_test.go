package engine

import (
	"math"
	"testing"
)

// TestSamplerProbs: Probs is the distribution Sample draws from, for every
// option combination (the frequencies of 100k draws within 5 standard
// deviations, zero outside the support).
func TestSamplerProbs(t *testing.T) {
	logits := []float32{0.5, 2, 1.2, 2, -1, 0.8, 1.9, 0}
	for _, opt := range []SamplerOptions{
		{},
		{Temperature: 1},
		{Temperature: 0.7, TopK: 3},
		{Temperature: 1.3, TopP: 0.6},
		{Temperature: 1, TopK: 5, TopP: 0.8},
	} {
		s := NewSampler(opt)
		p := make([]float64, len(logits))
		s.Probs(logits, p)
		var sum float64
		for _, x := range p {
			sum += x
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Errorf("%+v: probabilities sum to %v", opt, sum)
		}
		const n = 100000
		counts := make([]int, len(logits))
		for range n {
			counts[s.Sample(logits)]++
		}
		for i := range p {
			got := float64(counts[i]) / n
			if (p[i] == 0) != (counts[i] == 0) || math.Abs(got-p[i]) > 5*math.Sqrt(p[i]*(1-p[i])/n)+1e-9 {
				t.Errorf("%+v: token %d drawn with frequency %.4f, Probs says %.4f", opt, i, got, p[i])
			}
		}
	}
}

package nn

import (
	"math"
)

// SampleParams choose how one row's token is drawn from its logits
// (SampleRow defines the draw; Backend.Sample makes it where the logits
// are).
type SampleParams struct {
	// Temperature divides the logits; not above 0 (or NaN) is greedy.
	Temperature float32
	// TopP keeps the nucleus of the tokens top-k kept: the fewest most
	// likely whose probability reaches TopP. Outside (0, 1): all.
	TopP float32
	// TopK keeps the tokens whose logit is at least the TopK-th largest;
	// not above 0: all; 1 is greedy.
	TopK int32
	// U is the uniform draw in [0, 1) that picks the token (the caller's
	// seeded generator makes it, so that a draw repeats); outside it is
	// clamped.
	U float64
}

// Greedy reports whether p takes the largest logit's token.
func (p SampleParams) Greedy() bool { return !(p.Temperature > 0) || p.TopK == 1 }

// SampleRow draws a token from logits as p says, in float64. The draw is
// defined by thresholds on the logits' values, not by a sort, so that a
// device computes the same set with a radix select (no sort, ties
// included the same way):
//
//   - A NaN or +Inf logit, or no logit above −Inf, draws nothing: -1.
//     A −Inf logit is a masked token, never drawn.
//   - Greedy (p.Greedy()): the largest logit's token, the first on ties.
//   - Otherwise each finite token i weighs w_i = exp((l_i − m)·(1/T)) with
//     m the largest logit (so the largest weighs 1).
//   - Top-k (0 < TopK < len(logits)): θk is the TopK-th largest logit,
//     counted with multiplicity; the tokens with l ≥ θk are kept, every one
//     tied with θk among them, so more than TopK may stay.
//   - Top-p (0 < TopP < 1): among the tokens top-k kept, of total weight
//     Zk, θp is the largest logit θ with Σ_{kept, l ≥ θ} w ≥ TopP·Zk; the
//     tokens with l ≥ θp stay (all ties at θp too). That is the smallest
//     set of most likely tokens whose probability reaches TopP.
//   - The draw: with Z the kept tokens' total weight, the first kept token
//     in id order whose running sum of weights exceeds U·Z (the inverse
//     CDF in token-id order), so a token of zero weight is never drawn.
//
// −0 and +0 are one value. Backend.Sample computes the weights in float32
// and sums them exactly in fixed point (backend/cuda/kernels/sample.cu),
// so a device draw may differ from this one only where U·Z, or a top-p
// partial sum against TopP·Zk, lies within about 1e-6·Z of a boundary.
func SampleRow(logits []float32, p SampleParams) int {
	var s rowSample
	if !s.keep(logits, p) {
		return -1
	}
	if s.greedy {
		return s.argmax
	}
	var z float64
	for _, l := range logits {
		if s.kept(l) {
			z += s.weight(l)
		}
	}
	t := min(max(p.U, 0), 1) * z
	var cum float64
	last := -1
	for i, l := range logits {
		if !s.kept(l) {
			continue
		}
		if w := s.weight(l); w > 0 {
			cum += w
			last = i
			if cum > t {
				return i
			}
		}
	}
	return last // U·Z rounded to Z
}

// SampleProbs writes into probs (len(logits) values) the distribution
// SampleRow draws from: one-hot at the largest logit when greedy, else the
// kept tokens' weights over their sum. It reports false, with probs
// zero, when SampleRow draws nothing.
func SampleProbs(logits []float32, p SampleParams, probs []float64) bool {
	probs = probs[:len(logits)]
	clear(probs)
	var s rowSample
	if !s.keep(logits, p) {
		return false
	}
	if s.greedy {
		probs[s.argmax] = 1
		return true
	}
	var z float64
	for i, l := range logits {
		if s.kept(l) {
			probs[i] = s.weight(l)
			z += probs[i]
		}
	}
	for i := range probs {
		probs[i] /= z
	}
	return true
}

// rowSample is one row's kept set: the finite tokens whose key is at
// least floor, weighed exp((l − max)·inv).
type rowSample struct {
	greedy   bool
	argmax   int
	max, inv float64
	floor    uint32
}

// keep finds the row's largest logit and its kept set; false: the row
// draws nothing.
func (s *rowSample) keep(logits []float32, p SampleParams) bool {
	s.argmax = -1
	for i, l := range logits {
		switch {
		case l != l || math.IsInf(float64(l), 1):
			return false
		case l > float32(math.Inf(-1)) && (s.argmax < 0 || l > logits[s.argmax]):
			s.argmax = i
		}
	}
	if s.argmax < 0 {
		return false
	}
	if s.greedy = p.Greedy(); s.greedy {
		return true
	}
	s.max, s.inv = float64(logits[s.argmax]), 1/float64(p.Temperature)
	if k := int(p.TopK); k > 0 && k < len(logits) {
		s.floor = kthLargestKey(logits, k)
	}
	if p.TopP > 0 && p.TopP < 1 {
		s.floor = s.nucleusKey(logits, float64(p.TopP))
	}
	return true
}

func (s *rowSample) kept(l float32) bool {
	return orderKey(l) >= s.floor && l > float32(math.Inf(-1))
}

func (s *rowSample) weight(l float32) float64 { return math.Exp((float64(l) - s.max) * s.inv) }

// nucleusKey is the key of θp: among the kept tokens, the largest key κ
// whose tokens at or above it weigh at least topP of them all, found a
// byte of the key at a time from the top (a radix select on weight).
func (s *rowSample) nucleusKey(logits []float32, topP float64) uint32 {
	var prefix, mask uint32
	var need float64
	for shift := 24; shift >= 0; shift -= 8 {
		var h [256]float64
		for _, l := range logits {
			if k := orderKey(l); s.kept(l) && k&mask == prefix {
				h[k>>shift&255] += s.weight(l)
			}
		}
		if shift == 24 {
			var zk float64
			for _, v := range h {
				zk += v
			}
			need = topP * zk
		}
		d := pickDigit(&h, &need)
		prefix |= uint32(d) << shift
		mask |= 255 << shift
	}
	return prefix
}

// kthLargestKey is the key of the k-th largest logit (1 ≤ k ≤ len),
// counted with multiplicity, by a radix select on counts.
func kthLargestKey(logits []float32, k int) uint32 {
	var prefix, mask uint32
	need := float64(k)
	for shift := 24; shift >= 0; shift -= 8 {
		var h [256]float64
		for _, l := range logits {
			if key := orderKey(l); key&mask == prefix {
				h[key>>shift&255]++
			}
		}
		d := pickDigit(&h, &need)
		prefix |= uint32(d) << shift
		mask |= 255 << shift
	}
	return prefix
}

// pickDigit returns the largest digit d whose bins from d up hold at least
// *need (the lowest nonzero bin if rounding left none) and takes the bins
// above d off *need.
func pickDigit(h *[256]float64, need *float64) int {
	var above float64
	low := 0
	for d := 255; d >= 0; d-- {
		if h[d] == 0 {
			continue
		}
		if above+h[d] >= *need {
			*need -= above
			return d
		}
		above += h[d]
		low = d
	}
	*need -= above - h[low]
	return low
}

// orderKey maps a float32 to a uint32 in the same order (−0 as +0):
// the sign bit flipped for positives, every bit for negatives.
func orderKey(x float32) uint32 {
	b := math.Float32bits(x)
	if b == 1<<31 {
		b = 0
	}
	if b>>31 != 0 {
		return ^b
	}
	return b | 1<<31
}

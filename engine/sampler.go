package engine

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/replayssm/replayssm/model/nn"
)

// SamplerOptions choose how a token is drawn from a row of logits.
type SamplerOptions struct {
	// Temperature divides the logits; 0 (or less) is greedy decoding.
	Temperature float64
	// TopK keeps the K most likely tokens; 0 keeps all.
	TopK int
	// TopP keeps the smallest set of most likely tokens whose probability
	// reaches TopP (nucleus sampling); 0 or 1 keeps all.
	TopP float64
	// Seed makes the draws reproducible.
	Seed uint64

	// PresencePenalty and FrequencyPenalty (OpenAI's) lower each token's
	// logit by PresencePenalty once the completion holds it and by
	// FrequencyPenalty for every time it does.
	PresencePenalty, FrequencyPenalty float64
	// RepetitionPenalty (vLLM's, after CTRL) divides the positive logits of
	// the tokens in the prompt or the completion by it and multiplies the
	// negative ones; 0 or 1: none.
	RepetitionPenalty float64
	// LogitBias adds to the logits of the tokens it names.
	LogitBias map[int]float64
	// Suppress lists tokens (the end tokens) that are not drawn before the
	// completion holds MinTokens tokens.
	Suppress  []int
	MinTokens int
	// Constraint, if set, limits each draw to what a grammar allows
	// (structured output) and follows the tokens drawn; one per sequence.
	Constraint Constraint
}

// Constraint is a grammar over the tokens of one sequence: Mask sets the
// logits of the tokens it forbids next to −∞, Accept advances by the token
// drawn.
type Constraint interface {
	Mask(logits []float32)
	Accept(id int)
}

// Validate reports options out of range.
func (o SamplerOptions) Validate() error {
	if math.IsNaN(o.Temperature) || o.Temperature < 0 {
		return fmt.Errorf("temperature %v must be ≥ 0", o.Temperature)
	}
	if o.TopK < 0 {
		return fmt.Errorf("top-k %d must be ≥ 0", o.TopK)
	}
	if math.IsNaN(o.TopP) || o.TopP < 0 || o.TopP > 1 {
		return fmt.Errorf("top-p %v must be in [0, 1]", o.TopP)
	}
	return o.validateProcessing(0)
}

// Sampler draws tokens as nn.SampleRow defines it (greedy, or from
// softmax(logits/T) restricted by top-k then top-p), after its penalties,
// biases and grammar, with its own seeded generator: one uniform a
// sampled token. A device draws the same tokens from the same generator
// (nn.Decoder.Sample). A Sampler is not safe for concurrent use; make one
// per sequence.
type Sampler struct {
	opt SamplerOptions
	prm nn.SampleParams
	rng *rand.Rand

	// what the penalties and the minimum length count
	seen     map[int]bool // prompt tokens (repetition penalty)
	counts   map[int]int  // completion tokens
	produced int
}

type candidate struct {
	id int
	p  float64
}

// NewSampler returns a sampler for opt.
func NewSampler(opt SamplerOptions) *Sampler {
	return &Sampler{
		opt: opt,
		prm: nn.SampleParams{Temperature: float32(opt.Temperature), TopP: float32(opt.TopP), TopK: int32(min(opt.TopK, math.MaxInt32))},
		rng: rand.New(rand.NewPCG(opt.Seed, opt.Seed^0x9e3779b97f4a7c15)),
	}
}

// Greedy reports whether the sampler always takes the most likely token.
func (s *Sampler) Greedy() bool { return s.prm.Greedy() }

// Sample returns the chosen token id for one row of logits, which it may
// change (penalties and biases are applied in place).
func (s *Sampler) Sample(logits []float32) int {
	if !s.Plain() {
		s.process(logits)
	}
	id := nn.SampleRow(logits, s.next())
	if id < 0 { // a grammar or the minimum length masked every token
		id = argmax(logits)
	}
	s.record(id)
	return id
}

// next is the parameters of the sampler's next draw, with its uniform
// taken from the generator unless the draw is greedy.
func (s *Sampler) next() nn.SampleParams {
	p := s.prm
	if !p.Greedy() {
		p.U = s.rng.Float64()
	}
	return p
}

// topK returns, in dst's memory, the k largest logits (p holds the
// logit), by a min-heap: O(V log k), no full sort; unordered.
func topK(dst []candidate, logits []float32, k int) []candidate {
	h := candHeap(dst[:0])
	for id, l := range logits {
		v := float64(l)
		if len(h) < k {
			heap.Push(&h, candidate{id, v})
		} else if v > h[0].p || (v == h[0].p && id < h[0].id) {
			h[0] = candidate{id, v}
			heap.Fix(&h, 0)
		}
	}
	return h
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// candHeap is a min-heap on (logit, then higher id first), so the root is the
// weakest of the kept candidates.
type candHeap []candidate

func (h candHeap) Len() int { return len(h) }
func (h candHeap) Less(i, j int) bool {
	if h[i].p != h[j].p {
		return h[i].p < h[j].p
	}
	return h[i].id > h[j].id
}
func (h candHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)   { *h = append(*h, x.(candidate)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

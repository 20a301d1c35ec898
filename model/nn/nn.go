// Package nn holds the CPU building blocks of the hybrid SSM/attention models
// (Mamba-2 and Gated DeltaNet mixers around the ReplaySSM state cache,
// attention with a KV cache, dense MLPs, mixtures of experts) and the Decoder
// that runs a stack of them over a batch of sequences.
//
// The architecture packages (model/nemotronh, model/qwen, model/mamba2) only
// bind checkpoint tensors to these blocks, so each reads as its block diagram;
// every formula lives here, once. Compute is float32 throughout; the
// recurrences run in package replay.
package nn

import (
	"fmt"

	"github.com/replayssm/replayssm/tensor"
)

// Linear is a dense projection y = x·Wᵀ + b with W in PyTorch's [Out][In]
// layout. B is nil when the layer has no bias.
type Linear struct {
	In, Out int
	W       []float32
	B       []float32
}

// Forward computes y [n][Out] from x [n][In].
func (l *Linear) Forward(y, x []float32, n int) {
	tensor.MatMul(y, x, l.W, n, l.In, l.Out)
	if l.B != nil {
		for r := range n {
			tensor.Add(y[r*l.Out:(r+1)*l.Out], l.B)
		}
	}
}

// Params is the number of weights.
func (l *Linear) Params() int { return len(l.W) + len(l.B) }

func (l *Linear) check(name string) error {
	if l.In <= 0 || l.Out <= 0 || len(l.W) != l.In*l.Out {
		return fmt.Errorf("%s: weight has %d values, want %d×%d", name, len(l.W), l.Out, l.In)
	}
	if l.B != nil && len(l.B) != l.Out {
		return fmt.Errorf("%s: bias has %d values, want %d", name, len(l.B), l.Out)
	}
	return nil
}

// StackRows concatenates the output rows of projections that read the same
// input, so that one product computes them all: the result's outputs are
// ls[0]'s, then ls[1]'s, and so on.
func StackRows(ls ...Linear) (Linear, error) {
	var out Linear
	hasBias := false
	for _, l := range ls {
		hasBias = hasBias || l.B != nil
	}
	for i, l := range ls {
		if i == 0 {
			out.In = l.In
		} else if l.In != out.In {
			return Linear{}, fmt.Errorf("stack projections: input sizes %d and %d differ", out.In, l.In)
		}
		out.Out += l.Out
		out.W = append(out.W, l.W...)
		if hasBias {
			b := l.B
			if b == nil {
				b = make([]float32, l.Out)
			}
			out.B = append(out.B, b...)
		}
	}
	return out, nil
}

// RMSNorm is a root-mean-square norm over groups of Group consecutive
// elements (Group 0: the whole vector), x̂·W. Families whose checkpoints
// store the "1+w" form have the 1 added when the weights are bound.
type RMSNorm struct {
	W     []float32
	Eps   float32
	Group int
}

// Forward normalises n rows of len(W) elements from x into dst.
func (nm *RMSNorm) Forward(dst, x []float32, n int) {
	d := len(nm.W)
	g := nm.Group
	if g <= 0 {
		g = d
	}
	for r := range n {
		for o := 0; o < d; o += g {
			tensor.RMSNorm(dst[r*d+o:r*d+o+g], x[r*d+o:r*d+o+g], nm.W[o:o+g], nm.Eps)
		}
	}
}

// arena hands out float32 scratch buffers for one forward pass and takes them
// all back at once, so that steady-state decode allocates nothing.
type arena struct {
	buf  []float32
	off  int
	need int // high-water mark of the last pass, for the next one
	ints intArena
}

// get returns a zeroed buffer of n elements, valid until reset.
func (a *arena) get(n int) []float32 {
	a.need += n
	if a.off+n > len(a.buf) {
		// Too small this pass: serve from the heap, grow at the next reset.
		return make([]float32, n)
	}
	s := a.buf[a.off : a.off+n : a.off+n]
	a.off += n
	clear(s)
	return s
}

func (a *arena) reset() {
	if a.need > len(a.buf) {
		a.buf = make([]float32, a.need+a.need/4)
	}
	a.off, a.need = 0, 0
	a.ints.reset()
}

// intArena is arena for ints (expert choices, row lists).
type intArena struct {
	buf  []int
	off  int
	need int
}

func (a *intArena) get(n int) []int {
	a.need += n
	if a.off+n > len(a.buf) {
		return make([]int, n)
	}
	s := a.buf[a.off : a.off+n : a.off+n]
	a.off += n
	clear(s)
	return s
}

func (a *intArena) reset() {
	if a.need > len(a.buf) {
		a.buf = make([]int, a.need+a.need/4)
	}
	a.off, a.need = 0, 0
}

// Package nn holds the building blocks of the hybrid SSM/attention models
// (Mamba-2, Gated DeltaNet and Kimi Delta Attention mixers around the
// ReplaySSM state cache, attention with a KV cache, latent attention with a
// cache of latents, dense MLPs, mixtures of experts) and the Decoder that
// runs a stack of them over a batch of sequences, on a Backend.
//
// The architecture packages (model/nemotronh, model/qwen, model/mamba2,
// model/kimi) only bind checkpoint tensors to these blocks, so each reads
// as its block diagram; every formula lives here, once, as a sequence of
// Backend operations, so a block does not know which device it runs on.
// Product weights are bound in the checkpoint's format (tensor.Weights:
// float32 or bfloat16, views of the memory-mapped files where they can be),
// everything else as host float32, and Decoder.Place puts them on the
// backend.
package nn

import (
	"fmt"

	"github.com/replayssm/replayssm/tensor"
)

// Linear is a dense projection y = x·Wᵀ + b with W in PyTorch's [Out][In]
// layout, in the checkpoint's format. B is nil when the layer has no bias.
type Linear struct {
	In, Out int
	W       tensor.Weights
	B       []float32

	w, b Weight // W and B on the backend (Place)
}

// place puts the weights on be, W in its product format.
func (l *Linear) place(be Backend) {
	l.w = be.Matrix(l.W, l.Out, l.In)
	l.b = be.Weight(l.B, 1, l.Out)
}

// placeExact puts the weights on be in float32: a router's logits choose
// experts, and a rounding that reorders two of them changes the output.
// (A bfloat16 checkpoint's router is widened, exactly.)
func (l *Linear) placeExact(be Backend) {
	l.w = be.Weight(l.W.Float32(), l.Out, l.In)
	l.b = be.Weight(l.B, 1, l.Out)
}

// apply computes y [n][Out] from x [n][In] on be.
func (l *Linear) apply(be Backend, y, x Tensor) { be.MatMul(y, x, l.w, l.b) }

// Params is the number of weights.
func (l *Linear) Params() int { return l.W.Len() + len(l.B) }

func (l *Linear) check(name string) error {
	if l.In <= 0 || l.Out <= 0 || l.W.Len() != l.In*l.Out {
		return fmt.Errorf("%s: weight has %d values, want %d×%d", name, l.W.Len(), l.Out, l.In)
	}
	if l.B != nil && len(l.B) != l.Out {
		return fmt.Errorf("%s: bias has %d values, want %d", name, len(l.B), l.Out)
	}
	return nil
}

// StackRows concatenates the output rows of projections that read the same
// input, so that one product computes them all: the result's outputs are
// ls[0]'s, then ls[1]'s, and so on, in their format (tensor.Concat).
func StackRows(ls ...Linear) (Linear, error) {
	var out Linear
	hasBias := false
	ws := make([]tensor.Weights, len(ls))
	for i, l := range ls {
		hasBias = hasBias || l.B != nil
		ws[i] = l.W
	}
	for i, l := range ls {
		if i == 0 {
			out.In = l.In
		} else if l.In != out.In {
			return Linear{}, fmt.Errorf("stack projections: input sizes %d and %d differ", out.In, l.In)
		}
		out.Out += l.Out
		if hasBias {
			b := l.B
			if b == nil {
				b = make([]float32, l.Out)
			}
			out.B = append(out.B, b...)
		}
	}
	out.W = tensor.Concat(ws...)
	return out, nil
}

// RMSNorm is a root-mean-square norm over groups of Group consecutive
// elements (Group 0: the whole vector), x̂·W. Families whose checkpoints
// store the "1+w" form have the 1 added when the weights are bound.
type RMSNorm struct {
	W     []float32
	Eps   float32
	Group int

	w Weight // W on the backend (Place)
}

func (nm *RMSNorm) place(be Backend) { nm.w = be.Weight(nm.W, 1, len(nm.W)) }

// apply normalises the rows of x (len(W) values each) into dst on be.
func (nm *RMSNorm) apply(be Backend, dst, x Tensor) { be.RMSNorm(dst, x, nm.w, nm.Eps, nm.Group) }

// Forward normalises n rows of len(W) elements from host x into host dst.
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

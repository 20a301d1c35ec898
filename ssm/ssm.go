// Package ssm holds the math of the two recurrent layer kinds replayssm runs,
// Mamba-2 and Gated DeltaNet: their shapes and a plain float64 reference for one
// decode step over a batch of sequences (docs/DESIGN.md 1.1 and 1.2).
//
// The references are the ground truth every fast path is checked against, on
// the CPU and on the GPU. They are written for clarity, not speed: one loop per
// formula, float64 throughout, no reuse of intermediate results that the
// formulas do not name.
package ssm

import (
	"fmt"
	"math"
)

// Mamba2Shape is the shape of one Mamba-2 SSM core (docs/DESIGN.md 1.1): H heads of
// dimension P, state size N, G groups (head h uses group h/(H/G)).
type Mamba2Shape struct {
	Heads     int // H
	HeadDim   int // P
	StateSize int // N
	Groups    int // G
}

// Validate reports whether the shape is usable.
func (s Mamba2Shape) Validate() error {
	if s.Heads <= 0 || s.HeadDim <= 0 || s.StateSize <= 0 || s.Groups <= 0 {
		return fmt.Errorf("mamba2 shape %+v: every size must be positive", s)
	}
	if s.Heads%s.Groups != 0 {
		return fmt.Errorf("mamba2 shape %+v: %d heads are not divisible into %d groups", s, s.Heads, s.Groups)
	}
	return nil
}

// StateElems is the number of state elements of one sequence: H·P·N.
func (s Mamba2Shape) StateElems() int { return s.Heads * s.HeadDim * s.StateSize }

// Group returns the group of head h.
func (s Mamba2Shape) Group(h int) int { return h / (s.Heads / s.Groups) }

// GDNShape is the shape of one Gated DeltaNet core (docs/DESIGN.md 1.2): Hk key heads
// and Hv value heads (value head j reads key head j/(Hv/Hk)), key dimension dk
// and value dimension dv. Each value head carries a dk×dv state.
type GDNShape struct {
	KeyHeads   int // Hk
	ValueHeads int // Hv
	KeyDim     int // dk
	ValueDim   int // dv
}

// Validate reports whether the shape is usable.
func (s GDNShape) Validate() error {
	if s.KeyHeads <= 0 || s.ValueHeads <= 0 || s.KeyDim <= 0 || s.ValueDim <= 0 {
		return fmt.Errorf("gdn shape %+v: every size must be positive", s)
	}
	if s.ValueHeads%s.KeyHeads != 0 {
		return fmt.Errorf("gdn shape %+v: %d value heads are not a multiple of %d key heads", s, s.ValueHeads, s.KeyHeads)
	}
	return nil
}

// StateElems is the number of state elements of one sequence: Hv·dk·dv.
func (s GDNShape) StateElems() int { return s.ValueHeads * s.KeyDim * s.ValueDim }

// KeyHead returns the key head read by value head j.
func (s GDNShape) KeyHead(j int) int { return j / (s.ValueHeads / s.KeyHeads) }

// Softplus is log(1+e^x), computed without overflow; above 20 it returns x, as
// PyTorch's softplus does with its default threshold.
func Softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// Sigmoid is 1/(1+e^-x).
func Sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// L2NormEps is the epsilon of the GDN q/k normalisation: x·rsqrt(Σx² + eps).
const L2NormEps = 1e-6

package tensor

import (
	"fmt"
	"math"
)

// Rope is a rotary position embedding over the leading RotaryDim dimensions of
// a head, with rotate_half pairing: dimension i < RotaryDim/2 rotates with
// i + RotaryDim/2 by the angle pos·θ^(−2i/RotaryDim). The remaining
// dimensions pass through (partial RoPE).
type Rope struct {
	RotaryDim int
	invFreq   []float32
}

// NewRope builds the rotation for rotaryDim dimensions (even, positive) and
// base theta. The inverse frequencies and angles are float32, as transformers
// computes them, so positions far from zero round the same way.
func NewRope(rotaryDim int, theta float64) (*Rope, error) {
	if rotaryDim <= 0 || rotaryDim%2 != 0 {
		return nil, fmt.Errorf("rope: rotary dim %d must be even and positive", rotaryDim)
	}
	if !(theta > 0) {
		return nil, fmt.Errorf("rope: theta %v must be positive", theta)
	}
	r := &Rope{RotaryDim: rotaryDim, invFreq: make([]float32, rotaryDim/2)}
	for i := range r.invFreq {
		e := float32(2*i) / float32(rotaryDim)
		r.invFreq[i] = float32(1 / math.Pow(theta, float64(e)))
	}
	return r, nil
}

// InvFreq returns the inverse frequencies θ^(−2i/RotaryDim), i <
// RotaryDim/2, as float32 (a device backend's copy of the rotation).
func (r *Rope) InvFreq() []float32 { return r.invFreq }

// Apply rotates one head vector x (len ≥ RotaryDim) in place for position pos.
func (r *Rope) Apply(x []float32, pos int) {
	half := r.RotaryDim / 2
	p := float32(pos)
	for i, f := range r.invFreq {
		ang := float64(p * f)
		c, s := float32(math.Cos(ang)), float32(math.Sin(ang))
		a, b := x[i], x[i+half]
		x[i] = a*c - b*s
		x[i+half] = b*c + a*s
	}
}

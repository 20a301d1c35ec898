package nn

import (
	"fmt"
	"math"

	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
	"github.com/replayssm/replayssm/tensor"
)

// Mamba2Mixer is a Mamba-2 layer (docs/DESIGN.md 1.1):
//
//	[z | xBC | dt] = in_proj(x)
//	xBC  = silu(conv(xBC));  x, B, C = split(xBC)
//	y    = SSM(x, B, C, Δ = softplus(dt + dt_bias))   (the replay cache)
//	out  = out_proj(rmsnorm_groups(y·silu(z))·w)
//
// The gate multiplies before the norm, whose RMS runs over groups of
// NormGroup channels (I/G for NemotronH, I for transformers' Mamba2).
type Mamba2Mixer struct {
	Shape   ssm.Mamba2Shape
	InProj  Linear             // 2I + 2GN + H outputs: [z | x | B | C | dt]
	Conv    replay.ConvWeights // over [x | B | C], I + 2GN channels
	ALog    []float32          // [H]
	DtBias  []float32          // [H]
	D       []float32          // [H]
	Norm    RMSNorm            // gated norm: weight [I], Group channels per RMS
	OutProj Linear             // I → hidden
	// ScanDelta and StepDelta are the [lo, hi] bounds of Δ for rows of a
	// multi-token forward and for one-token decode steps; [0, +Inf] is no
	// clamp. NemotronH clamps Δ ≥ time_step_min in its scan path only.
	ScanDelta, StepDelta [2]float64

	dtBias Weight // DtBias on the backend (Place)
}

// Kind is hfconfig.Mamba.
func (m *Mamba2Mixer) Kind() hfconfig.LayerKind { return hfconfig.Mamba }

// Params is the number of weights.
func (m *Mamba2Mixer) Params() int {
	return m.InProj.Params() + len(m.Conv.Weight) + len(m.Conv.Bias) + len(m.ALog) + len(m.DtBias) +
		len(m.D) + len(m.Norm.W) + m.OutProj.Params()
}

func (m *Mamba2Mixer) dims() (I, GN, H int) {
	sh := m.Shape
	return sh.Heads * sh.HeadDim, sh.Groups * sh.StateSize, sh.Heads
}

// Validate checks that the weights fit the shape.
func (m *Mamba2Mixer) Validate() error {
	if err := m.Shape.Validate(); err != nil {
		return err
	}
	I, GN, H := m.dims()
	if err := m.InProj.check("in_proj"); err != nil {
		return err
	}
	if m.InProj.Out != 2*I+2*GN+H {
		return fmt.Errorf("in_proj has %d outputs, want 2·%d + 2·%d + %d", m.InProj.Out, I, GN, H)
	}
	if m.Conv.Channels != I+2*GN {
		return fmt.Errorf("conv1d has %d channels, want %d", m.Conv.Channels, I+2*GN)
	}
	if len(m.ALog) != H || len(m.DtBias) != H || len(m.D) != H {
		return fmt.Errorf("%d, %d, %d values of A_log, dt_bias and D, want %d", len(m.ALog), len(m.DtBias), len(m.D), H)
	}
	if len(m.Norm.W) != I || m.Norm.Group <= 0 || I%m.Norm.Group != 0 {
		return fmt.Errorf("gated norm has %d weights in groups of %d, want %d", len(m.Norm.W), m.Norm.Group, I)
	}
	if err := m.OutProj.check("out_proj"); err != nil {
		return err
	}
	if m.OutProj.In != I {
		return fmt.Errorf("out_proj reads %d inputs, want %d", m.OutProj.In, I)
	}
	return nil
}

// place puts the weights on be.
func (m *Mamba2Mixer) place(be Backend) {
	m.InProj.place(be)
	m.Norm.place(be)
	m.OutProj.place(be)
	m.dtBias = be.Weight(m.DtBias, 1, len(m.DtBias))
}

func (m *Mamba2Mixer) newState(be Backend, capacity int, opt replay.Options) (blockState, error) {
	c, err := be.NewMamba2(m.Shape, replay.Mamba2Params{ALog: m.ALog, DtBias: m.DtBias, D: m.D}, m.Conv, capacity, opt)
	if err != nil {
		return nil, err
	}
	return newSSMState(c, capacity), nil
}

// inputs gathers the SSM core's inputs of rows (one per slot, draft or
// prompt token; negative: padding) from the projection [z | xBC | dt],
// bounds their Δ (a Verify's rows as decode steps, a multi-token
// forward's by ScanDelta) and runs the convolution cc over them,
// returning the batch the cache takes.
func (m *Mamba2Mixer) inputs(b *batch, proj Tensor, rows []int32, verify bool, cc convCall) (replay.Mamba2Batch[Tensor], error) {
	I, GN, H := m.dims()
	w, C := len(rows), I+2*GN
	dt := b.packed(b.gather(proj.Columns(I+C, H), rows))
	scan := func(k int) bool { return !verify && (rows[k] < 0 || b.scan[rows[k]]) }
	for lo := 0; lo < w; { // runs of rows with the same Δ bounds
		hi := lo + 1
		for hi < w && scan(hi) == scan(lo) {
			hi++
		}
		m.clamp(b.be, dt.Slice(lo, hi), scan(lo))
		lo = hi
	}
	xbc, err := b.convSplit(b.gather(proj.Columns(I, C), rows), cc, I, GN, GN)
	if err != nil {
		return replay.Mamba2Batch[Tensor]{}, err
	}
	return replay.Mamba2Batch[Tensor]{X: xbc[0], B: xbc[1], C: xbc[2], Dt: dt}, nil
}

func (m *Mamba2Mixer) forward(b *batch, bst blockState, x, out Tensor) error {
	st := bst.(*ssmState[replay.Mamba2Batch[Tensor]])
	I, _, _ := m.dims()
	proj := b.mem.Alloc(b.n, m.InProj.Out)
	m.InProj.apply(b.be, proj, x)
	y := b.mem.Alloc(b.n, I)
	err := runSSM(b, st, y, func(rows []int32, cc convCall) (replay.Mamba2Batch[Tensor], error) {
		return m.inputs(b, proj, rows, false, cc)
	})
	if err != nil {
		return err
	}
	m.gateNormOut(b.be, proj, y, out)
	return nil
}

// clamp bounds the Δ of dt's rows: ScanDelta for rows of a multi-token
// forward, StepDelta for decode steps.
func (m *Mamba2Mixer) clamp(be Backend, dt Tensor, scan bool) {
	c := m.StepDelta
	if scan {
		c = m.ScanDelta
	}
	if c[0] > 0 || !math.IsInf(c[1], 1) {
		be.ClampDelta(dt, m.dtBias, c[0], c[1])
	}
}

// gateNormOut finishes the mixer: out = out_proj(rmsnorm(y·silu(z))).
func (m *Mamba2Mixer) gateNormOut(be Backend, proj, y, out Tensor) {
	I, _, _ := m.dims()
	be.MulSiLU(y, proj.Columns(0, I))
	m.Norm.apply(be, y, y)
	m.OutProj.apply(be, out, y)
}

// clampDelta rewrites raw dt values so that Δ = softplus(dt + dt_bias) lands
// in [lo, hi]. The replay cache applies the softplus itself and does not
// clamp, so a clamped Δ is passed as the dt that produces it.
func clampDelta(dt, dtBias []float32, lo, hi float64) {
	for h, v := range dt {
		b := float64(dtBias[h])
		d := tensor.Softplus(float64(v) + b)
		switch {
		case d < lo:
			dt[h] = float32(softplusInv(lo) - b)
		case d > hi:
			dt[h] = float32(softplusInv(hi) - b)
		}
	}
}

// softplusInv is the inverse of softplus for y > 0: log(eʸ − 1).
func softplusInv(y float64) float64 {
	if y > 20 {
		return y
	}
	return y + math.Log(-math.Expm1(-y))
}

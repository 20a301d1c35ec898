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

type mamba2State struct {
	cache *replay.Mamba2Cache
	slot  []replay.Slot // by sequence
	slots []replay.Slot // one wave's slots
}

func (m *Mamba2Mixer) newState(capacity int, opt replay.Options) (blockState, error) {
	c, err := replay.NewMamba2(m.Shape, replay.Mamba2Params{ALog: m.ALog, DtBias: m.DtBias, D: m.D}, m.Conv, capacity, opt)
	if err != nil {
		return nil, err
	}
	return &mamba2State{cache: c, slot: make([]replay.Slot, capacity)}, nil
}

func (s *mamba2State) admit(seq int) (err error) { s.slot[seq], err = s.cache.Admit(); return }
func (s *mamba2State) evict(seq int) error       { return s.cache.Evict(s.slot[seq]) }
func (s *mamba2State) stats() replay.Stats       { return s.cache.Stats() }
func (s *mamba2State) close()                    { s.cache.Close() }

func (m *Mamba2Mixer) forward(b *batch, bst blockState, x, out []float32) error {
	st := bst.(*mamba2State)
	I, GN, H := m.dims()
	n, P, C := b.n, m.InProj.Out, I+2*GN
	proj := b.mem.get(n * P)
	m.InProj.Forward(proj, x, n)

	y := b.mem.get(n * I)
	for _, wave := range b.waves {
		w := len(wave)
		st.slots = st.slots[:0]
		cin := b.mem.get(w * C)
		dt := b.mem.get(w * H)
		for i, r := range wave {
			st.slots = append(st.slots, st.slot[b.seq[r]])
			row := proj[r*P : (r+1)*P]
			copy(cin[i*C:(i+1)*C], row[I:I+C])
			copy(dt[i*H:(i+1)*H], row[I+C:I+C+H])
			clamp := m.StepDelta
			if b.scan[r] {
				clamp = m.ScanDelta
			}
			clampDelta(dt[i*H:(i+1)*H], m.DtBias, clamp)
		}
		cout := b.mem.get(w * C)
		if err := st.cache.Conv(st.slots, cin, cout); err != nil {
			return err
		}
		tensor.SiLUInPlace(cout)
		xs, Bs, Cs := b.mem.get(w*I), b.mem.get(w*GN), b.mem.get(w*GN)
		for i := range wave {
			row := cout[i*C : (i+1)*C]
			copy(xs[i*I:(i+1)*I], row[:I])
			copy(Bs[i*GN:(i+1)*GN], row[I:I+GN])
			copy(Cs[i*GN:(i+1)*GN], row[I+GN:])
		}
		yw := b.mem.get(w * I)
		if err := st.cache.Step(st.slots, replay.Mamba2Input{X: xs, B: Bs, C: Cs, Dt: dt}, yw); err != nil {
			return err
		}
		for i, r := range wave {
			copy(y[r*I:(r+1)*I], yw[i*I:(i+1)*I])
		}
	}
	// Gate before the norm: rmsnorm(y·silu(z)).
	for r := range n {
		z := proj[r*P : r*P+I]
		yr := y[r*I : (r+1)*I]
		for i := range yr {
			yr[i] *= tensor.SiLU(z[i])
		}
	}
	m.Norm.Forward(y, y, n)
	m.OutProj.Forward(out, y, n)
	return nil
}

// clampDelta rewrites raw dt values so that Δ = softplus(dt + dt_bias) lands
// in [lo, hi]. The replay cache applies the softplus itself and does not
// clamp, so a clamped Δ is passed as the dt that produces it.
func clampDelta(dt, dtBias []float32, clamp [2]float64) {
	lo, hi := clamp[0], clamp[1]
	if lo <= 0 && math.IsInf(hi, 1) {
		return
	}
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

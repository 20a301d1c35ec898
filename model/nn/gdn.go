package nn

import (
	"fmt"

	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// GDNMixer is a Gated DeltaNet layer (docs/DESIGN.md 1.2):
//
//	[q | k | v | z | b | a] = in_proj(x)
//	q, k, v = split(silu(conv([q | k | v])))
//	o       = GDN(q, k, v, g(a), β(b))       (the replay cache: l2norm, decay, delta rule)
//	out     = out_proj(rmsnorm_heads(o)·w·silu(z))
//
// The gated norm normalises first, per value head, with a plain weight w.
// Qwen3-Next's per-key-head packing is reordered into this flat layout when
// the weights are bound.
type GDNMixer struct {
	Shape   ssm.GDNShape
	InProj  Linear             // 2·Hk·dk + 2·Hv·dv + 2·Hv outputs
	Conv    replay.ConvWeights // over [q | k | v], no bias
	ALog    []float32          // [Hv]
	DtBias  []float32          // [Hv]
	Norm    RMSNorm            // weight [dv], shared by the value heads
	OutProj Linear             // Hv·dv → hidden
}

// Kind is hfconfig.GatedDeltaNet.
func (m *GDNMixer) Kind() hfconfig.LayerKind { return hfconfig.GatedDeltaNet }

// Params is the number of weights.
func (m *GDNMixer) Params() int {
	return m.InProj.Params() + len(m.Conv.Weight) + len(m.Conv.Bias) + len(m.ALog) + len(m.DtBias) +
		len(m.Norm.W) + m.OutProj.Params()
}

func (m *GDNMixer) dims() (K, V, Hv int) {
	sh := m.Shape
	return sh.KeyHeads * sh.KeyDim, sh.ValueHeads * sh.ValueDim, sh.ValueHeads
}

// Validate checks that the weights fit the shape.
func (m *GDNMixer) Validate() error {
	if err := m.Shape.Validate(); err != nil {
		return err
	}
	K, V, Hv := m.dims()
	if err := m.InProj.check("in_proj"); err != nil {
		return err
	}
	if m.InProj.Out != 2*K+2*V+2*Hv {
		return fmt.Errorf("input projections have %d outputs, want 2·%d + 2·%d + 2·%d", m.InProj.Out, K, V, Hv)
	}
	if m.Conv.Channels != 2*K+V {
		return fmt.Errorf("conv1d has %d channels, want %d", m.Conv.Channels, 2*K+V)
	}
	if len(m.ALog) != Hv || len(m.DtBias) != Hv {
		return fmt.Errorf("%d and %d values of A_log and dt_bias, want %d", len(m.ALog), len(m.DtBias), Hv)
	}
	if len(m.Norm.W) != m.Shape.ValueDim {
		return fmt.Errorf("gated norm has %d weights, want %d", len(m.Norm.W), m.Shape.ValueDim)
	}
	if err := m.OutProj.check("out_proj"); err != nil {
		return err
	}
	if m.OutProj.In != V {
		return fmt.Errorf("out_proj reads %d inputs, want %d", m.OutProj.In, V)
	}
	return nil
}

// place puts the weights on be.
func (m *GDNMixer) place(be Backend) {
	m.InProj.place(be)
	m.Norm.place(be)
	m.OutProj.place(be)
}

func (m *GDNMixer) newState(be Backend, capacity int, opt replay.Options) (blockState, error) {
	c, err := be.NewGDN(m.Shape, replay.GDNParams{ALog: m.ALog, DtBias: m.DtBias}, m.Conv, capacity, opt)
	if err != nil {
		return nil, err
	}
	return newSSMState(c, capacity), nil
}

// inputs gathers the recurrence's inputs of rows (one per slot, draft or
// prompt token; negative: padding) from the projection [q k v | z | b | a]
// and runs the convolution cc over them, returning the batch the
// cache takes.
func (m *GDNMixer) inputs(b *batch, proj Tensor, rows []int32, cc convCall) (replay.GDNBatch[Tensor], error) {
	K, V, Hv := m.dims()
	C := 2*K + V
	bs, as := b.packed(b.gather(proj.Columns(C+V, Hv), rows)), b.packed(b.gather(proj.Columns(C+V+Hv, Hv), rows))
	qkv, err := b.convSplit(b.gather(proj.Columns(0, C), rows), cc, K, K, V)
	if err != nil {
		return replay.GDNBatch[Tensor]{}, err
	}
	return replay.GDNBatch[Tensor]{Q: qkv[0], K: qkv[1], V: qkv[2], A: as, B: bs}, nil
}

func (m *GDNMixer) forward(b *batch, bst blockState, x, out Tensor) error {
	st := bst.(*ssmState[replay.GDNBatch[Tensor]])
	_, V, _ := m.dims()
	proj := b.mem.Alloc(b.n, m.InProj.Out)
	m.InProj.apply(b.be, proj, x)
	o := b.mem.Alloc(b.n, V)
	err := runSSM(b, st, o, func(rows []int32, cc convCall) (replay.GDNBatch[Tensor], error) {
		return m.inputs(b, proj, rows, cc)
	})
	if err != nil {
		return err
	}
	m.normGateOut(b.be, proj, o, out)
	return nil
}

// normGateOut finishes the layer: out = out_proj(rmsnorm_heads(o)·silu(z)).
func (m *GDNMixer) normGateOut(be Backend, proj, o, out Tensor) {
	K, V, Hv := m.dims()
	heads := o.Reshape(o.Rows*Hv, m.Shape.ValueDim)
	m.Norm.apply(be, heads, heads)
	be.MulSiLU(o, proj.Columns(2*K+V, V))
	m.OutProj.apply(be, out, o)
}

package nn

import (
	"fmt"

	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// KDAMixer is a Kimi Delta Attention layer (docs/DESIGN.md 2.2b) as
// Kimi-Linear builds it: Gated DeltaNet with a forget gate per key channel,
// made by a low-rank projection, and a low-rank sigmoid output gate.
//
//	[q | k | v | b | fa | ga] = in_proj(x)          q_proj, k_proj, v_proj, b_proj, f_a_proj, g_a_proj
//	q, k, v = silu(conv(q)), silu(conv(k)), silu(conv(v))   depthwise, no bias
//	g       = −exp(A_log[h])·softplus(f_b(fa) + dt_bias)    per head and key channel (Backend.KDAGate)
//	o       = KDA(q, k, v, g, β = sigmoid(b))               the replay cache: l2norm, q/√dk, decay, delta rule
//	out     = o_proj(rmsnorm_heads(o)·w·sigmoid(g_b(ga)))   norm first, plain weight w
//
// The checkpoint's three short convolutions (q_conv1d, k_conv1d, v_conv1d)
// are one convolution over [q | k | v] here, so that one cache window holds
// them. The gates' ranks are the widths of fa and ga (Kimi-Linear: the
// head size).
type KDAMixer struct {
	Shape   ssm.GDNShape
	InProj  Linear             // 2·Hk·dk + Hv·dv + Hv + FB.In + GB.In outputs
	Conv    replay.ConvWeights // over [q | k | v], no bias
	FB      Linear             // f_b_proj: forget-gate rank → Hv·dk
	GB      Linear             // g_b_proj: output-gate rank → Hv·dv
	ALog    []float32          // [Hv]
	DtBias  []float32          // [Hv·dk]
	Norm    RMSNorm            // weight [dv], shared by the heads
	OutProj Linear             // Hv·dv → hidden

	aLog, dtBias Weight // ALog and DtBias on the backend (place)
}

// Kind is hfconfig.KimiDeltaAttention.
func (m *KDAMixer) Kind() hfconfig.LayerKind { return hfconfig.KimiDeltaAttention }

// Params is the number of weights.
func (m *KDAMixer) Params() int {
	return m.InProj.Params() + len(m.Conv.Weight) + len(m.Conv.Bias) + m.FB.Params() + m.GB.Params() +
		len(m.ALog) + len(m.DtBias) + len(m.Norm.W) + m.OutProj.Params()
}

// cols returns the widths of in_proj's parts: K = Hk·dk, V = Hv·dv, the
// value heads, and the two gate ranks.
func (m *KDAMixer) cols() (K, V, Hv, fr, gr int) {
	sh := m.Shape
	return sh.KeyHeads * sh.KeyDim, sh.ValueHeads * sh.ValueDim, sh.ValueHeads, m.FB.In, m.GB.In
}

// Validate checks that the weights fit the shape.
func (m *KDAMixer) Validate() error {
	if err := m.Shape.Validate(); err != nil {
		return err
	}
	K, V, Hv, fr, gr := m.cols()
	for _, l := range []struct {
		name string
		l    *Linear
	}{{"in_proj", &m.InProj}, {"f_b_proj", &m.FB}, {"g_b_proj", &m.GB}, {"o_proj", &m.OutProj}} {
		if err := l.l.check(l.name); err != nil {
			return err
		}
	}
	if m.InProj.Out != 2*K+V+Hv+fr+gr {
		return fmt.Errorf("input projections have %d outputs, want 2·%d + %d + %d + %d + %d", m.InProj.Out, K, V, Hv, fr, gr)
	}
	if m.FB.Out != Hv*m.Shape.KeyDim || m.GB.Out != V {
		return fmt.Errorf("f_b_proj has %d outputs and g_b_proj %d, want %d and %d", m.FB.Out, m.GB.Out, Hv*m.Shape.KeyDim, V)
	}
	if m.Conv.Channels != 2*K+V || len(m.Conv.Weight) != m.Conv.Channels*m.Conv.Kernel {
		return fmt.Errorf("conv1d has %d channels (%d weights), want %d", m.Conv.Channels, len(m.Conv.Weight), 2*K+V)
	}
	if len(m.ALog) != Hv || len(m.DtBias) != Hv*m.Shape.KeyDim {
		return fmt.Errorf("%d and %d values of A_log and dt_bias, want %d and %d", len(m.ALog), len(m.DtBias), Hv, Hv*m.Shape.KeyDim)
	}
	if len(m.Norm.W) != m.Shape.ValueDim {
		return fmt.Errorf("gated norm has %d weights, want %d", len(m.Norm.W), m.Shape.ValueDim)
	}
	if m.OutProj.In != V {
		return fmt.Errorf("o_proj reads %d inputs, want %d", m.OutProj.In, V)
	}
	return nil
}

// place puts the weights on be; A_log and dt_bias exactly, since they
// set the decays the recurrence compounds.
func (m *KDAMixer) place(be Backend) {
	m.InProj.place(be)
	m.FB.place(be)
	m.GB.place(be)
	m.Norm.place(be)
	m.OutProj.place(be)
	m.aLog = be.Weight(m.ALog, 1, len(m.ALog))
	m.dtBias = be.Weight(m.DtBias, 1, len(m.DtBias))
}

func (m *KDAMixer) newState(be Backend, capacity int, opt replay.Options) (blockState, error) {
	c, err := be.NewKDA(m.Shape, m.Conv, capacity, opt)
	if err != nil {
		return nil, err
	}
	return newSSMState(c, capacity), nil
}

// project runs the input projections of every row: proj [n][in_proj] and
// the log-decays g [n][Hv·dk], formed once for all rows before the
// recurrence takes them wave by wave.
func (m *KDAMixer) project(b *batch, x Tensor) (proj, g Tensor) {
	K, V, Hv, fr, _ := m.cols()
	proj = b.mem.Alloc(b.n, m.InProj.Out)
	m.InProj.apply(b.be, proj, x)
	g = b.mem.Alloc(b.n, m.FB.Out)
	m.FB.apply(b.be, g, b.packed(proj.Columns(2*K+V+Hv, fr)))
	b.be.KDAGate(g, m.aLog, m.dtBias)
	return proj, g
}

// inputs gathers the recurrence's inputs of rows (one per slot, draft or
// prompt token; negative: padding) from the projection and the
// log-decays and runs the convolution cc over them, returning the
// batch the cache takes.
func (m *KDAMixer) inputs(b *batch, proj, g Tensor, rows []int32, cc convCall) (replay.KDABatch[Tensor], error) {
	K, V, Hv, _, _ := m.cols()
	C := 2*K + V
	bs, gs := b.packed(b.gather(proj.Columns(C, Hv), rows)), b.packed(b.gather(g, rows))
	qkv, err := b.convSplit(b.gather(proj.Columns(0, C), rows), cc, K, K, V)
	if err != nil {
		return replay.KDABatch[Tensor]{}, err
	}
	return replay.KDABatch[Tensor]{Q: qkv[0], K: qkv[1], V: qkv[2], G: gs, B: bs}, nil
}

func (m *KDAMixer) forward(b *batch, bst blockState, x, out Tensor) error {
	st := bst.(*ssmState[replay.KDABatch[Tensor]])
	_, V, _, _, _ := m.cols()
	proj, g := m.project(b, x)
	o := b.mem.Alloc(b.n, V)
	err := runSSM(b, st, o, func(rows []int32, cc convCall) (replay.KDABatch[Tensor], error) {
		return m.inputs(b, proj, g, rows, cc)
	})
	if err != nil {
		return err
	}
	m.normGateOut(b, proj, o, out)
	return nil
}

// verify is KDAMixer's forward over the rows of a Verify: the rows of each
// sequence go through its cache's ConvVerify and Verify in one call.
func (m *KDAMixer) verify(b *batch, vp *verifyPlan, bst blockState, x, out Tensor) error {
	st := bst.(*ssmState[replay.KDABatch[Tensor]])
	_, V, _, _, _ := m.cols()
	proj, g := m.project(b, x)
	o, err := runVerify(b, vp, st, V, func(rows []int32, cc convCall) (replay.KDABatch[Tensor], error) {
		return m.inputs(b, proj, g, rows, cc)
	})
	if err != nil {
		return err
	}
	m.normGateOut(b, proj, o, out)
	return nil
}

// normGateOut finishes the layer: out = o_proj(rmsnorm_heads(o)·w·
// sigmoid(g_b(ga))), the norm before the gate as fla's FusedRMSNormGated.
func (m *KDAMixer) normGateOut(b *batch, proj, o, out Tensor) {
	K, V, Hv, fr, gr := m.cols()
	be := b.be
	heads := o.Reshape(o.Rows*Hv, m.Shape.ValueDim)
	m.Norm.apply(be, heads, heads)
	gate := b.mem.Alloc(o.Rows, V)
	m.GB.apply(be, gate, b.packed(proj.Columns(2*K+V+Hv+fr, gr)))
	be.MulSigmoid(o, gate)
	m.OutProj.apply(be, out, o)
}

package nn

import (
	"fmt"

	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
	"github.com/replayssm/replayssm/tensor"
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

type gdnState struct {
	cache *replay.GDNCache
	slot  []replay.Slot
	slots []replay.Slot
}

func (m *GDNMixer) newState(capacity int, opt replay.Options) (blockState, error) {
	c, err := replay.NewGDN(m.Shape, replay.GDNParams{ALog: m.ALog, DtBias: m.DtBias}, m.Conv, capacity, opt)
	if err != nil {
		return nil, err
	}
	return &gdnState{cache: c, slot: make([]replay.Slot, capacity)}, nil
}

func (s *gdnState) admit(seq int) (err error) { s.slot[seq], err = s.cache.Admit(); return }
func (s *gdnState) evict(seq int) error       { return s.cache.Evict(s.slot[seq]) }
func (s *gdnState) stats() replay.Stats       { return s.cache.Stats() }
func (s *gdnState) close()                    { s.cache.Close() }

func (m *GDNMixer) forward(b *batch, bst blockState, x, out []float32) error {
	st := bst.(*gdnState)
	K, V, Hv := m.dims()
	n, P, C := b.n, m.InProj.Out, 2*K+V
	proj := b.mem.get(n * P)
	m.InProj.Forward(proj, x, n)

	o := b.mem.get(n * V)
	for _, wave := range b.waves {
		w := len(wave)
		st.slots = st.slots[:0]
		cin := b.mem.get(w * C)
		bs, as := b.mem.get(w*Hv), b.mem.get(w*Hv)
		for i, r := range wave {
			st.slots = append(st.slots, st.slot[b.seq[r]])
			row := proj[r*P : (r+1)*P]
			copy(cin[i*C:(i+1)*C], row[:C])
			copy(bs[i*Hv:(i+1)*Hv], row[C+V:C+V+Hv])
			copy(as[i*Hv:(i+1)*Hv], row[C+V+Hv:C+V+2*Hv])
		}
		cout := b.mem.get(w * C)
		if err := st.cache.Conv(st.slots, cin, cout); err != nil {
			return err
		}
		tensor.SiLUInPlace(cout)
		qs, ks, vs := b.mem.get(w*K), b.mem.get(w*K), b.mem.get(w*V)
		for i := range wave {
			row := cout[i*C : (i+1)*C]
			copy(qs[i*K:(i+1)*K], row[:K])
			copy(ks[i*K:(i+1)*K], row[K:2*K])
			copy(vs[i*V:(i+1)*V], row[2*K:])
		}
		ow := b.mem.get(w * V)
		if err := st.cache.Step(st.slots, replay.GDNInput{Q: qs, K: ks, V: vs, A: as, B: bs}, ow); err != nil {
			return err
		}
		for i, r := range wave {
			copy(o[r*V:(r+1)*V], ow[i*V:(i+1)*V])
		}
	}
	// Norm first (per value head), then the gate.
	m.Norm.Forward(o, o, n*Hv)
	for r := range n {
		z := proj[r*P+C : r*P+C+V]
		or := o[r*V : (r+1)*V]
		for i := range or {
			or[i] *= tensor.SiLU(z[i])
		}
	}
	m.OutProj.Forward(out, o, n)
	return nil
}

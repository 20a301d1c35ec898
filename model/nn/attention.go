package nn

import (
	"fmt"
	"math"

	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
)

// Attention is causal softmax attention with grouped key/value heads (query
// head h reads key/value head h/(Heads/KVHeads)), scale HeadDim^−½:
//
//	q, k, v = q_proj(x), k_proj(x), v_proj(x)
//	q, k    = rope(q_norm(q)), rope(k_norm(k))     (each optional)
//	o       = softmax(q·Kᵀ·scale)·V
//	out     = o_proj(o · sigmoid(gate))            (gate: Qwen's gated output)
//
// With Gated, q_proj yields per head [q (HeadDim); gate (HeadDim)].
type Attention struct {
	Heads, KVHeads, HeadDim int
	Q, K, V, O              Linear
	Gated                   bool
	QNorm, KNorm            *RMSNorm     // per-head norms over HeadDim, or nil
	Rope                    *tensor.Rope // nil: no positional encoding (NemotronH)
}

// Kind is hfconfig.Attention.
func (a *Attention) Kind() hfconfig.LayerKind { return hfconfig.Attention }

// Params is the number of weights.
func (a *Attention) Params() int {
	n := a.Q.Params() + a.K.Params() + a.V.Params() + a.O.Params()
	if a.QNorm != nil {
		n += len(a.QNorm.W)
	}
	if a.KNorm != nil {
		n += len(a.KNorm.W)
	}
	return n
}

// Validate checks that the weights fit the head counts.
func (a *Attention) Validate() error {
	if a.Heads <= 0 || a.KVHeads <= 0 || a.HeadDim <= 0 || a.Heads%a.KVHeads != 0 {
		return fmt.Errorf("attention: %d heads, %d kv heads, head dim %d", a.Heads, a.KVHeads, a.HeadDim)
	}
	qOut := a.Heads * a.HeadDim
	if a.Gated {
		qOut *= 2
	}
	for _, c := range []struct {
		name    string
		l       *Linear
		in, out int
	}{
		{"q_proj", &a.Q, a.Q.In, qOut},
		{"k_proj", &a.K, a.Q.In, a.KVHeads * a.HeadDim},
		{"v_proj", &a.V, a.Q.In, a.KVHeads * a.HeadDim},
		{"o_proj", &a.O, a.Heads * a.HeadDim, a.O.Out},
	} {
		if err := c.l.check(c.name); err != nil {
			return err
		}
		if c.l.In != c.in || c.l.Out != c.out {
			return fmt.Errorf("%s is %d×%d, want %d×%d", c.name, c.l.Out, c.l.In, c.out, c.in)
		}
	}
	for _, nm := range []*RMSNorm{a.QNorm, a.KNorm} {
		if nm != nil && len(nm.W) != a.HeadDim {
			return fmt.Errorf("q/k norm has %d weights, want %d", len(nm.W), a.HeadDim)
		}
	}
	if a.Rope != nil && a.Rope.RotaryDim > a.HeadDim {
		return fmt.Errorf("rotary dim %d exceeds head dim %d", a.Rope.RotaryDim, a.HeadDim)
	}
	return nil
}

// place puts the weights on be.
func (a *Attention) place(be Backend) {
	for _, l := range []*Linear{&a.Q, &a.K, &a.V, &a.O} {
		l.place(be)
	}
	for _, nm := range []*RMSNorm{a.QNorm, a.KNorm} {
		if nm != nil {
			nm.place(be)
		}
	}
}

// kvState is an attention layer's per-sequence state: its KV cache.
type kvState struct{ kv KVCache }

func (a *Attention) newState(be Backend, capacity int, _ replay.Options) (blockState, error) {
	return &kvState{kv: be.NewKV(capacity, a.KVHeads*a.HeadDim)}, nil
}

func (s *kvState) admit(seq int) error {
	s.kv.Truncate(seq, 0)
	return nil
}
func (s *kvState) evict(seq int) error { return s.admit(seq) }
func (s *kvState) stats() replay.Stats { return replay.Stats{} }
func (s *kvState) close()              { s.kv.Close() }

func (a *Attention) forward(b *batch, bst blockState, x, out Tensor) error {
	st := bst.(*kvState)
	be := b.be
	n, hd, H, Hkv := b.n, a.HeadDim, a.Heads, a.KVHeads
	qw, kw := H*hd, Hkv*hd
	qraw := b.mem.Alloc(n, a.Q.Out)
	a.Q.apply(be, qraw, x)
	k := b.mem.Alloc(n, kw)
	a.K.apply(be, k, x)
	v := b.mem.Alloc(n, kw)
	a.V.apply(be, v, x)

	q := qraw
	var gate Tensor
	if a.Gated {
		// q_proj yields per head [q; gate]: as rows of one head, the two
		// halves are column ranges.
		heads := qraw.Reshape(n*H, 2*hd)
		q, gate = b.mem.Alloc(n, qw), b.mem.Alloc(n, qw)
		be.Copy(q.Reshape(n*H, hd), heads.Columns(0, hd))
		be.Copy(gate.Reshape(n*H, hd), heads.Columns(hd, hd))
	}
	qh, kh := q.Reshape(n*H, hd), k.Reshape(n*Hkv, hd)
	if a.QNorm != nil {
		a.QNorm.apply(be, qh, qh)
	}
	if a.KNorm != nil {
		a.KNorm.apply(be, kh, kh)
	}
	if a.Rope != nil {
		be.Rope(qh, a.Rope, b.pos, H)
		be.Rope(kh, a.Rope, b.pos, Hkv)
	}
	if err := st.kv.Append(k, v, b.seq, b.pos); err != nil {
		return err
	}
	o := b.mem.Alloc(n, qw)
	st.kv.Attend(o, q, b.seq, b.pos, H, Hkv, hd, float32(1/math.Sqrt(float64(hd))))
	if a.Gated {
		be.MulSigmoid(o, gate)
	}
	a.O.apply(be, out, o)
	return nil
}

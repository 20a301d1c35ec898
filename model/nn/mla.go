package nn

import (
	"fmt"
	"math"

	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/replay"
)

// MLA is multi-head latent attention (DeepSeek-V2's MLA) as Kimi-Linear
// uses it: without RoPE, the rope-sized parts of the queries and keys
// taking part in the scores unrotated. Per position the cache keeps one
// latent shared by every head, from which each head's key and value are
// rebuilt:
//
//	q          = q_proj(x)                    per head [qn (NopeDim) ; qr (RopeDim)]
//	[c ; kr]   = kv_a_proj_with_mqa(x)        c: the latent (Rank), kr: a rope part shared by the heads
//	c          = rmsnorm(c)·w                 kv_a_layernorm
//	cache      ← [c ; kr]                     Rank + RopeDim values a position
//	[kn ; v]_h = kv_b_proj(c_t)               for every cached position t and head h
//	o_h        = softmax([qn ; qr]_h·[kn_h ; kr_t]ᵀ / √(NopeDim+RopeDim))·v_h
//	out        = o_proj(o)
//
// This is the straightforward form: every pass rebuilds each of its
// sequences' keys and values from all their cached latents (a product of
// Rank by Heads·(NopeDim+VDim) per position), where the absorbed form
// would fold kv_b_proj into the queries and outputs and attend over the
// latents themselves. With QA set, queries are q_b_proj(QNorm(q_a_proj(x)))
// (DeepSeek's query LoRA; Kimi-Linear has none).
type MLA struct {
	Heads   int
	NopeDim int // qk_nope_head_dim
	RopeDim int // qk_rope_head_dim (unrotated)
	VDim    int // v_head_dim
	Rank    int // kv_lora_rank

	Q      Linear   // q_proj, or q_b_proj after QA and QNorm
	QA     *Linear  // q_a_proj, or nil
	QNorm  *RMSNorm // q_a_layernorm, with QA
	KVA    Linear   // kv_a_proj_with_mqa: hidden → Rank + RopeDim
	KVNorm RMSNorm  // kv_a_layernorm over the latent
	KVB    Linear   // kv_b_proj: Rank → Heads·(NopeDim + VDim), per head [kn ; v]
	O      Linear   // o_proj: Heads·VDim → hidden
}

// Kind is hfconfig.LatentAttention.
func (a *MLA) Kind() hfconfig.LayerKind { return hfconfig.LatentAttention }

// Params is the number of weights.
func (a *MLA) Params() int {
	n := a.Q.Params() + a.KVA.Params() + len(a.KVNorm.W) + a.KVB.Params() + a.O.Params()
	if a.QA != nil {
		n += a.QA.Params() + len(a.QNorm.W)
	}
	return n
}

// headDim is the width of one head's query, key and value in the attention
// proper: the key width NopeDim+RopeDim, or VDim if that is larger, the
// shorter ones padded with zeros (which add nothing to a score or an
// output).
func (a *MLA) headDim() int { return max(a.NopeDim+a.RopeDim, a.VDim) }

// Validate checks that the weights fit the sizes.
func (a *MLA) Validate() error {
	if a.Heads <= 0 || a.NopeDim <= 0 || a.RopeDim < 0 || a.VDim <= 0 || a.Rank <= 0 {
		return fmt.Errorf("mla: %d heads, nope %d, rope %d, v %d, rank %d", a.Heads, a.NopeDim, a.RopeDim, a.VDim, a.Rank)
	}
	hidden, qIn := a.KVA.In, a.KVA.In
	if a.QA != nil {
		if a.QNorm == nil {
			return fmt.Errorf("mla: q_a_proj without q_a_layernorm")
		}
		if err := a.QA.check("q_a_proj"); err != nil {
			return err
		}
		if a.QA.In != hidden || len(a.QNorm.W) != a.QA.Out {
			return fmt.Errorf("mla: q_a_proj is %d×%d with a norm of %d, want inputs %d", a.QA.Out, a.QA.In, len(a.QNorm.W), hidden)
		}
		qIn = a.QA.Out
	}
	for _, c := range []struct {
		name    string
		l       *Linear
		in, out int
	}{
		{"q_proj", &a.Q, qIn, a.Heads * (a.NopeDim + a.RopeDim)},
		{"kv_a_proj_with_mqa", &a.KVA, hidden, a.Rank + a.RopeDim},
		{"kv_b_proj", &a.KVB, a.Rank, a.Heads * (a.NopeDim + a.VDim)},
		{"o_proj", &a.O, a.Heads * a.VDim, a.O.Out},
	} {
		if err := c.l.check(c.name); err != nil {
			return err
		}
		if c.l.In != c.in || c.l.Out != c.out {
			return fmt.Errorf("%s is %d×%d, want %d×%d", c.name, c.l.Out, c.l.In, c.out, c.in)
		}
	}
	if len(a.KVNorm.W) != a.Rank {
		return fmt.Errorf("kv_a_layernorm has %d weights, want %d", len(a.KVNorm.W), a.Rank)
	}
	return nil
}

// place puts the weights on be.
func (a *MLA) place(be Backend) {
	for _, l := range []*Linear{&a.Q, &a.KVA, &a.KVB, &a.O} {
		l.place(be)
	}
	a.KVNorm.place(be)
	if a.QA != nil {
		a.QA.place(be)
		a.QNorm.place(be)
	}
}

// mlaState is a latent-attention layer's per-sequence state, its latents,
// and the scratch of its passes: one sequence's keys and values rebuilt
// from them, as a KV cache of one sequence that Attend reads.
type mlaState struct {
	lat       LatentCache
	kv        KVCache
	seqs, all []int32 // the scratch sequence's rows (all 0) and positions 0, 1, ...
	pos       []int32 // the positions of one sequence's rows of the pass
	rep       []int32 // the rows that broadcast the rope part over the heads
	rows      []int32
	order     []int32 // the pass's sequences in order of first appearance
}

func (a *MLA) newState(be Backend, capacity int, _ replay.Options) (blockState, error) {
	return &mlaState{lat: be.NewLatent(capacity, a.Rank+a.RopeDim), kv: be.NewKV(1, a.Heads*a.headDim())}, nil
}

func (s *mlaState) admit(seq int) error {
	s.lat.Truncate(seq, 0)
	return nil
}
func (s *mlaState) evict(seq int) error { return s.admit(seq) }
func (s *mlaState) stats() replay.Stats { return replay.Stats{} }
func (s *mlaState) close() {
	s.lat.Close()
	s.kv.Close()
}

func (a *MLA) forward(b *batch, bst blockState, x, out Tensor) error {
	st := bst.(*mlaState)
	be := b.be
	n, H, hd := b.n, a.Heads, a.headDim()
	dq := a.NopeDim + a.RopeDim

	// Queries, padded per head to hd.
	qin := x
	if a.QA != nil {
		qin = b.mem.Alloc(n, a.QA.Out)
		a.QA.apply(be, qin, x)
		a.QNorm.apply(be, qin, qin)
	}
	q := b.mem.Alloc(n, H*dq)
	a.Q.apply(be, q, qin)
	if hd != dq {
		qp := b.mem.Zeros(n, H*hd)
		be.Copy(qp.Reshape(n*H, hd).Columns(0, dq), q.Reshape(n*H, dq))
		q = qp
	}

	// The rows' latents, normalised, into the cache.
	lat := b.mem.Alloc(n, a.Rank+a.RopeDim)
	a.KVA.apply(be, lat, x)
	c := lat.Columns(0, a.Rank)
	a.KVNorm.apply(be, c, c)
	if err := st.lat.Append(lat, b.seq, b.pos); err != nil {
		return err
	}

	o := b.mem.Alloc(n, H*hd)
	st.order = st.order[:0]
	for _, sq := range b.seq {
		seen := false
		for _, p := range st.order {
			seen = seen || p == sq
		}
		if !seen {
			st.order = append(st.order, sq)
		}
	}
	for _, seq := range st.order {
		st.rows, st.pos = st.rows[:0], st.pos[:0]
		for i, sq := range b.seq {
			if sq == seq {
				st.rows = append(st.rows, int32(i))
				st.pos = append(st.pos, b.pos[i])
			}
		}
		mark := b.mem.Mark()
		if err := a.attend(b, st, int(seq), q, o); err != nil {
			return err
		}
		b.mem.Rewind(mark)
	}

	ov := o
	if hd != a.VDim {
		ov = b.mem.Alloc(n, H*a.VDim)
		be.Copy(ov.Reshape(n*H, a.VDim), o.Reshape(n*H, hd).Columns(0, a.VDim))
	}
	a.O.apply(be, out, ov)
	return nil
}

// attend writes to o the attention of sequence seq's rows of the pass
// (st.rows, at positions st.pos) over all its cached positions: their keys
// and values rebuilt from the latents, put in the scratch KV cache as one
// sequence, and read by the backend's causal attention.
func (a *MLA) attend(b *batch, st *mlaState, seq int, q, o Tensor) error {
	be := b.be
	H, hd, R, dn, dr, dv := a.Heads, a.headDim(), a.Rank, a.NopeDim, a.RopeDim, a.VDim
	T := st.lat.Len(seq)
	lat := b.mem.Alloc(T, R+dr)
	st.lat.Read(lat, seq, T)
	kvb := b.mem.Alloc(T, H*(dn+dv))
	a.KVB.apply(be, kvb, b.packed(lat.Columns(0, R)))
	per := kvb.Reshape(T*H, dn+dv)

	k, v := b.mem.Alloc(T, H*hd), b.mem.Alloc(T, H*hd)
	if hd > dn+dr {
		k = b.mem.Zeros(T, H*hd)
	}
	if hd > dv {
		v = b.mem.Zeros(T, H*hd)
	}
	kh, vh := k.Reshape(T*H, hd), v.Reshape(T*H, hd)
	be.Copy(kh.Columns(0, dn), per.Columns(0, dn))
	if dr > 0 {
		// The rope part of position t is every head's: row t·H+h of the
		// keys reads row t of the latents.
		st.rep = st.rep[:0]
		for t := range T {
			for range H {
				st.rep = append(st.rep, int32(t))
			}
		}
		be.Gather(kh.Columns(dn, dr), lat.Columns(R, dr), st.rep)
	}
	be.Copy(vh.Columns(0, dv), per.Columns(dn, dv))

	st.kv.Truncate(0, 0)
	for len(st.all) < T {
		st.seqs, st.all = append(st.seqs, 0), append(st.all, int32(len(st.all)))
	}
	if err := st.kv.Append(k, v, st.seqs[:T], st.all[:T]); err != nil {
		return err
	}
	m := len(st.rows)
	qs := b.mem.Alloc(m, H*hd)
	be.Gather(qs, q, st.rows)
	os := b.mem.Alloc(m, H*hd)
	st.kv.Attend(os, qs, st.seqs[:m], st.pos, H, H, hd, float32(1/math.Sqrt(float64(dn+dr))))
	be.Scatter(o, os, st.rows)
	return nil
}

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

// kvState holds each sequence's keys and values, [position][KVHeads·HeadDim].
type kvState struct {
	k, v [][]float32
	job  attendJob
}

// attendJob is the softmax attention of one forward over (row, head) pairs.
type attendJob struct {
	b              *batch
	st             *kvState
	q, o           []float32
	heads, kvHeads int
	hd             int
	scale          float32
}

// run computes o for the (row, head) pairs [lo, hi), with scores as scratch.
func (j *attendJob) run(lo, hi int, scores []float32) {
	H, hd := j.heads, j.hd
	qw, kw := H*hd, j.kvHeads*hd
	for i := lo; i < hi; i++ {
		r, h := i/H, i%H
		T := j.b.pos[r] + 1
		keys, vals := j.st.k[j.b.seq[r]], j.st.v[j.b.seq[r]]
		qh := j.q[r*qw+h*hd : r*qw+(h+1)*hd]
		off := (h / (H / j.kvHeads)) * hd // GQA: the key/value head of query head h
		sc := scores[:T]
		for t := range T {
			sc[t] = tensor.Dot(qh, keys[t*kw+off:t*kw+off+hd]) * j.scale
		}
		tensor.Softmax(sc)
		oh := j.o[r*qw+h*hd : r*qw+(h+1)*hd]
		for t, p := range sc {
			tensor.Axpy(oh, p, vals[t*kw+off:t*kw+off+hd])
		}
	}
}

func (a *Attention) newState(capacity int, _ replay.Options) (blockState, error) {
	return &kvState{k: make([][]float32, capacity), v: make([][]float32, capacity)}, nil
}

func (s *kvState) admit(seq int) error {
	s.k[seq], s.v[seq] = s.k[seq][:0], s.v[seq][:0]
	return nil
}
func (s *kvState) evict(seq int) error { return s.admit(seq) }
func (s *kvState) stats() replay.Stats { return replay.Stats{} }
func (s *kvState) close()              {}

func (a *Attention) forward(b *batch, bst blockState, x, out []float32) error {
	st := bst.(*kvState)
	n, hd, H, Hkv := b.n, a.HeadDim, a.Heads, a.KVHeads
	qw, kw := H*hd, Hkv*hd
	qraw := b.mem.get(n * a.Q.Out)
	a.Q.Forward(qraw, x, n)
	k := b.mem.get(n * kw)
	a.K.Forward(k, x, n)
	v := b.mem.get(n * kw)
	a.V.Forward(v, x, n)

	q := qraw
	var gate []float32
	if a.Gated {
		q, gate = b.mem.get(n*qw), b.mem.get(n*qw)
		for r := range n {
			for h := range H {
				src := qraw[r*2*qw+h*2*hd:]
				copy(q[r*qw+h*hd:r*qw+(h+1)*hd], src[:hd])
				copy(gate[r*qw+h*hd:r*qw+(h+1)*hd], src[hd:2*hd])
			}
		}
	}
	if a.QNorm != nil {
		a.QNorm.Forward(q, q, n*H)
	}
	if a.KNorm != nil {
		a.KNorm.Forward(k, k, n*Hkv)
	}
	for r := range n {
		if a.Rope != nil {
			for h := range H {
				a.Rope.Apply(q[r*qw+h*hd:r*qw+(h+1)*hd], b.pos[r])
			}
			for h := range Hkv {
				a.Rope.Apply(k[r*kw+h*hd:r*kw+(h+1)*hd], b.pos[r])
			}
		}
		sq := b.seq[r]
		if got := len(st.k[sq]) / kw; got != b.pos[r] {
			return fmt.Errorf("sequence %d has %d cached positions, row is at position %d", sq, got, b.pos[r])
		}
		st.k[sq] = append(st.k[sq], k[r*kw:(r+1)*kw]...)
		st.v[sq] = append(st.v[sq], v[r*kw:(r+1)*kw]...)
	}

	o := b.mem.get(n * qw)
	scale := float32(1 / math.Sqrt(float64(hd)))
	maxT := 0
	var work int64
	for r := range n {
		maxT = max(maxT, b.pos[r]+1)
		work += int64(b.pos[r]+1) * int64(2*qw)
	}
	job := &st.job
	*job = attendJob{b: b, st: st, q: q, o: o, heads: H, kvHeads: Hkv, hd: hd, scale: scale}
	if work < 1<<16 {
		job.run(0, n*H, b.mem.get(maxT))
	} else {
		tensor.Parallel(n*H, 1, work, func(lo, hi int) {
			job.run(lo, hi, make([]float32, maxT)) // per goroutine: the arena is not shared
		})
	}
	job.b, job.q, job.o = nil, nil, nil
	if a.Gated {
		for i, g := range gate {
			o[i] *= tensor.Sigmoid(g)
		}
	}
	a.O.Forward(out, o, n)
	return nil
}

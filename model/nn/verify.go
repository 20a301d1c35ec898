package nn

import (
	"context"
	"errors"
	"fmt"

	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
)

// verifier is a block with a speculative verify path of its own: the SSM
// mixers, whose caches verify drafts against one checkpoint (docs/DESIGN.md 2.3).
// Blocks without it (attention, MLP, MoE) run their plain forward over the
// verify rows: attention appends the rows' keys and values, which Commit
// truncates.
type verifier interface {
	verify(b *batch, vp *verifyPlan, st blockState, x, out []float32) error
}

// verifyPlan groups the rows of one Verify by sequence.
type verifyPlan struct {
	seqs   []int   // sequences, in order of first appearance
	rows   [][]int // rows[i]: the row indices of seqs[i], in token order
	counts []int   // len(rows[i]); nil when every sequence has stride rows
	stride int     // the most rows of one sequence: the caches' T
}

func newVerifyPlan(rows []Row, capacity int) *verifyPlan {
	vp := &verifyPlan{}
	at := make([]int, capacity)
	for i := range at {
		at[i] = -1
	}
	for i, r := range rows {
		k := at[r.Seq]
		if k < 0 {
			k = len(vp.seqs)
			at[r.Seq] = k
			vp.seqs = append(vp.seqs, int(r.Seq))
			vp.rows = append(vp.rows, nil)
		}
		vp.rows[k] = append(vp.rows[k], i)
		vp.stride = max(vp.stride, len(vp.rows[k]))
	}
	for _, rs := range vp.rows {
		if len(rs) != vp.stride {
			vp.counts = make([]int, len(vp.rows))
			for i, rs := range vp.rows {
				vp.counts[i] = len(rs)
			}
			break
		}
	}
	return vp
}

// Verify runs a speculative verify forward (docs/DESIGN.md 2.3) and writes the
// logits of the rows that ask for them, in row order. rows hold, for each
// sequence, up to State.Options().MaxDraft tokens that follow its committed
// history, in order: in speculative decoding, its newest token and the
// drafts after it. Positions do not advance and nothing is committed: SSM
// layers run the rows through their caches' ConvVerify and Verify (replay
// mode appends them to the ring; baseline mode writes one state per row) and
// attention layers append their keys and values. Commit then keeps a prefix
// of each sequence's rows. A Verify replaces the uncommitted rows of an
// earlier Verify of the same sequence.
//
// A verify row is a decode step computed alongside the others, so the SSM
// layers use the one-token Δ bounds (Mamba2Mixer.StepDelta): the outputs are
// those of sequential decoding, which makes speculation lossless. (transformers
// clamps Δ on any multi-token forward, so its assisted generation differs from
// its own greedy decoding on NemotronH models with time_step_min > 0.)
//
// On error the batch's sequences are in an unknown state: evict them.
func (d *Decoder) Verify(ctx context.Context, s *State, rows []Row, logits []float32) error {
	nLogits, err := d.checkRows("verify", s, rows, logits)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	vp := newVerifyPlan(rows, len(s.live))
	if d.hasSSM() && vp.stride > s.opt.MaxDraft {
		return fmt.Errorf("verify: %d rows for one sequence, the state allows %d (replay.Options.MaxDraft)", vp.stride, s.opt.MaxDraft)
	}
	// Drop the rows of an earlier, uncommitted verify from the KV caches.
	d.eachKV(s, func(st *kvState, kw int) {
		for _, q := range vp.seqs {
			st.truncate(q, s.pos[q]*kw)
		}
	})
	s.mem.reset()
	b := &s.b
	b.mem = &s.mem
	b.plan(s, rows)
	n, H := len(rows), d.Hidden

	h := s.mem.get(n * H)
	for i, r := range rows {
		copy(h[i*H:(i+1)*H], d.Embed[r.Token*H:(r.Token+1)*H])
	}
	xn := s.mem.get(n * H)
	out := s.mem.get(n * H)
	for li, l := range d.Layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		for bi, br := range l.Branches {
			br.Norm.Forward(xn, h, n)
			clear(out)
			var err error
			if v, ok := br.Block.(verifier); ok {
				err = v.verify(b, vp, s.blocks[li][bi], xn, out)
			} else {
				err = br.Block.forward(b, s.blocks[li][bi], xn, out)
			}
			if err != nil {
				return fmt.Errorf("verify: layer %d %v: %w", li, br.Block.Kind(), err)
			}
			tensor.Add(h, out)
		}
		if s.OnLayer != nil {
			s.OnLayer(li, h)
		}
	}
	if nLogits > 0 {
		sel := s.mem.get(nLogits * H)
		k := 0
		for i, r := range rows {
			if r.Logits {
				d.FinalNorm.Forward(sel[k*H:(k+1)*H], h[i*H:(i+1)*H], 1)
				k++
			}
		}
		d.LMHead.Forward(logits[:nLogits*d.Vocab], sel, nLogits)
	}
	return nil
}

// Commit keeps the first accepted[i] rows of seqs[i]'s last Verify and
// advances its position by that many: SSM caches move their ring cursors
// (or, in baseline mode, select the accepted row's state) and shift their
// conv windows; attention layers drop the keys and values of the rest.
// Nothing is recomputed or copied.
func (d *Decoder) Commit(s *State, seqs []Seq, accepted []int) error {
	if s.dec != d {
		return errors.New("commit: state belongs to another model")
	}
	if len(seqs) != len(accepted) {
		return fmt.Errorf("commit: %d accepted counts for %d sequences", len(accepted), len(seqs))
	}
	for i, q := range seqs {
		if err := s.check(q); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		if accepted[i] < 0 {
			return fmt.Errorf("commit: sequence %d accepts %d rows", q, accepted[i])
		}
	}
	// Check against the KV caches before anything moves; the SSM caches
	// check their pending counts themselves, before they move.
	var err error
	d.eachKV(s, func(st *kvState, kw int) {
		for i, q := range seqs {
			if pending := len(st.k[q])/kw - s.pos[q]; err == nil && accepted[i] > pending {
				err = fmt.Errorf("commit: sequence %d accepts %d of %d verified rows", q, accepted[i], pending)
			}
		}
	})
	if err != nil {
		return err
	}
	slots := make([]replay.Slot, len(seqs))
	for li, row := range s.blocks {
		for _, bst := range row {
			var err error
			switch st := bst.(type) {
			case *mamba2State:
				for i, q := range seqs {
					slots[i] = st.slot[q]
				}
				err = st.cache.Commit(slots, accepted)
			case *gdnState:
				for i, q := range seqs {
					slots[i] = st.slot[q]
				}
				err = st.cache.Commit(slots, accepted)
			}
			if err != nil {
				return fmt.Errorf("layer %d: %w", li, err)
			}
		}
	}
	d.eachKV(s, func(st *kvState, kw int) {
		for i, q := range seqs {
			st.truncate(int(q), (s.pos[q]+accepted[i])*kw)
		}
	})
	for i, q := range seqs {
		s.pos[q] += accepted[i]
	}
	return nil
}

func (d *Decoder) hasSSM() bool {
	for _, l := range d.Layers {
		for _, br := range l.Branches {
			if _, ok := br.Block.(verifier); ok {
				return true
			}
		}
	}
	return false
}

// eachKV calls fn with every attention layer's KV state and its width per
// position.
func (d *Decoder) eachKV(s *State, fn func(st *kvState, kw int)) {
	for li, l := range d.Layers {
		for bi, br := range l.Branches {
			if a, ok := br.Block.(*Attention); ok {
				fn(s.blocks[li][bi].(*kvState), a.KVHeads*a.HeadDim)
			}
		}
	}
}

// truncate keeps the first n values of sequence seq's keys and values.
func (s *kvState) truncate(seq, n int) {
	if len(s.k[seq]) > n {
		s.k[seq], s.v[seq] = s.k[seq][:n], s.v[seq][:n]
	}
}

// gather copies the per-sequence rows of a verify into [seq][stride] blocks
// of width w (rows past a sequence's count stay zero): src row r is at
// src[r·pitch+off:], w values.
func (vp *verifyPlan) gather(dst, src []float32, pitch, off, w int) {
	for i, rs := range vp.rows {
		for k, r := range rs {
			copy(dst[(i*vp.stride+k)*w:(i*vp.stride+k+1)*w], src[r*pitch+off:r*pitch+off+w])
		}
	}
}

// scatter is the inverse of gather for outputs of width w.
func (vp *verifyPlan) scatter(dst, src []float32, w int) {
	for i, rs := range vp.rows {
		for k, r := range rs {
			copy(dst[r*w:(r+1)*w], src[(i*vp.stride+k)*w:(i*vp.stride+k+1)*w])
		}
	}
}

// verify is Mamba2Mixer's forward over the rows of a Verify: the rows of each
// sequence go through its cache's ConvVerify and Verify in one call.
func (m *Mamba2Mixer) verify(b *batch, vp *verifyPlan, bst blockState, x, out []float32) error {
	st := bst.(*mamba2State)
	I, GN, H := m.dims()
	n, P, C := b.n, m.InProj.Out, I+2*GN
	proj := b.mem.get(n * P)
	m.InProj.Forward(proj, x, n)

	S, T := len(vp.seqs), vp.stride
	st.slots = st.slots[:0]
	for _, q := range vp.seqs {
		st.slots = append(st.slots, st.slot[q])
	}
	cin := b.mem.get(S * T * C)
	dt := b.mem.get(S * T * H)
	vp.gather(cin, proj, P, I, C)
	vp.gather(dt, proj, P, I+C, H)
	for r := 0; r < S*T; r++ {
		clampDelta(dt[r*H:(r+1)*H], m.DtBias, m.StepDelta)
	}
	cout := b.mem.get(S * T * C)
	if err := st.cache.ConvVerify(st.slots, T, cin, cout); err != nil {
		return err
	}
	tensor.SiLUInPlace(cout)
	xs, Bs, Cs := b.mem.get(S*T*I), b.mem.get(S*T*GN), b.mem.get(S*T*GN)
	for r := 0; r < S*T; r++ {
		row := cout[r*C : (r+1)*C]
		copy(xs[r*I:(r+1)*I], row[:I])
		copy(Bs[r*GN:(r+1)*GN], row[I:I+GN])
		copy(Cs[r*GN:(r+1)*GN], row[I+GN:])
	}
	yv := b.mem.get(S * T * I)
	if err := st.cache.Verify(st.slots, T, vp.counts, replay.Mamba2Input{X: xs, B: Bs, C: Cs, Dt: dt}, yv); err != nil {
		return err
	}
	y := b.mem.get(n * I)
	vp.scatter(y, yv, I)
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

// verify is GDNMixer's forward over the rows of a Verify.
func (m *GDNMixer) verify(b *batch, vp *verifyPlan, bst blockState, x, out []float32) error {
	st := bst.(*gdnState)
	K, V, Hv := m.dims()
	n, P, C := b.n, m.InProj.Out, 2*K+V
	proj := b.mem.get(n * P)
	m.InProj.Forward(proj, x, n)

	S, T := len(vp.seqs), vp.stride
	st.slots = st.slots[:0]
	for _, q := range vp.seqs {
		st.slots = append(st.slots, st.slot[q])
	}
	cin := b.mem.get(S * T * C)
	bs, as := b.mem.get(S*T*Hv), b.mem.get(S*T*Hv)
	vp.gather(cin, proj, P, 0, C)
	vp.gather(bs, proj, P, C+V, Hv)
	vp.gather(as, proj, P, C+V+Hv, Hv)
	cout := b.mem.get(S * T * C)
	if err := st.cache.ConvVerify(st.slots, T, cin, cout); err != nil {
		return err
	}
	tensor.SiLUInPlace(cout)
	qs, ks, vs := b.mem.get(S*T*K), b.mem.get(S*T*K), b.mem.get(S*T*V)
	for r := 0; r < S*T; r++ {
		row := cout[r*C : (r+1)*C]
		copy(qs[r*K:(r+1)*K], row[:K])
		copy(ks[r*K:(r+1)*K], row[K:2*K])
		copy(vs[r*V:(r+1)*V], row[2*K:])
	}
	ov := b.mem.get(S * T * V)
	if err := st.cache.Verify(st.slots, T, vp.counts, replay.GDNInput{Q: qs, K: ks, V: vs, A: as, B: bs}, ov); err != nil {
		return err
	}
	o := b.mem.get(n * V)
	vp.scatter(o, ov, V)
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

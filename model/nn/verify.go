package nn

import (
	"context"
	"errors"
	"fmt"

	"github.com/replayssm/replayssm/replay"
)

// verifier is a block with a speculative verify path of its own: the SSM
// mixers, whose caches verify drafts against one checkpoint (docs/DESIGN.md 2.3).
// Blocks without it (attention, MLP, MoE) run their plain forward over the
// verify rows: attention appends the rows' keys and values, which Commit
// truncates.
type verifier interface {
	verify(b *batch, vp *verifyPlan, st blockState, x, out Tensor) error
}

// verifyPlan groups the rows of one Verify by sequence.
type verifyPlan struct {
	seqs   []int   // sequences, in order of first appearance
	rows   [][]int // rows[i]: the row indices of seqs[i], in token order
	counts []int   // len(rows[i]); nil when every sequence has stride rows
	stride int     // the most rows of one sequence: the caches' T
	index  []int32 // [seq][stride]: the row of each draft, −1 past a sequence's count
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
	vp.index = make([]int32, len(vp.rows)*vp.stride)
	for i, rs := range vp.rows {
		for k := range vp.stride {
			vp.index[i*vp.stride+k] = -1
			if k < len(rs) {
				vp.index[i*vp.stride+k] = int32(rs[k])
			}
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
	nLogits, err := d.checkRows("verify", s, rows, len(logits)/d.Vocab)
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
	d.eachKV(s, func(kv positions) {
		for _, q := range vp.seqs {
			kv.Truncate(q, s.pos[q])
		}
	})
	s.mem.Reset()
	b := &s.b
	b.plan(s, rows, false)
	h := s.mem.Alloc(len(rows), d.Hidden)
	d.be.Embed(h, d.embed, b.tok)
	if err := d.layers(ctx, s, h, vp, "verify"); err != nil {
		return err
	}
	return d.logits(s, rows, h, func(lg Tensor) { d.be.Download(logits[:nLogits*d.Vocab], lg) })
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
	d.eachKV(s, func(kv positions) {
		for i, q := range seqs {
			if pending := kv.Len(int(q)) - s.pos[q]; err == nil && accepted[i] > pending {
				err = fmt.Errorf("commit: sequence %d accepts %d of %d verified rows", q, accepted[i], pending)
			}
		}
	})
	if err != nil {
		return err
	}
	for li, row := range s.blocks {
		for _, bst := range row {
			if c, ok := bst.(committer); ok {
				if err := c.commit(seqs, accepted); err != nil {
					return fmt.Errorf("layer %d: %w", li, err)
				}
			}
		}
	}
	d.eachKV(s, func(kv positions) {
		for i, q := range seqs {
			kv.Truncate(int(q), s.pos[q]+accepted[i])
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

// positions is what Verify, Commit and the MTP head move of an attention
// layer's per-position state: a KVCache, or a latent-attention layer's
// LatentCache.
type positions interface {
	Len(seq int) int
	Truncate(seq, n int)
}

// eachKV calls fn with every attention layer's per-position cache.
func (d *Decoder) eachKV(s *State, fn func(kv positions)) {
	for li, l := range d.Layers {
		for bi := range l.Branches {
			switch st := s.blocks[li][bi].(type) {
			case *kvState:
				fn(st.kv)
			case *mlaState:
				fn(st.lat)
			}
		}
	}
}

// runVerify is runSSM for a Verify: every sequence's rows through the
// cache's ConvVerify and Verify in one call; it returns the outputs
// (width values a row) as b.n rows.
func runVerify[In any](b *batch, vp *verifyPlan, st *ssmState[In], width int,
	inputs func(rows []int32, cc convCall) (In, error)) (Tensor, error) {
	c, slot, slots := st.cache, st.slot, &st.slots
	sl := (*slots)[:0]
	for _, q := range vp.seqs {
		sl = append(sl, slot[q])
	}
	*slots = sl
	T := vp.stride
	in, err := inputs(vp.index, convCall{c: c, slots: sl, op: convVerify, T: T})
	if err != nil {
		return Tensor{}, err
	}
	yv := b.mem.Alloc(len(vp.index), width)
	if err := c.Verify(sl, T, vp.counts, in, yv); err != nil {
		return Tensor{}, err
	}
	y := b.mem.Zeros(b.n, width) // rows outside the plan (none today) stay defined
	b.be.Scatter(y, yv, vp.index)
	return y, nil
}

// verify is Mamba2Mixer's forward over the rows of a Verify: the rows of each
// sequence go through its cache's ConvVerify and Verify in one call.
func (m *Mamba2Mixer) verify(b *batch, vp *verifyPlan, bst blockState, x, out Tensor) error {
	st := bst.(*ssmState[replay.Mamba2Batch[Tensor]])
	I, _, _ := m.dims()
	proj := b.mem.Alloc(b.n, m.InProj.Out)
	m.InProj.apply(b.be, proj, x)
	y, err := runVerify(b, vp, st, I, func(rows []int32, cc convCall) (replay.Mamba2Batch[Tensor], error) {
		return m.inputs(b, proj, rows, true, cc)
	})
	if err != nil {
		return err
	}
	m.gateNormOut(b.be, proj, y, out)
	return nil
}

// verify is GDNMixer's forward over the rows of a Verify.
func (m *GDNMixer) verify(b *batch, vp *verifyPlan, bst blockState, x, out Tensor) error {
	st := bst.(*ssmState[replay.GDNBatch[Tensor]])
	_, V, _ := m.dims()
	proj := b.mem.Alloc(b.n, m.InProj.Out)
	m.InProj.apply(b.be, proj, x)
	o, err := runVerify(b, vp, st, V, func(rows []int32, cc convCall) (replay.GDNBatch[Tensor], error) {
		return m.inputs(b, proj, rows, cc)
	})
	if err != nil {
		return err
	}
	m.normGateOut(b.be, proj, o, out)
	return nil
}

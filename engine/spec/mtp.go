package spec

import (
	"context"
	"errors"
	"fmt"

	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
)

// MTP drafts with the target's multi-token-prediction head (nn.MTP): greedy
// tokens, so its drafts are deterministic (q one-hot).
//
// The head needs the target's hidden states, which it takes from the
// target's own forwards: NewMTP hooks the target state's OnLayer and keeps,
// for each sequence, the final-normed hidden state of every position the
// target runs (prefill, verify rows) until the head has consumed it. A
// Request's Seq must therefore be the target state's nn.Seq of the
// sequence, as the engine's loop passes it.
//
// Per proposal, with history x[0..L−1] (the target has run x[0..L−2] at
// least): the head's committed rows are t = 0..L−2 (row t: hidden t, token
// t+1, at position t), so the new ones run in one committing Forward whose
// last row gives draft 1; draft j+1 comes from an uncommitted row with the
// head's own output of the previous row as hidden and draft j as token.
// The next proposal's committing Forward drops those chained rows. Rejected
// target rows cost nothing here: their hidden states are overwritten by the
// next verify before the head reads them.
//
// An MTP drafter is not safe for concurrent use.
type MTP struct {
	head      *nn.MTP
	target    *nn.Decoder
	tst       *nn.State
	st        *nn.State
	maxDrafts int
	// DraftVocab, when in (0, vocabulary), limits the drafts to token ids
	// below it: the head's logits are computed for those rows of the LM
	// head only, which is most of the drafting cost of a small model
	// (byte-level BPE ids grow with merge order, so low ids are the common
	// tokens). Drafts need not be the head's exact argmax: verification
	// keeps the output exact either way. 0 drafts from the whole vocabulary.
	DraftVocab int
	prev       func(layer int, h []float32)
	seqs       map[int]*mtpSeq

	rows   []nn.Row
	hidden []float32
	out    []float32
	logit  []float32
	sel    []float32
	idx    []int
	at     []int
}

type mtpSeq struct {
	q        nn.Seq
	admitted bool
	fed      int       // head rows committed: rows 0..fed−1
	base     int       // position of hid's first state
	hid      []float32 // target hidden states (final-normed) of positions base…
	last     []float32 // the head's output for the newest row
}

// NewMTP builds a drafter on head for the target decoder whose state is
// targetState (it sets targetState.OnLayer, calling any hook already there
// first; Close restores it), for up to capacity sequences, proposing up to
// maxDrafts tokens each.
func NewMTP(head *nn.MTP, target *nn.Decoder, targetState *nn.State, capacity, maxDrafts int) (*MTP, error) {
	if head == nil || target == nil || targetState == nil {
		return nil, errors.New("mtp drafter: no head, target or target state")
	}
	if maxDrafts < 1 || maxDrafts > replay.MaxDraftLimit {
		return nil, fmt.Errorf("mtp drafter: %d drafts out of range [1, %d]", maxDrafts, replay.MaxDraftLimit)
	}
	if head.Dec.Hidden != target.Hidden || head.Dec.Vocab != target.Vocab {
		return nil, fmt.Errorf("mtp drafter: head is %d wide over %d tokens, target %d over %d",
			head.Dec.Hidden, head.Dec.Vocab, target.Hidden, target.Vocab)
	}
	st, err := head.Dec.NewState(capacity, replay.Options{})
	if err != nil {
		return nil, fmt.Errorf("mtp drafter: %w", err)
	}
	m := &MTP{head: head, target: target, tst: targetState, st: st, maxDrafts: maxDrafts,
		prev: targetState.OnLayer, seqs: map[int]*mtpSeq{}}
	targetState.OnLayer = m.onLayer
	return m, nil
}

// Close releases the head's state and unhooks the target state.
func (m *MTP) Close() {
	m.tst.OnLayer = m.prev
	m.st.Close()
}

// Release forgets a sequence.
func (m *MTP) Release(seq int) {
	if s, ok := m.seqs[seq]; ok {
		if s.admitted {
			_ = m.st.Evict(s.q)
		}
		delete(m.seqs, seq)
	}
}

// onLayer keeps the target's final-normed hidden states of the rows it runs.
func (m *MTP) onLayer(layer int, h []float32) {
	if m.prev != nil {
		m.prev(layer, h)
	}
	if layer != len(m.target.Layers)-1 {
		return
	}
	H := m.target.Hidden
	for i := range len(h) / H {
		q, pos := m.tst.Row(i)
		s := m.seqs[int(q)]
		if s != nil && pos == 0 && (s.fed > 0 || s.base > 0 || len(s.hid) > 0) {
			m.Release(int(q)) // a new sequence in a reused slot
			s = nil
		}
		if s == nil {
			s = &mtpSeq{}
			m.seqs[int(q)] = s
		}
		k := pos - s.base
		if k < 0 {
			continue
		}
		if need := (k + 1) * H; len(s.hid) < need {
			if cap(s.hid) >= need {
				s.hid = s.hid[:need]
			} else {
				s.hid = append(s.hid, make([]float32, need-len(s.hid))...)
			}
		}
		m.target.FinalNorm.Forward(s.hid[k*H:(k+1)*H], h[i*H:(i+1)*H], 1)
	}
}

// Propose fills each request's drafts with the head's greedy tokens.
func (m *MTP) Propose(ctx context.Context, reqs []Request) error {
	H, V := m.target.Hidden, m.target.Vocab
	m.rows, m.hidden, m.at = m.rows[:0], m.hidden[:0], m.at[:0]
	for i := range reqs {
		r := &reqs[i]
		r.Drafts, r.Probs = r.Drafts[:0], nil
		r.Max = min(r.Max, m.maxDrafts)
		L := len(r.History)
		s := m.seqs[r.Seq]
		if r.Max <= 0 || L < 2 || s == nil || s.fed > L-2 {
			continue
		}
		// The target's hidden states of positions fed..L−2 must be there.
		if s.base > s.fed || (L-1-s.base)*H > len(s.hid) {
			continue
		}
		for t := s.fed; t <= L-2; t++ {
			if id := r.History[t+1]; id < 0 || id >= V {
				return fmt.Errorf("mtp drafter: token %d outside the vocabulary [0, %d)", id, V)
			}
		}
		if !s.admitted {
			q, err := m.st.Admit()
			if err != nil {
				return fmt.Errorf("mtp drafter: %w", err)
			}
			s.q, s.admitted = q, true
		}
		for t := s.fed; t <= L-2; t++ {
			m.rows = append(m.rows, nn.Row{Seq: s.q, Token: r.History[t+1], Logits: t == L-2})
			m.hidden = append(m.hidden, s.hid[(t-s.base)*H:(t-s.base+1)*H]...)
		}
		m.at = append(m.at, i)
	}
	if len(m.at) == 0 {
		return nil
	}
	// Draft 1: the new rows, committed.
	if err := m.run(ctx, true); err != nil {
		return err
	}
	most := 0
	for k, i := range m.at {
		r := &reqs[i]
		s := m.seqs[r.Seq]
		L := len(r.History)
		s.last = append(s.last[:0], m.sel[k*H:(k+1)*H]...)
		// Positions < L−1 are consumed: drop their hidden states.
		drop := L - 1 - s.base
		s.hid = append(s.hid[:0], s.hid[drop*H:]...)
		s.base, s.fed = L-1, L-1
		most = max(most, r.Max)
	}
	m.draft(reqs, 0)
	// Draft j+1: a chained, uncommitted row per sequence.
	for j := 1; j < most; j++ {
		m.rows, m.hidden = m.rows[:0], m.hidden[:0]
		live := m.at[:0:0]
		for _, i := range m.at {
			r := &reqs[i]
			if r.Max <= j {
				continue
			}
			s := m.seqs[r.Seq]
			m.rows = append(m.rows, nn.Row{Seq: s.q, Token: r.Drafts[j-1], Logits: true})
			m.hidden = append(m.hidden, s.last...)
			live = append(live, i)
		}
		if err := m.run(ctx, false); err != nil {
			return err
		}
		for k, i := range live {
			s := m.seqs[reqs[i].Seq]
			s.last = append(s.last[:0], m.out[k*H:(k+1)*H]...)
		}
		m.at = live
		m.draft(reqs, j)
	}
	return nil
}

// run runs m.rows through the head into m.out, and the logits of the rows
// that ask for them (over the draft vocabulary) into m.logit.
func (m *MTP) run(ctx context.Context, commit bool) error {
	H, V := m.target.Hidden, m.vocab()
	m.out = grow(m.out, len(m.rows)*H)
	m.idx = m.idx[:0]
	for i := range m.rows {
		if m.rows[i].Logits {
			m.idx = append(m.idx, i)
			m.rows[i].Logits = false // the LM head is applied below
		}
	}
	if err := m.head.Forward(ctx, m.st, m.rows, m.hidden, commit, m.out, nil); err != nil {
		return fmt.Errorf("mtp drafter: %w", err)
	}
	nl := len(m.idx)
	m.sel = grow(m.sel, nl*H)
	for k, i := range m.idx {
		copy(m.sel[k*H:(k+1)*H], m.out[i*H:(i+1)*H])
	}
	lm := m.head.Dec.LMHead
	m.logit = grow(m.logit, nl*V)
	tensor.Product(m.logit, m.sel, lm.W.Slice(0, V*H), nl, H, V)
	if lm.B != nil {
		for r := range nl {
			tensor.Add(m.logit[r*V:(r+1)*V], lm.B[:V])
		}
	}
	return nil
}

// vocab is the number of token ids drafts come from.
func (m *MTP) vocab() int {
	if m.DraftVocab > 0 && m.DraftVocab < m.target.Vocab {
		return m.DraftVocab
	}
	return m.target.Vocab
}

// draft appends draft j (the argmax of the last run's logits) to the
// requests in m.at, in order.
func (m *MTP) draft(reqs []Request, j int) {
	V := m.vocab()
	for k, i := range m.at {
		r := &reqs[i]
		if len(r.Drafts) == j {
			r.Drafts = append(r.Drafts, tensor.Argmax(m.logit[k*V:(k+1)*V]))
		}
	}
}

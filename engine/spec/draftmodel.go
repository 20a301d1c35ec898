package spec

import (
	"context"
	"fmt"

	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
)

// DraftModel drafts with a small model that shares the target's tokenizer:
// greedy tokens, so its drafts are deterministic (q one-hot).
//
// Its own state must follow the target's accepted tokens and forget the
// rejected ones. It uses its caches' verify and commit for that, as the
// target does, and never re-runs accepted tokens:
//
//   - Tokens known to be in the history (the target's output since the last
//     proposal) run in one Verify and are committed at once: this gives
//     draft 1. (A new sequence's prompt runs in a Forward, as the target's
//     does, so that the draft model computes what the target computes when
//     both are the same model: a multi-token Forward is a scan, which
//     NemotronH computes with a clamped Δ, while a verify row is a decode
//     step.)
//   - Draft j+1 comes from a Verify over drafts 1..j, uncommitted; each such
//     Verify replaces the previous one (a replay cache appends from its
//     committed cursor, attention drops its uncommitted keys), so T drafts
//     cost 1+2+…+(T−1) verified rows on top of the new tokens.
//   - At the next proposal the drafts that the history confirms are
//     committed from the last Verify (a cursor move) and the rest dropped.
//
// A DraftModel is not safe for concurrent use.
type DraftModel struct {
	dec       *nn.Decoder
	st        *nn.State
	maxDrafts int
	seqs      map[int]*draftSeq
	rows      []nn.Row
	logit     []float32

	commitQ []nn.Seq
	commitN []int
	at      []int
	forward []bool
}

type draftSeq struct {
	q        nn.Seq
	fed      int   // history tokens committed in the draft state
	pending  []int // the drafts in the draft state's last, uncommitted Verify
	verified bool  // pending holds a Verify's drafts, to commit or drop
}

// NewDraftModel builds a drafter on dec for up to capacity sequences at a
// time, proposing up to maxDrafts tokens each. opt configures the draft
// model's SSM caches (its MaxDraft is set here).
func NewDraftModel(dec *nn.Decoder, capacity, maxDrafts int, opt replay.Options) (*DraftModel, error) {
	if maxDrafts < 1 || maxDrafts > replay.MaxDraftLimit {
		return nil, fmt.Errorf("draft model: %d drafts out of range [1, %d]", maxDrafts, replay.MaxDraftLimit)
	}
	// A verify carries the new history tokens (the target's correction
	// plus the drafts this drafter had not run: up to maxDrafts+1), or
	// drafts 1..maxDrafts−1.
	opt.MaxDraft = maxDrafts + 1
	st, err := dec.NewState(capacity, opt)
	if err != nil {
		return nil, fmt.Errorf("draft model: %w", err)
	}
	return &DraftModel{dec: dec, st: st, maxDrafts: maxDrafts, seqs: map[int]*draftSeq{}}, nil
}

// Vocab is the draft model's vocabulary size.
func (m *DraftModel) Vocab() int { return m.dec.Vocab }

// Close releases the draft model's state.
func (m *DraftModel) Close() { m.st.Close() }

// Release forgets a sequence.
func (m *DraftModel) Release(seq int) {
	if s, ok := m.seqs[seq]; ok {
		_ = m.st.Evict(s.q)
		delete(m.seqs, seq)
	}
}

// Propose fills each request's drafts with the draft model's greedy tokens.
func (m *DraftModel) Propose(ctx context.Context, reqs []Request) error {
	V := m.dec.Vocab
	var active []int // indices into reqs
	commitSeqs, commitN := m.commitQ[:0], m.commitN[:0]
	for i := range reqs {
		r := &reqs[i]
		r.Drafts, r.Probs = r.Drafts[:0], nil
		r.Max = min(r.Max, m.maxDrafts)
		if r.Max <= 0 || len(r.History) == 0 {
			continue
		}
		for _, id := range r.History {
			if id < 0 || id >= V {
				return fmt.Errorf("draft model: token %d outside its vocabulary [0, %d)", id, V)
			}
		}
		s := m.seqs[r.Seq]
		if s != nil && s.fed >= len(r.History) {
			// The history did not grow past what was fed: start over.
			m.Release(r.Seq)
			s = nil
		}
		if s == nil {
			q, err := m.st.Admit()
			if err != nil {
				return fmt.Errorf("draft model: %w", err)
			}
			s = &draftSeq{q: q}
			m.seqs[r.Seq] = s
		}
		if s.verified {
			// Commit the drafts the history confirms, keeping at least the
			// newest token unfed: it gives draft 1.
			c := 0
			for c < len(s.pending) && s.fed+c < len(r.History)-1 && r.History[s.fed+c] == s.pending[c] {
				c++
			}
			commitSeqs = append(commitSeqs, s.q)
			commitN = append(commitN, c)
			s.fed += c
			s.verified = false
		}
		active = append(active, i)
	}
	if len(commitSeqs) > 0 {
		if err := m.dec.Commit(m.st, commitSeqs, commitN); err != nil {
			return fmt.Errorf("draft model: %w", err)
		}
	}
	if len(active) == 0 {
		return nil
	}
	// Draft 1: the new history tokens, committed. Prompts (and long runs
	// of new tokens) go through a Forward, the rest through a Verify.
	m.logit = grow(m.logit, 2*len(active)*V) // draft-1 logits, then scratch
	m.forward = m.forward[:0]
	for _, i := range active {
		s := m.seqs[reqs[i].Seq]
		m.forward = append(m.forward, s.fed == 0 || len(reqs[i].History)-s.fed > m.st.Options().MaxDraft)
	}
	for _, viaForward := range []bool{true, false} {
		m.rows, m.commitQ, m.commitN, m.at = m.rows[:0], m.commitQ[:0], m.commitN[:0], m.at[:0]
		for k, i := range active {
			if m.forward[k] != viaForward {
				continue
			}
			r := &reqs[i]
			s := m.seqs[r.Seq]
			h := r.History[s.fed:]
			for j, id := range h {
				m.rows = append(m.rows, nn.Row{Seq: s.q, Token: id, Logits: j == len(h)-1})
			}
			m.commitQ = append(m.commitQ, s.q)
			m.commitN = append(m.commitN, len(h))
			m.at = append(m.at, k)
			s.fed = len(r.History)
		}
		if len(m.rows) == 0 {
			continue
		}
		out := m.logit[len(active)*V : (len(active)+len(m.at))*V]
		var err error
		if viaForward {
			err = m.dec.Forward(ctx, m.st, m.rows, out)
		} else if err = m.dec.Verify(ctx, m.st, m.rows, out); err == nil {
			err = m.dec.Commit(m.st, m.commitQ, m.commitN)
		}
		if err != nil {
			return fmt.Errorf("draft model: %w", err)
		}
		for j, k := range m.at {
			copy(m.logit[k*V:(k+1)*V], out[j*V:(j+1)*V])
		}
	}
	most := 0
	for k, i := range active {
		r := &reqs[i]
		r.Drafts = append(r.Drafts, tensor.Argmax(m.logit[k*V:(k+1)*V]))
		most = max(most, r.Max)
	}
	// Draft j+1 from a verify over drafts 1..j.
	for j := 1; j < most; j++ {
		m.rows = m.rows[:0]
		n := 0
		for _, i := range active {
			r := &reqs[i]
			if r.Max <= j {
				continue
			}
			s := m.seqs[r.Seq]
			for k, id := range r.Drafts[:j] {
				m.rows = append(m.rows, nn.Row{Seq: s.q, Token: id, Logits: k == j-1})
			}
			n++
		}
		m.logit = grow(m.logit, n*V)
		if err := m.dec.Verify(ctx, m.st, m.rows, m.logit); err != nil {
			return fmt.Errorf("draft model: %w", err)
		}
		k := 0
		for _, i := range active {
			r := &reqs[i]
			if r.Max <= j {
				continue
			}
			r.Drafts = append(r.Drafts, tensor.Argmax(m.logit[k*V:(k+1)*V]))
			s := m.seqs[r.Seq]
			s.pending = append(s.pending[:0], r.Drafts[:j]...)
			s.verified = true
			k++
		}
	}
	return nil
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

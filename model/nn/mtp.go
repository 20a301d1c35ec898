package nn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/replayssm/replayssm/model/safetensors"
)

// MTP is a multi-token-prediction head, Qwen3-Next's and Qwen3.5's mtp.*
// module (NemotronH's has the same form: enorm, hnorm, eh_proj, its
// attention and MoE sublayers, final_layernorm): from the target's hidden
// state at position t and the token at t+1 it predicts the token at t+2.
//
//	e      = EmbedNorm(embed(token[t+1]))          pre_fc_norm_embedding
//	h      = HiddenNorm(hidden[t])                 pre_fc_norm_hidden
//	x      = FC(concat(e, h))                      fc: 2H → H, no bias
//	x      = Layers(x)  at position t              one decoder layer: gated attention over the
//	                                               head's own KV cache of MTP rows, then the MLP
//	out    = FinalNorm(x)                          mtp.norm
//	logits = LMHead(out)                           the target's LM head
//
// hidden[t] is the target's last hidden state after its final norm (what
// its LM head reads; State.OnLayer gives the residual before it). Drafting
// several tokens chains the head: the next row takes out as its hidden and
// the drafted token as its token.
//
// Dec holds the head's layers as a Decoder with the target's embedding and
// LM head and mtp.norm as its final norm, so that State, Commit and the
// blocks' caches work unchanged; only Forward (here) differs from the
// Decoder's, as the rows' inputs are FC's outputs, not token embeddings.
type MTP struct {
	EmbedNorm  RMSNorm
	HiddenNorm RMSNorm
	FC         Linear // [Hidden][2·Hidden]
	Dec        *Decoder

	be Backend // where the head's own weights are (its Dec's backend)
}

// Validate checks the sizes Forward relies on.
func (m *MTP) Validate() error {
	if m.Dec == nil {
		return errors.New("mtp: no layers")
	}
	H := m.Dec.Hidden
	if err := m.Dec.Validate(); err != nil {
		return fmt.Errorf("mtp: %w", err)
	}
	if m.Dec.hasSSM() {
		return errors.New("mtp: the head's layers must not hold SSM mixers")
	}
	if len(m.EmbedNorm.W) != H || len(m.HiddenNorm.W) != H {
		return fmt.Errorf("mtp: pre-fc norms have %d and %d weights, want %d", len(m.EmbedNorm.W), len(m.HiddenNorm.W), H)
	}
	if err := m.FC.check("mtp.fc"); err != nil {
		return err
	}
	if m.FC.In != 2*H || m.FC.Out != H {
		return fmt.Errorf("mtp.fc is %d×%d, want %d×%d", m.FC.Out, m.FC.In, H, 2*H)
	}
	return nil
}

// Params is the number of the head's own weights (not the shared embedding
// and LM head).
func (m *MTP) Params() int {
	n := len(m.EmbedNorm.W) + len(m.HiddenNorm.W) + m.FC.Params() + len(m.Dec.FinalNorm.W)
	for _, l := range m.Dec.Layers {
		for _, b := range l.Branches {
			n += len(b.Norm.W) + b.Block.Params()
		}
	}
	return n
}

// Forward runs MTP rows: row i is the next row of sequence rows[i].Seq, with
// token rows[i].Token (token t+1) and hidden state hidden[i·H:(i+1)·H]
// (hidden t). It writes every row's output (after the final norm) to out
// [rows][Hidden] when out is not nil, and the logits of the rows that ask
// for them, in row order, to logits.
//
// With commit, each sequence's uncommitted rows are dropped first and the
// rows are committed: the sequence's position advances. Without it the rows
// follow the sequence's uncommitted ones (a chain of drafts) and stay
// uncommitted; the next committing Forward (or Decoder.Commit) drops them.
func (m *MTP) Forward(ctx context.Context, s *State, rows []Row, hidden []float32, commit bool, out, logits []float32) error {
	d := m.Dec
	if s.dec != d {
		return errors.New("mtp: state belongs to another model")
	}
	n, H := len(rows), d.Hidden
	nLogits := 0
	for i, r := range rows {
		if err := s.check(r.Seq); err != nil {
			return fmt.Errorf("mtp row %d: %w", i, err)
		}
		if r.Token < 0 || r.Token >= d.Vocab {
			return fmt.Errorf("mtp row %d: token %d outside the vocabulary [0, %d)", i, r.Token, d.Vocab)
		}
		if r.Logits {
			nLogits++
		}
	}
	if len(hidden) < n*H {
		return fmt.Errorf("mtp: %d hidden values for %d rows of %d", len(hidden), n, H)
	}
	if out != nil && len(out) < n*H {
		return fmt.Errorf("mtp: output buffer has %d values, want %d×%d", len(out), n, H)
	}
	if len(logits) < nLogits*d.Vocab {
		return fmt.Errorf("mtp: logits buffer has %d values, want %d×%d", len(logits), nLogits, d.Vocab)
	}
	if n == 0 {
		return nil
	}
	if m.be != d.be {
		m.place(d.be)
	}
	be := d.be
	// pending[q]: the uncommitted rows of q the new rows follow.
	pending := map[int]int{}
	d.eachKV(s, func(kv positions) {
		for _, r := range rows {
			q := int(r.Seq)
			if commit {
				kv.Truncate(q, s.pos[q])
			} else {
				pending[q] = kv.Len(q) - s.pos[q]
			}
		}
	})
	s.mem.Reset()
	b := &s.b
	b.plan(s, rows, true)
	if !commit {
		for i := range b.pos {
			b.pos[i] += int32(pending[int(b.seq[i])])
		}
	}
	x := s.mem.Alloc(n, 2*H) // [EmbedNorm(embed(token)) | HiddenNorm(hidden)]
	tmp := s.mem.Alloc(n, H)
	be.Embed(tmp, d.embed, b.tok)
	m.EmbedNorm.apply(be, x.Columns(0, H), tmp)
	be.Upload(tmp, hidden[:n*H])
	m.HiddenNorm.apply(be, x.Columns(H, H), tmp)
	h := s.mem.Alloc(n, H)
	m.FC.apply(be, h, x)
	if err := d.layers(ctx, s, h, nil, "mtp"); err != nil {
		return err
	}
	d.FinalNorm.apply(be, h, h)
	if out != nil {
		be.Download(out[:n*H], h)
	}
	if nLogits > 0 {
		sel := make([]int32, 0, nLogits)
		for i, r := range rows {
			if r.Logits {
				sel = append(sel, int32(i))
			}
		}
		xs := s.mem.Alloc(nLogits, H)
		be.Gather(xs, h, sel)
		lg := s.mem.Alloc(nLogits, d.Vocab)
		d.LMHead.apply(be, lg, xs)
		be.Download(logits[:nLogits*d.Vocab], lg)
	}
	if err := be.Err(); err != nil {
		return err
	}
	if commit {
		for _, r := range rows {
			s.pos[r.Seq]++
		}
	}
	return nil
}

// place puts the head's own weights (not its Dec's) on be.
func (m *MTP) place(be Backend) {
	m.be = be
	m.EmbedNorm.place(be)
	m.HiddenNorm.place(be)
	m.FC.place(be)
}

// Row returns the sequence and position of row i of the Forward or Verify in
// progress: it is valid only inside State.OnLayer, whose h holds the rows in
// that order.
func (s *State) Row(i int) (Seq, int) { return Seq(s.b.seq[i]), int(s.b.pos[i]) }

// MTPFile is the file beside a checkpoint that may hold its MTP head's
// tensors (the shipped qwen35-kjv keeps them there, so that its
// model.safetensors stays the transformers checkpoint).
const MTPFile = "mtp.safetensors"

// OpenMTPSource opens the tensors an MTP head binds from: dir/MTPFile when
// that file exists, else the checkpoint in dir. close releases them.
func OpenMTPSource(dir string) (src Source, close func() error, err error) {
	if st, err := os.Stat(filepath.Join(dir, MTPFile)); err == nil && st.Mode().IsRegular() {
		f, err := safetensors.Open(filepath.Join(dir, MTPFile))
		if err != nil {
			return nil, nil, err
		}
		return f, f.Close, nil
	}
	c, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, nil, err
	}
	return c, c.Close, nil
}

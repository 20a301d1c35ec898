package nn

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
)

// Block is one residual branch's computation: a mixer (Mamba-2, Gated
// DeltaNet, attention) or a feed-forward block (MLP, MoE). The blocks of this
// package are the only implementations.
type Block interface {
	// Kind names the block in errors and statistics.
	Kind() hfconfig.LayerKind
	// Params is the number of weights.
	Params() int
	// place puts the block's weights on be.
	place(be Backend)
	// newState builds the per-sequence state of the block on be (nil if
	// none).
	newState(be Backend, capacity int, opt replay.Options) (blockState, error)
	// forward writes out [rows][hidden] (every value) from the normalised
	// input x.
	forward(b *batch, st blockState, x, out Tensor) error
}

// blockState is what a block keeps per sequence: an SSM layer's replay slots,
// an attention layer's keys and values.
type blockState interface {
	admit(seq int) error
	evict(seq int) error
	stats() replay.Stats
	close()
}

// Branch is one residual branch: h += Block(Norm(h)).
type Branch struct {
	Norm  RMSNorm
	Block Block
}

// Layer is one decoder layer: its residual branches in order (one for
// NemotronH and Mamba-2, mixer then feed-forward for Qwen).
type Layer struct {
	Branches []Branch
}

// Decoder is a decoder-only language model: token embedding, layers, final
// norm and the LM head.
type Decoder struct {
	Config    *hfconfig.Config
	Hidden    int
	Vocab     int
	Embed     tensor.Weights // [Vocab][Hidden]
	Layers    []Layer
	FinalNorm RMSNorm
	LMHead    Linear // shares Embed's memory when the embeddings are tied
	Tied      bool
	// Files, when not nil, holds the memory-mapped checkpoint that the
	// product weights are views of (model.Load): it stays open while the
	// model is used, and Close closes it.
	Files io.Closer

	be    Backend // where the weights are (Place)
	embed Weight
}

// Place puts the model's weights on be; States made afterwards run there.
// A Decoder not placed runs on CPU() (placed by its first NewState).
func (d *Decoder) Place(be Backend) {
	d.be = be
	d.embed = be.Matrix(d.Embed, d.Vocab, d.Hidden)
	if d.Tied && d.LMHead.B == nil {
		d.LMHead.w = d.embed
	} else {
		d.LMHead.place(be)
	}
	d.FinalNorm.place(be)
	for _, l := range d.Layers {
		for i := range l.Branches {
			l.Branches[i].Norm.place(be)
			l.Branches[i].Block.place(be)
		}
	}
}

// Close closes Files, the checkpoint the weights point into; the Decoder
// must not be used afterwards, on the CPU nor placed anew.
func (d *Decoder) Close() error {
	if d.Files == nil {
		return nil
	}
	err := d.Files.Close()
	d.Files = nil
	return err
}

// Backend returns where the model runs (nil before Place or NewState).
func (d *Decoder) Backend() Backend { return d.be }

// Params is the number of weights (tied embeddings counted once).
func (d *Decoder) Params() int {
	n := d.Embed.Len()
	if !d.Tied {
		n += d.LMHead.Params()
	}
	n += len(d.FinalNorm.W)
	for _, l := range d.Layers {
		for _, b := range l.Branches {
			n += len(b.Norm.W) + b.Block.Params()
		}
	}
	return n
}

// Validate checks the sizes the forward pass relies on.
func (d *Decoder) Validate() error {
	if d.Hidden <= 0 || d.Vocab <= 0 || d.Embed.Len() != d.Vocab*d.Hidden {
		return fmt.Errorf("embedding has %d values, want %d×%d", d.Embed.Len(), d.Vocab, d.Hidden)
	}
	if err := d.LMHead.check("lm_head"); err != nil {
		return err
	}
	if d.LMHead.In != d.Hidden || d.LMHead.Out != d.Vocab {
		return fmt.Errorf("lm_head is %d×%d, want %d×%d", d.LMHead.Out, d.LMHead.In, d.Vocab, d.Hidden)
	}
	if len(d.FinalNorm.W) != d.Hidden {
		return fmt.Errorf("final norm has %d weights, want %d", len(d.FinalNorm.W), d.Hidden)
	}
	for i, l := range d.Layers {
		for j, b := range l.Branches {
			if len(b.Norm.W) != d.Hidden {
				return fmt.Errorf("layer %d branch %d: norm has %d weights, want %d", i, j, len(b.Norm.W), d.Hidden)
			}
			if b.Block == nil {
				return fmt.Errorf("layer %d branch %d: no block", i, j)
			}
			if v, ok := b.Block.(interface{ Validate() error }); ok {
				if err := v.Validate(); err != nil {
					return fmt.Errorf("layer %d %v: %w", i, b.Block.Kind(), err)
				}
			}
		}
	}
	return nil
}

// Seq names one live sequence of a State.
type Seq int

// State is the per-sequence state of a Decoder for up to Capacity sequences:
// a replay cache per SSM layer (one slot per sequence), a KV cache per
// attention layer, and each sequence's position. It is not safe for
// concurrent use.
type State struct {
	dec    *Decoder
	opt    replay.Options
	blocks [][]blockState // [layer][branch]
	live   []bool
	pos    []int
	mem    Arena
	b      batch
	hostH  []float32 // OnLayer's copy of the residual stream

	// OnLayer, if set, is called after each layer with the residual stream
	// h [rows][hidden] of the rows being computed (for layer-by-layer checks
	// against a reference). The slice is valid only during the call.
	OnLayer func(layer int, h []float32)
	// Stepwise makes Forward run a sequence's several rows through the SSM
	// caches as decode steps, one Step a row, instead of one Prefill: the
	// outputs then come from the checkpoint (or its read copy) and the
	// ring, as a generated token's do (teacher-forced decoding, what eval
	// drift measures). The logits agree either way up to the state
	// formats' rounding.
	Stepwise bool
}

// NewState builds the caches for capacity sequences. opt configures every
// SSM layer's replay cache.
func (d *Decoder) NewState(capacity int, opt replay.Options) (*State, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("state capacity %d must be positive", capacity)
	}
	if d.be == nil {
		d.Place(CPU())
	}
	s := &State{dec: d, opt: opt, live: make([]bool, capacity), pos: make([]int, capacity), mem: d.be.NewArena()}
	s.b.be, s.b.mem = d.be, s.mem
	for i, l := range d.Layers {
		row := make([]blockState, len(l.Branches))
		for j, br := range l.Branches {
			st, err := br.Block.newState(d.be, capacity, opt)
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("layer %d %v: %w", i, br.Block.Kind(), err)
			}
			row[j] = st
		}
		s.blocks = append(s.blocks, row)
	}
	return s, nil
}

// Capacity is the number of sequences the state can hold at once.
func (s *State) Capacity() int { return len(s.live) }

// Admit takes a free sequence with empty caches at position 0.
func (s *State) Admit() (Seq, error) {
	for i, l := range s.live {
		if l {
			continue
		}
		var admitted []blockState
		for li, row := range s.blocks {
			for _, st := range row {
				if st == nil {
					continue
				}
				if err := st.admit(i); err != nil {
					for _, a := range admitted { // undo exactly what was admitted
						_ = a.evict(i)
					}
					return 0, fmt.Errorf("admit sequence %d, layer %d: %w", i, li, err)
				}
				admitted = append(admitted, st)
			}
		}
		s.live[i] = true
		s.pos[i] = 0
		return Seq(i), nil
	}
	return 0, fmt.Errorf("all %d sequences are live", len(s.live))
}

// Evict frees a sequence.
func (s *State) Evict(q Seq) error {
	if err := s.check(q); err != nil {
		return err
	}
	var errs []error
	for _, row := range s.blocks {
		for _, st := range row {
			if st != nil {
				errs = append(errs, st.evict(int(q)))
			}
		}
	}
	s.live[q] = false
	return errors.Join(errs...)
}

// Len is the number of tokens sequence q has consumed (its next position).
func (s *State) Len(q Seq) int { return s.pos[q] }

// Stats sums the replay statistics over the SSM layers.
func (s *State) Stats() replay.Stats {
	var t replay.Stats
	for _, row := range s.blocks {
		for _, st := range row {
			if st != nil {
				t = t.Add(st.stats())
			}
		}
	}
	return t
}

// Options returns the replay options the caches were built with.
func (s *State) Options() replay.Options { return s.opt }

// Close stops the caches' worker goroutines and releases the caches' and
// the scratch's memory.
func (s *State) Close() {
	for _, row := range s.blocks {
		for _, st := range row {
			if st != nil {
				st.close()
			}
		}
	}
	if s.mem != nil {
		s.mem.Close()
	}
}

func (s *State) check(q Seq) error {
	if q < 0 || int(q) >= len(s.live) || !s.live[q] {
		return fmt.Errorf("sequence %d is not live", q)
	}
	return nil
}

// Row is one token to run: the next token of sequence Seq. Logits asks for
// the logits after it.
type Row struct {
	Seq    Seq
	Token  int
	Logits bool
}

// batch is the bookkeeping of one Forward, shared by the blocks.
type batch struct {
	be    Backend
	mem   Arena
	n     int
	seq   []int32
	pos   []int32
	tok   []int32
	scan  []bool    // row belongs to a multi-token (prefill or verify) forward of its sequence
	waves [][]int32 // row indices; each wave holds each sequence at most once, in order
	// pre holds the sequences with several rows in a Forward: the SSM
	// layers run them through their caches' Prefill, waves the rest.
	pre prefillPlan

	count, seen []int // per sequence, while planning

	// Host scratch of the MoE routing, reused across passes.
	host   []float32
	chosen []int
	rows   []int32
	rw     []float32
}

// gather returns the rows of src named by rows (negative: zeros) for an
// SSM layer's inputs: a view where they follow each other (a one-row wave
// of a decode step at batch 1, a prompt laid out in order: no copy, no
// kernel), else a gathered copy. The caller may change the result in
// place: a wave's or a prefill's rows of src are read by nothing else.
func (b *batch) gather(src Tensor, rows []int32) Tensor {
	if lo := span(rows); lo >= 0 {
		return src.Slice(lo, lo+len(rows))
	}
	t := b.mem.Alloc(len(rows), src.Cols)
	b.be.Gather(t, src, rows)
	return t
}

// packed returns src if its rows follow each other in memory (the caches
// take contiguous inputs), else a contiguous copy.
func (b *batch) packed(src Tensor) Tensor {
	if src.Contiguous() {
		return src
	}
	t := b.mem.Alloc(src.Rows, src.Cols)
	b.be.Copy(t, src)
	return t
}

// plan lays out a pass over rows. With prefill (a Forward), the rows of
// sequences with several of them go to b.pre, for the SSM caches' Prefill;
// otherwise (a Verify, whose SSM layers take the rows themselves) every
// row is in a wave.
func (b *batch) plan(s *State, rows []Row, prefill bool) {
	b.n = len(rows)
	b.seq = b.seq[:0]
	b.pos = b.pos[:0]
	b.tok = b.tok[:0]
	b.scan = b.scan[:0]
	for w := range b.waves {
		b.waves[w] = b.waves[w][:0]
	}
	if len(b.count) < len(s.live) {
		b.count, b.seen = make([]int, len(s.live)), make([]int, len(s.live))
	}
	for _, r := range rows {
		b.count[r.Seq]++
	}
	for i, r := range rows {
		q := int(r.Seq)
		k := b.seen[q]
		b.seen[q] = k + 1
		b.seq = append(b.seq, int32(q))
		b.pos = append(b.pos, int32(s.pos[q]+k))
		b.tok = append(b.tok, int32(r.Token))
		b.scan = append(b.scan, b.count[q] > 1 || s.pos[q] == 0)
		if prefill && b.count[q] > 1 {
			continue
		}
		for len(b.waves) <= k {
			b.waves = append(b.waves, nil)
		}
		b.waves[k] = append(b.waves[k], int32(i))
	}
	if prefill {
		b.pre.build(rows, b.count)
	} else {
		b.pre.reset()
	}
	for _, r := range rows {
		b.count[r.Seq], b.seen[r.Seq] = 0, 0
	}
	for len(b.waves) > 0 && len(b.waves[len(b.waves)-1]) == 0 {
		b.waves = b.waves[:len(b.waves)-1]
	}
}

// checkRows validates a call's rows before any cache moves: the state is
// this model's, every sequence is live, every token is in the vocabulary,
// and the output has room (room rows) for the rows that ask for logits,
// whose number it returns.
func (d *Decoder) checkRows(op string, s *State, rows []Row, room int) (int, error) {
	if s.dec != d {
		return 0, fmt.Errorf("%s: state belongs to another model", op)
	}
	nLogits := 0
	for i, r := range rows {
		if err := s.check(r.Seq); err != nil {
			return 0, fmt.Errorf("%s row %d: %w", op, i, err)
		}
		if r.Token < 0 || r.Token >= d.Vocab {
			return 0, fmt.Errorf("%s row %d: token %d outside the vocabulary [0, %d)", op, i, r.Token, d.Vocab)
		}
		if r.Logits {
			nLogits++
		}
	}
	if room < nLogits {
		return 0, fmt.Errorf("%s: output has room for %d rows of logits, want %d", op, room, nLogits)
	}
	return nLogits, nil
}

// Forward runs rows through the model, writing the logits of the rows that
// ask for them, in row order, to logits ([that many][Vocab]). Rows of one
// sequence must appear in the order of its tokens; any mix of sequences
// works (a decode batch, a prompt, several prompts, both at once).
//
// SSM layers step each sequence's tokens in order through its replay slot;
// attention layers append keys and values and attend causally. A sequence
// with several rows in the call, or starting at position 0, is a multi-token
// forward: NemotronH clamps its Δ as transformers' scan path does
// (REFERENCE-NOTES point 1). On error the caches of the batch's sequences
// are in an unknown state: evict them.
func (d *Decoder) Forward(ctx context.Context, s *State, rows []Row, logits []float32) error {
	nLogits, err := d.checkRows("forward", s, rows, len(logits)/d.Vocab)
	if err != nil {
		return err
	}
	return d.forward(ctx, s, rows, func(lg Tensor) { d.be.Download(logits[:nLogits*d.Vocab], lg) })
}

// Greedy is Forward for greedy decoding: it writes to ids, in row order,
// the largest logit's token of each row that asks for logits, taken where
// the model runs, so that only token ids leave the device. A row holding a
// NaN or an infinity is an error, as in the engine's own sampling.
func (d *Decoder) Greedy(ctx context.Context, s *State, rows []Row, ids []int32) error {
	nLogits, err := d.checkRows("forward", s, rows, len(ids))
	if err != nil {
		return err
	}
	if err := d.forward(ctx, s, rows, func(lg Tensor) { d.be.Argmax(ids[:nLogits], lg) }); err != nil {
		return err
	}
	return brokenRow(ids[:nLogits])
}

// Sample is Forward for sampling: it writes to ids, in row order, the
// token SampleRow draws from each row that asks for logits, with that
// row's p (one per such row), drawn where the model runs, so that only
// token ids leave the device. A row holding a NaN or an infinity is an
// error, as in Greedy.
func (d *Decoder) Sample(ctx context.Context, s *State, rows []Row, p []SampleParams, ids []int32) error {
	nLogits, err := d.checkRows("forward", s, rows, len(ids))
	if err != nil {
		return err
	}
	if len(p) < nLogits {
		return fmt.Errorf("forward: %d sampling parameters for %d rows of logits", len(p), nLogits)
	}
	if err := d.forward(ctx, s, rows, func(lg Tensor) { d.be.Sample(ids[:nLogits], lg, p[:nLogits]) }); err != nil {
		return err
	}
	return brokenRow(ids[:nLogits])
}

// brokenRow reports the first -1 of ids, the backend's mark of a row of
// logits holding a non-finite value.
func brokenRow(ids []int32) error {
	for k, id := range ids {
		if id < 0 {
			return fmt.Errorf("row %d of logits holds a non-finite value: the forward pass broke", k)
		}
	}
	return nil
}

// forward runs rows through the model and hands the logits of the rows
// that ask for them (on the backend) to out.
func (d *Decoder) forward(ctx context.Context, s *State, rows []Row, out func(Tensor)) error {
	if len(rows) == 0 {
		return nil
	}
	s.mem.Reset()
	b := &s.b
	b.plan(s, rows, !s.Stepwise)
	h := s.mem.Alloc(len(rows), d.Hidden)
	d.be.Embed(h, d.embed, b.tok)
	if err := d.layers(ctx, s, h, nil, "forward"); err != nil {
		return err
	}
	if err := d.logits(s, rows, h, out); err != nil {
		return err
	}
	for _, r := range rows {
		s.pos[r.Seq]++
	}
	return nil
}

// layers runs the residual stream h [rows][Hidden] of the planned batch
// through every layer: a Verify's rows (vp not nil) through the SSM
// mixers' verify paths.
func (d *Decoder) layers(ctx context.Context, s *State, h Tensor, vp *verifyPlan, op string) error {
	be, b := d.be, &s.b
	xn := s.mem.Alloc(h.Rows, h.Cols)
	out := s.mem.Alloc(h.Rows, h.Cols)
	for li, l := range d.Layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		for bi, br := range l.Branches {
			mark := s.mem.Mark()
			br.Norm.apply(be, xn, h)
			var err error
			if v, ok := br.Block.(verifier); ok && vp != nil {
				err = v.verify(b, vp, s.blocks[li][bi], xn, out)
			} else {
				err = br.Block.forward(b, s.blocks[li][bi], xn, out)
			}
			if err != nil {
				return fmt.Errorf("%s: layer %d %v: %w", op, li, br.Block.Kind(), err)
			}
			be.Add(h, out)
			s.mem.Rewind(mark)
		}
		if s.OnLayer != nil {
			s.hostH = grow(s.hostH, h.Rows*h.Cols)
			be.Download(s.hostH, h)
			if err := be.Err(); err != nil {
				return fmt.Errorf("%s: layer %d: %w", op, li, err)
			}
			s.OnLayer(li, s.hostH)
		}
	}
	return be.Err()
}

// logits computes the logits of the rows that ask for them, in row order,
// and hands them to out.
func (d *Decoder) logits(s *State, rows []Row, h Tensor, out func(Tensor)) error {
	be := d.be
	sel := make([]int32, 0, len(rows))
	for i, r := range rows {
		if r.Logits {
			sel = append(sel, int32(i))
		}
	}
	if len(sel) == 0 {
		return nil
	}
	x := s.mem.Alloc(len(sel), d.Hidden)
	be.Gather(x, h, sel)
	d.FinalNorm.apply(be, x, x)
	lg := s.mem.Alloc(len(sel), d.Vocab)
	d.LMHead.apply(be, lg, x)
	out(lg)
	return be.Err()
}

// grow returns buf with length n, reallocated when too small.
func grow(buf []float32, n int) []float32 {
	if cap(buf) < n {
		return make([]float32, n)
	}
	return buf[:n]
}

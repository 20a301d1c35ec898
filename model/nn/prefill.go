package nn

import "github.com/replayssm/replayssm/replay"

// prefillPlan groups the rows of a Forward's sequences that have several
// (a prompt, or a chunk of one) for the SSM caches' Prefill: T inputs a
// sequence, row index[i·T+k] holding input k of seqs[i] (−1 past its
// count).
type prefillPlan struct {
	seqs   []int32
	counts []int // rows of each sequence; nil when every one has T
	index  []int32
	T      int

	// Scratch kept across passes: the sequences' counts while building,
	// each sequence's place in seqs (−1: not in the plan), and counts'
	// backing array.
	n, at, countsBuf []int
}

func (p *prefillPlan) reset() {
	p.seqs, p.index, p.counts, p.T = p.seqs[:0], p.index[:0], nil, 0
}

// build collects the sequences with count[seq] > 1 from rows, in order of
// first appearance.
func (p *prefillPlan) build(rows []Row, count []int) {
	p.reset()
	for len(p.at) < len(count) {
		p.at = append(p.at, -1)
	}
	for _, r := range rows {
		q := int32(r.Seq)
		if count[q] < 2 || p.at[q] >= 0 {
			continue
		}
		p.at[q] = len(p.seqs)
		p.seqs = append(p.seqs, q)
		p.T = max(p.T, count[q])
	}
	if len(p.seqs) == 0 {
		return
	}
	p.n = p.n[:0]
	for range p.seqs {
		p.n = append(p.n, 0)
	}
	for range len(p.seqs) * p.T {
		p.index = append(p.index, -1)
	}
	for i, r := range rows {
		if k := p.at[r.Seq]; k >= 0 {
			p.index[k*p.T+p.n[k]] = int32(i)
			p.n[k]++
		}
	}
	for _, q := range p.seqs {
		p.at[q] = -1
	}
	for _, c := range p.n {
		if c != p.T {
			p.countsBuf = append(p.countsBuf[:0], p.n...)
			p.counts = p.countsBuf
			break
		}
	}
}

// slots returns the plan's sequences' slots in one SSM layer.
func (p *prefillPlan) slots(dst []replay.Slot, slot []replay.Slot) []replay.Slot {
	dst = dst[:0]
	for _, q := range p.seqs {
		dst = append(dst, slot[q])
	}
	return dst
}

// span returns lo when rows are lo, lo+1, ... (no padding), else −1: the
// plan's rows are then a view of the batch's, with nothing to gather or
// scatter (one prompt, or prompts of one length laid out one after
// another).
func span(rows []int32) int {
	if len(rows) == 0 || rows[0] < 0 {
		return -1
	}
	for i, r := range rows {
		if r != rows[0]+int32(i) {
			return -1
		}
	}
	return int(rows[0])
}

// outRows returns where the outputs of rows go: a view of out where they
// follow each other there, else scratch (scatter set) that the caller
// scatters into out.
func (b *batch) outRows(out Tensor, rows []int32) (t Tensor, scatter bool) {
	if lo := span(rows); lo >= 0 {
		return out.Slice(lo, lo+len(rows)), false
	}
	return b.mem.Alloc(len(rows), out.Cols), true
}

// convCache is the convolution of an SSM layer's cache (any replay.Cache
// over Tensors).
type convCache interface {
	Conv(slots []replay.Slot, in, out Tensor) error
	ConvVerify(slots []replay.Slot, T int, in, out Tensor) error
	ConvPrefill(slots []replay.Slot, T int, counts []int, in, out Tensor) error
}

// convCall is the convolution an SSM layer's inputs run: its cache's Conv
// (a wave), ConvVerify (a verify's drafts, T a slot) or ConvPrefill
// (prompts, T and counts), as a value, so that handing it on allocates
// nothing in the decode step.
type convCall struct {
	c      convCache
	slots  []replay.Slot
	op     convOp
	T      int
	counts []int
}

type convOp uint8

const (
	convStep convOp = iota
	convVerify
	convPrefill
)

func (cc convCall) run(in, out Tensor) error {
	switch cc.op {
	case convVerify:
		return cc.c.ConvVerify(cc.slots, cc.T, in, out)
	case convPrefill:
		return cc.c.ConvPrefill(cc.slots, cc.T, cc.counts, in, out)
	}
	return cc.c.Conv(cc.slots, in, out)
}

// convSplit runs an SSM layer's convolution cc over cin, applies SiLU and
// returns the output split into three parts of the given widths ([x | B |
// C], [q | k | v]), each packed.
func (b *batch) convSplit(cin Tensor, cc convCall, w0, w1, w2 int) ([3]Tensor, error) {
	cout := b.mem.Alloc(cin.Rows, w0+w1+w2)
	if err := cc.run(b.packed(cin), cout); err != nil {
		return [3]Tensor{}, err
	}
	b.be.SiLU(cout)
	return [3]Tensor{b.packed(cout.Columns(0, w0)), b.packed(cout.Columns(w0, w1)), b.packed(cout.Columns(w0+w1, w2))}, nil
}

// runSSM drives one SSM layer's cache over a Forward: each wave's rows
// through Conv and Step, then the prompts' (b.pre) through ConvPrefill and
// Prefill, their outputs into y's rows. inputs forms the cache's batch of
// the given rows (negative: padding) with the given convolution.
func runSSM[In any](b *batch, st *ssmState[In], y Tensor, inputs func(rows []int32, cc convCall) (In, error)) error {
	c, slot, slots := st.cache, st.slot, &st.slots
	for _, wave := range b.waves {
		mark := b.mem.Mark() // a wave's scratch, once its rows are scattered
		sl := (*slots)[:0]
		for _, r := range wave {
			sl = append(sl, slot[b.seq[r]])
		}
		*slots = sl
		in, err := inputs(wave, convCall{c: c, slots: sl})
		if err != nil {
			return err
		}
		yw, scatter := b.outRows(y, wave)
		if err := c.Step(sl, in, yw); err != nil {
			return err
		}
		if scatter {
			b.be.Scatter(y, yw, wave)
		}
		b.mem.Rewind(mark)
	}
	p := &b.pre
	if len(p.seqs) == 0 {
		return nil
	}
	mark := b.mem.Mark()
	defer b.mem.Rewind(mark)
	sl := p.slots(*slots, slot)
	*slots = sl
	in, err := inputs(p.index, convCall{c: c, slots: sl, op: convPrefill, T: p.T, counts: p.counts})
	if err != nil {
		return err
	}
	yw, scatter := b.outRows(y, p.index)
	if err := c.Prefill(sl, p.T, p.counts, in, yw); err != nil {
		return err
	}
	if scatter {
		b.be.Scatter(y, yw, p.index)
	}
	return nil
}

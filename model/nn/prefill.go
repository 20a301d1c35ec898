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

	n []int // scratch: the sequences' counts while building
}

func (p *prefillPlan) reset() {
	p.seqs, p.index, p.counts, p.T = p.seqs[:0], p.index[:0], nil, 0
}

// build collects the sequences with count[seq] > 1 from rows, in order of
// first appearance.
func (p *prefillPlan) build(rows []Row, count []int) {
	p.reset()
	at := map[int32]int{}
	for _, r := range rows {
		q := int32(r.Seq)
		if count[q] < 2 {
			continue
		}
		if _, ok := at[q]; !ok {
			at[q] = len(p.seqs)
			p.seqs = append(p.seqs, q)
			p.T = max(p.T, count[q])
		}
	}
	if len(p.seqs) == 0 {
		return
	}
	p.n = append(p.n[:0], make([]int, len(p.seqs))...)
	for range len(p.seqs) * p.T {
		p.index = append(p.index, -1)
	}
	for i, r := range rows {
		if k, ok := at[int32(r.Seq)]; ok {
			p.index[k*p.T+p.n[k]] = int32(i)
			p.n[k]++
		}
	}
	for _, c := range p.n {
		if c != p.T {
			p.counts = append([]int(nil), p.n...)
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

// gatherRows returns the rows of src named by rows (negative: zeros): a
// view where they follow each other, else a gathered copy.
func (b *batch) gatherRows(src Tensor, rows []int32) Tensor {
	if lo := span(rows); lo >= 0 {
		return src.Slice(lo, lo+len(rows))
	}
	return b.gather(src, rows)
}

// prefillOut returns where the prefill's outputs go: a view of out where
// its rows follow each other (and done is a no-op), else scratch that done
// scatters into out.
func (b *batch) prefillOut(out Tensor, rows []int32) (Tensor, func()) {
	if lo := span(rows); lo >= 0 {
		return out.Slice(lo, lo+len(rows)), func() {}
	}
	t := b.mem.Alloc(len(rows), out.Cols)
	return t, func() { b.be.Scatter(out, t, rows) }
}

// convSplit runs an SSM layer's convolution (conv: ConvPrefill, Conv or
// ConvVerify on the layer's cache) over cin, applies SiLU and returns the
// output split into parts of the given widths, each packed.
func (b *batch) convSplit(cin Tensor, conv func(in, out Tensor) error, widths ...int) ([]Tensor, error) {
	C := 0
	for _, w := range widths {
		C += w
	}
	cout := b.mem.Alloc(cin.Rows, C)
	if err := conv(b.packed(cin), cout); err != nil {
		return nil, err
	}
	b.be.SiLU(cout)
	parts := make([]Tensor, len(widths))
	off := 0
	for i, w := range widths {
		parts[i] = b.packed(cout.Columns(off, w))
		off += w
	}
	return parts, nil
}

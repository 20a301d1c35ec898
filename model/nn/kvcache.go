package nn

import "github.com/replayssm/replayssm/tensor"

// A KV cache is paged, as vLLM's PagedAttention: its keys and values live in
// a pool of blocks of KVBlock positions, and each sequence has a block
// table, the blocks holding its positions in order. An append takes a block
// from the pool when a sequence crosses a block boundary, a truncation gives
// back the blocks it empties, and the pool grows by KVChunkBlocks blocks at
// a time when it has none free. Memory then follows the positions held, not
// the capacity times the longest sequence, and no block moves once placed.
const (
	// KVBlock is the positions a block holds: position p of a sequence is
	// at offset p%KVBlock of its table's block p/KVBlock.
	KVBlock = 16
	// KVChunkBlocks is the blocks a pool grows by: a backend allocates its
	// storage a chunk at a time, block b in chunk b/KVChunkBlocks.
	KVChunkBlocks = 64
)

// BlockTable is a paged cache's bookkeeping, the same on every backend: the
// pool's blocks, numbered from 0 in the order the pool grew, the free ones,
// and each sequence's length and block table. The backend keeps the blocks'
// storage; the table only hands them out.
type BlockTable struct {
	tables [][]int32 // per sequence, the blocks of its positions in order
	lens   []int
	free   []int32 // taken from the end
	held   int
}

// NewBlockTable returns the bookkeeping of an empty pool for capacity
// sequences.
func NewBlockTable(capacity int) *BlockTable {
	return &BlockTable{tables: make([][]int32, capacity), lens: make([]int, capacity)}
}

// Len is the number of positions sequence seq holds.
func (t *BlockTable) Len(seq int) int { return t.lens[seq] }

// Table is sequence seq's blocks, the one holding positions j·KVBlock.. at
// index j; it is valid until the next Assign or Truncate.
func (t *BlockTable) Table(seq int) []int32 { return t.tables[seq] }

// Truncate keeps the first n positions of seq (nothing changes when it
// holds n or fewer) and returns the blocks past them to the pool:
// Truncate(seq, 0) frees all of them.
func (t *BlockTable) Truncate(seq, n int) {
	if n >= t.lens[seq] {
		return
	}
	keep := (n + KVBlock - 1) / KVBlock
	tb := t.tables[seq]
	for j := len(tb) - 1; j >= keep; j-- { // the last freed is taken first
		t.free = append(t.free, tb[j])
	}
	t.tables[seq], t.lens[seq] = tb[:keep], n
}

// Blocks reports the blocks that hold some sequence's positions and all
// the pool holds (used, plus free): a scheduler's measure of the cache's
// memory, held·KVBlock·width·2 values.
func (t *BlockTable) Blocks() (used, held int) { return t.held - len(t.free), t.held }

// Longest is the most blocks one sequence holds.
func (t *BlockTable) Longest() int {
	n := 0
	for _, tb := range t.tables {
		n = max(n, len(tb))
	}
	return n
}

// Assign books the rows of an Append (row i: position pos[i] of sequence
// seqs[i], each its sequence's next, as CheckAppend requires) and appends
// to dst the block that holds each row. A row that starts a block takes one
// from the pool; when the pool has too few free, grow(chunks) must add
// storage for that many chunks of KVChunkBlocks blocks first. On an error
// (a refused row, a failed grow) nothing changes.
func (t *BlockTable) Assign(dst, seqs, pos []int32, grow func(chunks int) error) ([]int32, error) {
	if _, err := CheckAppend(seqs, pos, t.Len); err != nil {
		return dst, err
	}
	fresh := 0
	for _, p := range pos {
		if p%KVBlock == 0 {
			fresh++
		}
	}
	if short := fresh - len(t.free); short > 0 {
		chunks := (short + KVChunkBlocks - 1) / KVChunkBlocks
		if err := grow(chunks); err != nil {
			return dst, err
		}
		for b := t.held + chunks*KVChunkBlocks - 1; b >= t.held; b-- { // the lowest is taken first
			t.free = append(t.free, int32(b))
		}
		t.held += chunks * KVChunkBlocks
	}
	for i, q := range seqs {
		p := int(pos[i])
		if p%KVBlock == 0 {
			last := len(t.free) - 1
			t.tables[q] = append(t.tables[q], t.free[last])
			t.free = t.free[:last]
		}
		dst = append(dst, t.tables[q][p/KVBlock])
		t.lens[q] = p + 1
	}
	return dst, nil
}

// cpuKV is the CPU's paged KV cache: chunks of KVChunkBlocks blocks, each
// chunk a key plane [KVChunkBlocks][KVBlock][width] then a value plane of
// the same shape (the CUDA backend's layout too). Keeping the planes apart
// keeps a sequence's keys in one run across the consecutive blocks a
// prompt takes, as the scores read them.
type cpuKV struct {
	*BlockTable
	chunks [][]float32
	width  int
	blocks []int32 // Append's blocks per row
	job    attendJob
}

func (cpuBackend) NewKV(capacity, width int) KVCache {
	return &cpuKV{BlockTable: NewBlockTable(capacity), width: width}
}

// run is the keys and values of blocks b, b+1, ..., b+n-1, which must
// lie in one chunk (runOf).
func (s *cpuKV) run(b int32, n int) (keys, vals []float32) {
	per := KVBlock * s.width
	o := int(b%KVChunkBlocks) * per
	c := s.chunks[b/KVChunkBlocks]
	v := o + KVChunkBlocks*per // the value plane's
	return c[o : o+n*per : o+n*per], c[v : v+n*per : v+n*per]
}

// runOf is the length of the run of table's blocks from index j that
// follow each other in one chunk, and so in its planes: a prompt's blocks
// usually do, and the scores then read its keys as one array.
func runOf(table []int32, j int) int {
	e := j + 1
	for e < len(table) && table[e] == table[e-1]+1 && table[e]%KVChunkBlocks != 0 {
		e++
	}
	return e - j
}

func (s *cpuKV) grow(chunks int) error {
	for range chunks {
		s.chunks = append(s.chunks, make([]float32, 2*KVChunkBlocks*KVBlock*s.width))
	}
	return nil
}

func (s *cpuKV) Append(k, v Tensor, seqs, pos []int32) error {
	blocks, err := s.Assign(s.blocks[:0], seqs, pos, s.grow)
	if err != nil {
		return err
	}
	s.blocks = blocks
	w := s.width
	for i, b := range blocks {
		keys, vals := s.run(b, 1)
		o := int(pos[i]%KVBlock) * w
		copy(keys[o:o+w], row(k, i))
		copy(vals[o:o+w], row(v, i))
	}
	return nil
}

func (s *cpuKV) Close() { s.chunks = nil }

func (s *cpuKV) Attend(o, q Tensor, seqs, pos []int32, heads, kvHeads, hd int, scale float32) {
	n := len(seqs)
	maxT := 0
	var work int64
	for _, p := range pos {
		maxT = max(maxT, int(p)+1)
		work += int64(p+1) * int64(2*heads*hd)
	}
	job := &s.job
	*job = attendJob{kv: s, seqs: seqs, pos: pos, q: q, o: o, heads: heads, kvHeads: kvHeads, hd: hd, scale: scale, scores: job.scores}
	if work < 1<<16 {
		if cap(job.scores) < maxT {
			// Headroom: a decode step's context grows by one position.
			job.scores = make([]float32, maxT+maxT/2)
		}
		job.run(0, n*heads, job.scores[:maxT])
	} else {
		tensor.Parallel(n*heads, 1, work, func(lo, hi int) {
			job.run(lo, hi, make([]float32, maxT)) // per goroutine
		})
	}
	job.q, job.o, job.seqs, job.pos = Tensor{}, Tensor{}, nil, nil
}

// attendJob is the softmax attention of one pass over (row, head) pairs.
type attendJob struct {
	kv             *cpuKV
	seqs, pos      []int32
	q, o           Tensor
	heads, kvHeads int
	hd             int
	scale          float32
	scores         []float32
}

// run computes o for the (row, head) pairs [lo, hi), with scores as scratch,
// reading a row's positions run of blocks by run through its sequence's
// table.
func (j *attendJob) run(lo, hi int, scores []float32) {
	H, hd := j.heads, j.hd
	kw := j.kvHeads * hd
	for i := lo; i < hi; i++ {
		r, h := i/H, i%H
		T := int(j.pos[r]) + 1
		table := j.kv.Table(int(j.seqs[r]))[:(T+KVBlock-1)/KVBlock]
		qh := row(j.q, r)[h*hd : (h+1)*hd]
		off := (h / (H / j.kvHeads)) * hd // GQA: the key/value head of query head h
		sc := scores[:T]
		for b := 0; b < len(table); {
			n := runOf(table, b)
			keys, _ := j.kv.run(table[b], n)
			at := sc[b*KVBlock : min(T, (b+n)*KVBlock)]
			for t := range at {
				at[t] = tensor.Dot(qh, keys[t*kw+off:t*kw+off+hd]) * j.scale
			}
			b += n
		}
		tensor.Softmax(sc)
		oh := row(j.o, r)[h*hd : (h+1)*hd]
		clear(oh)
		for b := 0; b < len(table); {
			n := runOf(table, b)
			_, vals := j.kv.run(table[b], n)
			for t, p := range sc[b*KVBlock : min(T, (b+n)*KVBlock)] {
				tensor.Axpy(oh, p, vals[t*kw+off:t*kw+off+hd])
			}
			b += n
		}
	}
}

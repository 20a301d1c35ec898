package cuda

import (
	"fmt"
	"unsafe"

	"github.com/replayssm/replayssm/model/nn"
)

// gpuKV is the paged KV cache (nn.BlockTable) on the device, laid out as
// the CPU's: chunks of nn.KVChunkBlocks blocks, one allocation each, a key
// plane [KVChunkBlocks][KVBlock][width] then a value plane, block b in
// chunk b/KVChunkBlocks (KV_BLOCK and KV_CHUNK_BLOCKS in kernels/nn.cu); a
// new chunk never moves the old ones. The kernels find a position through two device arrays:
// chunkTab, the chunks' addresses, and table [capacity][maxBlocks] int32,
// each sequence's block table.
//
// A pass replayed as a CUDA graph repeats the recorded kernel arguments
// and upload addresses, so every address the kernels take stays put from
// one decode step to the next, and what changes reaches the device as
// upload contents, which a graph copies afresh: each Append uploads the
// whole chunkTab (all its slots, mostly unchanged) and the rows' blocks
// into rowBlocks, a buffer of its own, and nn_kv_append writes each row's
// block into table itself. The arrays are reallocated only to grow (by
// doubling), which changes the arguments and so records a new graph.
type gpuKV struct {
	*nn.BlockTable
	b               *NNBackend
	capacity, width int

	chunks    []Buffer
	chunkPtrs []uint64 // chunkTab's contents, len(chunkPtrs) entries allocated
	chunkTab  Buffer
	table     Buffer
	maxBlocks int    // table's row length
	rowBlocks Buffer // Append's blocks per row
	part      Buffer // the split decode rows' partial softmax states

	blocks      []int32 // Append's blocks per row, on the host
	tiles, rest []int32 // Attend's split of its rows (attendTiles)
}

// kvTableBlocks and kvChunkSlots are the first sizes of a cache's block
// table rows (1,024 positions a sequence) and chunk address array.
const (
	kvTableBlocks = 64
	kvChunkSlots  = 16
)

func (b *NNBackend) NewKV(capacity, width int) nn.KVCache {
	return &gpuKV{BlockTable: nn.NewBlockTable(capacity), b: b, capacity: capacity, width: width}
}

// chunkBytes is the bytes of one chunk of blocks.
func (kv *gpuKV) chunkBytes() int { return 4 * nn.KVChunkBlocks * 2 * nn.KVBlock * kv.width }

// grow adds storage for chunks chunks of blocks (nn.BlockTable.Assign); on
// an error it adds none.
func (kv *gpuKV) grow(chunks int) error {
	b := kv.b
	held := len(kv.chunks)
	undo := func(err error) error {
		for _, c := range kv.chunks[held:] {
			b.fail(b.d.Free(c))
		}
		kv.chunks = kv.chunks[:held]
		return err
	}
	for range chunks {
		buf, err := b.d.Alloc(kv.chunkBytes())
		if err != nil {
			return undo(fmt.Errorf("kv cache chunk %d of %d KiB: %w", len(kv.chunks), kv.chunkBytes()>>10, err))
		}
		kv.chunks = append(kv.chunks, buf)
	}
	if len(kv.chunks) > len(kv.chunkPtrs) {
		n := max(kvChunkSlots, len(kv.chunkPtrs))
		for n < len(kv.chunks) {
			n *= 2
		}
		if err := kv.realloc(&kv.chunkTab, 8*n, "kv cache chunk addresses"); err != nil {
			return undo(err)
		}
		kv.chunkPtrs = append(kv.chunkPtrs, make([]uint64, n-len(kv.chunkPtrs))...)
	}
	for i, c := range kv.chunks[held:] {
		kv.chunkPtrs[held+i] = c.ptr
	}
	return nil
}

// realloc replaces *buf by a buffer of bytes (contents undefined), waiting
// for the stream first when the old one may still be read.
func (kv *gpuKV) realloc(buf *Buffer, bytes int, what string) error {
	b := kv.b
	fresh, err := b.d.Alloc(bytes)
	if err != nil {
		return fmt.Errorf("%s of %d bytes: %w", what, bytes, err)
	}
	kv.free(buf)
	*buf = fresh
	return nil
}

// free waits for the stream and frees *buf, if allocated.
func (kv *gpuKV) free(buf *Buffer) {
	if buf.ptr == 0 {
		return
	}
	b := kv.b
	b.fail(b.s.Synchronize())
	b.fail(b.d.Free(*buf))
	*buf = Buffer{}
}

// fitTable makes the device block tables hold the longest sequence's
// blocks, reallocating them with the host's tables when they do not.
func (kv *gpuKV) fitTable() error {
	need := kv.Longest()
	if need <= kv.maxBlocks && kv.table.ptr != 0 {
		return nil
	}
	n := max(kvTableBlocks, kv.maxBlocks)
	for n < need {
		n *= 2
	}
	if err := kv.realloc(&kv.table, 4*kv.capacity*n, "kv block tables"); err != nil {
		return err
	}
	kv.maxBlocks = n
	host := make([]int32, kv.capacity*n)
	for q := range kv.capacity {
		copy(host[q*n:], kv.Table(q))
	}
	b := kv.b
	b.fail(b.s.Upload(kv.table, unsafe.Slice((*byte)(unsafe.Pointer(&host[0])), 4*len(host))))
	return b.err
}

// fit makes *buf hold at least bytes, doubling it when it does not.
func (kv *gpuKV) fit(buf *Buffer, bytes int, what string) error {
	if buf.bytes >= bytes {
		return nil
	}
	return kv.realloc(buf, max(bytes, 2*buf.bytes, 1024), what)
}

func (kv *gpuKV) Append(k, v nn.Tensor, seqs, pos []int32) error {
	b := kv.b
	if b.err != nil || len(seqs) == 0 {
		return b.err
	}
	blocks, err := kv.Assign(kv.blocks[:0], seqs, pos, kv.grow)
	if err != nil {
		return err
	}
	kv.blocks = blocks
	if err = kv.fitTable(); err == nil {
		err = kv.fit(&kv.rowBlocks, 4*len(blocks), "kv cache row blocks")
	}
	if err != nil {
		for i := len(seqs) - 1; i >= 0; i-- { // unbook the rows: each sequence back to its first row's position
			kv.Truncate(int(seqs[i]), int(pos[i]))
		}
		return err
	}
	defer b.span(opKVAppend)()
	b.fail(b.s.Upload(kv.chunkTab, unsafe.Slice((*byte)(unsafe.Pointer(&kv.chunkPtrs[0])), 8*len(kv.chunkPtrs))))
	b.fail(b.s.Upload(kv.rowBlocks, unsafe.Slice((*byte)(unsafe.Pointer(&blocks[0])), 4*len(blocks))))
	a := &b.args
	a.Reset()
	kv.pagesArg()
	a.Ptr(kv.rowBlocks)
	b.tensorArg(k)
	b.tensorArg(v)
	a.Ptr(b.i32(seqs))
	a.Ptr(b.i32(pos))
	a.I32(int32(kv.width))
	b.launch(b.fn.kvAppend, [3]uint32{uint32(len(seqs)), 1, 1}, rowThreads(kv.width))
	return b.err
}

// pagesArg appends the arguments every kernel over the cache takes first
// after its tensors: the chunks' addresses, the block tables and their
// row length.
func (kv *gpuKV) pagesArg() {
	a := &kv.b.args
	a.Ptr(kv.chunkTab)
	a.Ptr(kv.table)
	a.I32(int32(kv.maxBlocks))
}

func (kv *gpuKV) Attend(o, q nn.Tensor, seqs, pos []int32, heads, kvHeads, hd int, scale float32) {
	b := kv.b
	if hd > maxHeadDim {
		b.fail(fmt.Errorf("attention head dimension %d exceeds %d", hd, maxHeadDim))
		return
	}
	if b.err != nil || len(seqs) == 0 {
		return
	}
	defer b.span(opAttend)()
	kv.tiles, kv.rest = kv.tiles[:0], kv.rest[:0]
	ki := attendTileKernel(hd)
	if ki >= 0 {
		kv.tiles, kv.rest = attendTiles(kv.tiles, kv.rest, seqs, pos, attendKernels[ki].rows)
	}
	a := &b.args
	if len(kv.tiles) > 0 {
		a.Reset()
		b.tensorArg(o)
		b.tensorArg(q)
		kv.pagesArg()
		a.Ptr(b.i32(kv.tiles))
		a.I32(int32(heads))
		a.I32(int32(kvHeads))
		a.I32(int32(hd))
		a.F32(scale)
		k := attendKernels[ki]
		b.launchShared(b.fn.attendTiles[ki], [3]uint32{uint32(len(kv.tiles) / 4), uint32(heads), 1}, uint32(k.threads), k.smem(hd))
		if len(kv.rest) == 0 {
			return
		}
	}
	n, rows := len(seqs), Buffer{}
	if len(kv.tiles) > 0 {
		n, rows = len(kv.rest), b.i32(kv.rest)
	}
	longest := 0
	for x := range n {
		i := x
		if len(kv.tiles) > 0 {
			i = int(kv.rest[x])
		}
		longest = max(longest, int(pos[i])+1)
	}
	splits := attendSplits(n*heads, longest, b.d.Multiprocessors())
	var part Buffer
	if splits > 1 {
		if err := kv.fit(&kv.part, 4*n*heads*splits*(hd+2), "split attention partials"); err != nil {
			b.fail(err)
			return
		}
		part = kv.part
	}
	a.Reset()
	b.tensorArg(o)
	b.tensorArg(q)
	kv.pagesArg()
	a.Ptr(b.i32(seqs))
	a.Ptr(b.i32(pos))
	a.Ptr(rows)
	a.I32(int32(heads))
	a.I32(int32(kvHeads))
	a.I32(int32(hd))
	a.F32(scale)
	a.Ptr(part)
	b.launch(b.fn.attend, [3]uint32{uint32(n), uint32(heads), uint32(splits)}, 32)
	if splits > 1 {
		a.Reset()
		b.tensorArg(o)
		a.Ptr(part)
		a.Ptr(rows)
		a.I32(int32(heads))
		a.I32(int32(hd))
		a.I32(int32(splits))
		b.launch(b.fn.attendCombine, [3]uint32{uint32(n), uint32(heads), 1}, rowThreads(hd))
	}
}

// Close waits for the stream (the last pass may still read the cache) and
// frees its memory.
func (kv *gpuKV) Close() {
	b := kv.b
	for _, buf := range []*Buffer{&kv.chunkTab, &kv.table, &kv.rowBlocks, &kv.part} {
		kv.free(buf)
	}
	if len(kv.chunks) > 0 {
		b.fail(b.s.Synchronize())
		for _, c := range kv.chunks {
			b.fail(b.d.Free(c))
		}
		kv.chunks = nil
	}
}

// gpuLatent keeps a latent-attention layer's latents in one device array
// [capacity][maxLen][width], growing maxLen by doubling (moving the
// positions held), with the backend's own row kernels: Append scatters
// rows into it and Read copies a sequence's rows out, through tensor views
// of the buffer.
type gpuLatent struct {
	b                       *NNBackend
	buf                     Buffer
	capacity, width, maxLen int
	lens                    []int
	rows                    []int32 // Append's scratch
}

func (b *NNBackend) NewLatent(capacity, width int) nn.LatentCache {
	return &gpuLatent{b: b, capacity: capacity, width: width, lens: make([]int, capacity)}
}

func (c *gpuLatent) Len(seq int) int     { return c.lens[seq] }
func (c *gpuLatent) Truncate(seq, n int) { c.lens[seq] = min(c.lens[seq], n) }

// Close waits for the stream (the last pass may still read the array) and
// frees it.
func (c *gpuLatent) Close() { c.free() }

func (c *gpuLatent) free() {
	if c.buf.ptr == 0 {
		return
	}
	b := c.b
	b.fail(b.s.Synchronize())
	b.fail(b.d.Free(c.buf))
	c.buf = Buffer{}
}

// grow makes room for n positions a sequence.
func (c *gpuLatent) grow(n int) error {
	if n <= c.maxLen {
		return nil
	}
	newLen := max(64, c.maxLen)
	for newLen < n {
		newLen *= 2
	}
	b := c.b
	fresh, err := b.d.Alloc(4 * c.capacity * newLen * c.width)
	if err != nil {
		return fmt.Errorf("latent cache of %d positions: %w", newLen, err)
	}
	longest := 0
	for _, l := range c.lens {
		longest = max(longest, l)
	}
	if c.maxLen > 0 && longest > 0 {
		a := &b.args
		a.Reset()
		a.Ptr(fresh)
		a.Ptr(c.buf)
		a.I32(int32(c.width))
		a.I32(int32(c.maxLen))
		a.I32(int32(newLen))
		b.launch(b.fn.latentMove, [3]uint32{uint32(longest), uint32(c.capacity), 1}, rowThreads(c.width))
	}
	c.free()
	c.buf, c.maxLen = fresh, newLen
	return b.err
}

// view is the whole array as [capacity·maxLen][width] rows.
func (c *gpuLatent) view() nn.Tensor {
	return nn.Tensor{S: &gpuBuf{buf: c.buf, dtype: Float32}, Rows: c.capacity * c.maxLen, Cols: c.width, Stride: c.width}
}

func (c *gpuLatent) Append(x nn.Tensor, seqs, pos []int32) error {
	need, err := nn.CheckAppend(seqs, pos, c.Len)
	if err != nil {
		return err
	}
	if err := c.grow(need); err != nil {
		return err
	}
	c.rows = c.rows[:0]
	for i, q := range seqs {
		c.rows = append(c.rows, int32(int(q)*c.maxLen+int(pos[i])))
	}
	c.b.Scatter(c.view(), x, c.rows)
	for _, q := range seqs {
		c.lens[q]++
	}
	return c.b.err
}

func (c *gpuLatent) Read(dst nn.Tensor, seq, n int) {
	if n == 0 {
		return
	}
	c.b.Copy(dst, c.view().Slice(seq*c.maxLen, seq*c.maxLen+n))
}

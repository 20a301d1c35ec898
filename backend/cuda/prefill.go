package cuda

import (
	"context"
	"fmt"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// bindPrefill builds the cache's prefill module (the plan's module with
// PREFILL_MODULE, kernels/replay_common.cu) from src and looks up its
// kernels.
func (c *replayCommon) bindPrefill(ctx context.Context, src string, capacity int) error {
	m, err := c.d.Compile(ctx, c.plan.file, src, append(c.plan.options(capacity), "-DPREFILL_MODULE=1")...)
	if err != nil {
		return fmt.Errorf("prefill module: %w", err)
	}
	for _, f := range []struct {
		dst  **Function
		name string
	}{{&c.prefill, c.kind + "_prefill"}, {&c.prefillDone, "prefill_done"}, {&c.convPrefill, "conv_prefill"}} {
		if *f.dst, err = m.Function(f.name); err != nil {
			return fmt.Errorf("prefill module: %w", err)
		}
	}
	return c.bindChunked(m)
}

// The chunked prefill's constants (kernels/replay_mamba2.cu's and
// replay_gdn.cu's CQ, CPS, CNT).
const (
	prefillChunk   = 64  // positions a chunk
	chunkScanRows  = 16  // state rows a scan block
	chunkedThreads = 256 // threads a prep or scan block
)

// chunkedPrefillMin is the fewest inputs a slot's prefill takes the
// chunked form for: below two chunks the sequential kernel, which keeps a
// whole head's state in one block, has nothing to lose.
const chunkedPrefillMin = 2 * prefillChunk

// chunkedKernels are a cache's chunked-prefill kernels: prep works on every
// chunk at once (Mamba-2's C·Bᵀ per group, GDN's WY form), scan walks each
// head's chunks in slices of its state rows, store stores the final
// states. prep is nil where the cache has none.
type chunkedKernels struct {
	prep, scan, store  *Function
	prepSmem, scanSmem int // dynamic shared memory, bytes
}

// chunkedSmem returns the chunked kernels' dynamic shared memory for a
// layer kind with state rows of cols values and chunk rows of q4 = CQ+4
// (the kernels' layouts).
func chunkedSmem(kind string, cols int) (prep, scan int) {
	const q, q4, r = prefillChunk, prefillChunk + 4, chunkScanRows
	n4 := cols + 4
	if kind == "mamba2" {
		prep = 4 * 2 * q * n4
		scan = 4*(q*n4+q*q4+2*r*q4+r*n4) + 8*q + 4*2*q
		return prep, scan
	}
	prep = 4*(2*q*n4+q*q4) + 8*q + 4*q
	scan = 4 * (q*n4 + r*q4 + r*n4 + 2*q)
	return prep, scan
}

// gdnChunkScratch is the floats gdn_chunk_prep writes for one slot and
// chunk (replay_gdn.cu's CHUNK_FLOATS).
func gdnChunkScratch(sh ssm.GDNShape) int {
	const q = prefillChunk
	head := q*sh.KeyDim + q*sh.ValueDim + q*q + 2*q
	return sh.ValueHeads*head + sh.KeyHeads*2*q*sh.KeyDim
}

// bindChunked looks up the chunked prefill's kernels. A GPU before sm_80
// (no TF32 tensor cores), a state row that is not a multiple of 8 values
// (the tiles' columns), or a GPU whose blocks cannot hold the kernels'
// shared memory leaves the cache with the sequential prefill alone.
func (c *replayCommon) bindChunked(m *Module) error {
	n := c.plan.cols
	prepSmem, scanSmem := chunkedSmem(c.kind, n)
	if major, _ := c.d.ComputeCapability(); major < 8 || n%8 != 0 ||
		max(prepSmem, scanSmem) > c.d.MaxSharedMemoryPerBlock() {
		return nil
	}
	k := chunkedKernels{prepSmem: prepSmem, scanSmem: scanSmem}
	prep := "mamba2_chunk_gram"
	if c.kind == "gdn" {
		prep = "gdn_chunk_prep"
	}
	var err error
	for _, f := range []struct {
		dst  **Function
		name string
	}{{&k.prep, prep}, {&k.scan, c.kind + "_chunk_scan"}, {&k.store, c.kind + "_chunk_store"}} {
		if *f.dst, err = m.Function(f.name); err != nil {
			return fmt.Errorf("prefill module: %w", err)
		}
	}
	if err := k.prep.SetMaxDynamicSharedMemory(prepSmem); err != nil {
		return fmt.Errorf("prefill module: %w", err)
	}
	if err := k.scan.SetMaxDynamicSharedMemory(scanSmem); err != nil {
		return fmt.Errorf("prefill module: %w", err)
	}
	c.chunked = k
	return nil
}

// useChunked reports whether a prefill of T inputs a slot takes the
// chunked form: long enough, and a mode whose prefill stores the state
// once (replay, or a float32 baseline: a baseline in a lower format rounds
// its state after every input, which only the sequential kernel does).
func (c *replayCommon) useChunked(T int) bool {
	return c.chunked.prep != nil && T >= chunkedPrefillMin &&
		(c.opt.Mode == replay.Replay || c.opt.State == numeric.F32)
}

// ConvPrefill runs the convolution over T consecutive inputs per slot
// ([slot][T][Channels]; counts, when not nil, each slot's own number) and
// moves each window on by its count (the contract's ConvPrefill).
func (c *replayCommon) ConvPrefill(slots []replay.Slot, T int, counts []int, in, out Buffer) error {
	if c.conv == nil {
		return c.errorf("conv", fmt.Errorf("cache built without conv weights"))
	}
	sl, cn, err := c.preparePrefill(slots, T, counts)
	if err == nil {
		n := 4 * len(slots) * T * c.conv.w.Channels
		if err = need("conv input", in, n); err == nil {
			err = need("conv output", out, n)
		}
	}
	if err != nil {
		return c.errorf("conv", err)
	}
	if err := c.conv.prefill(c.s, c.convPrefill, sl, cn, in, out, len(slots), T); err != nil {
		return c.errorf("conv", err)
	}
	return nil
}

// preparePrefill validates a prefill and puts its slots and counts on the
// device.
func (c *replayCommon) preparePrefill(slots []replay.Slot, T int, counts []int) (slotsDev, countsDev Buffer, err error) {
	if c.prefillErr != nil {
		return Buffer{}, Buffer{}, c.prefillErr
	}
	if err := c.ledger.CheckPrefill(slots, T, counts); err != nil {
		return Buffer{}, Buffer{}, err
	}
	if err := c.checkStep(slots); err != nil {
		return Buffer{}, Buffer{}, err
	}
	return c.useSlotsCounts(slots, counts)
}

// prefillHead appends the arguments every prefill kernel starts with: the
// state and read copy, then the layer's ring arrays.
func (c *replayCommon) prefillHead(a *Args, rings ...Buffer) {
	a.Reset()
	a.Ptr(c.state)
	a.Ptr(c.codes)
	a.Ptr(c.scales)
	a.Ptr(c.scale)
	for _, r := range rings {
		a.Ptr(r)
	}
	a.Ptr(c.hist)
	a.Ptr(c.cur)
	a.I32(int32(stateBuffers(c.opt)))
	a.I32(int32(b2i(c.opt.Mode == replay.Replay)))
}

// launchPrefill queues the prefill kernel built in c.args (one block per
// head and slot), then the cursor kernel, and records the prefill.
func (c *replayCommon) launchPrefill(slots []replay.Slot, T int, counts []int, sl Buffer) error {
	if err := c.d.Launch(c.prefill, c.grid(len(slots)), c.block(), 0, c.s, &c.args); err != nil {
		return c.errorf("prefill", err)
	}
	return c.finishPrefill(slots, T, counts, sl)
}

// finishPrefill queues the cursor kernel after a prefill's kernels and
// records the prefill.
func (c *replayCommon) finishPrefill(slots []replay.Slot, T int, counts []int, sl Buffer) error {
	a := &c.args
	a.Reset()
	a.Ptr(c.hist)
	a.Ptr(c.pending)
	a.Ptr(sl)
	a.I32(int32(len(slots)))
	a.I32(int32(b2i(c.opt.Mode == replay.Replay)))
	if err := c.d.Launch(c.prefillDone, [3]uint32{uint32((len(slots) + 127) / 128), 1, 1}, [3]uint32{128, 1, 1}, 0, c.s, a); err != nil {
		return c.errorf("prefill", err)
	}
	c.ledger.Prefill(slots, T, counts)
	return nil
}

// prefillChunked is Mamba-2's Prefill in the chunked form (replay_mamba2.cu):
// the chunks' C·Bᵀ per group, the scan of each head's rows in slices, and
// the store of the final states.
func (c *Mamba2Cache) prefillChunked(slots []replay.Slot, T int, counts []int, sl, cn Buffer, in Mamba2Input, y Buffer) error {
	H, P, N, G := c.shape.Heads, c.shape.HeadDim, c.shape.StateSize, c.shape.Groups
	batch, chunks := len(slots), (T+prefillChunk-1)/prefillChunk
	gramBytes := 4 * batch * chunks * G * prefillChunk * prefillChunk
	work, err := c.s.Scratch(gramBytes + 4*batch*H*P*N)
	if err != nil {
		return c.errorf("prefill", err)
	}
	gram, _ := work.Slice(0, gramBytes)
	fin, _ := work.Slice(gramBytes, work.bytes-gramBytes)
	k, a := &c.chunked, &c.args
	block := [3]uint32{chunkedThreads, 1, 1}

	a.Reset()
	a.Ptr(cn)
	a.I32(int32(T))
	a.Ptr(in.B)
	a.Ptr(in.C)
	a.Ptr(gram)
	a.I32(int32(chunks))
	grid := [3]uint32{uint32(chunks), uint32(G), uint32(batch)}
	if err := c.d.Launch(k.prep, grid, block, uint32(k.prepSmem), c.s, a); err != nil {
		return c.errorf("prefill", err)
	}

	a.Reset()
	a.Ptr(c.state)
	for _, r := range []Buffer{c.ringX, c.ringB, c.ringDt, c.ringA, c.hist, c.cur} {
		a.Ptr(r)
	}
	a.I32(int32(stateBuffers(c.opt)))
	a.I32(int32(b2i(c.opt.Mode == replay.Replay)))
	a.Ptr(sl)
	a.Ptr(cn)
	a.I32(int32(T))
	a.Ptr(in.X)
	a.Ptr(in.C)
	a.Ptr(in.Dt)
	a.Ptr(y)
	a.Ptr(c.a)
	a.Ptr(c.dtb)
	a.Ptr(c.dd)
	a.F32(in.DtMin)
	a.Ptr(gram)
	a.I32(int32(chunks))
	a.Ptr(in.B)
	a.Ptr(fin)
	grid = [3]uint32{uint32((P + chunkScanRows - 1) / chunkScanRows), uint32(H), uint32(batch)}
	if err := c.d.Launch(k.scan, grid, block, uint32(k.scanSmem), c.s, a); err != nil {
		return c.errorf("prefill", err)
	}

	return c.storeChunked(slots, T, counts, sl, fin)
}

// storeChunked queues the chunked prefill's store of the final states fin
// and the cursor kernel, and records the prefill.
func (c *replayCommon) storeChunked(slots []replay.Slot, T int, counts []int, sl, fin Buffer) error {
	a := &c.args
	a.Reset()
	a.Ptr(c.state)
	a.Ptr(c.codes)
	a.Ptr(c.scales)
	a.Ptr(c.scale)
	a.Ptr(c.cur)
	a.I32(int32(stateBuffers(c.opt)))
	a.I32(int32(b2i(c.opt.Mode == replay.Replay)))
	a.Ptr(sl)
	a.Ptr(fin)
	if err := c.d.Launch(c.chunked.store, c.grid(len(slots)), c.block(), 0, c.s, a); err != nil {
		return c.errorf("prefill", err)
	}
	return c.finishPrefill(slots, T, counts, sl)
}

// prefillChunked is GDN's Prefill in the chunked form (replay_gdn.cu): the
// WY form of every chunk, the scan of each value head's rows in slices,
// and the store of the final states.
func (c *GDNCache) prefillChunked(slots []replay.Slot, T int, counts []int, sl, cn Buffer, in GDNInput, o Buffer) error {
	sh := c.shape
	batch, chunks := len(slots), (T+prefillChunk-1)/prefillChunk
	prepBytes := 4 * batch * chunks * gdnChunkScratch(sh)
	work, err := c.s.Scratch(prepBytes + 4*batch*sh.ValueHeads*sh.ValueDim*sh.KeyDim)
	if err != nil {
		return c.errorf("prefill", err)
	}
	prep, _ := work.Slice(0, prepBytes)
	fin, _ := work.Slice(prepBytes, work.bytes-prepBytes)
	k, a := &c.chunked, &c.args
	block := [3]uint32{chunkedThreads, 1, 1}

	a.Reset()
	a.Ptr(cn)
	a.I32(int32(T))
	a.Ptr(in.Q)
	a.Ptr(in.K)
	a.Ptr(in.V)
	a.Ptr(in.A)
	a.Ptr(in.B)
	a.Ptr(c.negA)
	a.Ptr(c.dtb)
	a.F32(c.qscale)
	a.Ptr(prep)
	a.I32(int32(chunks))
	grid := [3]uint32{uint32(chunks), uint32(sh.ValueHeads), uint32(batch)}
	if err := c.d.Launch(k.prep, grid, block, uint32(k.prepSmem), c.s, a); err != nil {
		return c.errorf("prefill", err)
	}

	a.Reset()
	a.Ptr(c.state)
	for _, r := range []Buffer{c.ringK, c.ringV, c.ringA, c.ringBeta, c.hist, c.cur} {
		a.Ptr(r)
	}
	a.I32(int32(stateBuffers(c.opt)))
	a.I32(int32(b2i(c.opt.Mode == replay.Replay)))
	a.Ptr(sl)
	a.Ptr(cn)
	a.I32(int32(T))
	a.Ptr(o)
	a.Ptr(prep)
	a.I32(int32(chunks))
	a.Ptr(fin)
	grid = [3]uint32{uint32((sh.ValueDim + chunkScanRows - 1) / chunkScanRows), uint32(sh.ValueHeads), uint32(batch)}
	if err := c.d.Launch(k.scan, grid, block, uint32(k.scanSmem), c.s, a); err != nil {
		return c.errorf("prefill", err)
	}
	return c.storeChunked(slots, T, counts, sl, fin)
}

// Prefill runs T consecutive inputs per slot through the recurrence as one
// multi-token forward (the contract's Prefill; rows [slot][T] of in and y,
// counts, when not nil, each slot's own number): y receives every input's
// output from the float32 state; replay mode folds the ring and the inputs
// into the checkpoint and read copy, baseline mode rounds the state after
// every input.
func (c *Mamba2Cache) Prefill(slots []replay.Slot, T int, counts []int, in Mamba2Input, y Buffer) error {
	sl, cn, err := c.preparePrefill(slots, T, counts)
	if err == nil {
		err = c.checkInput(sl, len(slots), T, in, y)
	}
	if err != nil {
		return c.errorf("prefill", err)
	}
	if c.useChunked(T) {
		return c.prefillChunked(slots, T, counts, sl, cn, in, y)
	}
	a := &c.args
	c.prefillHead(a, c.ringX, c.ringB, c.ringDt, c.ringA)
	a.Ptr(sl)
	a.Ptr(cn)
	a.I32(int32(T))
	c.inputArgs(a, in.X, in.B, in, y)
	return c.launchPrefill(slots, T, counts, sl)
}

// Prefill runs T consecutive inputs per slot through the recurrence (see
// Mamba2Cache.Prefill); o receives [slot][T][Hv·dv].
func (c *GDNCache) Prefill(slots []replay.Slot, T int, counts []int, in GDNInput, o Buffer) error {
	sl, cn, err := c.preparePrefill(slots, T, counts)
	if err == nil {
		err = c.checkInput(sl, len(slots), T, in, o)
	}
	if err != nil {
		return c.errorf("prefill", err)
	}
	if c.useChunked(T) {
		return c.prefillChunked(slots, T, counts, sl, cn, in, o)
	}
	a := &c.args
	c.prefillHead(a, c.ringK, c.ringV, c.ringA, c.ringBeta)
	a.Ptr(sl)
	a.Ptr(cn)
	a.I32(int32(T))
	c.inputArgs(a, in, o)
	return c.launchPrefill(slots, T, counts, sl)
}

package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// This file holds what the GPU state caches (Mamba2Cache, GDNCache) share:
// the compiled module, device memory, the host ledger and the contract's
// slot operations. The caches mirror package replay's semantics on device
// buffers (docs/DESIGN.md 2, 2.3): every per-slot decision of a step
// (flush or not, early fold before a verify) is taken by the kernels from
// cursors in device memory, and small kernels move the cursors afterwards,
// so a decode step queues a fixed sequence of launches with no host round
// trip and can be captured in a CUDA graph (the Queue methods). The host
// keeps a replay.Ledger of the same cursors, from which it validates calls,
// counts statistics and exports slots.

// ErrReplayOptions reports options or shapes the GPU caches do not support.
var ErrReplayOptions = errors.New("cuda: unsupported replay cache options")

// replayCommon is the state both GPU caches share.
type replayCommon struct {
	kind     string // "mamba2" or "gdn", for errors
	d        *Device
	s        *Stream // every operation's stream
	plan     cachePlan
	opt      replay.Options
	capacity int
	threads  int // per block of the one-block-per-matrix kernels
	heads    int // state matrices per slot and state buffer
	elems    int // elements per state matrix
	ledger   *replay.Ledger

	mod                   *Module
	cursorVerify, commitF *Function
	// The prefill module's kernels (PREFILL_MODULE): the layer's prefill,
	// its cursor kernel and the convolution's; prefillErr, where that
	// module failed to build, is what Prefill and ConvPrefill return.
	prefill, prefillDone, convPrefill *Function
	prefillErr                        error
	chunked                           chunkedKernels // a long prompt's prefill (prefill.go)
	nonflush, flush, verify           *Function      // the per-head kernels and the items flush
	stepSmall                         *Function      // flush and non-flush slots in one kernel
	verifySmall                       *Function      // Mamba-2: a small batch's verify and cursor move in one kernel
	early                             earlyVerify    // a small batch's verify (Mamba-2's one kernel, GDN's per-head one) with the early start
	flushBlocks                       int            // the items flush's grid: the blocks the GPU holds at once
	baselineStep, baselineVerify      *Function
	small                             headSplit // the small step of split heads, where planned

	// The overlapped flush (plan.overlap): its stream of the greatest
	// priority, forked from s and joined back by events.
	side       *Stream
	fork, join *Event

	// state holds the checkpoint (replay) or the state buffers (baseline):
	// [slot][buffer][head] matrices in the state format, then for fp8 one
	// float32 scale per matrix in the same order.
	state Buffer
	// The read copy: codes holds [slot][head] matrices (nvfp4 codes, or bf16
	// / fp8 elements), scales the nvfp4 block scales, scale one float32 per
	// matrix (the nvfp4 global scale or the fp8 scale).
	codes, scales, scale Buffer
	// rings are the layer's per-slot ring arrays (slot-major).
	rings []slotArray

	// Device cursors, one int32 per slot: hist is the number of committed
	// ring entries since the checkpoint (replay), cur the current state
	// buffer (baseline), pending the drafts of the last verify; errFlag is
	// set by commit when a count was out of range; done counts the blocks
	// of a step's last kernel that have finished (step_done).
	hist, cur, pending, errFlag, done Buffer

	// The contract's host slot lists on the device: the slots of the last
	// call (uploaded when they change), a verify's counts, a commit's
	// accepted counts.
	slotsDev, countsDev, acceptedDev Buffer
	lastSlots                        []replay.Slot
	staging                          []byte

	conv *convWindows // nil: built without conv weights

	args  Args // the launch being built; a cache is driven by one goroutine
	clear clearTable
	bufs  []Buffer
}

// slotArray is a device array of capacity equal parts, one per slot.
type slotArray struct {
	buf     Buffer
	perSlot int // bytes
}

// at is slot s's part.
func (a slotArray) at(s replay.Slot) Buffer {
	b, _ := a.buf.Slice(int(s)*a.perSlot, a.perSlot)
	return b
}

// init compiles the plan's module (and the split module) and allocates the
// cursors, the slot lists and the state.
func (c *replayCommon) init(ctx context.Context, s *Stream, plan cachePlan, capacity int) error {
	if capacity < 1 {
		return fmt.Errorf("capacity %d must be positive", capacity)
	}
	c.d, c.s, c.plan, c.opt, c.capacity = s.d, s, plan, plan.opt, capacity
	c.threads, c.heads, c.elems = plan.threads, plan.heads, plan.rows*plan.cols
	src, err := replaySource(plan.file)
	if err != nil {
		return err
	}
	if c.mod, err = c.d.Compile(ctx, plan.file, src, plan.options(capacity)...); err != nil {
		return err
	}
	for _, f := range []struct {
		dst  **Function
		name string
	}{{&c.cursorVerify, "cursor_verify"}, {&c.commitF, "commit"}} {
		if *f.dst, err = c.mod.Function(f.name); err != nil {
			return err
		}
	}
	c.prefillErr = c.bindPrefill(ctx, src, capacity)
	for _, b := range []*Buffer{&c.hist, &c.cur, &c.pending, &c.slotsDev, &c.countsDev, &c.acceptedDev} {
		if *b, err = c.alloc(4 * capacity); err != nil {
			return err
		}
	}
	// done: the non-flush kernel's block count, and with the overlapped
	// flush the flush kernel's, the kernels finished and the group step's
	// item counter.
	for _, b := range []struct {
		buf   *Buffer
		bytes int
	}{{&c.errFlag, 4}, {&c.done, 32}} {
		if *b.buf, err = c.alloc(b.bytes); err != nil {
			return err
		}
		if err := c.d.Memset(*b.buf, 0); err != nil {
			return err
		}
	}
	if plan.overlap {
		if c.side, err = s.NewSide(); err != nil {
			return err
		}
		if c.fork, err = c.d.NewSyncEvent(); err != nil {
			return err
		}
		if c.join, err = c.d.NewSyncEvent(); err != nil {
			return err
		}
	}
	if err := c.allocStates(); err != nil {
		return err
	}
	st, read := c.stateBytes()
	copyBytes := 0
	if c.opt.ReadCopy != numeric.F32 {
		copyBytes = read
	}
	c.ledger = replay.NewLedger(c.opt, capacity, int64(st), int64(read), int64(copyBytes))
	return nil
}

// replaySource is what a replay module compiles: replay_common.cu, then the
// layer's file.
func replaySource(file string) (string, error) {
	common, err := KernelSource("replay_common.cu")
	if err != nil {
		return "", err
	}
	src, err := KernelSource(file)
	if err != nil {
		return "", err
	}
	return common + "\n" + src, nil
}

// alloc allocates a buffer that Close frees.
func (c *replayCommon) alloc(bytes int) (Buffer, error) {
	b, err := c.d.Alloc(max(bytes, 4))
	if err != nil {
		return Buffer{}, err
	}
	c.bufs = append(c.bufs, b)
	return b, nil
}

// allocRing allocates a per-slot ring array of perSlot bytes a slot.
func (c *replayCommon) allocRing(perSlot int) (Buffer, error) {
	b, err := c.alloc(perSlot * c.capacity)
	if err == nil {
		c.rings = append(c.rings, slotArray{b, perSlot})
	}
	return b, err
}

// uploadF64 allocates a buffer holding v as float64.
func (c *replayCommon) uploadF64(v []float64) (Buffer, error) {
	b, err := c.alloc(8 * len(v))
	if err != nil {
		return Buffer{}, err
	}
	raw := make([]byte, 8*len(v))
	for i, x := range v {
		putU64(raw[8*i:], math.Float64bits(x))
	}
	return b, c.d.CopyToDevice(b, raw)
}

// uploadF32 allocates a buffer holding v.
func (c *replayCommon) uploadF32(v []float32) (Buffer, error) {
	b, err := c.alloc(4 * len(v))
	if err != nil {
		return Buffer{}, err
	}
	return b, c.d.CopyToDeviceF32(b, v)
}

// stateMatrices is the number of matrices in the state buffer.
func (c *replayCommon) stateMatrices() int { return c.capacity * stateBuffers(c.opt) * c.heads }

// allocStates allocates the state buffer and the read copy (layouts at
// replayCommon.state and .codes).
func (c *replayCommon) allocStates() error {
	E, M := c.elems, c.stateMatrices()
	var err error
	if c.state, err = c.alloc(M * matrixBytes(c.opt.State, E)); err != nil {
		return err
	}
	if c.opt.ReadCopy == numeric.F32 {
		return nil
	}
	mats := c.capacity * c.heads
	if c.opt.ReadCopy == numeric.NVFP4 {
		if c.scales, err = c.alloc(mats * E / 16); err != nil {
			return err
		}
	}
	if c.codes, err = c.alloc(mats * codeBytes(c.opt.ReadCopy, E)); err != nil {
		return err
	}
	if c.opt.ReadCopy == numeric.NVFP4 || c.opt.ReadCopy == numeric.E4M3 {
		if c.scale, err = c.alloc(4 * mats); err != nil {
			return err
		}
	}
	return nil
}

// stateBytes is what one full state transfer of one slot moves (its
// matrices in the state format, with fp8 scales), and read what a
// non-flush step reads of one slot: the read copy if there is one, else the
// checkpoint.
func (c *replayCommon) stateBytes() (state, read int) {
	state = c.heads * matrixBytes(c.opt.State, c.elems)
	read = state
	if c.opt.ReadCopy != numeric.F32 {
		read = c.heads * matrixBytes(c.opt.ReadCopy, c.elems)
	}
	return state, read
}

// stateParts are slot s's state and read copy: its matrices (and an fp8
// state's scales) and the read copy's codes, block scales and scales.
func (c *replayCommon) stateParts(s replay.Slot) []Buffer {
	H, E, nb := c.heads, c.elems, stateBuffers(c.opt)
	es := elemBytes(c.opt.State)
	var parts []Buffer
	add := func(b Buffer, off, n int) {
		if r, err := b.Slice(off, n); err == nil && n > 0 {
			parts = append(parts, r)
		}
	}
	add(c.state, int(s)*nb*H*E*es, nb*H*E*es)
	if c.opt.State == numeric.E4M3 { // the slot's scales, after every matrix
		add(c.state, c.stateMatrices()*E+4*int(s)*nb*H, 4*nb*H)
	}
	if c.codes.ptr != 0 {
		per := H * codeBytes(c.opt.ReadCopy, E)
		add(c.codes, int(s)*per, per)
	}
	if c.scales.ptr != 0 {
		add(c.scales, int(s)*H*E/16, H*E/16)
	}
	if c.scale.ptr != 0 {
		add(c.scale, 4*int(s)*H, 4*H)
	}
	return parts
}

// slotParts is everything of slot s that Fork, Export and Import move: the
// state and read copy, the ring and the conv window.
func (c *replayCommon) slotParts(s replay.Slot) []Buffer {
	parts := c.stateParts(s)
	for _, r := range c.rings {
		parts = append(parts, r.at(s))
	}
	if c.conv != nil {
		parts = append(parts, c.conv.window(s))
	}
	return parts
}

// Close waits for the work queued on the cache's stream and frees the
// cache's device memory and modules.
func (c *replayCommon) Close() error {
	var errs []error
	if c.s != nil {
		errs = append(errs, c.s.Synchronize())
	}
	for _, b := range c.bufs {
		if err := c.d.Free(b); err != nil {
			errs = append(errs, err)
		}
	}
	c.bufs = nil
	for _, e := range []*Event{c.fork, c.join} {
		if e != nil {
			errs = append(errs, e.Close())
		}
	}
	c.fork, c.join = nil, nil
	if c.side != nil {
		errs = append(errs, c.side.Close())
		c.side = nil
	}
	if c.small.mod != nil {
		errs = append(errs, c.small.mod.Close())
	}
	c.small = headSplit{}
	if c.mod != nil {
		errs = append(errs, c.mod.Close())
		c.mod = nil
	}
	return errors.Join(errs...)
}

// Options returns the options in force (defaults filled in).
func (c *replayCommon) Options() replay.Options { return c.opt }

// Capacity is the number of slots.
func (c *replayCommon) Capacity() int { return c.capacity }

// Stats returns the counters since the cache was built (the host ledger's:
// the Queue methods are not counted).
func (c *replayCommon) Stats() replay.Stats { return c.ledger.Stats() }

// errorf wraps an operation's error with the cache's name.
func (c *replayCommon) errorf(op string, err error) error {
	return fmt.Errorf("cuda: %s cache: %s: %w", c.kind, op, err)
}

// Admit takes a free slot and queues the clearing of its state, read copy,
// conv window and cursors.
func (c *replayCommon) Admit() (replay.Slot, error) {
	s, err := c.ledger.Admit()
	if err != nil {
		return s, c.errorf("admit", err)
	}
	if err := c.clearSlot(s); err != nil {
		return s, c.errorf("admit", err)
	}
	return s, nil
}

// Reset queues the clearing of a live slot's state, conv window and
// cursors.
func (c *replayCommon) Reset(s replay.Slot) error {
	if err := c.ledger.Reset(s); err != nil {
		return c.errorf("reset", err)
	}
	if err := c.clearSlot(s); err != nil {
		return c.errorf("reset", err)
	}
	return nil
}

// Evict frees a slot.
func (c *replayCommon) Evict(s replay.Slot) error {
	if err := c.ledger.Evict(s); err != nil {
		return c.errorf("evict", err)
	}
	return nil
}

// clearParts are the parts of slot s that Admit and Reset zero: its
// state, read copy, conv window and cursors.
func (c *replayCommon) clearParts(s replay.Slot) []Buffer {
	parts := c.stateParts(s)
	if c.conv != nil {
		parts = append(parts, c.conv.window(s))
	}
	return append(parts, c.cursor(c.hist, s), c.cursor(c.cur, s), c.cursor(c.pending, s))
}

// newClearTable puts every slot's clearParts on the device, so that
// clearing a slot is one launch of zero_slot rather than a memset per part
// (admitting 256 sequences into a model of 21 SSM layers was some 30,000
// launches in the first pass). It runs once the cache's buffers, conv
// windows included, exist.
func (c *replayCommon) newClearTable(ctx context.Context, capacity int) error {
	fn, err := c.d.Kernel(ctx, "fill.cu", "zero_slot")
	if err != nil {
		return err
	}
	n := len(c.clearParts(0))
	raw := make([]byte, 16*capacity*n)
	longest := 0
	for s := range capacity {
		parts := c.clearParts(replay.Slot(s))
		if len(parts) != n {
			return fmt.Errorf("slot %d has %d parts to clear, slot 0 %d", s, len(parts), n)
		}
		for k, p := range parts {
			if p.bytes%4 != 0 {
				return fmt.Errorf("a part of %d bytes to clear is not whole 4-byte words", p.bytes)
			}
			at := 16 * (s*n + k)
			binary.LittleEndian.PutUint64(raw[at:], p.ptr)
			binary.LittleEndian.PutUint64(raw[at+8:], uint64(p.bytes/4))
			longest = max(longest, p.bytes/4)
		}
	}
	tbl, err := c.alloc(len(raw))
	if err != nil {
		return err
	}
	if err := c.d.CopyToDevice(tbl, raw); err != nil {
		return err
	}
	c.clear = clearTable{fn: fn, table: tbl, parts: n, blocks: max(1, min((longest+255)/256, 2*c.d.Multiprocessors()))}
	return nil
}

// clearTable is newClearTable's: the kernel, the table, parts per slot and
// the blocks that stride over the longest part.
type clearTable struct {
	fn            *Function
	table         Buffer
	parts, blocks int
}

// clearSlot queues zeroing slot s's clearParts.
func (c *replayCommon) clearSlot(s replay.Slot) error {
	a := &c.args
	a.Reset()
	a.Ptr(c.clear.table)
	a.I32(int32(c.clear.parts))
	a.I32(int32(s))
	return c.d.Launch(c.clear.fn, [3]uint32{uint32(c.clear.blocks), uint32(c.clear.parts), 1}, [3]uint32{256, 1, 1}, 0, c.s, a)
}

// cursor is slot s's int32 in a cursor array.
func (c *replayCommon) cursor(b Buffer, s replay.Slot) Buffer {
	r, _ := b.Slice(4*int(s), 4)
	return r
}

// Fork admits a new slot holding a copy of src's state, ring, conv window
// and cursors (pending drafts are not copied).
func (c *replayCommon) Fork(src replay.Slot) (replay.Slot, error) {
	dst, err := c.ledger.Fork(src)
	if err != nil {
		return -1, c.errorf("fork", err)
	}
	from, to := c.slotParts(src), c.slotParts(dst)
	from = append(from, c.cursor(c.hist, src), c.cursor(c.cur, src))
	to = append(to, c.cursor(c.hist, dst), c.cursor(c.cur, dst))
	for i := range from {
		if err := c.s.CopyDevice(to[i], from[i]); err != nil {
			return -1, c.errorf("fork", err)
		}
	}
	if err := c.s.Memset32(c.cursor(c.pending, dst), 0); err != nil {
		return -1, c.errorf("fork", err)
	}
	return dst, nil
}

// useSlots puts the slot list on the device (when it differs from the last
// one put there) and returns it.
func (c *replayCommon) useSlots(slots []replay.Slot) (Buffer, error) {
	if !slicesEqual(slots, c.lastSlots) {
		if err := c.upload(c.slotsDev, len(slots), func(i int) int32 { return int32(slots[i]) }); err != nil {
			return Buffer{}, err
		}
		c.lastSlots = append(c.lastSlots[:0], slots...)
	}
	return c.slotsDev.Slice(0, 4*len(slots))
}

// upload copies n int32 values into the start of b.
func (c *replayCommon) upload(b Buffer, n int, v func(i int) int32) error {
	c.staging = c.staging[:0]
	for i := range n {
		c.staging = append(c.staging, byte(v(i)), byte(v(i)>>8), byte(v(i)>>16), byte(v(i)>>24))
	}
	return c.s.Upload(b, c.staging)
}

func slicesEqual(a, b []replay.Slot) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// checkStep validates a step's slots.
func (c *replayCommon) checkStep(slots []replay.Slot) error {
	if len(slots) == 0 || len(slots) > 65535 {
		return fmt.Errorf("batch of %d slots (want 1 to %d)", len(slots), min(c.capacity, 65535))
	}
	return c.ledger.CheckBatch(slots)
}

// prepareVerify validates a verify and puts its slots and counts on the
// device.
func (c *replayCommon) prepareVerify(slots []replay.Slot, T int, counts []int) (slotsDev, countsDev Buffer, err error) {
	if len(slots) == 0 || len(slots) > 65535 {
		return Buffer{}, Buffer{}, fmt.Errorf("batch of %d slots (want 1 to %d)", len(slots), min(c.capacity, 65535))
	}
	if err := c.ledger.CheckVerify(slots, T, counts); err != nil {
		return Buffer{}, Buffer{}, err
	}
	return c.useSlotsCounts(slots, counts)
}

// useSlotsCounts puts a call's slots and per-slot counts (if any) on the
// device.
func (c *replayCommon) useSlotsCounts(slots []replay.Slot, counts []int) (slotsDev, countsDev Buffer, err error) {
	if slotsDev, err = c.useSlots(slots); err != nil {
		return Buffer{}, Buffer{}, err
	}
	if counts != nil {
		if err := c.upload(c.countsDev, len(counts), func(i int) int32 { return int32(counts[i]) }); err != nil {
			return Buffer{}, Buffer{}, err
		}
		countsDev, _ = c.countsDev.Slice(0, 4*len(counts))
	}
	return slotsDev, countsDev, nil
}

// Commit accepts the first accepted[i] drafts of slots[i]'s last Verify: a
// cursor move (replay) or the accepted draft's state buffer (baseline), and
// the conv windows shift by the accepted counts. Nothing is copied.
func (c *replayCommon) Commit(slots []replay.Slot, accepted []int) error {
	if err := c.ledger.CheckCommit(slots, accepted); err != nil {
		return c.errorf("commit", err)
	}
	if len(slots) == 0 {
		return nil
	}
	sl, err := c.useSlots(slots)
	if err == nil {
		err = c.upload(c.acceptedDev, len(accepted), func(i int) int32 { return int32(accepted[i]) })
	}
	acc, _ := c.acceptedDev.Slice(0, 4*len(accepted))
	if err == nil {
		err = c.queueCommit(sl, acc, len(slots))
	}
	if err == nil && c.conv != nil {
		err = c.conv.shift(c.s, sl, acc, len(slots))
	}
	if err != nil {
		return c.errorf("commit", err)
	}
	c.ledger.Commit(slots, accepted)
	return nil
}

// QueueCommit queues the acceptance of accepted[b] (int32, device memory)
// drafts of slots[b]'s last verify, for CUDA graphs: nothing is checked on
// the host, the ledger does not see it, and the conv windows do not move.
// CommitErrors reports counts that were out of range.
func (c *replayCommon) QueueCommit(slots, accepted Buffer, batch int) error {
	if batch < 1 || batch > c.capacity {
		return c.errorf("commit", fmt.Errorf("batch %d out of range [1, %d]", batch, c.capacity))
	}
	for _, e := range []error{need("slots", slots, 4*batch), need("accepted", accepted, 4*batch)} {
		if e != nil {
			return c.errorf("commit", e)
		}
	}
	return c.queueCommit(slots, accepted, batch)
}

func (c *replayCommon) queueCommit(slots, accepted Buffer, batch int) error {
	a := &c.args
	a.Reset()
	a.Ptr(c.hist)
	a.Ptr(c.cur)
	a.Ptr(c.pending)
	a.Ptr(slots)
	a.Ptr(accepted)
	a.I32(int32(batch))
	a.I32(int32(stateBuffers(c.opt)))
	a.I32(int32(cacheMode(c.opt.Mode)))
	a.Ptr(c.errFlag)
	return c.d.Launch(c.commitF, [3]uint32{uint32((batch + 127) / 128), 1, 1}, [3]uint32{128, 1, 1}, 0, c.s, a)
}

// CommitErrors reports (and clears) whether a QueueCommit since the last
// call saw an accepted count outside [0, pending drafts]; it synchronises
// with the cache's stream.
func (c *replayCommon) CommitErrors() error {
	var b [4]byte
	if err := c.s.CopyFromDevice(b[:], c.errFlag); err != nil {
		return err
	}
	if b[0]|b[1]|b[2]|b[3] != 0 {
		if err := c.s.Memset32(c.errFlag, 0); err != nil {
			return err
		}
		return errors.New("commit: an accepted count was outside [0, pending drafts]; it was clamped")
	}
	return nil
}

// checkQueued validates a Queue call's batch and slot buffer.
func (c *replayCommon) checkQueued(batch int, slots Buffer) error {
	if batch < 1 || batch > c.capacity || batch > 65535 {
		return fmt.Errorf("batch %d out of range [1, %d]", batch, min(c.capacity, 65535))
	}
	return need("slots", slots, 4*batch)
}

// checkDrafts validates a Queue verify's draft stride T and the optional
// per-slot counts (int32 in 1..T, device memory).
func (c *replayCommon) checkDrafts(batch, T int, counts Buffer) error {
	if c.opt.MaxDraft == 0 {
		return errors.New("verify: cache built with MaxDraft 0")
	}
	if T < 1 || T > c.opt.MaxDraft {
		return fmt.Errorf("verify: %d drafts per slot, cache allows 1..%d", T, c.opt.MaxDraft)
	}
	if counts.ptr != 0 {
		return need("counts", counts, 4*batch)
	}
	return nil
}

// need checks that a device buffer holds at least n bytes.
func need(name string, b Buffer, n int) error {
	if b.bytes < n || b.ptr == 0 {
		return fmt.Errorf("%s: %d bytes, want %d", name, b.bytes, n)
	}
	if b.ptr%4 != 0 {
		return fmt.Errorf("%s: device address %#x is not 4-byte aligned", name, b.ptr)
	}
	return nil
}

// needRows is need for a buffer of float rows (a layer's inputs and
// outputs), which the kernels move 16 bytes at a time (vector loads,
// cp.async, bulk copies): its address must be 16-byte aligned as well. A
// Buffer.Slice at another offset would fault on the device, and a faulted
// context loses every cache on it; here it is an error that names it.
func needRows(name string, b Buffer, n int) error {
	if err := need(name, b, n); err != nil {
		return err
	}
	if b.ptr%16 != 0 {
		return fmt.Errorf("%s: device address %#x is not 16-byte aligned (its rows move 16 bytes at a time)", name, b.ptr)
	}
	return nil
}

// Module is the compiled kernel module.
func (c *replayCommon) Module() *Module { return c.mod }

// ThreadsPerBlock is the block size of the one-block-per-matrix kernels.
func (c *replayCommon) ThreadsPerBlock() int { return c.threads }

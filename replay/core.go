package replay

import (
	"fmt"

	"github.com/replayssm/replayssm/numeric"
)

// core is what both layer caches share: the slot pool and its cursors, the
// state and read-copy stores, the ring arrays, the conv windows, the workers
// and the counters, with the operations that do not depend on the layer's
// math (admission, forks, commits, cursor moves, byte accounting). The layer
// files (mamba2.go, gdn.go) hold only the math of Step, Verify and the flush.
type core struct {
	kind  string // "mamba2" or "gdn", for errors and exported states
	dims  [4]int32
	opt   Options
	heads int // state matrices per state buffer of a slot
	slots slotTable
	state *matrices // checkpoint (replay) or state buffers (baseline): [slot][buffer][head]
	read  *matrices // read copy [slot][head], or nil
	conv  *convWindow
	// rings are the ring arrays, each [slot][entry][width]; nil in
	// baseline mode.
	rings  [][]float32
	widths []int
	work   *workers
	stats  Stats
}

// newCore validates opt and allocates everything but the layer's scratch.
func newCore(kind string, dims [4]int32, opt Options, heads, matElems, capacity int, conv ConvWeights, widths []int) (core, error) {
	c := core{kind: kind, dims: dims, opt: opt, heads: heads}
	if err := opt.validate(); err != nil {
		return c, fmt.Errorf("%s cache: %w", kind, err)
	}
	if capacity <= 0 {
		return c, fmt.Errorf("%s cache: capacity %d must be positive", kind, capacity)
	}
	c.slots = newSlotTable(capacity)
	var err error
	if c.state, err = newMatrices(opt.State, matElems, capacity*opt.stateBuffers()*heads); err != nil {
		return c, fmt.Errorf("%s cache: %w", kind, err)
	}
	if opt.ReadCopy != numeric.F32 {
		if c.read, err = newMatrices(opt.ReadCopy, matElems, capacity*heads); err != nil {
			return c, fmt.Errorf("%s cache: %w", kind, err)
		}
	}
	if conv.Channels > 0 {
		if c.conv, err = newConvWindow(conv, capacity, opt.MaxDraft); err != nil {
			return c, fmt.Errorf("%s cache: %w", kind, err)
		}
	}
	if opt.Mode == Replay {
		c.widths = widths
		for _, w := range widths {
			c.rings = append(c.rings, make([]float32, capacity*opt.ring()*w))
		}
	}
	c.work = newWorkers(opt.Threads)
	return c, nil
}

// Close stops the cache's worker goroutines.
func (c *core) Close() { c.work.close() }

// Options returns the options in force (defaults filled in).
func (c *core) Options() Options { return c.opt }

// Stats returns the counters since the cache was built.
func (c *core) Stats() Stats { return c.stats }

// Capacity is the number of slots.
func (c *core) Capacity() int { return c.slots.capacity() }

// Admit takes a free slot and clears it.
func (c *core) Admit() (Slot, error) {
	s, err := c.slots.admit()
	if err != nil {
		return s, fmt.Errorf("%s cache: %w", c.kind, err)
	}
	c.clearSlot(s)
	return s, nil
}

// Reset clears a live slot's state, ring and conv window.
func (c *core) Reset(s Slot) error {
	if err := c.slots.check(s); err != nil {
		return fmt.Errorf("%s cache: reset: %w", c.kind, err)
	}
	c.slots.resetCursors(s)
	c.clearSlot(s)
	return nil
}

// Evict frees a slot.
func (c *core) Evict(s Slot) error {
	if err := c.slots.evict(s); err != nil {
		return fmt.Errorf("%s cache: evict: %w", c.kind, err)
	}
	return nil
}

func (c *core) clearSlot(s Slot) {
	nb := c.opt.stateBuffers()
	for i := 0; i < nb*c.heads; i++ {
		c.state.zero(int(s)*nb*c.heads + i)
	}
	if c.read != nil {
		for h := range c.heads {
			c.read.zero(int(s)*c.heads + h)
		}
	}
	if c.conv != nil {
		c.conv.reset(s)
	}
}

// Fork admits a new slot holding a copy of src's state (for beams and
// parallel samples). Pending drafts are not copied.
func (c *core) Fork(src Slot) (Slot, error) {
	if err := c.slots.check(src); err != nil {
		return -1, fmt.Errorf("%s cache: fork: %w", c.kind, err)
	}
	dst, err := c.slots.admit()
	if err != nil {
		return -1, fmt.Errorf("%s cache: fork: %w", c.kind, err)
	}
	nb := c.opt.stateBuffers()
	for i := 0; i < nb*c.heads; i++ {
		c.state.copyMatrix(int(dst)*nb*c.heads+i, c.state, int(src)*nb*c.heads+i)
	}
	if c.read != nil {
		for h := range c.heads {
			c.read.copyMatrix(int(dst)*c.heads+h, c.read, int(src)*c.heads+h)
		}
	}
	for i, ring := range c.rings {
		per := c.opt.ring() * c.widths[i]
		copy(ring[int(dst)*per:(int(dst)+1)*per], ring[int(src)*per:(int(src)+1)*per])
	}
	if c.conv != nil {
		c.conv.copySlot(dst, src)
	}
	c.slots.hist[dst] = c.slots.hist[src]
	c.slots.cur[dst] = c.slots.cur[src]
	c.slots.flushes[dst] = c.slots.flushes[src]
	return dst, nil
}

// Conv runs the depthwise convolution for one step of each slot: in and out
// are [len(slots)][Channels]. The raw inputs enter the slots' windows.
func (c *core) Conv(slots []Slot, in, out []float32) error {
	return convStep(c.conv, &c.slots, slots, in, out)
}

// ConvVerify runs the convolution over T draft inputs per slot ([slot][T][C])
// without moving the windows; Commit shifts them by the accepted count.
func (c *core) ConvVerify(slots []Slot, T int, in, out []float32) error {
	return convVerify(c.conv, &c.slots, c.opt.MaxDraft, slots, T, in, out)
}

// Commit accepts the first accepted[i] drafts of slots[i]'s last Verify. In
// replay mode it moves the ring cursor; in baseline mode it selects the
// accepted draft's state buffer. Nothing is copied. Conv windows shift by the
// accepted count.
func (c *core) Commit(slots []Slot, accepted []int) error {
	if err := c.slots.checkCommit(slots, accepted); err != nil {
		return fmt.Errorf("%s cache: %w", c.kind, err)
	}
	for i, s := range slots {
		n := accepted[i]
		c.stats.Accepted += int64(n)
		if c.opt.Mode == Replay {
			c.slots.hist[s] += int32(n)
		} else {
			c.slots.cur[s] = int32((int(c.slots.cur[s]) + n) % c.opt.stateBuffers())
		}
		if c.conv != nil {
			c.conv.shift(s, n)
		}
		c.slots.pending[s] = 0
	}
	return nil
}

// stateBytes is one slot's state (all its heads) in the state format.
func (c *core) stateBytes() int64 { return int64(c.state.bytesPerMatrix()) * int64(c.heads) }

// outputBytes is what a non-flush output read moves for one slot.
func (c *core) outputBytes() int64 {
	if c.read != nil {
		return int64(c.read.bytesPerMatrix()) * int64(c.heads)
	}
	return c.stateBytes()
}

// countFlush counts a checkpoint write of slot s.
func (c *core) countFlush(s Slot) {
	c.stats.Flushes++
	c.slots.flushes[s]++
	c.stats.StateBytesRead += c.stateBytes()
	c.stats.StateBytesWritten += c.stateBytes()
	if c.read != nil {
		c.stats.StateBytesWritten += int64(c.read.bytesPerMatrix()) * int64(c.heads)
	}
}

// beginStep drops pending drafts before a step.
func (c *core) beginStep(slots []Slot) {
	for _, s := range slots {
		c.slots.pending[s] = 0
	}
}

// finishStep moves the cursors after a step (a replay slot whose ring reached
// the window has flushed) and counts bytes.
func (c *core) finishStep(slots []Slot) {
	sb := c.stateBytes()
	for _, s := range slots {
		c.stats.Steps++
		c.stats.BaselineBytes += 2 * sb
		if c.opt.Mode == Baseline {
			c.stats.StateBytesRead += sb
			c.stats.StateBytesWritten += sb
			continue
		}
		if t := c.slots.hist[s] + 1; int(t) >= c.opt.Window {
			c.countFlush(s)
			c.slots.hist[s] = 0
		} else {
			c.stats.StateBytesRead += c.outputBytes()
			c.slots.hist[s] = t
		}
	}
}

// beginVerify records each slot's pending drafts and decides, before the
// parallel section so every head of a slot sees the same decision, whether
// the committed history is folded first (docs/DESIGN.md 2.3's early flush: when
// history + 2T would overflow the ring).
func (c *core) beginVerify(slots []Slot, T int, counts []int) {
	sb := c.stateBytes()
	for i, s := range slots {
		cnt := T
		if counts != nil {
			cnt = counts[i]
		}
		c.slots.pending[s] = int32(cnt)
		c.stats.Verifies++
		c.stats.Drafts += int64(cnt)
		c.stats.BaselineBytes += int64(1+cnt) * sb
		if c.opt.Mode == Baseline {
			c.stats.StateBytesRead += sb
			c.stats.StateBytesWritten += int64(cnt) * sb
			continue
		}
		n := int(c.slots.hist[s])
		c.slots.fold[s] = n > 0 && n+2*cnt > c.opt.ring()
		if c.slots.fold[s] {
			c.countFlush(s)
		}
		c.stats.StateBytesRead += c.outputBytes()
	}
}

// finishVerify resets the history of slots whose history was folded.
func (c *core) finishVerify(slots []Slot) {
	for _, s := range slots {
		if c.slots.fold[s] {
			c.slots.hist[s] = 0
			c.slots.fold[s] = false
		}
	}
}

// reseed restarts a stochastic rounder for a write of matrix mat of slot s,
// so results do not depend on which worker ran which slot.
func (c *core) reseed(sr *numeric.Stochastic, s Slot, mat int, n int64) {
	if sr != nil {
		sr.Reseed(c.opt.Seed ^ uint64(s)<<32 ^ uint64(n)*0x9e3779b97f4a7c15 ^ uint64(mat))
	}
}

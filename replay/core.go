package replay

import (
	"fmt"

	"github.com/replayssm/replayssm/numeric"
)

// core is what both layer caches share: the ledger of slots and cursors
// (ledger.go, which takes every cursor decision), the state and read-copy
// stores, the ring arrays, the conv windows and the workers, with the
// operations that do not depend on the layer's math (admission, forks,
// commits). The layer files (mamba2.go, gdn.go) hold only the math of Step,
// Verify and the flush.
type core struct {
	kind   string // "mamba2" or "gdn", for errors and exported states
	dims   [4]int32
	opt    Options
	heads  int // state matrices per state buffer of a slot
	ledger *Ledger
	state  *matrices // checkpoint (replay) or state buffers (baseline): [slot][buffer][head]
	read   *matrices // read copy [slot][head], or nil
	conv   *convWindow
	// rings are the ring arrays, each [slot][entry][width]; nil in
	// baseline mode.
	rings  [][]float32
	widths []int
	work   *workers

	// The operation in flight, as the ledger had it before recording the
	// operation, for the slots it covers (indexed by slot): the committed
	// ring entries, whether a verify folds them first, and the counts that
	// seed stochastic writes (the slot's flushes, the cache's steps).
	opHist    []int32
	opFold    []bool
	opFlushes []uint32
	opSteps   int64
	folds     []bool // the ledger's per-row fold decisions
}

// newCore allocates everything but the layer's scratch for options opt,
// checked and with defaults filled in.
func newCore(kind string, dims [4]int32, opt Options, heads, matElems, capacity int, conv ConvWeights, widths []int) (core, error) {
	c := core{kind: kind, dims: dims, opt: opt, heads: heads}
	if capacity <= 0 {
		return c, fmt.Errorf("%s cache: capacity %d must be positive", kind, capacity)
	}
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
	read, copyBytes := c.stateBytes(), int64(0)
	if c.read != nil {
		read = int64(c.read.bytesPerMatrix()) * int64(heads)
		copyBytes = read
	}
	c.ledger = NewLedger(opt, capacity, c.stateBytes(), read, copyBytes)
	c.opHist, c.opFold, c.opFlushes = make([]int32, capacity), make([]bool, capacity), make([]uint32, capacity)
	c.folds = make([]bool, capacity)
	c.work = newWorkers(opt.Threads)
	return c, nil
}

// Close stops the cache's worker goroutines. It never fails.
func (c *core) Close() error {
	c.work.close()
	return nil
}

// Options returns the options in force (defaults filled in).
func (c *core) Options() Options { return c.opt }

// Stats returns the counters since the cache was built.
func (c *core) Stats() Stats { return c.ledger.Stats() }

// Capacity is the number of slots.
func (c *core) Capacity() int { return c.ledger.Capacity() }

// Admit takes a free slot and clears it.
func (c *core) Admit() (Slot, error) {
	s, err := c.ledger.Admit()
	if err != nil {
		return s, fmt.Errorf("%s cache: %w", c.kind, err)
	}
	c.clearSlot(s)
	return s, nil
}

// Reset clears a live slot's state, ring and conv window.
func (c *core) Reset(s Slot) error {
	if err := c.ledger.Reset(s); err != nil {
		return fmt.Errorf("%s cache: reset: %w", c.kind, err)
	}
	c.clearSlot(s)
	return nil
}

// Evict frees a slot.
func (c *core) Evict(s Slot) error {
	if err := c.ledger.Evict(s); err != nil {
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
	dst, err := c.ledger.Fork(src)
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
	return dst, nil
}

// Conv runs the depthwise convolution for one step of each slot: in and out
// are [len(slots)][Channels]. The raw inputs enter the slots' windows.
func (c *core) Conv(slots []Slot, in, out []float32) error {
	return convStep(c.conv, c.ledger, slots, in, out)
}

// ConvVerify runs the convolution over T draft inputs per slot ([slot][T][C])
// without moving the windows; Commit shifts them by the accepted count.
func (c *core) ConvVerify(slots []Slot, T int, in, out []float32) error {
	return convVerify(c.conv, c.ledger, c.opt.MaxDraft, slots, T, in, out)
}

// Commit accepts the first accepted[i] drafts of slots[i]'s last Verify. In
// replay mode it moves the ring cursor; in baseline mode it selects the
// accepted draft's state buffer. Nothing is copied. Conv windows shift by the
// accepted count.
func (c *core) Commit(slots []Slot, accepted []int) error {
	if err := c.ledger.CheckCommit(slots, accepted); err != nil {
		return fmt.Errorf("%s cache: %w", c.kind, err)
	}
	c.ledger.Commit(slots, accepted)
	if c.conv != nil {
		for i, s := range slots {
			c.conv.shift(s, accepted[i])
		}
	}
	return nil
}

// cur is slot s's current state buffer (baseline).
func (c *core) cur(s Slot) int {
	_, cur, _ := c.ledger.Cursors(s)
	return int(cur)
}

// recordStep records a step of the (checked) slots in the ledger, after
// taking what the step's tasks read of it: each slot's history before the
// step, and the counts the stochastic rounding of its writes is seeded
// with (the flushes before this one, the steps before this one).
func (c *core) recordStep(slots []Slot) {
	for _, s := range slots {
		hist, _, flushes := c.ledger.Cursors(s)
		c.opHist[s], c.opFold[s], c.opFlushes[s] = hist, false, flushes
	}
	c.opSteps = c.ledger.Stats().Steps
	c.ledger.Step(slots, nil)
}

// recordVerify records a verify of the (checked) slots in the ledger, after
// taking each slot's history before it, and then its decision to fold that
// history first (docs/DESIGN.md 2.3's early flush) and its flush count,
// the early fold's included.
func (c *core) recordVerify(slots []Slot, T int, counts []int) {
	for _, s := range slots {
		c.opHist[s], _, _ = c.ledger.Cursors(s)
	}
	c.opSteps = c.ledger.Stats().Steps
	folds := c.folds[:len(slots)]
	c.ledger.Verify(slots, T, counts, folds)
	for i, s := range slots {
		_, _, c.opFlushes[s] = c.ledger.Cursors(s)
		c.opFold[s] = folds[i]
	}
}

// stateBytes is one slot's state (all its heads) in the state format.
func (c *core) stateBytes() int64 { return int64(c.state.bytesPerMatrix()) * int64(c.heads) }

// reseed restarts a stochastic rounder for a write of matrix mat of slot s,
// so results do not depend on which worker ran which slot.
func (c *core) reseed(sr *numeric.Stochastic, s Slot, mat int, n int64) {
	if sr != nil {
		sr.Reseed(c.opt.Seed ^ uint64(s)<<32 ^ uint64(n)*0x9e3779b97f4a7c15 ^ uint64(mat))
	}
}

// checkpoint returns matrix mat of the checkpoint as float32: the stored
// matrix itself where the store is float32, else decoded into scratch.
func (c *core) checkpoint(scratch []float32, mat int) []float32 {
	if S := c.state.raw(mat); S != nil {
		return S
	}
	c.state.load(mat, scratch)
	return scratch
}

// storeFolded writes a fold's (or prefill's) result S for matrix mat of
// slot s: into the checkpoint where it is not the stored matrix itself
// (rounded, and stochastically where asked, seeded by the slot's flush
// count), and into the read copy.
func (c *core) storeFolded(sr *numeric.Stochastic, s Slot, mat int, S []float32) {
	if c.state.raw(mat) == nil {
		c.reseed(sr, s, mat, int64(c.opFlushes[s]))
		c.state.store(mat, S, sr)
	}
	if c.read != nil {
		c.read.store(mat, S, nil)
	}
}

// storeStep writes a baseline state S, just updated, to matrix dst of slot
// s: an fp32 store in place (or copied), any other rounded (stochastic
// rounding seeded by n) and read back into S, so that the next update
// starts from the stored state, as in a real low-precision cache (the
// naive comparison point).
func (c *core) storeStep(sr *numeric.Stochastic, s Slot, dst int, S []float32, n int64) {
	if raw := c.state.raw(dst); raw != nil {
		if &raw[0] != &S[0] {
			copy(raw, S)
		}
		return
	}
	c.reseed(sr, s, dst, n)
	c.state.store(dst, S, sr)
	c.state.load(dst, S)
}

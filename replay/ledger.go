package replay

import "fmt"

// Ledger is the host-side bookkeeping of a cache, whatever backend holds
// its state: which slots are live, each slot's cursors (the committed ring
// entries since the checkpoint, a baseline's current state buffer, the
// pending drafts) and the statistics. Every rule that moves a cursor lives
// here (docs/DESIGN.md 2, 2.3): a replay slot flushes when its ring
// reaches the window, a verify folds the committed history first when
// history + 2·drafts would overflow the ring, a commit of n moves the
// cursor by n. The CPU caches of this package take their decisions from
// it; a GPU cache, whose kernels take the same decisions from cursors in
// device memory, keeps one to validate its calls, count and export.
type Ledger struct {
	opt   Options
	slots slotTable
	stats Stats
	// state is one slot's state transfer in bytes (all its heads, in the
	// state format), read a non-flush output read, and copy the read
	// copy a flush writes (0 without one).
	state, read, copy int64
}

// NewLedger returns the ledger of a cache with options opt (defaults filled
// in) and capacity slots, whose slot moves state bytes for one full state
// transfer, read bytes for a non-flush step's output read and copy bytes
// for a flush's write of the read copy (0 without one).
func NewLedger(opt Options, capacity int, state, read, copy int64) *Ledger {
	return &Ledger{opt: opt, slots: newSlotTable(capacity), state: state, read: read, copy: copy}
}

// Stats returns the counters since the ledger was made.
func (l *Ledger) Stats() Stats { return l.stats }

// Capacity is the number of slots.
func (l *Ledger) Capacity() int { return l.slots.capacity() }

// Admit takes the lowest free slot, its cursors at zero.
func (l *Ledger) Admit() (Slot, error) { return l.slots.admit() }

// Reset zeroes a live slot's cursors.
func (l *Ledger) Reset(s Slot) error {
	if err := l.slots.check(s); err != nil {
		return err
	}
	l.slots.resetCursors(s)
	return nil
}

// Evict frees a live slot.
func (l *Ledger) Evict(s Slot) error { return l.slots.evict(s) }

// Fork admits a slot whose cursors are src's (pending drafts dropped).
func (l *Ledger) Fork(src Slot) (Slot, error) {
	if err := l.slots.check(src); err != nil {
		return -1, err
	}
	dst, err := l.slots.admit()
	if err != nil {
		return -1, err
	}
	t := &l.slots
	t.hist[dst], t.cur[dst], t.flushes[dst] = t.hist[src], t.cur[src], t.flushes[src]
	return dst, nil
}

// Check reports whether s is a live slot.
func (l *Ledger) Check(s Slot) error { return l.slots.check(s) }

// CheckBatch reports whether every slot is live and appears once.
func (l *Ledger) CheckBatch(slots []Slot) error { return l.slots.checkBatch(slots) }

// CheckVerify validates a verify's slots, stride T and per-slot counts.
func (l *Ledger) CheckVerify(slots []Slot, T int, counts []int) error {
	if err := checkDrafts(counts, len(slots), T, l.opt.MaxDraft); err != nil {
		return err
	}
	return l.slots.checkBatch(slots)
}

// CheckPrefill validates a prefill's slots, stride T and per-slot counts.
func (l *Ledger) CheckPrefill(slots []Slot, T int, counts []int) error {
	if err := checkPrefill(counts, len(slots), T); err != nil {
		return err
	}
	return l.slots.checkBatch(slots)
}

// CheckCommit validates a commit against the pending drafts.
func (l *Ledger) CheckCommit(slots []Slot, accepted []int) error {
	return l.slots.checkCommit(slots, accepted)
}

// Cursors returns a live slot's committed ring entries, its current state
// buffer (baseline) and its flush count.
func (l *Ledger) Cursors(s Slot) (hist, cur int32, flushes uint32) {
	return l.slots.hist[s], l.slots.cur[s], l.slots.flushes[s]
}

// SetCursors sets a live slot's cursors (an imported state), dropping its
// pending drafts.
func (l *Ledger) SetCursors(s Slot, hist, cur int32, flushes uint32) error {
	if err := l.slots.check(s); err != nil {
		return err
	}
	if hist < 0 || int(hist) > l.opt.ring() || cur < 0 || int(cur) >= l.opt.stateBuffers() {
		return fmt.Errorf("cursors out of range (history %d, buffer %d)", hist, cur)
	}
	t := &l.slots
	t.hist[s], t.cur[s], t.flushes[s], t.pending[s] = hist, cur, flushes, 0
	return nil
}

// Step records a decode step of the slots (checked): pending drafts drop,
// and a replay slot whose ring reaches the window flushes. flushed, when
// not nil, receives for each slot whether it flushed.
func (l *Ledger) Step(slots []Slot, flushed []bool) {
	t := &l.slots
	for i, s := range slots {
		t.pending[s] = 0
		l.stats.Steps++
		l.stats.BaselineBytes += 2 * l.state
		if l.opt.Mode == Baseline {
			l.stats.StateBytesRead += l.state
			l.stats.StateBytesWritten += l.state
			continue
		}
		f := int(t.hist[s])+1 >= l.opt.Window
		if flushed != nil {
			flushed[i] = f
		}
		if f {
			l.countFlush(s)
			t.hist[s] = 0
		} else {
			l.stats.StateBytesRead += l.read
			t.hist[s]++
		}
	}
}

// Verify records a verify of T drafts per slot (counts, when not nil, each
// slot's own number): the drafts become pending, and a replay slot folds
// its committed history first where history + 2·count would overflow the
// ring (docs/DESIGN.md 2.3's early flush). folds, when not nil, receives
// for each slot whether it folded.
func (l *Ledger) Verify(slots []Slot, T int, counts []int, folds []bool) {
	t := &l.slots
	for i, s := range slots {
		n := T
		if counts != nil {
			n = counts[i]
		}
		t.pending[s] = int32(n)
		l.stats.Verifies++
		l.stats.Drafts += int64(n)
		l.stats.BaselineBytes += int64(1+n) * l.state
		if l.opt.Mode == Baseline {
			l.stats.StateBytesRead += l.state
			l.stats.StateBytesWritten += int64(n) * l.state
			continue
		}
		h := int(t.hist[s])
		f := h > 0 && h+2*n > l.opt.ring()
		if folds != nil {
			folds[i] = f
		}
		if f {
			l.countFlush(s)
			t.hist[s] = 0
		}
		l.stats.StateBytesRead += l.read
	}
}

// Commit records the acceptance of accepted[i] drafts of slots[i] (checked
// with CheckCommit): a replay slot's history grows by them, a baseline
// slot's current buffer moves to the accepted draft's.
func (l *Ledger) Commit(slots []Slot, accepted []int) {
	t := &l.slots
	for i, s := range slots {
		n := accepted[i]
		l.stats.Accepted += int64(n)
		if l.opt.Mode == Replay {
			t.hist[s] += int32(n)
		} else {
			t.cur[s] = int32((int(t.cur[s]) + n) % l.opt.stateBuffers())
		}
		t.pending[s] = 0
	}
}

// Prefill records a prefill of T inputs per slot (counts, when not nil,
// each slot's own number): pending drafts drop, the state is read once and
// written once, and a replay slot's ring (its history folded in with the
// inputs) is empty afterwards.
func (l *Ledger) Prefill(slots []Slot, T int, counts []int) {
	t := &l.slots
	for i, s := range slots {
		n := T
		if counts != nil {
			n = counts[i]
		}
		t.pending[s] = 0
		l.stats.Prefilled += int64(n)
		l.stats.BaselineBytes += 2 * l.state
		if l.opt.Mode == Baseline {
			l.stats.StateBytesRead += l.state
			l.stats.StateBytesWritten += l.state
			continue
		}
		l.countFlush(s)
		t.hist[s] = 0
	}
}

// countFlush counts a checkpoint write of slot s.
func (l *Ledger) countFlush(s Slot) {
	l.stats.Flushes++
	l.slots.flushes[s]++
	l.stats.StateBytesRead += l.state
	l.stats.StateBytesWritten += l.state + l.copy
}

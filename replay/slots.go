package replay

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Slot names one live sequence in a cache.
type Slot int32

// Stats counts what a cache did, in slot-steps, and the state bytes it moved
// next to what an in-place baseline would have moved for the same tokens.
type Stats struct {
	Steps int64 // slot-steps of Step
	// Prefilled counts the inputs run by Prefill.
	Prefilled int64
	Verifies  int64 // slot-verifies
	Drafts    int64 // draft positions verified
	Accepted  int64 // draft positions committed
	Flushes   int64 // checkpoint writes (including early flushes)

	StateBytesRead    int64
	StateBytesWritten int64
	// BaselineBytes is what the in-place baseline in the same state format
	// would have read plus written: two state transfers per token stepped,
	// 1+T per verify of T drafts.
	BaselineBytes int64
}

// Add returns the sum of two Stats.
func (s Stats) Add(o Stats) Stats {
	return Stats{
		Steps: s.Steps + o.Steps, Prefilled: s.Prefilled + o.Prefilled, Verifies: s.Verifies + o.Verifies, Drafts: s.Drafts + o.Drafts,
		Accepted: s.Accepted + o.Accepted, Flushes: s.Flushes + o.Flushes,
		StateBytesRead: s.StateBytesRead + o.StateBytesRead, StateBytesWritten: s.StateBytesWritten + o.StateBytesWritten,
		BaselineBytes: s.BaselineBytes + o.BaselineBytes,
	}
}

// slotTable is the bookkeeping shared by every cache kind: which slots are
// live, and each slot's cursors.
type slotTable struct {
	live    []bool
	free    []Slot // stack of free slots, lowest on top
	hist    []int32
	cur     []int32
	pending []int32
	flushes []uint32
	mark    []uint32 // batch-duplicate detection
	epoch   uint32
}

func newSlotTable(capacity int) slotTable {
	t := slotTable{
		live:    make([]bool, capacity),
		hist:    make([]int32, capacity),
		cur:     make([]int32, capacity),
		pending: make([]int32, capacity),
		flushes: make([]uint32, capacity),
		mark:    make([]uint32, capacity),
	}
	for i := capacity - 1; i >= 0; i-- {
		t.free = append(t.free, Slot(i))
	}
	return t
}

func (t *slotTable) capacity() int { return len(t.live) }

func (t *slotTable) admit() (Slot, error) {
	if len(t.free) == 0 {
		return -1, fmt.Errorf("cache full: all %d slots are live", len(t.live))
	}
	s := t.free[len(t.free)-1]
	t.free = t.free[:len(t.free)-1]
	t.live[s] = true
	t.resetCursors(s)
	return s, nil
}

func (t *slotTable) resetCursors(s Slot) {
	t.hist[s], t.cur[s], t.pending[s], t.flushes[s] = 0, 0, 0, 0
}

func (t *slotTable) check(s Slot) error {
	if s < 0 || int(s) >= len(t.live) {
		return fmt.Errorf("slot %d out of range [0, %d)", s, len(t.live))
	}
	if !t.live[s] {
		return fmt.Errorf("slot %d is not live", s)
	}
	return nil
}

func (t *slotTable) evict(s Slot) error {
	if err := t.check(s); err != nil {
		return err
	}
	t.live[s] = false
	t.free = append(t.free, s)
	return nil
}

// checkBatch verifies that every slot is live and appears once.
func (t *slotTable) checkBatch(slots []Slot) error {
	t.epoch++
	if t.epoch == 0 {
		clear(t.mark)
		t.epoch = 1
	}
	for _, s := range slots {
		if err := t.check(s); err != nil {
			return err
		}
		if t.mark[s] == t.epoch {
			return fmt.Errorf("slot %d appears twice in one batch", s)
		}
		t.mark[s] = t.epoch
	}
	return nil
}

func checkLen(name string, got, want int) error {
	if got != want {
		return fmt.Errorf("%s has %d values, want %d", name, got, want)
	}
	return nil
}

// checkCommit validates a commit against the pending drafts.
func (t *slotTable) checkCommit(slots []Slot, accepted []int) error {
	if len(accepted) != len(slots) {
		return fmt.Errorf("commit: %d accepted counts for %d slots", len(accepted), len(slots))
	}
	if err := t.checkBatch(slots); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	for i, s := range slots {
		if accepted[i] < 0 || accepted[i] > int(t.pending[s]) {
			return fmt.Errorf("commit: slot %d accepts %d of %d pending drafts", s, accepted[i], t.pending[s])
		}
	}
	return nil
}

// checkDrafts validates per-slot draft counts against the stride T.
func checkDrafts(counts []int, nslots, T, maxDraft int) error {
	if maxDraft == 0 {
		return fmt.Errorf("verify: cache built with MaxDraft 0")
	}
	if T < 1 || T > maxDraft {
		return fmt.Errorf("verify: %d drafts per slot, cache allows 1..%d", T, maxDraft)
	}
	return checkCounts("verify", "drafts", counts, nslots, T)
}

// MaxPrefill bounds the inputs per slot of one Prefill.
const MaxPrefill = 1 << 20

// checkPrefill validates a prefill's stride T and per-slot counts.
func checkPrefill(counts []int, nslots, T int) error {
	if T < 1 || T > MaxPrefill {
		return fmt.Errorf("prefill: %d inputs per slot, want 1..%d", T, MaxPrefill)
	}
	return checkCounts("prefill", "inputs", counts, nslots, T)
}

// checkCounts validates per-slot counts (of what) in 1..T, if any.
func checkCounts(op, what string, counts []int, nslots, T int) error {
	if counts == nil {
		return nil
	}
	if len(counts) != nslots {
		return fmt.Errorf("%s: %d counts for %d slots", op, len(counts), nslots)
	}
	for i, c := range counts {
		if c < 1 || c > T {
			return fmt.Errorf("%s: slot index %d has %d %s, want 1..%d", op, i, c, what, T)
		}
	}
	return nil
}

func appendF32(dst []byte, v float32) []byte {
	return binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
}

func readF32(src []byte) (float32, []byte) {
	return math.Float32frombits(binary.LittleEndian.Uint32(src)), src[4:]
}

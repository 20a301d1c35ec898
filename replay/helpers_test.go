package replay

import (
	"math/rand/v2"
	"testing"
)

// normals returns n standard normal float32 values from rng.
func normals(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

// admitAll admits n sequences into c and returns their slots.
func admitAll(tb testing.TB, c interface{ Admit() (Slot, error) }, n int) []Slot {
	tb.Helper()
	slots := make([]Slot, n)
	for i := range slots {
		var err error
		if slots[i], err = c.Admit(); err != nil {
			tb.Fatal(err)
		}
	}
	return slots
}

// loopSteps runs step until the benchmark has timed enough of them; with
// nonflush, every slot's ring cursor is wound back before it reaches the
// flush, so every step is a non-flush step and a CPU profile sees nothing
// else.
func loopSteps(b *testing.B, c *core, slots []Slot, nonflush bool, step func() error) {
	L := c.opt.Window
	for b.Loop() {
		if err := step(); err != nil {
			b.Fatal(err)
		}
		if !nonflush {
			continue
		}
		for _, s := range slots {
			if int(c.ledger.slots.hist[s]) >= L-1 {
				c.ledger.slots.hist[s] = 0
			}
		}
	}
}

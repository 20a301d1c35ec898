package replay

import (
	"testing"

	"github.com/replayssm/replayssm/numeric"
)

// TestStepsDoNotAllocate asserts the steady-state allocation budget of the
// hot path: a decode step, a verify and a commit allocate nothing, in every
// mode, for both layer kinds.
func TestStepsDoNotAllocate(t *testing.T) {
	for _, l := range testLayers() {
		for _, opt := range []Options{
			{Mode: Replay, Window: 4, MaxDraft: 3, Threads: 2},
			{Mode: Replay, Window: 4, MaxDraft: 3, ReadCopy: numeric.NVFP4, Threads: 2},
			{Mode: Replay, Window: 4, MaxDraft: 3, State: numeric.BF16, Stochastic: true, Threads: 2},
			{Mode: Replay, Window: 4, MaxDraft: 3, State: numeric.F16, ReadCopy: numeric.E4M3, Threads: 2},
			{Mode: Baseline, MaxDraft: 3, Threads: 2},
		} {
			c, err := l.build(opt, 4)
			if err != nil {
				t.Fatal(err)
			}
			slots := make([]Slot, 4)
			for i := range slots {
				slots[i], _ = c.Admit()
			}
			in, ver := l.draw(4), l.draw(12)
			y, yv := make([]float32, 4*l.width()), make([]float32, 12*l.width())
			acc := []int{1, 2, 3, 0}
			if n := testing.AllocsPerRun(20, func() {
				if err := c.step(slots, in, y); err != nil {
					t.Fatal(err)
				}
			}); n != 0 {
				t.Errorf("%s %v: step allocates %.1f times", l.name(), opt.Mode, n)
			}
			if n := testing.AllocsPerRun(20, func() {
				if err := c.verify(slots, 3, nil, ver, yv); err != nil {
					t.Fatal(err)
				}
				if err := c.Commit(slots, acc); err != nil {
					t.Fatal(err)
				}
			}); n != 0 {
				t.Errorf("%s %v: verify+commit allocates %.1f times", l.name(), opt.Mode, n)
			}
			c.Close()
		}
	}
}

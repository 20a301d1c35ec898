package replaytest

import (
	"fmt"
	"math"
	"testing"

	"github.com/replayssm/replayssm/replay"
)

// prefills runs ConvPrefill and Prefill on the live slots, whatever their
// rings hold: a long prompt on two slots; then one slot at T inputs (more
// than the window), one at a single input, the rest at random counts; then
// one slot without counts. The random sequences after it check the states
// the prefills left.
func (h *harness[Buf]) prefills(t *testing.T) {
	t.Helper()
	slots := h.slots()
	for len(slots) < 3 {
		slots = append(slots, h.admit(t))
	}
	T := h.opt.Window + 5
	counts := make([]int, len(slots))
	for i := range counts {
		counts[i] = 1 + h.rng.IntN(T)
	}
	counts[0], counts[len(counts)-1] = T, 1
	// A long prompt first, while the slots' rings hold the random
	// sequence's steps: it crosses the blocks a GPU splits prompts into (64
	// outputs per thread, 16 staged rows, chunks of 64 inputs), one slot
	// ending a row past a chunk.
	h.prefill(t, slots[:2], 300, []int{300, 129})
	h.prefill(t, slots, T, counts)
	h.prefill(t, slots[1:2], 3, nil)
}

// prefill runs ConvPrefill and Prefill of T inputs per slot (counts nil: T
// each), checks every output against the references and that rows past a
// slot's count are not written, and advances the models.
func (h *harness[Buf]) prefill(t *testing.T, slots []replay.Slot, T int, counts []int) {
	t.Helper()
	n, C, w := len(slots), h.l.conv.Channels, h.l.width
	count := func(i int) int {
		if counts == nil {
			return T
		}
		return counts[i]
	}
	x := h.normals(n * T * C)
	out, err := h.io(t, "conv prefill", [][]float32{x}, n*T*C, func(in []Buf, out Buf) error {
		return h.c.ConvPrefill(slots, T, counts, in[0], out)
	})
	if err != nil {
		t.Fatalf("conv prefill %v T %d counts %v: %v", slots, T, counts, err)
	}
	h.eachRow(t, "conv prefill", slots, T, count, out, C, func(s replay.Slot, k, r int, got []float32) {
		m := h.live[s]
		row := x[r*C : (r+1)*C]
		checkConv(t, fmt.Sprintf("conv prefill slot %d input %d", s, k), got, h.l.convRef(m.conv, row))
		h.l.pushConv(m, row)
	})
	// A prefill's inputs do not enter the ring, so a bf16 ring rounds none
	// of them: the reference takes them as drawn.
	in, dtMin := h.l.draw(h.rng, n*T), h.dtMin()
	y, err := h.io(t, "prefill", in, n*T*w, func(in []Buf, y Buf) error {
		return h.c.prefill(slots, T, counts, in, dtMin, y)
	})
	if err != nil {
		t.Fatalf("prefill %v T %d counts %v: %v", slots, T, counts, err)
	}
	h.eachRow(t, "prefill", slots, T, count, y, w, func(s replay.Slot, k, r int, got []float32) {
		m := h.live[s]
		h.checkRow(t, fmt.Sprintf("prefill slot %d input %d (history %d)", s, k, m.hist), got, h.l.step(m.state, in, r, dtMin))
	})
	for i, s := range slots {
		h.modelPrefill(h.live[s], count(i))
	}
}

// eachRow calls f on every row of out ([slot][T] rows of width values)
// within its slot's count, in order, and fails the test where a row past
// the count was written (out was poisoned with NaN).
func (h *harness[Buf]) eachRow(t *testing.T, what string, slots []replay.Slot, T int, count func(int) int, out []float32, width int, f func(s replay.Slot, k, r int, got []float32)) {
	t.Helper()
	for i, s := range slots {
		for k := range T {
			r := i*T + k
			got := out[r*width : (r+1)*width]
			if k >= count(i) {
				if !math.IsNaN(float64(got[0])) {
					t.Fatalf("%s slot %d wrote row %d past its count %d", what, s, k, count(i))
				}
				continue
			}
			f(s, k, r, got)
		}
	}
}

// modelPrefill records a prefill of n inputs of a slot: the state read and
// written once; a replay slot's ring, history included, folded.
func (h *harness[Buf]) modelPrefill(m *slotModel, n int) {
	h.want.Prefilled += int64(n)
	h.want.BaselineBytes += 2 * h.state
	if h.opt.Mode == replay.Baseline {
		h.want.StateBytesRead += h.state
		h.want.StateBytesWritten += h.state
		return
	}
	h.modelFlush()
	m.hist = 0
}

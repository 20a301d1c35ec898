package replay

import (
	"math"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/ssm"
)

// longMemory returns layers whose state remembers hundreds of steps (slow
// decay, small updates), where rounding the state after every update
// compounds: the regime of long generations (docs/DESIGN.md 2.4).
func longMemory() []layer {
	m := newMamba2Fixture(21, ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 16, Groups: 2})
	for h := range m.prm.ALog {
		m.prm.ALog[h] = float32(math.Log(0.02 + 0.03*float64(h)))
		m.prm.DtBias[h] = -2
	}
	m.ref = ssm.Mamba2Params{ALog: to64(m.prm.ALog), DtBias: to64(m.prm.DtBias), D: to64(m.prm.D)}
	g := newGDNLayer(22, ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8})
	for j := range g.prm.ALog {
		g.prm.ALog[j] = float32(math.Log(0.01))
	}
	g.ref64 = ssm.GDNParams{ALog: to64(g.prm.ALog), DtBias: to64(g.prm.DtBias)}
	g.aShift = -2
	// β ≈ 0.1: the delta rule keeps about dk/β = 160 steps of memory.
	g.betaMul, g.bShift = 0.3, -2.2
	// KDA: the same β, and decays per channel between e^-0.003 and 1.
	k := newKDALayer(23, ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8})
	k.gate = 0.003
	k.betaMul, k.bShift = 0.3, -2.2
	return []layer{mamba2Layer{m}, g, k}
}

// errorCurve runs one slot for steps steps and returns the mean relative
// output error over each of the given windows of steps.
func errorCurve(t *testing.T, l layer, opt Options, steps int, windows [][2]int) []float64 {
	t.Helper()
	c, err := l.build(opt, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, _ := c.Admit()
	ref := l.refState()
	w := l.width()
	errs := make([]float64, steps)
	y := make([]float32, w)
	for step := 0; step < steps; step++ {
		in := l.draw(1)
		poison(y)
		if err := c.step([]Slot{s}, in, y); err != nil {
			t.Fatal(err)
		}
		errs[step] = relErr(y, l.ref(ref, in, 0))
	}
	var out []float64
	for _, win := range windows {
		sum := 0.0
		for _, e := range errs[win[0]:win[1]] {
			sum += e
		}
		out = append(out, sum/float64(win[1]-win[0]))
	}
	return out
}

// TestReadCopyErrorDoesNotCompound runs 4096 steps with long memory. With an
// nvfp4 or fp8 read copy over an fp32 checkpoint the output error stays at
// the read copy's quantisation level: once the state has filled (after a few
// memory lengths) the mean error of the last 512 steps is within 1.5x of
// steps 256..768 (a stationary quantity; 1.5x allows for noise). A naive
// state in the same format, rounded after every update, loses the small
// updates and drifts: its late error must be at least 2x its error over
// steps 8..40 and at least 3x the read copy's late error.
func TestReadCopyErrorDoesNotCompound(t *testing.T) {
	const steps = 4096
	windows := [][2]int{{8, 40}, {256, 768}, {steps - 512, steps}}
	for _, l := range longMemory() {
		for _, f := range []numeric.Format{numeric.NVFP4, numeric.E4M3} {
			t.Run(l.name()+"/"+f.String(), func(t *testing.T) {
				rc := errorCurve(t, l, Options{Mode: Replay, ReadCopy: f, Threads: 1}, steps, windows)
				naive := errorCurve(t, l, Options{Mode: Baseline, State: f, Threads: 1}, steps, windows)
				t.Logf("read copy: %.4f %.4f %.4f; naive state: %.4f %.4f %.4f", rc[0], rc[1], rc[2], naive[0], naive[1], naive[2])
				if rc[2] > 1.5*rc[1] {
					t.Errorf("read-copy error grew from %.4f (steps 256-768) to %.4f (last 512)", rc[1], rc[2])
				}
				if naive[2] < 2*naive[0] {
					t.Errorf("naive %v state error did not grow: %.4f (steps 8-40) -> %.4f (last 512)", f, naive[0], naive[2])
				}
				if naive[2] < 3*rc[2] {
					t.Errorf("naive %v late error %.4f not above 3x the read copy's %.4f", f, naive[2], rc[2])
				}
			})
		}
	}
}

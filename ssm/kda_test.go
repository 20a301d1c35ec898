package ssm

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestKDAGateOfOne: with every channel's gate at 1 (g = 0) KDA is the
// ungated delta rule, which GDNStep64 computes with a decay of exp(0).
func TestKDAGateOfOne(t *testing.T) {
	sh := GDNShape{KeyHeads: 1, ValueHeads: 2, KeyDim: 4, ValueDim: 3}
	rng := rand.New(rand.NewPCG(1, 2))
	n := func(k int) []float64 { return normals(rng, k) }
	s1, q, k, v := n(2*4*3), n(4), n(4), n(2*3)
	s2 := append([]float64(nil), s1...)
	beta := []float64{0.3, 0.8}
	o1, o2 := make([]float64, 6), make([]float64, 6)
	KDAStep64(sh, s1, q, k, v, make([]float64, 2*4), beta, o1)
	// GDN with a = −∞-like so that exp(g) = 1: A_log = −∞ makes g = 0.
	prm := GDNParams{ALog: []float64{math.Inf(-1), math.Inf(-1)}, DtBias: []float64{0, 0}}
	rawBeta := []float64{math.Log(0.3 / 0.7), math.Log(0.8 / 0.2)}
	GDNStep64(sh, prm, s2, q, k, v, []float64{0, 0}, rawBeta, o2)
	for i := range o1 {
		if math.Abs(o1[i]-o2[i]) > 1e-12 {
			t.Fatalf("output %d: KDA %v, GDN %v", i, o1[i], o2[i])
		}
	}
	for i := range s1 {
		if math.Abs(s1[i]-s2[i]) > 1e-12 {
			t.Fatalf("state %d: KDA %v, GDN %v", i, s1[i], s2[i])
		}
	}
}

// TestKDAReplayMatchesRecurrence: over windows of 1 to 16 steps with gates
// far from 1 (α from e⁻³ to 1, different in every channel), the replay's
// outputs from the checkpoint alone and its fold equal the plain
// recurrence's outputs and final state, to float64 rounding.
func TestKDAReplayMatchesRecurrence(t *testing.T) {
	const dk, dv = 6, 5
	sh := GDNShape{KeyHeads: 1, ValueHeads: 1, KeyDim: dk, ValueDim: dv}
	rng := rand.New(rand.NewPCG(3, 4))
	n := func(k int) []float64 { return normals(rng, k) }
	for _, T := range []int{1, 2, 4, 7, 16} {
		S0 := n(dk * dv)
		state := append([]float64(nil), S0...)
		var entries []KDAEntry
		var want [][]float64
		for range T {
			q, k, v := n(dk), n(dk), n(dv)
			g := make([]float64, dk)
			for i := range g {
				g[i] = -3 * rng.Float64()
			}
			beta := rng.Float64()
			o := make([]float64, dv)
			KDAStep64(sh, state, q, k, v, g, []float64{beta}, o)
			want = append(want, o)
			e := KDAEntry{K: make([]float64, dk), Q: make([]float64, dk), V: v, Alpha: make([]float64, dk), Beta: beta}
			L2Normalize(e.K, k)
			L2Normalize(e.Q, q)
			for i := range dk {
				e.Q[i] /= math.Sqrt(dk)
				e.Alpha[i] = math.Exp(g[i])
			}
			entries = append(entries, e)
		}
		got, folded := KDAReplay64(S0, dk, dv, entries)
		for s := range T {
			for m := range dv {
				if d := math.Abs(got[s][m] - want[s][m]); d > 1e-12*(1+math.Abs(want[s][m])) {
					t.Fatalf("T=%d step %d: replay output %v, recurrence %v", T, s, got[s][m], want[s][m])
				}
			}
		}
		for i := range folded {
			if d := math.Abs(folded[i] - state[i]); d > 1e-12*(1+math.Abs(state[i])) {
				t.Fatalf("T=%d: folded state %v, recurrence %v at %d", T, folded[i], state[i], i)
			}
		}
	}
}

// normals returns k standard normal values.
func normals(rng *rand.Rand, k int) []float64 {
	v := make([]float64, k)
	for i := range v {
		v[i] = rng.NormFloat64()
	}
	return v
}

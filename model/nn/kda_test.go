package nn_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// kdaRef is KDAMixer in float64: the projections, the convolution over a
// window of raw inputs, Kimi's gate, ssm.KDAStep64 for the recurrence,
// the per-head norm and the sigmoid output gate, written from the layer's
// definition (docs/DESIGN.md 2.2b).
type kdaRef struct {
	m     *nn.KDAMixer
	conv  [][][]float64 // [seq][K-1 previous raw inputs][channels]
	state [][]float64   // [seq] ssm.KDAStep64's state
}

func newKDARef(m *nn.KDAMixer, seqs int) *kdaRef {
	r := &kdaRef{m: m}
	sh := m.Shape
	for range seqs {
		win := make([][]float64, m.Conv.Kernel-1)
		for i := range win {
			win[i] = make([]float64, m.Conv.Channels)
		}
		r.conv = append(r.conv, win)
		r.state = append(r.state, make([]float64, sh.ValueHeads*sh.KeyDim*sh.ValueDim))
	}
	return r
}

func (r *kdaRef) step(seq int, x []float64) []float64 {
	m, sh := r.m, r.m.Shape
	K, V, Hv, dk := sh.KeyHeads*sh.KeyDim, sh.ValueHeads*sh.ValueDim, sh.ValueHeads, sh.KeyDim
	C, kw := m.Conv.Channels, m.Conv.Kernel
	proj := apply64(m.InProj, x)
	raw := proj[:C]
	b := proj[C : C+Hv]
	fa := proj[C+Hv : C+Hv+m.FB.In]
	ga := proj[C+Hv+m.FB.In:]

	// Tap kw−1 reads the current input, tap j the input kw−1−j steps back.
	win := append(r.conv[seq], raw)
	qkv := make([]float64, C)
	for c := range C {
		var s float64
		for j := range kw {
			s += float64(m.Conv.Weight[c*kw+j]) * win[j][c]
		}
		qkv[c] = s / (1 + math.Exp(-s))
	}
	r.conv[seq] = append([][]float64(nil), win[1:]...)

	g := apply64(m.FB, fa)
	for i := range g {
		g[i] = -math.Exp(float64(m.ALog[i/dk])) * ssm.Softplus(g[i]+float64(m.DtBias[i]))
	}
	beta := make([]float64, Hv)
	for j := range beta {
		beta[j] = ssm.Sigmoid(b[j])
	}
	o := make([]float64, V)
	ssm.KDAStep64(sh, r.state[seq], qkv[:K], qkv[K:2*K], qkv[2*K:], g, beta, o)

	o = rmsnorm64(o, m.Norm.W, float64(m.Norm.Eps))
	gate := apply64(m.GB, ga)
	for i := range o {
		o[i] *= ssm.Sigmoid(gate[i])
	}
	return apply64(m.OutProj, o)
}

func (r *kdaRef) save(seq int) any {
	win := make([][]float64, len(r.conv[seq]))
	for i, w := range r.conv[seq] {
		win[i] = slices.Clone(w)
	}
	return [2]any{win, slices.Clone(r.state[seq])}
}

func (r *kdaRef) restore(seq int, s any) {
	v := s.([2]any)
	r.conv[seq] = v[0].([][]float64)
	r.state[seq] = slices.Clone(v[1].([]float64))
}

// randomKDA is a Kimi Delta Attention layer of the given shape with random
// weights: forget gates spread from e^-20 to nearly 1 per channel, output
// gates far from 1, a non-trivial norm.
func randomKDA(rng *rand.Rand, hidden int, sh ssm.GDNShape, rank, kw int) *nn.KDAMixer {
	K, V, Hv, dk := sh.KeyHeads*sh.KeyDim, sh.ValueHeads*sh.ValueDim, sh.ValueHeads, sh.KeyDim
	C := 2*K + V
	m := &nn.KDAMixer{
		Shape:   sh,
		InProj:  linear(rng, 2*K+V+Hv+2*rank, hidden),
		Conv:    replay.ConvWeights{Channels: C, Kernel: kw, Weight: normals(rng, C*kw, 0.5)},
		FB:      linear(rng, Hv*dk, rank),
		GB:      linear(rng, V, rank),
		ALog:    make([]float32, Hv),
		DtBias:  make([]float32, Hv*dk),
		Norm:    nn.RMSNorm{W: normals(rng, sh.ValueDim, 0.3, 1), Eps: 1e-5},
		OutProj: linear(rng, hidden, V),
	}
	for h := range m.ALog {
		m.ALog[h] = float32(math.Log(1 + 15*rng.Float64()))
	}
	for i := range m.DtBias {
		// softplus(dt_bias) log-uniform in [0.01, 1]
		d := math.Exp(math.Log(0.01) + rng.Float64()*math.Log(100))
		m.DtBias[i] = float32(math.Log(math.Expm1(d)))
	}
	return m
}

// TestKDAMixer holds the Kimi Delta Attention layer to its float64
// reference over prompts, decode steps across flushes and a verify, in
// replay (window 4) and baseline modes, with unequal key and value heads
// and head sizes.
func TestKDAMixer(t *testing.T) {
	shapes := []ssm.GDNShape{
		{KeyHeads: 3, ValueHeads: 3, KeyDim: 8, ValueDim: 8}, // Kimi: heads and sizes shared
		{KeyHeads: 1, ValueHeads: 3, KeyDim: 4, ValueDim: 6}, // the layer's general shape
	}
	modes := []struct {
		name string
		opt  replay.Options
	}{
		{"replay-w4", replay.Options{Mode: replay.Replay, Window: 4, MaxDraft: 4}},
		{"replay-w4-exact", replay.Options{Mode: replay.Replay, Window: 4, MaxDraft: 4, ExactFold: true}},
		{"baseline", replay.Options{Mode: replay.Baseline, MaxDraft: 4}},
	}
	for _, sh := range shapes {
		for _, md := range modes {
			t.Run(fmt.Sprintf("%dx%d-%dx%d/%s", sh.KeyHeads, sh.KeyDim, sh.ValueHeads, sh.ValueDim, md.name), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(3, uint64(sh.KeyDim)))
				const hidden, rank = 12, 5
				m := randomKDA(rng, hidden, sh, rank, 4)
				h := newBlockHarness(t, rng, hidden, 40, m, newKDARef(m, 2), md.opt, 2, 2e-5)
				h.script(rng)
				t.Logf("worst error %.2e of the row's largest", h.worst)
			})
		}
	}
}

package replay

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/replayssm/replayssm/ssm"
)

// TestConvWindow checks the cache's causal depthwise convolution against a
// direct convolution over each slot's whole accepted input history (zero
// before the first input), through steps, verifies with random acceptance
// and forks.
func TestConvWindow(t *testing.T) {
	const C, K = 6, 4
	rng := rand.New(rand.NewPCG(8, 8))
	w := ConvWeights{Channels: C, Kernel: K, Weight: make([]float32, C*K), Bias: make([]float32, C)}
	for i := range w.Weight {
		w.Weight[i] = float32(rng.NormFloat64())
	}
	for i := range w.Bias {
		w.Bias[i] = float32(rng.NormFloat64())
	}
	shape := ssm.Mamba2Shape{Heads: 2, HeadDim: 2, StateSize: 4, Groups: 1}
	f := newMamba2Fixture(1, shape)
	c, err := NewMamba2(shape, f.prm, w, 3, Options{MaxDraft: 3, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hist := map[Slot][][]float32{}
	s0, _ := c.Admit()
	s1, _ := c.Admit()
	hist[s0], hist[s1] = nil, nil
	want := func(h [][]float32, x []float32) []float32 {
		all := append(append([][]float32(nil), h...), x)
		out := make([]float32, C)
		for ch := 0; ch < C; ch++ {
			sum := float64(w.Bias[ch])
			for k := 0; k < K; k++ {
				if i := len(all) - K + k; i >= 0 {
					sum += float64(w.Weight[ch*K+k]) * float64(all[i][ch])
				}
			}
			out[ch] = float32(sum)
		}
		return out
	}
	draw := func(n int) []float32 { return normals(rng, n) }
	check := func(what string, got, want []float32) {
		t.Helper()
		for i := range want {
			if math.Abs(float64(got[i]-want[i])) > 1e-5*(1+math.Abs(float64(want[i]))) {
				t.Fatalf("%s: channel %d = %v, want %v", what, i, got[i], want[i])
			}
		}
	}
	for round := 0; round < 40; round++ {
		slots := []Slot{s0, s1}
		if rng.IntN(2) == 0 {
			in := draw(2 * C)
			out := make([]float32, 2*C)
			poison(out)
			if err := c.Conv(slots, in, out); err != nil {
				t.Fatal(err)
			}
			for i, s := range slots {
				x := in[i*C : (i+1)*C]
				check("step", out[i*C:(i+1)*C], want(hist[s], x))
				hist[s] = append(hist[s], x)
			}
			continue
		}
		const T = 3
		in := draw(2 * T * C)
		out := make([]float32, 2*T*C)
		poison(out)
		if err := c.ConvVerify(slots, T, in, out); err != nil {
			t.Fatal(err)
		}
		// The SSM verify must precede Commit; run it on zero-cost inputs.
		y := make([]float32, 2*T*shape.Heads*shape.HeadDim)
		if err := c.Verify(slots, T, nil, f.input(2*T), y); err != nil {
			t.Fatal(err)
		}
		acc := []int{rng.IntN(T + 1), rng.IntN(T + 1)}
		for i, s := range slots {
			h := hist[s]
			for k := 0; k < T; k++ {
				x := in[(i*T+k)*C : (i*T+k+1)*C]
				check("verify", out[(i*T+k)*C:(i*T+k+1)*C], want(h, x))
				h = append(h, x)
			}
			hist[s] = append(hist[s], chunks(in[i*T*C:(i*T+acc[i])*C], C)...)
		}
		if err := c.Commit(slots, acc); err != nil {
			t.Fatal(err)
		}
		if round == 20 {
			// A fork continues with its own copy of the window.
			d, err := c.Fork(s1)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Evict(s0); err != nil {
				t.Fatal(err)
			}
			delete(hist, s0)
			hist[d] = append([][]float32(nil), hist[s1]...)
			s0 = d
		}
	}
}

func chunks(x []float32, n int) [][]float32 {
	var out [][]float32
	for i := 0; i+n <= len(x); i += n {
		out = append(out, x[i:i+n])
	}
	return out
}

package drift

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

func TestParseMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		want replay.Options
		err  bool
	}{
		{name: "naive-nvfp4", want: replay.Options{Mode: replay.Baseline, State: numeric.NVFP4}},
		{name: "naive-fp8-sr", want: replay.Options{Mode: replay.Baseline, State: numeric.E4M3, Stochastic: true}},
		{name: "fp16", want: replay.Options{Mode: replay.Replay, Window: 8, State: numeric.F16}},
		{name: "bf16-sr", want: replay.Options{Mode: replay.Replay, Window: 8, State: numeric.BF16, Stochastic: true}},
		{name: "fp8+nvfp4", want: replay.Options{Mode: replay.Replay, Window: 8, State: numeric.E4M3, ReadCopy: numeric.NVFP4}},
		{name: "fp32+nvfp4", want: replay.Options{Mode: replay.Replay, Window: 8, State: numeric.F32, ReadCopy: numeric.NVFP4}},
		{name: "naive-fp8+nvfp4", err: true}, // a baseline has no read copy
		{name: "fp12", err: true},
		{name: "fp16+fp12", err: true},
		{name: "", err: true},
	} {
		m, err := ParseMode(tc.name, 8)
		if tc.err {
			if err == nil {
				t.Errorf("%q: no error (options %+v)", tc.name, m.Options)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.name, err)
			continue
		}
		if m.Options != tc.want || m.Name != tc.name {
			t.Errorf("%q: %q %+v, want %+v", tc.name, m.Name, m.Options, tc.want)
		}
	}
	for _, name := range DefaultModes {
		if _, err := ParseMode(name, 16); err != nil {
			t.Errorf("default mode %q: %v", name, err)
		}
	}
}

// TestAgainst checks the per-position comparison against a direct float64
// computation of the softmaxes on random logits, and KL's two fixed
// points: identical distributions and a known two-token pair.
func TestAgainst(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const V = 1000
	ref, m := make([]float32, V), make([]float32, V)
	for i := range ref {
		ref[i] = float32(rng.NormFloat64() * 4)
		m[i] = ref[i] + float32(rng.NormFloat64()*0.3)
	}
	softmax := func(x []float32) []float64 {
		var z float64
		p := make([]float64, len(x))
		for i, v := range x {
			p[i] = math.Exp(float64(v))
			z += p[i]
		}
		for i := range p {
			p[i] /= z
		}
		return p
	}
	pr, pm := softmax(ref), softmax(m)
	var want float64
	for i := range pr {
		want += pr[i] * math.Log(pr[i]/pm[i])
	}
	lr := make([]float64, V)
	_, top := logSoftmax(lr, ref)
	kl, dlogp, mtop, err := against(lr, m, 7)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(kl-want) > 1e-9*max(1, want) {
		t.Errorf("KL %.12g, float64 reference %.12g", kl, want)
	}
	if d := math.Abs(math.Log(pr[7]) - math.Log(pm[7])); math.Abs(dlogp-d) > 1e-9 {
		t.Errorf("|Δ log p| %.12g, reference %.12g", dlogp, d)
	}
	argmax := func(p []float64) int {
		best := 0
		for i, v := range p {
			if v > p[best] {
				best = i
			}
		}
		return best
	}
	if top != argmax(pr) || mtop != argmax(pm) {
		t.Errorf("top tokens %d, %d, want %d, %d", top, mtop, argmax(pr), argmax(pm))
	}
	if kl, dlogp, _, _ := against(lr, ref, 7); kl > 1e-12 || dlogp > 1e-12 {
		t.Errorf("identical logits: KL %g, |Δ log p| %g", kl, dlogp)
	}
	// p = (1/2, 1/2) against q = (e/(1+e), 1/(1+e)): KL = log((1+e)/(2√e)).
	lr2 := make([]float64, 2)
	logSoftmax(lr2, []float32{0, 0})
	kl, _, _, _ = against(lr2, []float32{1, 0}, 0)
	if w := math.Log((1 + math.E) / (2 * math.Sqrt(math.E))); math.Abs(kl-w) > 1e-7 {
		t.Errorf("two tokens: KL %.9g, want %.9g", kl, w)
	}
	m[3] = float32(math.NaN())
	if _, _, _, err := against(lr, m, 7); err == nil {
		t.Error("NaN logits: no error")
	}
}

// TestMeasure runs a fixture model through the reference and three modes:
// replay with an fp32 checkpoint is the reference up to float32 sums; an
// nvfp4 read copy over it drifts, and a naive nvfp4 state drifts more (its
// error compounds). Every position lands in exactly one bucket, and the
// plot is a PNG.
func TestMeasure(t *testing.T) {
	d, err := model.Load("../model/testdata/fixtures/qwen3_5", model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	ids := make([]int, 601)
	for i := range ids {
		ids[i] = rng.IntN(d.Vocab)
	}
	var modes []Mode
	for _, name := range []string{"fp32", "fp32+nvfp4", "naive-nvfp4"} {
		m, err := ParseMode(name, 4)
		if err != nil {
			t.Fatal(err)
		}
		modes = append(modes, m)
	}
	calls := 0
	r, err := Measure(context.Background(), d, ids, modes, 128, func(done, total int) {
		calls++
		if total != 600 || done > total {
			t.Errorf("progress %d of %d", done, total)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 5 {
		t.Errorf("%d progress calls for 600 positions in chunks of 128, want 5", calls)
	}
	if want := []int{256, 512, 600}; !slices.Equal(r.Ends, want) {
		t.Errorf("bucket ends %v, want %v", r.Ends, want)
	}
	for _, s := range r.Series {
		sum := 0
		for _, b := range s.Buckets {
			sum += b.Positions
		}
		if sum != 600 || s.All.Positions != 600 {
			t.Errorf("%s: buckets hold %d positions, all %d, want 600", s.Mode, sum, s.All.Positions)
		}
		t.Logf("%-12s mean KL %.3g, p95 |Δ log p| %.3g, top-1 %.4f", s.Mode, s.All.MeanKL, s.All.P95DLogP, s.All.Top1)
	}
	exact, copy, naive := r.Series[0].All, r.Series[1].All, r.Series[2].All
	// float32 replay against the float32 recurrence: sums in another order.
	if exact.MeanKL > 1e-9 || exact.Top1 < 0.999 {
		t.Errorf("fp32 replay drifts from the reference: %+v", exact)
	}
	if !(copy.MeanKL > 10*exact.MeanKL && naive.MeanKL > copy.MeanKL) {
		t.Errorf("mean KL fp32 %g, fp32+nvfp4 %g, naive-nvfp4 %g: want them rising", exact.MeanKL, copy.MeanKL, naive.MeanKL)
	}
	path := filepath.Join(t.TempDir(), "drift.png")
	if err := Plot(r, "qwen3_5 fixture", path); err != nil {
		t.Fatal(err)
	}
	png, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 1000 {
		t.Errorf("the plot is not a PNG (%d bytes)", len(png))
	}
}

// TestCurve checks the plot's binning against a direct computation: every
// position in exactly one bin, bin means of a known ramp, centres rising,
// and bins of zero KL left out.
func TestCurve(t *testing.T) {
	const n = 1000
	s := Series{KL: make([]float32, n)}
	for i := range s.KL {
		s.KL[i] = float32(i + 1) // position p has KL p
	}
	pos, kl := Curve(s)
	lo := 0
	for k := range pos {
		// A bin [lo, hi) of the ramp has mean (lo+1+hi)/2: recover hi.
		hi := int(math.Round(2*kl[k])) - lo - 1
		if hi <= lo || hi > n {
			t.Fatalf("bin %d: mean %v does not fit positions from %d", k, kl[k], lo+1)
		}
		if c := math.Sqrt(float64(lo+1) * float64(hi)); math.Abs(pos[k]-c) > 1e-9 {
			t.Errorf("bin %d: centre %v, want %v", k, pos[k], c)
		}
		if k > 0 && !(pos[k] > pos[k-1]) {
			t.Errorf("bin %d: centre %v after %v", k, pos[k], pos[k-1])
		}
		lo = hi
	}
	if lo != n {
		t.Errorf("the bins cover positions 1..%d, want 1..%d", lo, n)
	}
	if want := 4 * math.Log2(n); float64(len(pos)) > want+1 {
		t.Errorf("%d bins for %d positions, want about %.0f (four an octave)", len(pos), n, want)
	}
	zero := Series{KL: make([]float32, n)}
	if p, _ := Curve(zero); len(p) != 0 {
		t.Errorf("KL of zero gave %d points; a log axis cannot show them", len(p))
	}
	if err := Plot(&Result{Series: []Series{zero}}, "", filepath.Join(t.TempDir(), "x.png")); err == nil {
		t.Error("a plot of nothing but zeros: no error")
	}
}

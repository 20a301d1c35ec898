package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// bruteSample is SampleRow's definition computed the obvious way, by
// sorting: the kept set, its probabilities in token-id order and the draw.
func bruteSample(logits []float32, p SampleParams) (id int, probs []float64) {
	inf := math.Inf(1)
	best := -1
	for i, l := range logits {
		v := float64(l)
		if math.IsNaN(v) || v == inf {
			return -1, nil
		}
		if v > -inf && (best < 0 || v > float64(logits[best])) {
			best = i
		}
	}
	if best < 0 {
		return -1, nil
	}
	probs = make([]float64, len(logits))
	if !(p.Temperature > 0) || p.TopK == 1 {
		probs[best] = 1
		return best, probs
	}
	m := float64(logits[best])
	order := make([]int, len(logits))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return logits[order[a]] > logits[order[b]] })
	theta := -inf
	if k := int(p.TopK); k > 0 && k < len(logits) {
		theta = float64(logits[order[k-1]])
	}
	w := func(i int) float64 { return math.Exp((float64(logits[i]) - m) / float64(p.Temperature)) }
	keep := func(i int) bool { return float64(logits[i]) > -inf && float64(logits[i]) >= theta }
	if p.TopP > 0 && p.TopP < 1 {
		var zk float64
		for i := range logits {
			if keep(i) {
				zk += w(i)
			}
		}
		var cum float64
		for j := 0; j < len(order); {
			v := logits[order[j]]
			for ; j < len(order) && logits[order[j]] == v; j++ { // a level: every tie
				if keep(order[j]) {
					cum += w(order[j])
				}
			}
			if cum >= float64(p.TopP)*zk {
				theta = float64(v)
				break
			}
		}
	}
	var z float64
	for i := range logits {
		if keep(i) {
			probs[i] = w(i)
			z += probs[i]
		}
	}
	for i := range probs {
		probs[i] /= z
	}
	t, cum := min(max(p.U, 0), 1), 0.0
	id = -1
	for i, q := range probs {
		if q > 0 {
			cum += q
			id = i
			if cum > t {
				break
			}
		}
	}
	return id, probs
}

// inInterval reports whether u lies within eps of token id's interval of
// the inverse CDF of probs in id order (and id may be drawn at all).
func inInterval(probs []float64, id int, u, eps float64) bool {
	if id < 0 || id >= len(probs) || probs[id] == 0 {
		return false
	}
	var lo float64
	for _, q := range probs[:id] {
		lo += q
	}
	return u >= lo-eps && u < lo+probs[id]+eps
}

// randomLogits are n normal logits of spread s, a few of them repeated so
// that ties happen at the thresholds.
func randomLogits(rng *rand.Rand, n int, s float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * s)
	}
	for range n / 8 {
		v[rng.IntN(n)] = v[rng.IntN(n)]
	}
	return v
}

func TestSampleRowMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	negInf := float32(math.Inf(-1))
	type row struct {
		name   string
		logits []float32
	}
	rows := []row{
		{"one", []float32{0.3}},
		{"two tied", []float32{1, 1}},
		{"all tied", []float32{2, 2, 2, 2, 2, 2, 2}},
		{"signed zeros", []float32{0, float32(math.Copysign(0, -1)), -1, 0, float32(math.Copysign(0, -1)), 1}},
		{"masked", []float32{negInf, 3, negInf, 1, 2, negInf, 2}},
		{"one unmasked", []float32{negInf, negInf, -4, negInf}},
		{"wide", randomLogits(rng, 300, 20)},
		{"narrow", randomLogits(rng, 300, 0.01)},
		{"few levels", func() []float32 {
			v := make([]float32, 200)
			for i := range v {
				v[i] = float32(rng.IntN(5))
			}
			return v
		}()},
	}
	for range 12 {
		rows = append(rows, row{"random", randomLogits(rng, 1+rng.IntN(2000), 1+3*rng.Float64())})
	}
	masked := randomLogits(rng, 500, 2)
	for i := range masked {
		if rng.IntN(3) == 0 {
			masked[i] = negInf
		}
	}
	rows = append(rows, row{"random masked", masked})
	var params []SampleParams
	for _, T := range []float32{0, -1, 1e-6, 0.05, 0.7, 1, 3, 1e6} {
		for _, k := range []int32{0, 1, 2, 5, 40, 299, 300, 5000} {
			for _, p := range []float32{0, 1e-6, 0.1, 0.5, 0.9, 0.999, 1} {
				params = append(params, SampleParams{Temperature: T, TopK: k, TopP: p})
			}
		}
	}
	n := 0
	for _, r := range rows {
		for _, p := range params {
			for _, u := range []float64{0, rng.Float64(), rng.Float64(), 0.5, math.Nextafter(1, 0)} {
				p.U = u
				want, wantP := bruteSample(r.logits, p)
				// A float64 rounding apart: U within 1e-12 of the boundary.
				if got := SampleRow(r.logits, p); got != want && !inInterval(wantP, got, p.U, 1e-12) {
					t.Fatalf("%s (%d logits) %+v: token %d, want %d", r.name, len(r.logits), p, got, want)
				}
				gotP := make([]float64, len(r.logits))
				SampleProbs(r.logits, p, gotP)
				for i := range gotP {
					if math.Abs(gotP[i]-wantP[i]) > 1e-12 {
						t.Fatalf("%s %+v: probability of token %d %g, want %g", r.name, p, i, gotP[i], wantP[i])
					}
				}
				n++
			}
		}
	}
	t.Logf("%d draws", n)
}

// TestSampleRowEdges pins the draws the definition decides by hand.
func TestSampleRowEdges(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	sample := SampleParams{Temperature: 1}
	for _, c := range []struct {
		name   string
		logits []float32
		p      SampleParams
		want   int
	}{
		{"NaN", []float32{1, nan, 2}, sample, -1},
		{"+Inf", []float32{1, inf, 2}, sample, -1},
		{"all masked", []float32{-inf, -inf}, sample, -1},
		{"greedy: the first maximum", []float32{1, 3, 3, 2}, SampleParams{}, 1},
		{"top-k 1 is greedy", []float32{1, 3, 3, 2}, SampleParams{Temperature: 1, TopK: 1, U: 0.99}, 1},
		{"masked never drawn", []float32{-inf, 0, -inf}, SampleParams{Temperature: 1, U: 0}, 1},
		{"top-k keeps the ties", []float32{5, 1, 5, 5, 0}, SampleParams{Temperature: 1e-3, TopK: 2, U: 0.99}, 3},
		{"tiny top-p keeps the maximum's ties", []float32{1, 4, 0, 4}, SampleParams{Temperature: 1, TopP: 1e-6, U: 0.75}, 3},
		{"U below 0", []float32{0, 0, 0}, SampleParams{Temperature: 1, U: -1}, 0},
		{"U at 1", []float32{0, 0, 0}, SampleParams{Temperature: 1, U: 1}, 2},
		{"cold: the maximum", []float32{1, 1.001, 0}, SampleParams{Temperature: 1e-6, U: 0.999}, 1},
		{"hot: uniform", []float32{0, 1, 2, 3}, SampleParams{Temperature: 1e30, U: 0.3}, 1},
		{"+0 and −0 tie", []float32{-0.5, float32(math.Copysign(0, -1)), 0}, SampleParams{Temperature: 1e-3, TopK: 1 + 1, U: 0.6}, 2},
	} {
		if got := SampleRow(c.logits, c.p); got != c.want {
			t.Errorf("%s: %v %+v: %d, want %d", c.name, c.logits, c.p, got, c.want)
		}
	}
}

// TestSampleRowFrequencies draws many times from one row and compares the
// counts with the renormalised distribution by a chi-square statistic,
// which must stay under df + 6·√(2·df) (about six standard deviations).
func TestSampleRowFrequencies(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	logits := randomLogits(rng, 64, 1.5)
	for _, p := range []SampleParams{
		{Temperature: 1},
		{Temperature: 0.7, TopK: 12},
		{Temperature: 1.3, TopP: 0.8},
		{Temperature: 0.9, TopK: 30, TopP: 0.95},
	} {
		t.Run(fmt.Sprintf("T=%g,k=%d,p=%g", p.Temperature, p.TopK, p.TopP), func(t *testing.T) {
			_, probs := bruteSample(logits, p)
			const n = 200000
			counts := make([]int, len(logits))
			for range n {
				p.U = rng.Float64()
				counts[SampleRow(logits, p)]++
			}
			var chi2 float64
			df := -1
			for i, q := range probs {
				if q == 0 {
					if counts[i] != 0 {
						t.Fatalf("token %d, outside the kept set, drawn %d times", i, counts[i])
					}
					continue
				}
				e := q * n
				chi2 += (float64(counts[i]) - e) * (float64(counts[i]) - e) / e
				df++
			}
			if bound := float64(df) + 6*math.Sqrt(2*float64(df)); chi2 > bound {
				t.Fatalf("chi-square %.1f over %d degrees of freedom exceeds %.1f", chi2, df, bound)
			}
			t.Logf("chi-square %.1f, %d degrees of freedom", chi2, df)
		})
	}
}

package nntest

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/model/nn"
)

// sampleParams are the rows' draws, row r taking entry r mod len: greedy,
// plain, top-k, top-p and both, a top-k of one and of the whole
// vocabulary, tiny and whole-mass top-p, cold and hot temperatures.
var sampleParams = []nn.SampleParams{
	{},
	{Temperature: 1},
	{Temperature: 0.7, TopK: 50},
	{Temperature: 1, TopP: 0.9},
	{Temperature: 0.6, TopK: 1000, TopP: 0.95},
	{Temperature: 1, TopK: 1},
	{Temperature: 2, TopP: 1e-6},
	{Temperature: 1e-3},
	{Temperature: 1.2, TopK: 1 << 30},
	{Temperature: 0.8, TopK: 20, TopP: 0.5},
	{Temperature: 1, TopP: 0.999},
	{Temperature: 50, TopK: 3},
	{Temperature: 0.3, TopK: 2, TopP: 0.7},
	{Temperature: 1.5, TopP: 0.3},
}

// sample checks Backend.Sample against nn.SampleRow: rows of logits
// spread as a model's are (a few large, ties at the top and at the
// thresholds), each row with its own parameters and draw, the output
// poisoned first. A token other than the reference's passes only where
// the reference's own float64 distribution puts the draw within
// tol.Sample of that token's interval, with TopP as given or moved by
// tol.Sample (the device's weights are float32).
func (c *checker) sample(t *testing.T) {
	near := 0
	for _, cols := range []int{1, 7, 1000, 151936, 248320} {
		for _, rows := range []int{1, 64} {
			v := c.sampleLogits(rows, cols)
			p := make([]nn.SampleParams, rows)
			for r := range p {
				p[r] = sampleParams[(r+cols)%len(sampleParams)]
				p[r].U = c.rng.Float64()
			}
			near += c.checkSample(t, fmt.Sprintf("%d×%d", rows, cols), v, rows, cols, p)
		}
	}
	// One row drawn at 64 evenly spread points of its inverse CDF: every
	// part of the walk, the first and the last kept token.
	const cols = 5000
	v := c.sampleLogits(1, cols)
	for _, q := range sampleParams {
		rows := 64
		all := make([]float32, 0, rows*cols)
		p := make([]nn.SampleParams, rows)
		for r := range p {
			all = append(all, v...)
			p[r] = q
			p[r].U = (float64(r) + 0.5) / float64(rows)
		}
		p[0].U, p[rows-1].U = 0, math.Nextafter(1, 0)
		near += c.checkSample(t, fmt.Sprintf("sweep %+v", q), all, rows, cols, p)
	}
	// Broken rows give -1: a NaN, either infinity, beside sampled ones.
	rows, cols2 := 6, 3001
	w := c.sampleLogits(rows, cols2)
	w[1*cols2+7] = float32(math.NaN())
	w[3*cols2+cols2-1] = float32(math.Inf(1))
	w[4*cols2] = float32(math.Inf(-1))
	p := make([]nn.SampleParams, rows)
	for r := range p {
		p[r] = nn.SampleParams{Temperature: 1, TopP: 0.9, U: c.rng.Float64()}
	}
	near += c.checkSample(t, "broken rows", w, rows, cols2, p)
	t.Logf("%d draws differ from the reference within the tolerance of a boundary", near)
}

// sampleLogits are rows × cols logits as a model's look: normal with a
// spread of 2 to 5, a handful raised far above the rest, the row's largest
// value repeated, and runs of repeated values (ties at any threshold).
func (c *checker) sampleLogits(rows, cols int) []float32 {
	v := c.normals(rows*cols, 1)
	for r := range rows {
		x := v[r*cols : (r+1)*cols]
		s := 2 + 3*c.rng.Float64()
		for i := range x {
			x[i] *= float32(s)
		}
		for range min(8, cols) {
			x[c.rng.IntN(cols)] += float32(10 + 10*c.rng.Float64())
		}
		for range cols / 16 {
			x[c.rng.IntN(cols)] = x[c.rng.IntN(cols)]
		}
		best := 0
		for i := range x {
			if x[i] > x[best] {
				best = i
			}
		}
		x[c.rng.IntN(cols)] = x[best]
	}
	return v
}

// checkSample runs Sample on v and checks every row; it returns how many
// rows passed only within the tolerance.
func (c *checker) checkSample(t *testing.T, what string, v []float32, rows, cols int, p []nn.SampleParams) int {
	t.Helper()
	got := make([]int32, rows)
	for i := range got {
		got[i] = -7
	}
	c.be.Sample(got, c.tensor(v, rows, cols), p)
	if err := c.be.Err(); err != nil {
		t.Fatalf("%s: backend error: %v", what, err)
	}
	near := 0
	for r := range rows {
		x := v[r*cols : (r+1)*cols]
		want := -1
		if finiteRow(x) {
			want = nn.SampleRow(x, p[r])
		}
		g := int(got[r])
		if g == want {
			continue
		}
		if want >= 0 && SampleWithin(x, p[r], g, c.tol.Sample) {
			near++
			continue
		}
		t.Fatalf("%s: row %d %+v: token %d, want %d\n%s", what, r, p[r], g, want, DescribeDraw(x, p[r], g, want))
	}
	return near
}

// SampleWithin reports whether token g may be a device's draw from the
// row x, whose nn.SampleRow draw differs: with TopP as given or moved by
// tol, U lies within tol of g's interval of the inverse CDF (tol is a
// fraction of the kept weight, Tolerances.Sample).
func SampleWithin(x []float32, p nn.SampleParams, g int, tol float64) bool {
	if g < 0 || g >= len(x) {
		return false
	}
	probs := make([]float64, len(x))
	for _, dp := range []float64{0, -tol, tol} {
		q := p
		if p.TopP > 0 && p.TopP < 1 {
			// Kept inside (0, 1): outside, top-p would keep every token.
			q.TopP = float32(min(max(float64(p.TopP)+dp, math.SmallestNonzeroFloat32), 1-1e-7))
		} else if dp != 0 {
			continue
		}
		if !nn.SampleProbs(x, q, probs) || probs[g] == 0 {
			continue
		}
		var lo float64
		for _, pr := range probs[:g] {
			lo += pr
		}
		if p.U >= lo-tol && p.U < lo+probs[g]+tol {
			return true
		}
	}
	return false
}

// DescribeDraw is what a failed draw's log needs: the kept set's size,
// the largest logit, and where U falls against the intervals of the
// device's token got and the reference's want.
func DescribeDraw(x []float32, p nn.SampleParams, got, want int) string {
	var b strings.Builder
	probs := make([]float64, len(x))
	if !nn.SampleProbs(x, p, probs) {
		return "the reference draws nothing"
	}
	kept, best := 0, 0
	for i, q := range probs {
		if q > 0 {
			kept++
		}
		if x[i] > x[best] {
			best = i
		}
	}
	fmt.Fprintf(&b, "  %d tokens, %d kept; largest logit %v at %d; U %.9f\n", len(x), kept, x[best], best, p.U)
	for _, id := range []int{want, got} {
		if id < 0 || id >= len(x) {
			fmt.Fprintf(&b, "  token %d: outside the row\n", id)
			continue
		}
		var lo float64
		for _, q := range probs[:id] {
			lo += q
		}
		fmt.Fprintf(&b, "  token %d: logit %v, probability %.9g, interval [%.9f, %.9f)\n", id, x[id], probs[id], lo, lo+probs[id])
	}
	return b.String()
}

func finiteRow(x []float32) bool {
	for _, f := range x {
		if f-f != 0 {
			return false
		}
	}
	return true
}

// Package ref64 holds float64 reference pieces that several packages' tests
// re-implement a model with: causal attention over a cache, a dense
// projection, and the relative error the MTP tests bound. It is test
// support: plain loops in float64, no speed, no shortcuts.
package ref64

import "math"

// Attend is one query of causal grouped-query attention over a cache:
// q [heads·headDim], keys[j] and vals[j] [kvHeads·headDim] for every cached
// position j (the query's own included); scores scaled by 1/√headDim,
// softmax in float64 with the maximum subtracted. Query head h reads key /
// value head h / (heads/kvHeads).
func Attend(q []float64, keys, vals [][]float64, heads, kvHeads, headDim int) []float64 {
	o := make([]float64, heads*headDim)
	for h := range heads {
		kv := h / (heads / kvHeads)
		sc := make([]float64, len(keys))
		mx := math.Inf(-1)
		for j := range sc {
			for i := range headDim {
				sc[j] += q[h*headDim+i] * keys[j][kv*headDim+i]
			}
			sc[j] /= math.Sqrt(float64(headDim))
			mx = math.Max(mx, sc[j])
		}
		var z float64
		for j := range sc {
			sc[j] = math.Exp(sc[j] - mx)
			z += sc[j]
		}
		for j := range sc {
			for i := range headDim {
				o[h*headDim+i] += sc[j] / z * vals[j][kv*headDim+i]
			}
		}
	}
	return o
}

// Project is W·x for a row-major float32 matrix W of rows × len(x).
func Project(w []float32, x []float64, rows int) []float64 {
	n := len(x)
	y := make([]float64, rows)
	for r := range rows {
		for i := range n {
			y[r] += float64(w[r*n+i]) * x[i]
		}
	}
	return y
}

// MaxRelErr is max |got − want| / max(max |want|, 1e-3): an error relative
// to the output's scale, not to each (possibly tiny) element.
func MaxRelErr(got []float32, want []float64) float64 {
	var d, s float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-want[i]))
		s = math.Max(s, math.Abs(want[i]))
	}
	return d / math.Max(s, 1e-3)
}

// RelDiff is ‖got − want‖ / ‖want‖ over float32 vectors (Euclidean norms,
// summed in float64): two runs' logits against each other.
func RelDiff(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

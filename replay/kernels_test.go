package replay

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestKernels checks every row kernel, SIMD and plain Go, against float64
// sums on random vectors of lengths around the SIMD block sizes (so the
// assembly loops and the Go tails both run). Tolerance: a float32 sum of n
// products has error ≲ n·2^-24·Σ|terms|; we allow 1e-5 relative to Σ|terms|.
func TestKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	vec := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return v
	}
	type impl struct {
		name       string
		dot        func(a, b []float32) float32
		axpy       func(y []float32, a float32, x []float32)
		update     func(row []float32, a, c float32, B, C []float32) float32
		rankUpdate func(row []float32, decay float32, coef, V []float32, stride int)
	}
	impls := []impl{{"go", dotGo, axpyGo, updateRowDotGo, rankUpdateGo}}
	if simd {
		impls = append(impls, impl{"simd", dotSIMD, axpySIMD, updateRowDotSIMD, rankUpdateSIMD})
	} else {
		t.Log("no SIMD kernels on this machine: testing the plain-Go kernels only")
	}
	close := func(what string, got float32, want, scale float64) {
		t.Helper()
		if math.Abs(float64(got)-want) > 1e-5*scale+1e-30 {
			t.Fatalf("%s: got %v want %v (scale %v)", what, got, want, scale)
		}
	}
	for _, im := range impls {
		for _, n := range []int{1, 7, 8, 9, 31, 32, 33, 64, 80, 127, 128, 129, 300} {
			a, b, c := vec(n), vec(n), vec(n)
			want, scale := 0.0, 0.0
			for i := range a {
				want += float64(a[i]) * float64(b[i])
				scale += math.Abs(float64(a[i]) * float64(b[i]))
			}
			close(im.name+" dot", im.dot(a, b), want, scale)

			y := append([]float32(nil), a...)
			im.axpy(y, 0.7, b)
			for i := range y {
				close(im.name+" axpy", y[i], float64(a[i])+0.7*float64(b[i]), 1+math.Abs(float64(a[i])))
			}

			row := append([]float32(nil), a...)
			got := im.update(row, 0.9, -0.3, b, c)
			want, scale = 0, 0
			for i := range row {
				r := 0.9*float64(a[i]) - 0.3*float64(b[i])
				close(im.name+" update row", row[i], r, 1+math.Abs(r))
				want += r * float64(c[i])
				scale += math.Abs(r * float64(c[i]))
			}
			close(im.name+" update dot", got, want, scale)

			for _, tt := range []int{0, 1, 5, 17} {
				stride := n + 3
				V := vec(tt*stride + n)
				coef := vec(tt)
				row := append([]float32(nil), a...)
				im.rankUpdate(row, 0.8, coef, V, stride)
				for i := range row {
					r, s := 0.8*float64(a[i]), math.Abs(0.8*float64(a[i]))
					for j := 0; j < tt; j++ {
						r += float64(coef[j]) * float64(V[j*stride+i])
						s += math.Abs(float64(coef[j]) * float64(V[j*stride+i]))
					}
					close(im.name+" rank update", row[i], r, s)
				}
			}
		}
	}
}

func BenchmarkDot128(b *testing.B) {
	x, y := make([]float32, 128), make([]float32, 128)
	for i := range x {
		x[i], y[i] = float32(i), float32(128-i)
	}
	b.SetBytes(2 * 4 * 128)
	var s float32
	for b.Loop() {
		s += dot(x, y)
	}
	_ = s
}

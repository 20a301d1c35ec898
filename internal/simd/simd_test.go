package simd

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestKernels checks Dot and Axpy (assembly where present, and the Go
// versions) against float64 on lengths around the vector block sizes.
// Tolerance: 1e-5 of Σ|terms| (float32 sums of up to 300 products).
func TestKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 7, 8, 9, 31, 32, 33, 80, 128, 300} {
		a, b := make([]float32, n), make([]float32, n)
		for i := range a {
			a[i], b[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
		}
		want, scale := 0.0, 0.0
		for i := range a {
			want += float64(a[i]) * float64(b[i])
			scale += math.Abs(float64(a[i]) * float64(b[i]))
		}
		for name, dot := range map[string]func(a, b []float32) float32{"Dot": Dot, "DotGo": DotGo} {
			if got := float64(dot(a, b)); math.Abs(got-want) > 1e-5*scale {
				t.Errorf("%s n=%d: %v, want %v", name, n, got, want)
			}
		}
		for name, axpy := range map[string]func([]float32, float32, []float32){"Axpy": Axpy, "AxpyGo": AxpyGo} {
			y := append([]float32(nil), a...)
			axpy(y, -0.75, b)
			for i := range y {
				w := float64(a[i]) - 0.75*float64(b[i])
				if math.Abs(float64(y[i])-w) > 1e-6*(1+math.Abs(w)) {
					t.Fatalf("%s n=%d: y[%d] = %v, want %v", name, n, i, y[i], w)
				}
			}
		}
	}
	t.Logf("assembly kernels: %v", Enabled())
}

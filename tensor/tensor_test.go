package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64())
	}
	return v
}

// matMul64 is the float64 reference of MatMul.
func matMul64(x, w []float32, n, in, out int) []float64 {
	y := make([]float64, n*out)
	for r := range n {
		for o := range out {
			var s float64
			for i := range in {
				s += float64(x[r*in+i]) * float64(w[o*in+i])
			}
			y[r*out+o] = s
		}
	}
	return y
}

func TestMatMul(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	tests := []struct{ n, in, out int }{
		{1, 1, 1}, {1, 7, 3}, {1, 8, 4}, {1, 16, 5}, {2, 24, 9}, {3, 64, 64},
		{1, 100, 37}, {5, 257, 130}, {70, 64, 328}, {1, 1024, 513}, {4, 2048, 260},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%dx%dx%d", tc.n, tc.in, tc.out), func(t *testing.T) {
			x, w := randVec(r, tc.n*tc.in), randVec(r, tc.out*tc.in)
			y := make([]float32, tc.n*tc.out)
			for i := range y {
				y[i] = float32(math.NaN())
			}
			MatMul(y, x, w, tc.n, tc.in, tc.out)
			want := matMul64(x, w, tc.n, tc.in, tc.out)
			tol := 1e-5 * math.Sqrt(float64(tc.in))
			for i := range y {
				if d := math.Abs(float64(y[i]) - want[i]); !(d <= tol*(1+math.Abs(want[i]))) {
					t.Fatalf("y[%d] = %v, want %v", i, y[i], want[i])
				}
			}
		})
	}
}

// randBF16 returns n normal values rounded to bfloat16, as bits; none is zero.
func randBF16(r *rand.Rand, n int) []uint16 {
	v := randVec(r, n)
	for i := range v {
		if v[i] == 0 {
			v[i] = 1
		}
	}
	return Weights{F32: v}.Round(BFloat16).BF16
}

// TestMatMulBF16 checks the product with bfloat16 weights against the
// float64 product of the same (widened) weights: the widening is exact, so
// only the float32 sums differ, by the bound TestMatMul uses. The sizes
// cover every remainder of the 8-wide vectors and of the 4-row tiles.
func TestMatMulBF16(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	tests := []struct{ n, in, out int }{
		{1, 1, 1}, {1, 7, 3}, {1, 8, 4}, {1, 9, 5}, {1, 31, 6}, {1, 33, 7}, {2, 24, 9}, {3, 65, 66},
		{1, 100, 37}, {5, 257, 130}, {70, 64, 327}, {1, 1027, 513}, {4, 2049, 261},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%dx%dx%d", tc.n, tc.in, tc.out), func(t *testing.T) {
			x, w := randVec(r, tc.n*tc.in), randBF16(r, tc.out*tc.in)
			y := make([]float32, tc.n*tc.out)
			for i := range y {
				y[i] = float32(math.NaN())
			}
			Product(y, x, Weights{BF16: w}, tc.n, tc.in, tc.out)
			want := matMul64(x, Weights{BF16: w}.Float32(), tc.n, tc.in, tc.out)
			tol := 1e-5 * math.Sqrt(float64(tc.in))
			for i := range y {
				if d := math.Abs(float64(y[i]) - want[i]); !(d <= tol*(1+math.Abs(want[i]))) {
					t.Fatalf("y[%d] = %v, want %v", i, y[i], want[i])
				}
			}
		})
	}
}

func TestWeights(t *testing.T) {
	f := Weights{F32: []float32{1, -2.5, 3.00390625, 1e-3}}
	b := f.Round(BFloat16)
	if b.DType() != BFloat16 || b.Len() != 4 || b.Bytes() != 8 || f.Bytes() != 16 {
		t.Fatalf("rounded: %v, %d values, %d bytes", b.DType(), b.Len(), b.Bytes())
	}
	// 3.00390625 = 3 + 2⁻⁸ is a tie between bfloat16 neighbours 3 and
	// 3.015625: to even, 3.
	if b.At(0) != 1 || b.At(1) != -2.5 || b.At(2) != 3 || math.Abs(float64(b.At(3))-1e-3) > 1e-5 {
		t.Fatalf("rounded values %v", b.Float32())
	}
	if got := b.Round(Float32).F32; got[1] != -2.5 {
		t.Fatalf("widened %v", got)
	}
	c := Concat(b.Slice(1, 3), b)
	if c.DType() != BFloat16 || c.Len() != 6 || c.At(0) != -2.5 || c.At(2) != 1 {
		t.Fatalf("concat of bfloat16: %v %v", c.DType(), c.Float32())
	}
	if m := Concat(b, f); m.DType() != Float32 || m.At(1) != -2.5 || m.At(6) != 3.00390625 {
		t.Fatalf("concat of mixed formats: %v %v", m.DType(), m.F32)
	}
	if _, ok := b.IsFinite(); !ok {
		t.Fatal("finite values reported non-finite")
	}
	inf := Weights{F32: []float32{1, float32(math.Inf(-1))}}.Round(BFloat16)
	if i, ok := inf.IsFinite(); ok || i != 1 {
		t.Fatalf("IsFinite of [1 -Inf] = %d, %v", i, ok)
	}
}

// TestKernels checks the assembly kernels against the plain-Go ones at every
// length around the vector width.
func TestKernels(t *testing.T) {
	if !simd {
		t.Skip("no AVX2+FMA kernels on this machine or build")
	}
	r := rand.New(rand.NewPCG(3, 4))
	for n := 0; n <= 80; n++ {
		a, b := randVec(r, n), randVec(r, 4*n)
		got, want := dot(a, b[:n]), dotGo(a, b[:n])
		if d := math.Abs(float64(got - want)); d > 1e-5*(1+math.Abs(float64(want)))*float64(n+1) {
			t.Fatalf("dot n=%d: simd %v, go %v", n, got, want)
		}
		y1, y2 := randVec(r, n), make([]float32, n)
		copy(y2, y1)
		axpy(y1, 0.7, a)
		axpyGo(y2, 0.7, a)
		for i := range y1 {
			if math.Abs(float64(y1[i]-y2[i])) > 1e-5*(1+math.Abs(float64(y2[i]))) {
				t.Fatalf("axpy n=%d [%d]: simd %v, go %v", n, i, y1[i], y2[i])
			}
		}
		bw := randBF16(r, n)
		if got, want := dotBF16(a, bw), dotBF16Go(a, bw); math.Abs(float64(got-want)) > 1e-5*(1+math.Abs(float64(want)))*float64(n+1) {
			t.Fatalf("dotBF16 n=%d: simd %v, go %v", n, got, want)
		}
		wide, wideGo := make([]float32, n), make([]float32, n)
		widenBF16(wide, bw)
		widenBF16Go(wideGo, bw)
		for i := range wide {
			if wide[i] != wideGo[i] {
				t.Fatalf("widenBF16 n=%d [%d]: simd %v, go %v", n, i, wide[i], wideGo[i])
			}
		}
		var g4, w4 [4]float32
		dot4(a, b, n, &g4)
		dot4Go(a, b, n, &w4)
		for j := range 4 {
			if d := math.Abs(float64(g4[j] - w4[j])); d > 1e-5*(1+math.Abs(float64(w4[j])))*float64(n+1) {
				t.Fatalf("dot4 n=%d row %d: simd %v, go %v", n, j, g4[j], w4[j])
			}
		}
	}
}

func TestOps(t *testing.T) {
	x := []float32{1, -2, 3, -4}
	dst := make([]float32, 4)
	RMSNorm(dst, x, []float32{1, 2, 1, 0.5}, 0)
	rms := math.Sqrt((1 + 4 + 9 + 16) / 4.0)
	want := []float64{1 / rms, -4 / rms, 3 / rms, -2 / rms}
	for i := range dst {
		if math.Abs(float64(dst[i])-want[i]) > 1e-6 {
			t.Fatalf("RMSNorm = %v, want %v", dst, want)
		}
	}
	s := []float32{1, 2, 3, 1000}
	Softmax(s)
	if s[3] < 0.999 || math.IsNaN(float64(s[0])) {
		t.Fatalf("Softmax = %v", s)
	}
	if got := LogSoftmaxAt([]float32{0, 0}, 1); math.Abs(got+math.Ln2) > 1e-12 {
		t.Fatalf("LogSoftmaxAt = %v, want −ln 2", got)
	}
	if Argmax([]float32{1, 3, 3, 2}) != 1 {
		t.Fatal("Argmax must return the first maximum")
	}
	if v := SiLU(0); v != 0 {
		t.Fatalf("SiLU(0) = %v", v)
	}
	if v := Softplus(30); v != 30 {
		t.Fatalf("Softplus(30) = %v", v)
	}
}

func TestRope(t *testing.T) {
	rp, err := NewRope(4, 10000)
	if err != nil {
		t.Fatal(err)
	}
	x := []float32{1, 2, 3, 4, 5, 6}
	rp.Apply(x, 0)
	if x[0] != 1 || x[2] != 3 || x[4] != 5 {
		t.Fatalf("position 0 must not rotate: %v", x)
	}
	x = []float32{1, 0, 0, 0, 7, 8}
	rp.Apply(x, 2)
	// pair (0, 2) rotates by angle 2·θ^0 = 2.
	if math.Abs(float64(x[0])-math.Cos(2)) > 1e-6 || math.Abs(float64(x[2])-math.Sin(2)) > 1e-6 || x[4] != 7 || x[5] != 8 {
		t.Fatalf("rope = %v", x)
	}
	if _, err := NewRope(3, 1e4); err == nil {
		t.Fatal("odd rotary dim accepted")
	}
}

func BenchmarkMatMul(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct{ n, in, out int }{{1, 512, 1536}, {1, 2048, 2048}, {1, 4096, 4096}, {8, 512, 1536}, {64, 512, 1536}} {
		b.Run(fmt.Sprintf("%dx%dx%d", tc.n, tc.in, tc.out), func(b *testing.B) {
			x, w := randVec(r, tc.n*tc.in), randVec(r, tc.out*tc.in)
			y := make([]float32, tc.n*tc.out)
			b.SetBytes(int64(4 * tc.in * tc.out))
			for b.Loop() {
				MatMul(y, x, w, tc.n, tc.in, tc.out)
			}
			b.ReportMetric(float64(2*tc.n*tc.in*tc.out)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		b.Run(fmt.Sprintf("bf16/%dx%dx%d", tc.n, tc.in, tc.out), func(b *testing.B) {
			x, w := randVec(r, tc.n*tc.in), randBF16(r, tc.out*tc.in)
			y := make([]float32, tc.n*tc.out)
			b.SetBytes(int64(2 * tc.in * tc.out))
			for b.Loop() {
				MatMulBF16(y, x, w, tc.n, tc.in, tc.out)
			}
			b.ReportMetric(float64(2*tc.n*tc.in*tc.out)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

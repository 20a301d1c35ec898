package tensor

import (
	"fmt"

	vec "github.com/replayssm/replayssm/internal/simd"
)

// rowBlockBytes bounds the rows of x one pass over a block of weight rows
// reads, so that they stay in the L2 cache while the weight block sits in L1.
const rowBlockBytes = 192 << 10

// MatMul computes y = x·wᵀ for n rows: y[r][o] = Σᵢ x[r][i]·w[o][i], with
// x [n][in], w [out][in] (PyTorch's Linear weight layout) and y [n][out].
// The output columns are split over goroutines; each weight row is read
// from memory once per block of rows.
func MatMul(y, x, w []float32, n, in, out int) {
	if len(x) < n*in || len(w) < out*in || len(y) < n*out {
		panic(fmt.Sprintf("tensor.MatMul: x has %d values (want %d×%d), w %d (want %d×%d), y %d (want %d×%d)",
			len(x), n, in, len(w), out, in, len(y), n, out))
	}
	if n == 0 || out == 0 {
		return
	}
	work := int64(n) * int64(in) * int64(out)
	if work < 2*minParallelWork {
		matMulCols(y, x, w, n, in, out, 0, out) // no closure: small products allocate nothing
		return
	}
	Parallel(out, 4, work, func(lo, hi int) {
		matMulCols(y, x, w, n, in, out, lo, hi)
	})
}

// matMulCols computes the output columns [lo, hi) of MatMul.
func matMulCols(y, x, w []float32, n, in, out, lo, hi int) {
	if n == 1 {
		// A matrix-vector product streams the weights: one row at a time
		// keeps a single sequential stream for the hardware prefetcher.
		for o := lo; o < hi; o++ {
			y[o] = dot(x[:in], w[o*in:(o+1)*in])
		}
		return
	}
	rb := max(1, rowBlockBytes/(4*max(1, in)))
	var acc [4]float32
	for r0 := 0; r0 < n; r0 += rb {
		r1 := min(n, r0+rb)
		o := lo
		for ; o+4 <= hi; o += 4 {
			wb := w[o*in : (o+4)*in]
			for r := r0; r < r1; r++ {
				dot4(x[r*in:(r+1)*in], wb, in, &acc)
				copy(y[r*out+o:r*out+o+4], acc[:])
			}
		}
		for ; o < hi; o++ {
			wr := w[o*in : (o+1)*in]
			for r := r0; r < r1; r++ {
				y[r*out+o] = dot(x[r*in:(r+1)*in], wr)
			}
		}
	}
}

// Dot returns Σᵢ a[i]·b[i] over len(a) elements.
func Dot(a, b []float32) float32 { return dot(a, b[:len(a)]) }

// dotGo is the plain-Go dot product: four partial sums, added at the end.
func dotGo(a, b []float32) float32 { return vec.DotGo(a, b) }

// dot4Go computes acc[j] = Σᵢ x[i]·w[j·n+i] for the four rows of w: each
// element of x is loaded once for four products.
func dot4Go(x, w []float32, n int, acc *[4]float32) {
	x = x[:n]
	w0, w1, w2, w3 := w[:n], w[n:2*n], w[2*n:3*n], w[3*n:4*n]
	var s0, s1, s2, s3 float32
	for i, v := range x {
		s0 += v * w0[i]
		s1 += v * w1[i]
		s2 += v * w2[i]
		s3 += v * w3[i]
	}
	acc[0], acc[1], acc[2], acc[3] = s0, s1, s2, s3
}

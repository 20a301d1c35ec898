package tensor

import (
	"fmt"
	"sync"

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

// Product computes y = x·wᵀ as MatMul does, for weights in either format.
func Product(y, x []float32, w Weights, n, in, out int) {
	if w.BF16 != nil {
		MatMulBF16(y, x, w.BF16, n, in, out)
		return
	}
	MatMul(y, x, w.F32, n, in, out)
}

// MatMulBF16 is MatMul with bfloat16 weights w (their bits), each widened
// exactly to float32: y[r][o] = Σᵢ x[r][i]·float32(w[o][i]), summed in
// float32. A matrix-vector product reads half MatMul's bytes, which is its
// time when the weights come from memory.
func MatMulBF16(y, x []float32, w []uint16, n, in, out int) {
	if len(x) < n*in || len(w) < out*in || len(y) < n*out {
		panic(fmt.Sprintf("tensor.MatMulBF16: x has %d values (want %d×%d), w %d (want %d×%d), y %d (want %d×%d)",
			len(x), n, in, len(w), out, in, len(y), n, out))
	}
	if n == 0 || out == 0 {
		return
	}
	work := int64(n) * int64(in) * int64(out)
	if work < 2*minParallelWork {
		matMulColsBF16(y, x, w, n, in, out, 0, out)
		return
	}
	Parallel(out, 4, work, func(lo, hi int) {
		matMulColsBF16(y, x, w, n, in, out, lo, hi)
	})
}

// tiles holds the float32 copies of bfloat16 weight rows that products of
// several rows run the float32 kernels over (*[]float32, grown as needed).
var tiles = sync.Pool{New: func() any { return new([]float32) }}

// matMulColsBF16 computes the output columns [lo, hi) of MatMulBF16.
func matMulColsBF16(y, x []float32, w []uint16, n, in, out, lo, hi int) {
	if n == 1 {
		// One row widens the weights in registers: each is used once.
		for o := lo; o < hi; o++ {
			y[o] = dotBF16(x[:in], w[o*in:(o+1)*in])
		}
		return
	}
	// Several rows use each weight once per row: widen four weight rows
	// into a float32 tile per block of rows and run the float32 kernels
	// over it, so that the widening is paid once per block, not per row.
	tp := tiles.Get().(*[]float32)
	if cap(*tp) < 4*in {
		*tp = make([]float32, 4*in)
	}
	tile := (*tp)[:4*in]
	rb := max(1, rowBlockBytes/(4*max(1, in)))
	var acc [4]float32
	for r0 := 0; r0 < n; r0 += rb {
		r1 := min(n, r0+rb)
		o := lo
		for ; o+4 <= hi; o += 4 {
			widenBF16(tile, w[o*in:(o+4)*in])
			for r := r0; r < r1; r++ {
				dot4(x[r*in:(r+1)*in], tile, in, &acc)
				copy(y[r*out+o:r*out+o+4], acc[:])
			}
		}
		for ; o < hi; o++ {
			wr := tile[:in]
			widenBF16(wr, w[o*in:(o+1)*in])
			for r := r0; r < r1; r++ {
				y[r*out+o] = dot(x[r*in:(r+1)*in], wr)
			}
		}
	}
	tiles.Put(tp)
}

// Dot returns Σᵢ a[i]·b[i] over len(a) elements.
func Dot(a, b []float32) float32 { return dot(a, b[:len(a)]) }

// dotGo is the plain-Go dot product: four partial sums, added at the end.
func dotGo(a, b []float32) float32 { return vec.DotGo(a, b) }

// dotBF16Go is dotBF16 in plain Go: four partial sums, added pairwise.
func dotBF16Go(x []float32, w []uint16) float32 {
	w = w[:len(x)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		s0 += x[i] * bf16(w[i])
		s1 += x[i+1] * bf16(w[i+1])
		s2 += x[i+2] * bf16(w[i+2])
		s3 += x[i+3] * bf16(w[i+3])
	}
	for ; i < len(x); i++ {
		s0 += x[i] * bf16(w[i])
	}
	return (s0 + s1) + (s2 + s3)
}

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

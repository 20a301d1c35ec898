//go:build !noasm

package tensor

import (
	"golang.org/x/sys/cpu"

	vec "github.com/replayssm/replayssm/internal/simd"
)

// simd reports whether the AVX2+FMA kernels run on this machine.
var simd = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dot4AVX2 writes acc[j] = Σᵢ x[i]·w[j·stride+i] for j < 4, i < n; n must
// be a multiple of 8, stride is in elements.
//
//go:noescape
func dot4AVX2(x, w *float32, stride, n int, acc *[4]float32)

// dotBF16AVX2 returns Σᵢ x[i]·bf16(w[i]) for i < n; n must be a multiple
// of 8.
//
//go:noescape
func dotBF16AVX2(x *float32, w *uint16, n int) float32

// widenBF16AVX2 sets dst[i] = bf16(src[i]) for i < n; n must be a multiple
// of 8.
//
//go:noescape
func widenBF16AVX2(dst *float32, src *uint16, n int)

func dotBF16(x []float32, w []uint16) float32 {
	n := len(x)
	m := n &^ 7
	if !simd || m == 0 {
		return dotBF16Go(x, w)
	}
	w = w[:n]
	s := dotBF16AVX2(&x[0], &w[0], m)
	for i := m; i < n; i++ {
		s += x[i] * bf16(w[i])
	}
	return s
}

func widenBF16(dst []float32, src []uint16) {
	n := len(dst)
	m := n &^ 7
	if !simd || m == 0 {
		widenBF16Go(dst, src)
		return
	}
	src = src[:n]
	widenBF16AVX2(&dst[0], &src[0], m)
	widenBF16Go(dst[m:], src[m:])
}

func axpy(y []float32, a float32, x []float32) { vec.Axpy(y, a, x) }

func dot(a, b []float32) float32 { return vec.Dot(a, b) }

func dot4(x, w []float32, n int, acc *[4]float32) {
	if !simd {
		dot4Go(x, w, n, acc)
		return
	}
	m := n &^ 7
	x = x[:n]
	w = w[:4*n]
	if m == 0 {
		dot4Go(x, w, n, acc)
		return
	}
	dot4AVX2(&x[0], &w[0], n, m, acc)
	for i := m; i < n; i++ {
		v := x[i]
		acc[0] += v * w[i]
		acc[1] += v * w[n+i]
		acc[2] += v * w[2*n+i]
		acc[3] += v * w[3*n+i]
	}
}

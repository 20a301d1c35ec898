//go:build !noasm

package simd

import "golang.org/x/sys/cpu"

// enabled is fixed at start-up: AVX2 and FMA present.
var enabled = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dotAVX2 returns Σ a[i]·b[i] for i < n; n must be a multiple of 8.
//
//go:noescape
func dotAVX2(a, b *float32, n int) float32

// axpyAVX2 does y[i] += a·x[i] for i < n; n must be a multiple of 8.
//
//go:noescape
func axpyAVX2(y *float32, a float32, x *float32, n int)

func dotSIMD(a, b []float32) float32 {
	n := len(a) &^ 7
	b = b[:len(a)]
	var s float32
	if n > 0 {
		s = dotAVX2(&a[0], &b[0], n)
	}
	for i := n; i < len(a); i++ {
		s += a[i] * b[i]
	}
	return s
}

func axpySIMD(y []float32, a float32, x []float32) {
	n := len(y) &^ 7
	x = x[:len(y)]
	if n > 0 {
		axpyAVX2(&y[0], a, &x[0], n)
	}
	for i := n; i < len(y); i++ {
		y[i] += a * x[i]
	}
}

//go:build !noasm

package replay

import "golang.org/x/sys/cpu"

// simd reports whether the AVX2+FMA kernels run on this machine. It is fixed
// at start-up; the plain-Go kernels are used where it is false.
var simd = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func dotAVX2(a, b *float32, n int) float32

//go:noescape
func axpyAVX2(y *float32, a float32, x *float32, n int)

//go:noescape
func updateRowDotAVX2(row *float32, a, c float32, b, cv *float32, n int) float32

//go:noescape
func rankUpdateAVX2(row *float32, decay float32, coef *float32, t int, v *float32, stride int, n int)

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

func updateRowDotSIMD(row []float32, a, c float32, B, C []float32) float32 {
	n := len(row) &^ 7
	B = B[:len(row)]
	C = C[:len(row)]
	var s float32
	if n > 0 {
		s = updateRowDotAVX2(&row[0], a, c, &B[0], &C[0], n)
	}
	for i := n; i < len(row); i++ {
		r := a*row[i] + c*B[i]
		row[i] = r
		s += r * C[i]
	}
	return s
}

func rankUpdateSIMD(row []float32, decay float32, coef []float32, V []float32, stride int) {
	n := len(row) &^ 7
	t := len(coef)
	if t > 0 {
		_ = V[(t-1)*stride+len(row)-1] // bounds: every row of V the kernel reads
	}
	if n > 0 {
		var cp, vp *float32
		if t > 0 {
			cp, vp = &coef[0], &V[0]
		} else {
			vp = &row[0] // not read
		}
		rankUpdateAVX2(&row[0], decay, cp, t, vp, stride, n)
	}
	for i := n; i < len(row); i++ {
		r := decay * row[i]
		for j, c := range coef {
			r += c * V[j*stride+i]
		}
		row[i] = r
	}
}

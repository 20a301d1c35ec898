// Package simd holds the vector kernels more than one package needs: dot
// products and axpy over float32 slices, in AVX2+FMA assembly where the
// processor has it and plain Go elsewhere (build tag noasm forces plain Go).
package simd

// Dot returns Σ a[i]·b[i] over len(a) elements (b must be at least as long).
func Dot(a, b []float32) float32 {
	if enabled {
		return dotSIMD(a, b)
	}
	return DotGo(a, b)
}

// Axpy does y[i] += a·x[i] over len(y) elements.
func Axpy(y []float32, a float32, x []float32) {
	if enabled {
		axpySIMD(y, a, x)
		return
	}
	AxpyGo(y, a, x)
}

// Enabled reports whether the assembly kernels run on this machine.
func Enabled() bool { return enabled }

// DotGo is Dot in plain Go: four partial sums, added pairwise at the end.
func DotGo(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return (s0 + s1) + (s2 + s3)
}

// AxpyGo is Axpy in plain Go.
func AxpyGo(y []float32, a float32, x []float32) {
	x = x[:len(y)]
	for i := range y {
		y[i] += a * x[i]
	}
}

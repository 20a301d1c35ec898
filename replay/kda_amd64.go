//go:build !noasm

package replay

//go:noescape
func decayDotsAVX2(yk, yq *float64, a, x *float32, n int) (float64, float64)

//go:noescape
func decayDotAVX2(y *float64, a, x *float32, n int) float64

// decayDotsSIMD is decayDotsGo with AVX2 and FMA over the channels in
// blocks of 8, the rest in Go; the caller checks simd.
func decayDotsSIMD(yk, yq []float64, a, x []float32) (float64, float64) {
	n := len(yk)
	n8 := n &^ 7
	if n8 == 0 {
		return decayDotsGo(yk, yq, a, x)
	}
	_, _, _ = yq[n-1], a[n-1], x[n-1]
	sk, sq := decayDotsAVX2(&yk[0], &yq[0], &a[0], &x[0], n8)
	if n8 < n {
		tk, tq := decayDotsGo(yk[n8:], yq[n8:n], a[n8:n], x[n8:n])
		sk, sq = sk+tk, sq+tq
	}
	return sk, sq
}

// decayDotSIMD is decayDotGo with AVX2 and FMA over the channels in blocks
// of 8, the rest in Go.
func decayDotSIMD(y []float64, a, x []float32) float64 {
	n := len(y)
	n8 := n &^ 7
	if n8 == 0 {
		return decayDotGo(y, a, x)
	}
	_, _ = a[n-1], x[n-1]
	s := decayDotAVX2(&y[0], &a[0], &x[0], n8)
	if n8 < n {
		s += decayDotGo(y[n8:], a[n8:n], x[n8:n])
	}
	return s
}

//go:build amd64 && !noasm

package replay

// rankUpdateDotRowsAVX2Test runs the AVX2 rank update directly (on an
// AVX-512 machine dispatch never takes it); nil where the CPU lacks AVX2.
var rankUpdateDotRowsAVX2Test = func() func(S []float32, rows, n int, decay float32, coefT []float32, cs, t int, V []float32, vstride int, C, out []float32) {
	if !simd {
		return nil
	}
	return func(S []float32, rows, n int, decay float32, coefT []float32, cs, t int, V []float32, vstride int, C, out []float32) {
		if !rankUpdateDotRowsAVX2(S, rows, n, decay, coefT, cs, t, V, vstride, C, out) {
			rankUpdateDotRowsGo(S, rows, n, decay, coefT, cs, t, V, vstride, C, out)
		}
	}
}()

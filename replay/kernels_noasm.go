//go:build !amd64 || noasm

package replay

import "github.com/replayssm/replayssm/numeric"

// simd is false where no assembly kernels are built.
const simd = false

func dotSIMD(a, b []float32) float32               { return dotGo(a, b) }
func axpySIMD(y []float32, a float32, x []float32) { axpyGo(y, a, x) }
func updateRowDotSIMD(row []float32, a, c float32, B, C []float32) float32 {
	return updateRowDotGo(row, a, c, B, C)
}
func rankUpdateSIMD(row []float32, decay float32, coef []float32, V []float32, stride int) {
	rankUpdateGo(row, decay, coef, V, stride)
}

func dotRowsSIMD(S []float32, n int, v []float32, out []float32) { dotRowsGo(S, n, v, out) }
func rankUpdateRowsSIMD(S []float32, n int, decay float32, coef []float32, t int, V []float32, vstride int) {
	rankUpdateRowsGo(S, n, decay, coef, t, V, vstride)
}
func updateRowsSIMD(S []float32, n int, a float32, c, B, C, out []float32) {
	updateRowsGo(S, n, a, c, B, C, out)
}

func dotRowsNVFP4SIMD(codes, scales []byte, global float32, n int, v []float32, rb *readBuffers, out []float32) bool {
	return false
}

func dotRowsBF16SIMD(S []uint16, n int, v []float32, out []float32) bool { return false }

func decodeBF16(dst []float32, src []uint16) { numeric.DecodeBF16(dst, src) }
func encodeBF16(dst []uint16, src []float32) { numeric.EncodeBF16(dst, src) }

func quantizeNVFP4(packed []byte, scales []uint8, src []float32) float32 {
	return numeric.QuantizeNVFP4(packed, scales, src)
}

func dotRowsMultiSIMD(S []float32, n int, V []float32, nv int, out []float32) bool { return false }

func updateRowsBF16(S []uint16, n int, a float32, c, B, C, out []float32) bool { return false }

func dotRowsNVFP4PairSIMD(codes, scales []byte, global float32, n int, v, w []float32, rb *readBuffers, out, out2 []float32) bool {
	return false
}

func prefetch(v []float32) {}

func gdnOutSIMD(vt, sk, sq, U, ck, cq []float32, gt, beta, cqt float32, ut, o []float32) bool {
	return false
}

func gdnFoldUSIMD(V, P, coef, g, beta []float32, t, n int, U []float32) bool { return false }

func sumSquares(x []float32) float64              { return sumSquaresGo(x) }
func scaleTo(dst, x []float32, r float32)         { scaleToGo(dst, x, r) }
func scaleAdd2(dst, x, y []float32, a, b float32) { scaleAdd2Go(dst, x, y, a, b) }

func rankUpdateDotRowsSIMD(S []float32, rows, n int, decay float32, coefT []float32, cs, t int, V []float32, vstride int, C, out []float32) bool {
	return false
}

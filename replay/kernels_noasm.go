//go:build !amd64 || noasm

package replay

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

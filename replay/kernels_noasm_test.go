//go:build !amd64 || noasm

package replay

// rankUpdateDotRowsAVX2Test is nil without the amd64 kernels.
var rankUpdateDotRowsAVX2Test func(S []float32, rows, n int, decay float32, coefT []float32, cs, t int, V []float32, vstride int, C, out []float32)

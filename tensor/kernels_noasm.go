//go:build !amd64 || noasm

package tensor

// simd is false where no assembly kernels are built.
const simd = false

func dot(a, b []float32) float32                  { return dotGo(a, b) }
func dot4(x, w []float32, n int, acc *[4]float32) { dot4Go(x, w, n, acc) }
func axpy(y []float32, a float32, x []float32)    { axpyGo(y, a, x) }
func dotBF16(x []float32, w []uint16) float32     { return dotBF16Go(x, w) }
func widenBF16(dst []float32, src []uint16)       { widenBF16Go(dst, src) }

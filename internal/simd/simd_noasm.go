//go:build !amd64 || noasm

package simd

const enabled = false

func dotSIMD(a, b []float32) float32               { return DotGo(a, b) }
func axpySIMD(y []float32, a float32, x []float32) { AxpyGo(y, a, x) }

package tensor

import (
	"math"

	vec "github.com/replayssm/replayssm/internal/simd"
)

// RMSNorm writes x·rsqrt(mean(x²) + eps)·w to dst (dst may alias x); a nil w
// means no weight. The sum of squares is accumulated in float64, the rest is
// float32, as PyTorch computes it on float32 tensors.
func RMSNorm(dst, x, w []float32, eps float32) {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	r := float32(1 / math.Sqrt(float64(float32(ss/float64(len(x)))+eps)))
	dst = dst[:len(x)]
	if w == nil {
		for i, v := range x {
			dst[i] = v * r
		}
		return
	}
	w = w[:len(x)]
	for i, v := range x {
		dst[i] = v * r * w[i]
	}
}

// Sigmoid is 1/(1+e^−x).
func Sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

// SiLU is x·sigmoid(x).
func SiLU(x float32) float32 { return x * Sigmoid(x) }

// Softplus is log(1+eˣ), returning x above 20 as PyTorch's softplus does.
func Softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

// SiLUInPlace applies SiLU to every element of x.
func SiLUInPlace(x []float32) {
	for i, v := range x {
		x[i] = SiLU(v)
	}
}

// SwiGLU writes silu(gate[i])·up[i] to dst (dst may alias either input).
func SwiGLU(dst, gate, up []float32) {
	up = up[:len(gate)]
	dst = dst[:len(gate)]
	for i, g := range gate {
		dst[i] = SiLU(g) * up[i]
	}
}

// ReLU2InPlace applies relu(x)² to every element of x (NemotronH's MLP).
func ReLU2InPlace(x []float32) {
	for i, v := range x {
		if v < 0 {
			v = 0
		}
		x[i] = v * v
	}
}

// Softmax replaces x by exp(x−max)/Σexp(x−max), summing in float64.
func Softmax(x []float32) {
	if len(x) == 0 {
		return
	}
	m := x[0]
	for _, v := range x[1:] {
		if v > m {
			m = v
		}
	}
	var s float64
	for i, v := range x {
		e := math.Exp(float64(v - m))
		x[i] = float32(e)
		s += e
	}
	inv := float32(1 / s)
	for i := range x {
		x[i] *= inv
	}
}

// LogSoftmaxAt returns log softmax(x)[i], computed in float64.
func LogSoftmaxAt(x []float32, i int) float64 { return float64(x[i]) - LogSumExp(x) }

// LogSumExp returns log Σ exp(x), computed in float64 around the largest
// value so that nothing overflows.
func LogSumExp(x []float32) float64 {
	m := float64(x[0])
	for _, v := range x[1:] {
		m = max(m, float64(v))
	}
	var s float64
	for _, v := range x {
		s += math.Exp(float64(v) - m)
	}
	return m + math.Log(s)
}

// Add adds src to dst element-wise.
func Add(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

// Axpy adds a·x to y element-wise.
func Axpy(y []float32, a float32, x []float32) { axpy(y, a, x[:len(y)]) }

func axpyGo(y []float32, a float32, x []float32) { vec.AxpyGo(y, a, x) }

// Argmax returns the index of the largest element (the first on ties).
func Argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

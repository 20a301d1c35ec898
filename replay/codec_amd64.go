//go:build !noasm

package replay

import (
	"golang.org/x/sys/cpu"

	"github.com/replayssm/replayssm/numeric"
)

// simdCodec reports whether the fp16 / fp8 codecs of codec_amd64.s run here.
var simdCodec = simd && cpu.X86.HasF16C

//go:noescape
func decodeF16AVX2(dst *float32, src *uint16, n int)

//go:noescape
func encodeF16AVX2(dst *uint16, src *float32, n int)

//go:noescape
func decodeE4M3AVX2(dst *float32, src *uint8, n int, scale float32)

//go:noescape
func encodeE4M3AVX2(dst *uint8, src *float32, n int, inv float32)

//go:noescape
func absMaxAVX2(src *float32, n int) float32

// simdPrefix is how many leading elements of an n-element slice the codecs
// take (a multiple of 16), the rest going to package numeric.
func simdPrefix(n int) int {
	if !simdCodec {
		return 0
	}
	return n &^ 15
}

// decodeF16 is numeric.DecodeF16.
func decodeF16(dst []float32, src []uint16) {
	k := simdPrefix(len(src))
	if k > 0 {
		_ = dst[len(src)-1]
		decodeF16AVX2(&dst[0], &src[0], k)
	}
	numeric.DecodeF16(dst[k:len(src)], src[k:])
}

// encodeF16 is numeric.EncodeF16.
func encodeF16(dst []uint16, src []float32) {
	k := simdPrefix(len(src))
	if k > 0 {
		_ = dst[len(src)-1]
		encodeF16AVX2(&dst[0], &src[0], k)
	}
	numeric.EncodeF16(dst[k:len(src)], src[k:])
}

// decodeE4M3 is numeric.DecodeE4M3.
func decodeE4M3(dst []float32, src []uint8, scale float32) {
	k := simdPrefix(len(src))
	if k > 0 {
		_ = dst[len(src)-1]
		decodeE4M3AVX2(&dst[0], &src[0], k, scale)
	}
	numeric.DecodeE4M3(dst[k:len(src)], src[k:], scale)
}

// encodeE4M3 is numeric.EncodeE4M3.
func encodeE4M3(dst []uint8, src []float32, inv float32) {
	k := simdPrefix(len(src))
	if k > 0 {
		_ = dst[len(src)-1]
		encodeE4M3AVX2(&dst[0], &src[0], k, inv)
	}
	numeric.EncodeE4M3(dst[k:len(src)], src[k:], inv)
}

// absMax is the largest |x[i]|, NaN left out, Inf counted.
func absMax(x []float32) float32 {
	k := simdPrefix(len(x))
	var m float32
	if k > 0 {
		m = absMaxAVX2(&x[0], k)
	}
	return max(m, absMaxGo(x[k:]))
}

//go:noescape
func dotRowsF16AVX512(s *uint16, rows, n int, v *float32, out *float32)

//go:noescape
func dotRowsE4M3AVX512(s *uint8, rows, n int, v *float32, scale float32, out *float32)

// simdDot512 reports whether the fused fp16 / fp8 row-dot kernels run here.
var simdDot512 = simdCodec && simd512

// dotRowsF16SIMD writes out[p] = S_p·v for the fp16 matrix S of len(out)
// rows of n, decoding in registers; it reports false where it cannot run.
func dotRowsF16SIMD(S []uint16, n int, v []float32, out []float32) bool {
	if !simdDot512 || n%32 != 0 || len(out) == 0 {
		return false
	}
	_ = S[len(out)*n-1]
	_ = v[n-1]
	dotRowsF16AVX512(&S[0], len(out), n, &v[0], &out[0])
	return true
}

// dotRowsE4M3SIMD is dotRowsF16SIMD for an fp8 matrix with its scale.
func dotRowsE4M3SIMD(S []uint8, scale float32, n int, v []float32, out []float32) bool {
	if !simdDot512 || n%32 != 0 || len(out) == 0 {
		return false
	}
	_ = S[len(out)*n-1]
	_ = v[n-1]
	dotRowsE4M3AVX512(&S[0], len(out), n, &v[0], scale, &out[0])
	return true
}

//go:noescape
func dotRowsE4M3PairAVX512(s *uint8, rows, n int, v, w *float32, scale float32, out, out2 *float32)

//go:noescape
func dotRowsF16PairAVX512(s *uint16, rows, n int, v, w *float32, out, out2 *float32)

// dotRowsF16PairSIMD is dotRowsF16SIMD for two vectors (out = S·v, out2 =
// S·w), the matrix read once.
func dotRowsF16PairSIMD(S []uint16, n int, v, w []float32, out, out2 []float32) bool {
	if !simdDot512 || n%32 != 0 || len(out) == 0 {
		return false
	}
	_ = S[len(out)*n-1]
	_, _ = v[n-1], w[n-1]
	_ = out2[len(out)-1]
	dotRowsF16PairAVX512(&S[0], len(out), n, &v[0], &w[0], &out[0], &out2[0])
	return true
}

// dotRowsE4M3PairSIMD is dotRowsE4M3SIMD for two vectors.
func dotRowsE4M3PairSIMD(S []uint8, scale float32, n int, v, w []float32, out, out2 []float32) bool {
	if !simdDot512 || n%32 != 0 || len(out) == 0 {
		return false
	}
	_ = S[len(out)*n-1]
	_, _ = v[n-1], w[n-1]
	_ = out2[len(out)-1]
	dotRowsE4M3PairAVX512(&S[0], len(out), n, &v[0], &w[0], scale, &out[0], &out2[0])
	return true
}

//go:noescape
func updateRowsF16AVX2(s *uint16, rows, n int, a float32, c *float32, b, cv *float32, out *float32)

// updateRowsF16 is updateRowsBF16 for an fp16 state.
func updateRowsF16(S []uint16, n int, a float32, c, B, C, out []float32) bool {
	rows := len(out)
	if !simdCodec || n%16 != 0 || rows == 0 {
		return false
	}
	_ = S[rows*n-1]
	c = c[:rows]
	B, C = B[:n], C[:n]
	updateRowsF16AVX2(&S[0], rows, n, a, &c[0], &B[0], &C[0], &out[0])
	return true
}

//go:noescape
func updateRowsBF16AVX512(s *uint16, rows, n int, a float32, c *float32, b, cv *float32, out *float32)

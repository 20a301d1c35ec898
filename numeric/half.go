package numeric

import (
	"fmt"
	"math"
	"sync"
)

// Bit patterns of the float32 thresholds the fp16 and bf16 encoders compare
// against (magnitudes, sign bit clear).
const (
	f32Inf      = 0x7f800000 // +Inf; anything above is NaN
	f32F16Ovf   = 0x477ff000 // 65520: the midpoint between 65504 and 2^16, which rounds (to even) up to Inf
	f32F16MinN  = 0x38800000 // 2^-14: smallest normal fp16
	f32Half     = 0x3f000000 // 0.5: its float32 ulp is 2^-24, fp16's subnormal step
	f16QuietNaN = 0x7e00
	bf16QNaN    = 0x7fc0
)

// F16FromF32 returns the IEEE binary16 nearest to f, ties to even; overflow
// gives ±Inf and NaN the canonical quiet NaN with f's sign.
func F16FromF32(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	a := b & 0x7fffffff
	switch {
	case a >= f32F16Ovf: // rounds to Inf, is Inf, or is NaN
		if a > f32Inf {
			return sign | f16QuietNaN
		}
		return sign | 0x7c00
	case a < f32F16MinN:
		// Subnormal or zero: adding 0.5 makes the FPU round |f| to a multiple
		// of 2^-24 (ties to even), and the low bits of the sum are then the
		// fp16 code. A sum reaching 0.5+2^-14 yields 0x400, the smallest
		// normal, which is the right answer for values that round up to it.
		r := math.Float32frombits(a) + 0.5
		return sign | uint16(math.Float32bits(r)-f32Half)
	default:
		// Normal: rebias the exponent from 127 to 15 (subtract 112<<23) and
		// round the 23-bit mantissa to 10 bits by adding 0xfff plus the kept
		// mantissa's lowest bit, which breaks ties towards even. A carry out
		// of the mantissa correctly bumps the exponent.
		a += 0xc8000fff + (a>>13)&1
		return sign | uint16(a>>13)
	}
}

// F32FromF16 returns the float32 value of the binary16 h (exact: every fp16
// value is a float32 value). NaN codes give a NaN.
func F32FromF16(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	e := uint32(h>>10) & 0x1f
	m := uint32(h & 0x3ff)
	switch e {
	case 0: // ±0 and subnormals: m·2^-24, computed exactly in float32
		return math.Float32frombits(sign | math.Float32bits(float32(m)*0x1p-24))
	case 0x1f: // Inf and NaN keep their mantissa as the payload
		return math.Float32frombits(sign | f32Inf | m<<13)
	}
	return math.Float32frombits(sign | (e+112)<<23 | m<<13)
}

// BF16FromF32 returns the bfloat16 nearest to f (its top 16 bits after
// rounding to nearest even); overflow gives ±Inf and NaN the canonical quiet
// NaN with f's sign.
func BF16FromF32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > f32Inf {
		return uint16(b>>16)&0x8000 | bf16QNaN
	}
	// Adding 0x7fff plus the lowest kept bit rounds the discarded 16 bits to
	// nearest, ties to even; a carry propagates into the exponent and, past
	// the largest finite value, produces the Inf pattern.
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// F32FromBF16 returns the float32 value of the bfloat16 h (exact).
func F32FromBF16(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// EncodeF16 stores F16FromF32(src[i]) in dst[i]. It panics if the lengths differ.
func EncodeF16(dst []uint16, src []float32) {
	checkLen(len(dst), len(src))
	for i, f := range src {
		dst[i] = F16FromF32(f)
	}
}

// DecodeF16 stores F32FromF16(src[i]) in dst[i]. It panics if the lengths differ.
func DecodeF16(dst []float32, src []uint16) {
	checkLen(len(dst), len(src))
	t := f16Values()
	for i, h := range src {
		dst[i] = t[h]
	}
}

// f16Values returns the float32 value of every fp16 code (256 KiB), built on
// first use and never written afterwards. A lookup decodes more than twice
// as fast as the arithmetic in F32FromF16, whose branches on the exponent
// field cost more than a load from a table that stays in the L2 cache.
var f16Values = sync.OnceValue(func() *[1 << 16]float32 {
	t := new([1 << 16]float32)
	for h := range t {
		t[h] = F32FromF16(uint16(h))
	}
	return t
})

// EncodeBF16 stores BF16FromF32(src[i]) in dst[i]. It panics if the lengths differ.
func EncodeBF16(dst []uint16, src []float32) {
	checkLen(len(dst), len(src))
	for i, f := range src {
		dst[i] = BF16FromF32(f)
	}
}

// DecodeBF16 stores F32FromBF16(src[i]) in dst[i]. It panics if the lengths differ.
func DecodeBF16(dst []float32, src []uint16) {
	checkLen(len(dst), len(src))
	for i, h := range src {
		dst[i] = F32FromBF16(h)
	}
}

// checkLen panics when a bulk conversion gets slices of different lengths:
// that is a bug in the caller, not bad data.
func checkLen(dst, src int) {
	if dst != src {
		panic(fmt.Sprintf("numeric: len(dst) = %d, len(src) = %d", dst, src))
	}
}

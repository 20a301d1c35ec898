package numeric

import "math"

// Bit patterns of the float32 thresholds the fp8 encoders compare against.
const (
	f32E4M3Max   = 0x43e00000 // 448, largest finite e4m3
	f32E4M3MinN  = 0x3c800000 // 2^-6, smallest normal e4m3
	f32E4M3Magic = 0x46800000 // 2^14: its float32 ulp is 2^-9, e4m3's subnormal step
	e4m3Max      = 0x7e
	e4m3NaN      = 0x7f

	f32E5M2Max   = 0x47600000 // 57344, largest finite e5m2
	f32E5M2MinN  = 0x38800000 // 2^-14, smallest normal e5m2
	f32E5M2Magic = 0x43000000 // 2^7: its float32 ulp is 2^-16, e5m2's subnormal step
	e5m2Max      = 0x7b
	e5m2Inf      = 0x7c
	e5m2NaN      = 0x7e
)

// E4M3FromF32 returns the fp8 e4m3fn code nearest to f, ties to even,
// saturating: magnitudes that round above 448 and ±Inf give ±448; NaN gives
// 0x7f with f's sign.
func E4M3FromF32(f float32) uint8 {
	b := math.Float32bits(f)
	sign := uint8(b>>24) & 0x80
	a := b & 0x7fffffff
	switch {
	case a > f32Inf:
		return sign | e4m3NaN
	case a >= f32E4M3Max:
		// Everything above 448 rounds either to 448 or to 480, which does not
		// exist (its code is NaN) and saturates back to 448.
		return sign | e4m3Max
	case a < f32E4M3MinN:
		// Subnormal: the FPU rounds |f|+2^14 to a multiple of 2^-9 (ties to
		// even); the low bits of the sum are the code, up to 0x08 = 2^-6.
		r := math.Float32frombits(a) + 0x1p14
		return sign | uint8(math.Float32bits(r)-f32E4M3Magic)
	default:
		// Normal: rebias 127 -> 7 (subtract 120<<23), round 23 mantissa bits
		// to 3 by adding 0x7ffff plus the lowest kept bit (ties to even).
		a += 0xc407ffff + (a>>20)&1
		return sign | uint8(a>>20)
	}
}

// E5M2FromF32 returns the fp8 e5m2 code nearest to f, ties to even; finite
// magnitudes that round above 57344 saturate to ±57344, ±Inf stays ±Inf and
// NaN gives 0x7e with f's sign.
func E5M2FromF32(f float32) uint8 {
	b := math.Float32bits(f)
	sign := uint8(b>>24) & 0x80
	a := b & 0x7fffffff
	switch {
	case a > f32Inf:
		return sign | e5m2NaN
	case a == f32Inf:
		return sign | e5m2Inf
	case a >= f32E5M2Max:
		return sign | e5m2Max
	case a < f32E5M2MinN:
		// Subnormal: |f|+2^7 is rounded by the FPU to a multiple of 2^-16.
		r := math.Float32frombits(a) + 0x1p7
		return sign | uint8(math.Float32bits(r)-f32E5M2Magic)
	default:
		// Normal: rebias 127 -> 15 (subtract 112<<23), round to 2 mantissa bits.
		a += 0xc80fffff + (a>>21)&1
		return sign | uint8(a>>21)
	}
}

// e4m3Values and e5m2Values hold the float32 value of every code. They are
// computed once at package initialisation and never written afterwards.
var (
	e4m3Values = fp8Table(4, 3, true)
	e5m2Values = fp8Table(5, 2, false)
)

// fp8Table computes the decode table of an fp8 format with ebits exponent
// bits and mbits mantissa bits. fn formats (e4m3fn) have no infinities and
// only the all-ones code is NaN; the others follow IEEE (all-ones exponent is
// Inf or NaN).
func fp8Table(ebits, mbits uint, fn bool) [256]float32 {
	var t [256]float32
	bias := 1<<(ebits-1) - 1
	emax := uint(1)<<ebits - 1
	for c := range 256 {
		e := uint(c>>mbits) & emax
		m := c & (1<<mbits - 1)
		var v float64
		switch {
		case fn && c&0x7f == 0x7f, !fn && e == emax && m != 0:
			v = math.NaN()
		case !fn && e == emax:
			v = math.Inf(1)
		case e == 0:
			v = math.Ldexp(float64(m), 1-bias-int(mbits))
		default:
			v = math.Ldexp(float64(1<<mbits+m), int(e)-bias-int(mbits))
		}
		if c&0x80 != 0 {
			v = -v
		}
		t[c] = float32(v)
	}
	return t
}

// F32FromE4M3 returns the value of the e4m3fn code b; 0x7f and 0xff give NaN.
func F32FromE4M3(b uint8) float32 { return e4m3Values[b] }

// F32FromE5M2 returns the value of the e5m2 code b.
func F32FromE5M2(b uint8) float32 { return e5m2Values[b] }

// EncodeE4M3 stores E4M3FromF32(src[i]*invScale) in dst[i], the product
// rounded to float32 first. It panics if the lengths differ.
func EncodeE4M3(dst []uint8, src []float32, invScale float32) {
	checkLen(len(dst), len(src))
	for i, f := range src {
		dst[i] = E4M3FromF32(f * invScale)
	}
}

// DecodeE4M3 stores F32FromE4M3(src[i])*scale in dst[i]. It panics if the
// lengths differ.
func DecodeE4M3(dst []float32, src []uint8, scale float32) {
	checkLen(len(dst), len(src))
	t := &e4m3Values
	for i, c := range src {
		dst[i] = t[c] * scale
	}
}

// EncodeE5M2 stores E5M2FromF32(src[i]*invScale) in dst[i], the product
// rounded to float32 first. It panics if the lengths differ.
func EncodeE5M2(dst []uint8, src []float32, invScale float32) {
	checkLen(len(dst), len(src))
	for i, f := range src {
		dst[i] = E5M2FromF32(f * invScale)
	}
}

// DecodeE5M2 stores F32FromE5M2(src[i])*scale in dst[i]. It panics if the
// lengths differ.
func DecodeE5M2(dst []float32, src []uint8, scale float32) {
	checkLen(len(dst), len(src))
	t := &e5m2Values
	for i, c := range src {
		dst[i] = t[c] * scale
	}
}

package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
)

// The decoders below are small local copies so that this package depends on
// nothing but the standard library. The project's numeric package owns the
// codecs; these can be swapped for it once it is settled. Every one of them is
// checked exhaustively against the reference library's own conversion
// (testdata/reference.safetensors) and against float64 arithmetic.

// DecodeFloat32 converts src, little-endian elements of dtype dt, into dst,
// which must hold exactly len(src)/dt.Size() elements. F64 is rounded to the
// nearest float32 (overflowing to ±Inf); every other float dtype converts
// exactly, NaN payloads included where float32 can hold them.
func DecodeFloat32(dst []float32, src []byte, dt DType) error {
	size := dt.Size()
	if !dt.IsFloat() {
		return fmt.Errorf("dtype %v cannot be converted to float32: %w", dt, ErrDType)
	}
	if len(src) != len(dst)*size {
		return fmt.Errorf("decode %v: %d source bytes for %d elements, want %d", dt, len(src), len(dst), len(dst)*size)
	}
	switch dt {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F64:
		for i := range dst {
			dst[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(src[8*i:])))
		}
	case BF16:
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
		}
	case F16:
		table := f16Table()
		for i := range dst {
			dst[i] = table[binary.LittleEndian.Uint16(src[2*i:])]
		}
	case F8E4M3:
		table := e4m3Table()
		for i, b := range src {
			dst[i] = table[b]
		}
	case F8E5M2:
		// E5M2 is the top byte of an IEEE binary16 (same exponent width and bias).
		table := f16Table()
		for i, b := range src {
			dst[i] = table[uint16(b)<<8]
		}
	case F8E8M0:
		for i, b := range src {
			dst[i] = e8m0ToFloat32(b)
		}
	}
	return nil
}

// f16ToFloat32 decodes one IEEE binary16 value exactly.
func f16ToFloat32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch exp {
	case 0x1f: // Inf or NaN: keep the payload in the top mantissa bits.
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case 0: // zero or subnormal: mant·2^-24, exact in float32.
		return math.Float32frombits(sign | math.Float32bits(float32(mant)*(1.0/(1<<24))))
	}
	// Normal: rebias the exponent from 15 to 127.
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// f16Table maps every binary16 bit pattern to its float32 value. A table beats
// the branchy decoder by ~3x on bulk weight loads, and costs 256 KiB built once
// on first use (never for programs that do not read F16 tensors).
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = f16ToFloat32(uint16(i))
	}
	return &t
})

// e4m3ToFloat32 decodes one OCP FP8 E4M3 ("fn": finite, no Inf) value: bias 7,
// 3 mantissa bits, exponent field 0 subnormal, S.1111.111 NaN.
func e4m3ToFloat32(b uint8) float32 {
	neg := b&0x80 != 0
	exp := int(b>>3) & 0xf
	mant := int(b & 7)
	var v float32
	switch {
	case exp == 0xf && mant == 7:
		v = float32(math.NaN())
	case exp == 0:
		v = float32(mant) * (1.0 / 512) // mant·2^-9
	default:
		v = float32(8+mant) * float32(math.Ldexp(1, exp-7-3))
	}
	if neg {
		v = -v
	}
	return v
}

var e4m3Table = sync.OnceValue(func() *[256]float32 {
	var t [256]float32
	for i := range t {
		t[i] = e4m3ToFloat32(uint8(i))
	}
	return &t
})

// e8m0ToFloat32 decodes an OCP MX E8M0 scale: 2^(b-127), 0xFF is NaN.
func e8m0ToFloat32(b uint8) float32 {
	if b == 0xff {
		return float32(math.NaN())
	}
	return float32(math.Ldexp(1, int(b)-127))
}

package numeric

import (
	"fmt"
	"math"
)

// NVFP4Block is the number of contiguous elements that share one e4m3 scale.
const NVFP4Block = 16

// e2m1Values is the magnitude grid of e2m1, indexed by magnitude index.
var e2m1Values = [8]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6}

// E2M1FromF32 returns the 4-bit e2m1 code (sign<<3 | magnitude index) nearest
// to f, ties to the even magnitude index, saturating at ±6. NaN gives 0.
func E2M1FromF32(f float32) uint8 {
	// e2m1 is a regular binary float with bias 1 and one mantissa bit
	// (index = exponent<<1 | mantissa; exponent 0 holds 0 and 0.5), so the
	// fp16 bit tricks apply. Both candidate codes are computed and one is
	// selected without branching on the value: NVFP4 data is noise to a
	// branch predictor.
	b := math.Float32bits(f)
	a := b & 0x7fffffff
	// Normal (|f| >= 1): rebias 127 -> 1 (subtract 126<<23) and round 23
	// mantissa bits to 1 with ties to even. Wraps harmlessly below 1.
	c := (a + 0xc11fffff + (a>>22)&1) >> 22
	// Below 1: the FPU rounds |f|+2^22 to a multiple of 0.5 (ties to even),
	// giving index 0, 1 or 2 in the low bits.
	sub := math.Float32bits(math.Float32frombits(a)+0x1p22) - 0x4a800000
	if a < 0x3f800000 {
		c = sub
	}
	if a >= 0x40c00000 { // 6 and above, Inf too: saturate
		c = 7
	}
	if a > f32Inf { // NaN has no e2m1 code
		return 0
	}
	return uint8(b>>28)&0x8 | uint8(c)
}

// F32FromE2M1 returns the value of the e2m1 code c (its low 4 bits).
func F32FromE2M1(c uint8) float32 {
	v := e2m1Values[c&7]
	if c&8 != 0 {
		return -v
	}
	return v
}

// NVFP4Bytes returns the bytes NVFP4 needs for n elements besides the global
// scale: ceil(n/2) packed bytes plus ceil(n/16) block scales, which is
// n/2 + n/16 when n is a multiple of 16.
func NVFP4Bytes(n int) int {
	return (n+1)/2 + (n+NVFP4Block-1)/NVFP4Block
}

// nvfp4Max is 6·448: the largest e2m1 magnitude times the largest e4m3 scale.
const nvfp4Max = 6 * 448

// QuantizeNVFP4 encodes src as NVFP4 (see the package documentation for
// the formulas): e2m1 codes packed into packed, two per byte with the even
// element in the low nibble, and one e4m3 scale code per block of 16 in
// scales. It returns the tensor's global scale. It panics unless
// len(packed) == ceil(len(src)/2) and len(scales) == ceil(len(src)/16).
func QuantizeNVFP4(packed []byte, scales []uint8, src []float32) (global float32) {
	n := len(src)
	checkNVFP4(len(packed), len(scales), n)
	global = maxFiniteAbs(src) / nvfp4Max
	if global == 0 {
		clear(packed)
		clear(scales)
		return 0
	}
	for b := range scales {
		blk := src[b*NVFP4Block : min(b*NVFP4Block+NVFP4Block, n)]
		s := E4M3FromF32(maxFiniteAbs(blk) / (6 * global))
		scales[b] = s
		out := packed[b*NVFP4Block/2 : min(b*NVFP4Block/2+NVFP4Block/2, len(packed))]
		if s == 0 {
			// The whole block rounds to zero; storing +0 codes rather than
			// signed zeros makes zero blocks re-quantise to themselves.
			clear(out)
			continue
		}
		d := F32FromE4M3(s) * global
		for i := 0; i < len(blk); i += 2 {
			lo := E2M1FromF32(blk[i] / d)
			var hi uint8
			if i+1 < len(blk) {
				hi = E2M1FromF32(blk[i+1] / d)
			}
			out[i/2] = lo | hi<<4
		}
	}
	return global
}

// DequantizeNVFP4 decodes NVFP4 data written by QuantizeNVFP4 into dst:
// dst[i] = e2m1(code i)·(scale(block of i)·global). It panics unless
// len(packed) == ceil(len(dst)/2) and len(scales) == ceil(len(dst)/16).
func DequantizeNVFP4(dst []float32, packed []byte, scales []uint8, global float32) {
	n := len(dst)
	checkNVFP4(len(packed), len(scales), n)
	// Signed values of the 16 codes; a local array keeps the inner loop free
	// of bounds checks and branches.
	var lut [16]float32
	for c := range lut {
		lut[c] = F32FromE2M1(uint8(c))
	}
	for b, s := range scales {
		d := F32FromE4M3(s) * global
		blk := dst[b*NVFP4Block : min(b*NVFP4Block+NVFP4Block, n)]
		in := packed[b*NVFP4Block/2:]
		if len(blk) == NVFP4Block {
			in = in[:NVFP4Block/2]
			for i, p := range in {
				blk[2*i] = lut[p&15] * d
				blk[2*i+1] = lut[p>>4] * d
			}
			continue
		}
		for i := range blk {
			blk[i] = lut[in[i/2]>>(4*(i&1))&15] * d
		}
	}
}

// checkNVFP4 panics if the NVFP4 buffers do not fit n elements.
func checkNVFP4(packed, scales, n int) {
	if packed != (n+1)/2 || scales != (n+NVFP4Block-1)/NVFP4Block {
		panic(fmt.Sprintf("numeric: NVFP4 of %d elements needs %d packed bytes and %d scales, got %d and %d",
			n, (n+1)/2, (n+NVFP4Block-1)/NVFP4Block, packed, scales))
	}
}

// maxFiniteAbs returns the largest finite |x| in xs, 0 if there is none.
// It compares bit patterns: for non-negative floats their order is the
// order of the values, and integer max compiles without branches.
func maxFiniteAbs(xs []float32) float32 {
	var m uint32
	for _, x := range xs {
		a := math.Float32bits(x) & 0x7fffffff
		if a >= f32Inf { // Inf and NaN do not count
			a = 0
		}
		m = max(m, a)
	}
	return math.Float32frombits(m)
}

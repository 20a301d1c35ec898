package numeric

import (
	"math"
	"math/rand/v2"
)

// Largest finite magnitudes, as float32 bits, that stochastic rounding
// saturates finite inputs to.
const (
	f32F16Max  = 0x477fe000 // 65504
	f32BF16Max = 0x7f7f0000 // (2-2^-7)·2^127
)

// stochasticStream is PCG's second seed word, fixed so that the one uint64
// seed NewStochastic takes names one random sequence.
const stochasticStream = 0x9e3779b97f4a7c15

// Stochastic converts float32 values with stochastic rounding: a value
// between two representable neighbours lo < x < hi becomes hi with
// probability (x-lo)/(hi-lo) and lo otherwise, so the expected result is x.
// The probability is exact: the bits of x below the format's quantum are
// compared with as many uniform random bits.
//
// A Stochastic owns a seeded PCG generator; the same seed gives the same
// roundings. It is not safe for concurrent use: give each goroutine its own.
type Stochastic struct {
	rng rand.PCG
}

// NewStochastic returns a stochastic rounder whose random stream is fixed by seed.
func NewStochastic(seed uint64) *Stochastic {
	s := &Stochastic{}
	s.rng.Seed(seed, stochasticStream)
	return s
}

// Reseed restarts the random stream as NewStochastic(seed) would, without
// allocating: a cache reseeds per (slot, flush) so results do not depend on
// which worker handled which slot.
func (s *Stochastic) Reseed(seed uint64) { s.rng.Seed(seed, stochasticStream) }

// F16FromF32 returns f rounded stochastically to binary16. Finite values
// beyond ±65504 give ±65504; ±Inf and NaN convert as in F16FromF32.
func (s *Stochastic) F16FromF32(f float32) uint16 {
	b := math.Float32bits(f)
	a := b & 0x7fffffff
	if a >= f32Inf {
		return F16FromF32(f)
	}
	return uint16(b>>16)&0x8000 | F16FromF32(s.round(min(a, f32F16Max), 10, -14))
}

// BF16FromF32 returns f rounded stochastically to bfloat16. Finite values
// beyond the largest finite bfloat16 saturate to it; ±Inf and NaN convert as
// in BF16FromF32.
func (s *Stochastic) BF16FromF32(f float32) uint16 {
	b := math.Float32bits(f)
	a := b & 0x7fffffff
	if a >= f32Inf {
		return BF16FromF32(f)
	}
	return uint16(b>>16)&0x8000 | BF16FromF32(s.round(min(a, f32BF16Max), 7, -126))
}

// E4M3FromF32 returns f rounded stochastically to fp8 e4m3fn. Magnitudes
// beyond 448 and ±Inf saturate to ±448; NaN gives 0x7f with f's sign.
func (s *Stochastic) E4M3FromF32(f float32) uint8 {
	b := math.Float32bits(f)
	a := b & 0x7fffffff
	if a >= f32Inf {
		return E4M3FromF32(f)
	}
	return uint8(b>>24)&0x80 | E4M3FromF32(s.round(min(a, f32E4M3Max), 3, -6))
}

// EncodeF16 stores s.F16FromF32(src[i]) in dst[i]. It panics if the lengths differ.
func (s *Stochastic) EncodeF16(dst []uint16, src []float32) {
	checkLen(len(dst), len(src))
	for i, f := range src {
		dst[i] = s.F16FromF32(f)
	}
}

// EncodeBF16 stores s.BF16FromF32(src[i]) in dst[i]. It panics if the lengths differ.
func (s *Stochastic) EncodeBF16(dst []uint16, src []float32) {
	checkLen(len(dst), len(src))
	for i, f := range src {
		dst[i] = s.BF16FromF32(f)
	}
}

// EncodeE4M3 stores s.E4M3FromF32(src[i]*invScale) in dst[i], the product
// rounded to float32 first. It panics if the lengths differ.
func (s *Stochastic) EncodeE4M3(dst []uint8, src []float32, invScale float32) {
	checkLen(len(dst), len(src))
	for i, f := range src {
		dst[i] = s.E4M3FromF32(f * invScale)
	}
}

// round rounds the finite non-negative float32 with bits a stochastically to
// a format with mbits mantissa bits whose smallest normal is 2^emin, and
// returns the result as a float32 that the format represents exactly (the
// caller has clamped a to the format's largest finite value, so rounding up
// stays finite).
func (s *Stochastic) round(a uint32, mbits, emin int) float32 {
	// |x| = m·2^e with m the 24-bit significand.
	m, e, binade := a&0x7fffff, -149, -127
	if ex := int(a >> 23); ex != 0 {
		m |= 0x800000
		e = ex - 150
		binade = ex - 127
	}
	// The format's quantum at |x| is 2^q: its mantissa step in x's binade,
	// or the subnormal step below the smallest normal.
	q := max(binade, emin) - mbits
	d := q - e // number of bits of m below the quantum
	if d <= 0 {
		return math.Float32frombits(a)
	}
	var k uint32
	if d < 24 {
		// The usual case. With rem = m mod 2^d, adding d uniform random
		// bits to m carries into the kept bits exactly when those bits are
		// at least 2^d - rem, which happens with probability rem/2^d; no
		// branch depends on the draw.
		k = (m + uint32(s.rng.Uint64())&(1<<d-1)) >> d
	} else if s.below(m, uint(d)) {
		// |x| is below one quantum, so k is 0 or 1: 1 with probability m/2^d.
		k = 1
	}
	return float32(k) * pow2(q) // exact: k has at most mbits+2 bits
}

// pow2 returns 2^q as a float32 for -149 <= q <= 127.
func pow2(q int) float32 {
	if q < -126 {
		return math.Float32frombits(1 << (q + 149)) // subnormal
	}
	return math.Float32frombits(uint32(q+127) << 23)
}

// below reports, with probability exactly rem/2^d, whether a uniform d-bit
// random integer R is below rem (rem < 2^24).
func (s *Stochastic) below(rem uint32, d uint) bool {
	// For d > 64, R < rem needs every bit of R above the low 64 to be zero.
	for d > 64 {
		n := min(d-64, 64)
		if s.rng.Uint64()>>(64-n) != 0 {
			return false
		}
		d -= n
	}
	r := s.rng.Uint64()
	if d < 64 {
		r &= 1<<d - 1
	}
	return r < uint64(rem)
}

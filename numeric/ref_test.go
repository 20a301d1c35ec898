package numeric

import (
	"math"
	"math/big"
	"sort"
)

// This file is the slow exact reference the codecs are tested against. It
// shares no code with the package: values come from the sign/exponent/
// mantissa definition of each format, and rounding picks, among the
// enumerated codes, the one nearest to the input with exact (math/big)
// arithmetic, ties to the even code.

// refFormat describes a small binary floating-point format from first
// principles.
type refFormat struct {
	name         string
	ebits, mbits int
	// ieee: the all-ones exponent holds Inf (mantissa 0) and NaN, as in
	// IEEE 754. Otherwise that exponent holds finite values (and, for e4m3,
	// the single NaN), and Inf inputs saturate to the largest finite value.
	ieee bool
	// saturate: finite values beyond the largest finite one become it.
	// Otherwise overflow rounds to Inf as IEEE 754 says.
	saturate bool
	// nanCode is the canonical positive NaN code the encoder must produce;
	// hasNaN false means NaN encodes as code 0 (e2m1).
	nanCode uint32
	hasNaN  bool
	// isNaN reports whether a positive code is NaN.
	isNaN func(c uint32) bool
	// maxCode is the largest positive finite code; codes 0..maxCode are the
	// non-negative finite values in increasing order.
	maxCode uint32
}

var (
	refF16 = refFormat{name: "fp16", ebits: 5, mbits: 10, ieee: true, nanCode: 0x7e00, hasNaN: true,
		isNaN: func(c uint32) bool { return c > 0x7c00 }, maxCode: 0x7bff}
	refBF16 = refFormat{name: "bf16", ebits: 8, mbits: 7, ieee: true, nanCode: 0x7fc0, hasNaN: true,
		isNaN: func(c uint32) bool { return c > 0x7f80 }, maxCode: 0x7f7f}
	refE4M3 = refFormat{name: "e4m3", ebits: 4, mbits: 3, saturate: true, nanCode: 0x7f, hasNaN: true,
		isNaN: func(c uint32) bool { return c == 0x7f }, maxCode: 0x7e}
	refE5M2 = refFormat{name: "e5m2", ebits: 5, mbits: 2, ieee: true, saturate: true, nanCode: 0x7e, hasNaN: true,
		isNaN: func(c uint32) bool { return c > 0x7c }, maxCode: 0x7b}
	refE2M1 = refFormat{name: "e2m1", ebits: 2, mbits: 1, saturate: true,
		isNaN: func(uint32) bool { return false }, maxCode: 7}
)

func (f refFormat) bits() int         { return 1 + f.ebits + f.mbits }
func (f refFormat) signBit() uint32   { return 1 << (f.ebits + f.mbits) }
func (f refFormat) bias() int         { return 1<<(f.ebits-1) - 1 }
func (f refFormat) infCode() uint32   { return f.maxCode + 1 } // meaningful only when ieee
func (f refFormat) maxValue() float64 { return f.value(f.maxCode) }

// value returns the value of a code (sign included) by the textbook formula:
// (-1)^s · 2^(e-bias) · (1 + m/2^mbits) for normal codes and
// (-1)^s · 2^(1-bias) · (m/2^mbits) for e = 0.
func (f refFormat) value(c uint32) float64 {
	neg := c&f.signBit() != 0
	c &^= f.signBit()
	e := int(c >> f.mbits)
	m := float64(c & (1<<f.mbits - 1))
	frac := m / math.Pow(2, float64(f.mbits))
	var v float64
	switch {
	case f.isNaN(c):
		return math.NaN()
	case f.ieee && e == 1<<f.ebits-1:
		v = math.Inf(1)
	case e == 0:
		v = math.Pow(2, float64(1-f.bias())) * frac
	default:
		v = math.Pow(2, float64(e-f.bias())) * (1 + frac)
	}
	if neg {
		return -v
	}
	return v
}

// candidates returns the non-negative values codes 0..maxCode take,
// followed, for formats that overflow to Inf, by 2^(emax+1): the value the Inf code would
// have if the exponent range went on. IEEE 754 rounds overflow exactly as if
// that value existed (and it has an even code), then calls it Inf.
func (f refFormat) candidates() []float64 {
	vs := make([]float64, 0, f.maxCode+2)
	for c := uint32(0); c <= f.maxCode; c++ {
		vs = append(vs, f.value(c))
	}
	if !f.saturate {
		vs = append(vs, math.Pow(2, float64(1<<f.ebits-1-f.bias())))
	}
	return vs
}

// refRounder rounds float32 values to a format by search; it caches the
// candidate list and big.Float scratch space.
type refRounder struct {
	f                 refFormat
	vals              []float64
	x, lo, hi, dl, dh big.Float
}

func newRefRounder(f refFormat) *refRounder {
	r := &refRounder{f: f, vals: f.candidates()}
	// 512 bits hold any difference of two float64 values in [2^-149, 2^128]
	// exactly (the span is under 280 bits), so the comparisons below are exact.
	for _, z := range []*big.Float{&r.dl, &r.dh} {
		z.SetPrec(512)
	}
	return r
}

// encode returns the code of the value nearest to x, ties to the even code,
// with the format's overflow, Inf and NaN rules.
func (r *refRounder) encode(x float32) uint32 {
	f := r.f
	var sign uint32
	if math.Signbit(float64(x)) {
		sign = f.signBit()
	}
	ax := math.Abs(float64(x))
	switch {
	case math.IsNaN(ax):
		if !f.hasNaN {
			return 0
		}
		return sign | f.nanCode
	case math.IsInf(ax, 1):
		if f.ieee {
			return sign | f.infCode()
		}
		return sign | f.maxCode
	case f.saturate && ax > f.maxValue():
		ax = f.maxValue() // saturation
	}
	lo, hi, exact := r.bracket(ax)
	if exact {
		return sign | lo
	}
	if hi == uint32(len(r.vals)) { // beyond the pseudo value: IEEE overflow
		return sign | f.infCode()
	}
	r.x.SetFloat64(ax)
	r.lo.SetFloat64(r.vals[lo])
	r.hi.SetFloat64(r.vals[hi])
	r.dl.Sub(&r.x, &r.lo)
	r.dh.Sub(&r.hi, &r.x)
	switch c := r.dl.Cmp(&r.dh); {
	case c < 0:
		return sign | lo
	case c > 0:
		return sign | hi
	case lo%2 == 0:
		return sign | lo
	default:
		return sign | hi
	}
}

// bracket returns the codes of the candidates just below and above ax
// (ax >= 0), or ax's own code with exact set.
func (r *refRounder) bracket(ax float64) (lo, hi uint32, exact bool) {
	i := sort.SearchFloat64s(r.vals, ax) // first index with vals[i] >= ax
	if i < len(r.vals) && r.vals[i] == ax {
		return uint32(i), 0, true
	}
	return uint32(i - 1), uint32(i), false
}

// neighbours returns the two representable finite values around the
// non-negative finite x (equal when x is representable), with x clamped to
// the largest finite value.
func (r *refRounder) neighbours(x float64) (lo, hi float64) {
	x = math.Min(x, r.f.maxValue())
	l, h, exact := r.bracket(x)
	if exact {
		return r.vals[l], r.vals[l]
	}
	return r.vals[l], r.vals[h]
}

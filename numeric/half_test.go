package numeric

import (
	"math"
	"math/rand/v2"
	"testing"
)

// sameFloat reports whether got is the value want: equal including the sign
// of zero, or both NaN.
func sameFloat(got float32, want float64) bool {
	if math.IsNaN(want) {
		return got != got
	}
	return float64(got) == want && math.Signbit(float64(got)) == math.Signbit(want)
}

// checkAllCodes decodes every code of a format, compares the value with the
// reference formula, and re-encodes it: every code must come back, except
// NaNs, which must come back as the canonical NaN with their sign.
func checkAllCodes(t *testing.T, rf refFormat, decode func(uint32) float32, encode func(float32) uint32) {
	t.Helper()
	for c := uint32(0); c < 1<<rf.bits(); c++ {
		got := decode(c)
		want := rf.value(c)
		if !sameFloat(got, want) {
			t.Fatalf("%s: decode(%#x) = %g, want %g", rf.name, c, got, want)
		}
		back := encode(got)
		wantBack := c
		if math.IsNaN(want) {
			wantBack = c&rf.signBit() | rf.nanCode
		}
		if back != wantBack {
			t.Fatalf("%s: encode(decode(%#x) = %g) = %#x, want %#x", rf.name, c, got, back, wantBack)
		}
	}
}

func TestF16AllCodes(t *testing.T) {
	checkAllCodes(t, refF16,
		func(c uint32) float32 { return F32FromF16(uint16(c)) },
		func(f float32) uint32 { return uint32(F16FromF32(f)) })
}

func TestBF16AllCodes(t *testing.T) {
	checkAllCodes(t, refBF16,
		func(c uint32) float32 { return F32FromBF16(uint16(c)) },
		func(f float32) uint32 { return uint32(BF16FromF32(f)) })
}

// roundingInputs returns float32 values that probe a format's rounding:
// every midpoint between neighbouring codes (including the overflow midpoint
// towards the Inf or first-missing value) and the float32 values right
// beside each, both signs, then n random values. Half of the random values
// are arbitrary float32 bit patterns; the other half have exponents in and
// around the format's range, where the interesting rounding happens.
func roundingInputs(t *testing.T, rf refFormat, n int, seed uint64) []float32 {
	t.Helper()
	vals := rf.candidates()
	if rf.saturate {
		// The first value past the largest finite one, as if the exponent
		// range went on; its midpoint with the max is where saturating
		// formats would otherwise start to round up.
		top := vals[len(vals)-1]
		step := top - vals[len(vals)-2]
		vals = append(vals, top+step, top+4*step)
	}
	var in []float32
	for i := 0; i+1 < len(vals); i++ {
		mid := (vals[i] + vals[i+1]) / 2
		m := float32(mid)
		if float64(m) != mid {
			t.Fatalf("%s: midpoint %g is not a float32", rf.name, mid)
		}
		for _, x := range []float32{m, math.Nextafter32(m, 0), math.Nextafter32(m, math.MaxFloat32), float32(vals[i])} {
			in = append(in, x, -x)
		}
	}
	r := rand.New(rand.NewPCG(seed, 1))
	emin := 1 - rf.bias() - rf.mbits - 3
	emax := 1<<rf.ebits - 1 - rf.bias() + 2
	for i := range n {
		if i%2 == 0 {
			in = append(in, math.Float32frombits(r.Uint32()))
			continue
		}
		e := emin + r.IntN(emax-emin+1)
		if e < -126 {
			e = -126 - r.IntN(23) // into float32 subnormals
			in = append(in, math.Float32frombits(r.Uint32N(uint32(1)<<(e+149))|r.Uint32()&0x80000000))
			continue
		}
		b := uint32(e+127)<<23 | r.Uint32()&0x807fffff
		in = append(in, math.Float32frombits(b))
	}
	return append(in, specials...)
}

// specials are values every encoder must get right.
var specials = []float32{
	0, float32(math.Copysign(0, -1)),
	float32(math.Inf(1)), float32(math.Inf(-1)),
	float32(math.NaN()), -float32(math.NaN()),
	math.Float32frombits(0x7f800001), math.Float32frombits(0xffc00001), // signalling and negative quiet NaN payloads
	math.MaxFloat32, -math.MaxFloat32,
	math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32,
	0x1p-126, 1, -1, 0.1, 1.0 / 3,
}

// checkRounding compares encode with the reference on inputs.
func checkRounding(t *testing.T, rf refFormat, in []float32, encode func(float32) uint32) {
	t.Helper()
	ref := newRefRounder(rf)
	fails := 0
	for _, x := range in {
		got, want := encode(x), ref.encode(x)
		if got != want {
			t.Errorf("%s: encode(%g = %#08x) = %#x (%g), want %#x (%g)", rf.name, x, math.Float32bits(x),
				got, rf.value(got), want, rf.value(want))
			if fails++; fails > 20 {
				t.FailNow()
			}
		}
	}
}

func TestF16Rounding(t *testing.T) {
	in := roundingInputs(t, refF16, 2_000_000, 16)
	checkRounding(t, refF16, in, func(f float32) uint32 { return uint32(F16FromF32(f)) })
}

func TestBF16Rounding(t *testing.T) {
	in := roundingInputs(t, refBF16, 2_000_000, 17)
	checkRounding(t, refBF16, in, func(f float32) uint32 { return uint32(BF16FromF32(f)) })
}

// TestHalfSpotValues pins hand-checked conversions, each explained, so a
// mistake shared by the codec and the reference would still show.
func TestHalfSpotValues(t *testing.T) {
	tests := []struct {
		name string
		in   float32
		f16  uint16
		bf16 uint16
	}{
		{"one", 1, 0x3c00, 0x3f80},
		{"minus two", -2, 0xc000, 0xc000},
		{"negative zero", float32(math.Copysign(0, -1)), 0x8000, 0x8000},
		{"fp16 max", 65504, 0x7bff, 0x4780},                           // bf16: 65504 is between 65280 and 65536, nearer 65536
		{"below fp16 overflow midpoint", 65519.996, 0x7bff, 0x4780},   // 65520 - 2^-8
		{"fp16 overflow midpoint ties to Inf", 65520, 0x7c00, 0x4780}, // Inf has the even code
		{"fp16 smallest subnormal", 0x1p-24, 0x0001, 0x3380},
		{"half the smallest subnormal ties to zero", 0x1p-25, 0x0000, 0x3300},
		{"just above half the smallest subnormal", 0x1.000002p-25, 0x0001, 0x3300},
		{"1.5 subnormal steps ties to 2 steps", 0x1.8p-24, 0x0002, 0x33c0},
		{"largest subnormal rounds up to smallest normal", 0x1.ffffp-15, 0x0400, 0x3880},
		{"1+2^-11 ties down to even 1", 0x1.002p0, 0x3c00, 0x3f80},
		{"1+3·2^-11 ties up to even 1+2^-9", 0x1.006p0, 0x3c02, 0x3f80},
		{"bf16 1+2^-8 ties to 1", 0x1.01p0, 0x3c04, 0x3f80},
		{"bf16 1+3·2^-8 ties up", 0x1.03p0, 0x3c0c, 0x3f82},
		{"float32 max overflows both", math.MaxFloat32, 0x7c00, 0x7f80},
		{"-Inf", float32(math.Inf(-1)), 0xfc00, 0xff80},
		{"NaN is canonical", float32(math.NaN()), 0x7e00, 0x7fc0},
		{"negative NaN keeps its sign", math.Float32frombits(0xff800001), 0xfe00, 0xffc0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := F16FromF32(tt.in); got != tt.f16 {
				t.Errorf("F16FromF32(%g) = %#04x, want %#04x", tt.in, got, tt.f16)
			}
			if got := BF16FromF32(tt.in); got != tt.bf16 {
				t.Errorf("BF16FromF32(%g) = %#04x, want %#04x", tt.in, got, tt.bf16)
			}
		})
	}
}

// TestHalfBulkDecodeAllCodes checks the bulk decoders, which use a table
// for fp16, on every code.
func TestHalfBulkDecodeAllCodes(t *testing.T) {
	codes := make([]uint16, 1<<16)
	for i := range codes {
		codes[i] = uint16(i)
	}
	dst := make([]float32, len(codes))
	DecodeF16(dst, codes)
	for i, v := range dst {
		if !sameFloat(v, refF16.value(uint32(i))) {
			t.Fatalf("DecodeF16(%#04x) = %g, want %g", i, v, refF16.value(uint32(i)))
		}
	}
	DecodeBF16(dst, codes)
	for i, v := range dst {
		if !sameFloat(v, refBF16.value(uint32(i))) {
			t.Fatalf("DecodeBF16(%#04x) = %g, want %g", i, v, refBF16.value(uint32(i)))
		}
	}
}

func TestHalfBulkMatchesScalar(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	src := make([]float32, 1000)
	for i := range src {
		src[i] = float32(r.NormFloat64() * math.Pow(2, float64(r.IntN(40)-20)))
	}
	h := make([]uint16, len(src))
	back := make([]float32, len(src))
	EncodeF16(h, src)
	DecodeF16(back, h)
	for i, x := range src {
		if h[i] != F16FromF32(x) || back[i] != F32FromF16(h[i]) {
			t.Fatalf("fp16 element %d: bulk %#x/%g, scalar %#x/%g", i, h[i], back[i], F16FromF32(x), F32FromF16(h[i]))
		}
	}
	EncodeBF16(h, src)
	DecodeBF16(back, h)
	for i, x := range src {
		if h[i] != BF16FromF32(x) || back[i] != F32FromBF16(h[i]) {
			t.Fatalf("bf16 element %d: bulk %#x/%g, scalar %#x/%g", i, h[i], back[i], BF16FromF32(x), F32FromBF16(h[i]))
		}
	}
}

func TestBulkLengthMismatchPanics(t *testing.T) {
	tests := []struct {
		name string
		call func()
	}{
		{"EncodeF16", func() { EncodeF16(make([]uint16, 2), make([]float32, 3)) }},
		{"DecodeF16", func() { DecodeF16(make([]float32, 2), make([]uint16, 3)) }},
		{"EncodeBF16", func() { EncodeBF16(make([]uint16, 3), make([]float32, 2)) }},
		{"DecodeBF16", func() { DecodeBF16(make([]float32, 0), make([]uint16, 1)) }},
		{"EncodeE4M3", func() { EncodeE4M3(make([]uint8, 2), make([]float32, 3), 1) }},
		{"DecodeE4M3", func() { DecodeE4M3(make([]float32, 2), make([]uint8, 3), 1) }},
		{"EncodeE5M2", func() { EncodeE5M2(make([]uint8, 2), make([]float32, 3), 1) }},
		{"DecodeE5M2", func() { DecodeE5M2(make([]float32, 2), make([]uint8, 3), 1) }},
		{"QuantizeNVFP4", func() { QuantizeNVFP4(make([]byte, 8), make([]uint8, 2), make([]float32, 16)) }},
		{"DequantizeNVFP4", func() { DequantizeNVFP4(make([]float32, 16), make([]byte, 7), make([]uint8, 1), 1) }},
		{"Stochastic.EncodeF16", func() { NewStochastic(1).EncodeF16(make([]uint16, 2), make([]float32, 3)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with mismatched lengths did not panic", tt.name)
				}
			}()
			tt.call()
		})
	}
}

// FuzzHalf checks both 16-bit encoders against the reference on any float32
// bit pattern.
func FuzzHalf(f *testing.F) {
	for _, x := range specials {
		f.Add(math.Float32bits(x))
	}
	f.Add(uint32(0x477ff000)) // 65520
	f.Add(uint32(0x33000000)) // 2^-25
	f16, bf16 := newRefRounder(refF16), newRefRounder(refBF16)
	f.Fuzz(func(t *testing.T, b uint32) {
		x := math.Float32frombits(b)
		if got, want := uint32(F16FromF32(x)), f16.encode(x); got != want {
			t.Errorf("F16FromF32(%#08x) = %#x, want %#x", b, got, want)
		}
		if got, want := uint32(BF16FromF32(x)), bf16.encode(x); got != want {
			t.Errorf("BF16FromF32(%#08x) = %#x, want %#x", b, got, want)
		}
	})
}

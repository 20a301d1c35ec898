package numeric

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestE4M3AllCodes(t *testing.T) {
	checkAllCodes(t, refE4M3,
		func(c uint32) float32 { return F32FromE4M3(uint8(c)) },
		func(f float32) uint32 { return uint32(E4M3FromF32(f)) })
}

func TestE5M2AllCodes(t *testing.T) {
	checkAllCodes(t, refE5M2,
		func(c uint32) float32 { return F32FromE5M2(uint8(c)) },
		func(f float32) uint32 { return uint32(E5M2FromF32(f)) })
}

func TestE4M3Rounding(t *testing.T) {
	in := roundingInputs(t, refE4M3, 1_000_000, 43)
	checkRounding(t, refE4M3, in, func(f float32) uint32 { return uint32(E4M3FromF32(f)) })
}

func TestE5M2Rounding(t *testing.T) {
	in := roundingInputs(t, refE5M2, 1_000_000, 52)
	checkRounding(t, refE5M2, in, func(f float32) uint32 { return uint32(E5M2FromF32(f)) })
}

// TestFP8DecodeSpotValues pins code values checked by hand against the OCP
// 8-bit floating point specification's tables.
func TestFP8DecodeSpotValues(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		format string
		code   uint8
		want   float64
	}{
		{"e4m3", 0x7e, 448},    // S.1111.110: largest finite
		{"e4m3", 0xfe, -448},   //
		{"e4m3", 0x7f, nan},    // S.1111.111 is the only NaN
		{"e4m3", 0xff, nan},    //
		{"e4m3", 0x78, 256},    // S.1111.000: e4m3fn uses the top exponent for finite values
		{"e4m3", 0x01, 0x1p-9}, // smallest subnormal: 1/8 · 2^-6
		{"e4m3", 0x07, 0x7p-9}, // largest subnormal
		{"e4m3", 0x08, 0x1p-6}, // smallest normal
		{"e4m3", 0x38, 1},      // exponent field 7 = bias
		{"e4m3", 0x80, math.Copysign(0, -1)},
		{"e5m2", 0x7b, 57344}, // S.11110.11: largest finite
		{"e5m2", 0x7c, math.Inf(1)},
		{"e5m2", 0xfc, math.Inf(-1)},
		{"e5m2", 0x7d, nan},
		{"e5m2", 0x7e, nan},
		{"e5m2", 0xff, nan},
		{"e5m2", 0x01, 0x1p-16}, // smallest subnormal: 1/4 · 2^-14
		{"e5m2", 0x04, 0x1p-14}, // smallest normal
		{"e5m2", 0x3c, 1},
		{"e5m2", 0xc2, -3}, // 1.1000.10 = -1.5·2
	}
	for _, tt := range tests {
		var got float32
		if tt.format == "e4m3" {
			got = F32FromE4M3(tt.code)
		} else {
			got = F32FromE5M2(tt.code)
		}
		if !sameFloat(got, tt.want) {
			t.Errorf("%s code %#02x = %g, want %g", tt.format, tt.code, got, tt.want)
		}
	}
}

// TestFP8EncodeSpotValues pins hand-checked roundings, especially the
// saturation rules that differ between the two formats.
func TestFP8EncodeSpotValues(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	tests := []struct {
		name string
		in   float32
		e4m3 uint8
		e5m2 uint8
	}{
		{"one", 1, 0x38, 0x3c},
		{"e4m3 max", 448, 0x7e, 0x5f},                               // e5m2: 448 = 1.75·2^8 is exact
		{"464 ties between 448 and 480: saturate", 464, 0x7e, 0x5f}, // e5m2: 464 is nearer 448 than 512
		{"e4m3 overflow saturates", 1e6, 0x7e, 0x7b},
		{"e5m2 overflow midpoint saturates", 61440, 0x7e, 0x7b},
		{"Inf: e4m3 saturates, e5m2 keeps it", inf, 0x7e, 0x7c},
		{"-Inf", -inf, 0xfe, 0xfc},
		{"NaN", nan, 0x7f, 0x7e},
		{"negative NaN keeps its sign", -nan, 0xff, 0xfe},
		{"half the e4m3 smallest subnormal ties to zero", 0x1p-10, 0x00, 0x14}, // e5m2: 2^-10 is normal, exponent field 5
		{"1.5 e4m3 subnormal steps ties to 2", 0x1.8p-9, 0x02, 0x1a},           // e5m2: 1.5·2^-9 exact
		{"1+2^-4 ties down to 1", 0x1.1p0, 0x38, 0x3c},
		{"1+3·2^-4 ties up to 1.25", 0x1.3p0, 0x3a, 0x3d}, // e5m2: 1.1875 is nearer 1.25
		{"half the e5m2 smallest subnormal ties to zero", 0x1p-17, 0x00, 0x00},
		{"negative zero", float32(math.Copysign(0, -1)), 0x80, 0x80},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := E4M3FromF32(tt.in); got != tt.e4m3 {
				t.Errorf("E4M3FromF32(%g) = %#02x, want %#02x", tt.in, got, tt.e4m3)
			}
			if got := E5M2FromF32(tt.in); got != tt.e5m2 {
				t.Errorf("E5M2FromF32(%g) = %#02x, want %#02x", tt.in, got, tt.e5m2)
			}
		})
	}
}

func TestFP8BulkScales(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	src := make([]float32, 777)
	for i := range src {
		src[i] = float32(r.NormFloat64() * 1e-3)
	}
	const scale = float32(1.0 / 3000)
	inv := 1 / scale
	codes := make([]uint8, len(src))
	back := make([]float32, len(src))

	EncodeE4M3(codes, src, inv)
	DecodeE4M3(back, codes, scale)
	for i, x := range src {
		if codes[i] != E4M3FromF32(x*inv) || back[i] != F32FromE4M3(codes[i])*scale {
			t.Fatalf("e4m3 element %d (%g): bulk %#x/%g disagrees with scalar", i, x, codes[i], back[i])
		}
	}
	EncodeE5M2(codes, src, inv)
	DecodeE5M2(back, codes, scale)
	for i, x := range src {
		if codes[i] != E5M2FromF32(x*inv) || back[i] != F32FromE5M2(codes[i])*scale {
			t.Fatalf("e5m2 element %d (%g): bulk %#x/%g disagrees with scalar", i, x, codes[i], back[i])
		}
	}
}

// FuzzFP8 checks both fp8 encoders against the reference on any float32.
func FuzzFP8(f *testing.F) {
	for _, x := range specials {
		f.Add(math.Float32bits(x))
	}
	f.Add(math.Float32bits(464))
	f.Add(math.Float32bits(61440))
	f.Add(math.Float32bits(0x1p-10))
	e4, e5 := newRefRounder(refE4M3), newRefRounder(refE5M2)
	f.Fuzz(func(t *testing.T, b uint32) {
		x := math.Float32frombits(b)
		if got, want := uint32(E4M3FromF32(x)), e4.encode(x); got != want {
			t.Errorf("E4M3FromF32(%#08x) = %#x, want %#x", b, got, want)
		}
		if got, want := uint32(E5M2FromF32(x)), e5.encode(x); got != want {
			t.Errorf("E5M2FromF32(%#08x) = %#x, want %#x", b, got, want)
		}
	})
}

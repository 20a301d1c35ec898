package safetensors

import (
	"encoding/binary"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
)

// refMinifloat decodes a sign/exponent/mantissa float in float64 arithmetic,
// written from the format definitions rather than from the decoders under
// test. ieee: the all-ones exponent is Inf/NaN (F16, E5M2); otherwise only
// the all-ones pattern is NaN (E4M3 "fn").
func refMinifloat(bits uint32, expBits, mantBits int, ieee bool) float64 {
	bias := 1<<(expBits-1) - 1
	sign := 1.0
	if bits>>(expBits+mantBits)&1 == 1 {
		sign = -1
	}
	e := int(bits>>mantBits) & (1<<expBits - 1)
	m := float64(bits & (1<<mantBits - 1))
	frac := m / float64(int(1)<<mantBits)
	maxE := 1<<expBits - 1
	switch {
	case ieee && e == maxE && m == 0:
		return sign * math.Inf(1)
	case ieee && e == maxE:
		return math.NaN()
	case !ieee && e == maxE && int(m) == 1<<mantBits-1:
		return math.NaN()
	case e == 0:
		return sign * frac * math.Pow(2, float64(1-bias))
	}
	return sign * (1 + frac) * math.Pow(2, float64(e-bias))
}

func TestDecodeExhaustive(t *testing.T) {
	tests := []struct {
		dt  DType
		n   int // bit patterns
		ref func(uint32) float64
	}{
		{F16, 1 << 16, func(b uint32) float64 { return refMinifloat(b, 5, 10, true) }},
		{BF16, 1 << 16, func(b uint32) float64 { return refMinifloat(b, 8, 7, true) }},
		{F8E4M3, 256, func(b uint32) float64 { return refMinifloat(b, 4, 3, false) }},
		{F8E5M2, 256, func(b uint32) float64 { return refMinifloat(b, 5, 2, true) }},
		{F8E8M0, 256, func(b uint32) float64 {
			if b == 0xff {
				return math.NaN()
			}
			return math.Pow(2, float64(int(b)-127))
		}},
	}
	for _, tc := range tests {
		size := tc.dt.Size()
		src := make([]byte, tc.n*size)
		for i := range tc.n {
			if size == 2 {
				binary.LittleEndian.PutUint16(src[2*i:], uint16(i))
			} else {
				src[i] = byte(i)
			}
		}
		dst := make([]float32, tc.n)
		if err := DecodeFloat32(dst, src, tc.dt); err != nil {
			t.Fatal(err)
		}
		bad := 0
		for i := range tc.n {
			want := tc.ref(uint32(i))
			// Every value of these formats is exact in float32 (float64 -> float32
			// is exact here), so demand bit equality, signed zeros included.
			if !sameFloat(dst[i], float32(want)) && bad < 5 {
				t.Errorf("%v %#x = %g, want %g", tc.dt, i, dst[i], want)
				bad++
			}
		}
	}
}

// TestDecodeMatchesReference compares every decoder with torch's own
// float32 conversion of the same bit patterns, saved by the reference
// safetensors library (testdata/reference.safetensors, gen_reference.py).
func TestDecodeMatchesReference(t *testing.T) {
	f, err := Open(filepath.Join("testdata", "reference.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Metadata()["format"] != "pt" {
		t.Errorf("metadata = %v", f.Metadata())
	}
	wantDType := map[string]DType{"f16_all": F16, "bf16_all": BF16, "e4m3_all": F8E4M3, "e5m2_all": F8E5M2, "e8m0_all": F8E8M0, "f64_vals": F64}
	checked := 0
	for _, name := range f.Names() {
		if !strings.HasSuffix(name, ".f32") {
			continue
		}
		src := strings.TrimSuffix(name, ".f32")
		info, _ := f.Info(src)
		if info.DType != wantDType[src] {
			t.Errorf("%s has dtype %v, want %v", src, info.DType, wantDType[src])
		}
		got, err := f.Float32(src)
		if err != nil {
			t.Fatal(err)
		}
		want, err := f.Float32(name, info.Shape...)
		if err != nil {
			t.Fatal(err)
		}
		bad := 0
		for i := range want {
			if !sameFloat(got[i], want[i]) && bad < 5 {
				t.Errorf("%s[%d] = %g (%#08x), torch says %g (%#08x)", src, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
				bad++
			}
		}
		checked += len(want)
	}
	if checked < 2*65536+3*256 {
		t.Errorf("checked only %d values", checked)
	}
	// The integer tensors: extremes round-trip through the header and layout.
	for _, tc := range []struct {
		name string
		dt   DType
		want []int64
	}{
		{"i64", I64, []int64{math.MinInt64, math.MaxInt64, 0, 1, -1}},
		{"i32", I32, []int64{math.MinInt32, math.MaxInt32, 0, 1, -1}},
		{"i16", I16, []int64{math.MinInt16, math.MaxInt16, 0, 1, -1}},
		{"i8", I8, []int64{-128, 127, 0, 1, -1}},
		{"u8", U8, []int64{0, 255, 0, 1, 2}},
		{"bool", Bool, []int64{1, 0, 1}},
	} {
		b, err := f.Bytes(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		info, _ := f.Info(tc.name)
		if info.DType != tc.dt || len(b) != len(tc.want)*tc.dt.Size() {
			t.Fatalf("%s: dtype %v, %d bytes", tc.name, info.DType, len(b))
		}
		for i, w := range tc.want {
			var v int64
			switch tc.dt.Size() {
			case 8:
				v = int64(binary.LittleEndian.Uint64(b[8*i:]))
			case 4:
				v = int64(int32(binary.LittleEndian.Uint32(b[4*i:])))
			case 2:
				v = int64(int16(binary.LittleEndian.Uint16(b[2*i:])))
			default:
				v = int64(b[i])
				if tc.dt == I8 {
					v = int64(int8(b[i]))
				}
			}
			if v != w {
				t.Errorf("%s[%d] = %d, want %d", tc.name, i, v, w)
			}
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	if err := DecodeFloat32(make([]float32, 2), make([]byte, 7), F32); err == nil {
		t.Error("short source accepted")
	}
	if err := DecodeFloat32(make([]float32, 2), make([]byte, 8), I32); !errors.Is(err, ErrDType) {
		t.Errorf("I32: %v", err)
	}
	if err := DecodeFloat32(nil, nil, Invalid); !errors.Is(err, ErrDType) {
		t.Errorf("Invalid: %v", err)
	}
}

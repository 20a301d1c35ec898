package replay

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/replayssm/replayssm/numeric"
)

// codecInputs are float32 values for the encoders: every kind of bit
// pattern (random bits: NaN payloads, infinities, subnormals), values around
// the fp16 and e4m3 rounding and overflow boundaries, and ties. The length
// is not a multiple of 16, so the Go tail runs too.
func codecInputs(rng *rand.Rand) []float32 {
	var x []float32
	for range 20000 {
		x = append(x, math.Float32frombits(rng.Uint32()))
	}
	for range 20000 {
		x = append(x, float32(rng.NormFloat64()*math.Pow(2, float64(rng.IntN(40)-20))))
	}
	special := []float32{0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		65504, 65519.99, 65520, 65536, 448, 464, 463.99, 480, 1 << 20, 0x1p-6, 0x1p-9, 0x1p-10, 0x1.8p-10,
		0x1p-24, 0x1p-25, 0x1.8p-24, 0x1p-14, 1.0625, 1.1875, 3.0 / 4096}
	for _, v := range special {
		x = append(x, v, -v, math.Nextafter32(v, 0), math.Nextafter32(v, float32(math.Inf(1))))
	}
	// Exact halfway points of the e4m3 and fp16 grids.
	for e := -12; e < 9; e++ {
		for m := range 8 {
			x = append(x, float32(math.Ldexp(float64(16+2*m+1), e-4)))
		}
	}
	return append(x, 1, 2, 3) // odd length
}

func sameF32(a, b float32) bool {
	if a != a || b != b { // NaN: the sign must still agree
		return a != a && b != b && math.Signbit(float64(a)) == math.Signbit(float64(b))
	}
	return math.Float32bits(a) == math.Float32bits(b)
}

// TestCodecsMatchNumeric checks the SIMD codecs of the fp16 and fp8 states
// against package numeric's exact ones, bit for bit (NaN: NaN of the same
// sign). On machines without AVX2/F16C both sides are package numeric.
func TestCodecsMatchNumeric(t *testing.T) {
	if !simdCodec {
		t.Log("no AVX2+F16C: the codecs are package numeric's")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	x := codecInputs(rng)
	n := len(x)

	h, want16 := make([]uint16, n), make([]uint16, n)
	encodeF16(h, x)
	numeric.EncodeF16(want16, x)
	for i := range x {
		if h[i] != want16[i] {
			t.Fatalf("encodeF16(%v = %#08x) = %#04x, want %#04x", x[i], math.Float32bits(x[i]), h[i], want16[i])
		}
	}

	all := make([]uint16, 1<<16+5)
	for i := range all {
		all[i] = uint16(i)
	}
	got, want := make([]float32, len(all)), make([]float32, len(all))
	decodeF16(got, all)
	numeric.DecodeF16(want, all)
	for i := range all {
		if !sameF32(got[i], want[i]) {
			t.Fatalf("decodeF16(%#04x) = %v, want %v", all[i], got[i], want[i])
		}
	}

	codes := make([]uint8, 256*3+7)
	for i := range codes {
		codes[i] = uint8(i)
	}
	for _, scale := range []float32{1, 0.37, 0, 0x1p-130, 3e30, 448 / 7.0} {
		got, want := make([]float32, len(codes)), make([]float32, len(codes))
		decodeE4M3(got, codes, scale)
		numeric.DecodeE4M3(want, codes, scale)
		for i := range codes {
			if !sameF32(got[i], want[i]) {
				t.Fatalf("decodeE4M3(%#02x, scale %v) = %v, want %v", codes[i], scale, got[i], want[i])
			}
		}
	}

	for _, inv := range []float32{1, 1 / 0.37, 0, 1e-3, 1e3} {
		got, want := make([]uint8, n), make([]uint8, n)
		encodeE4M3(got, x, inv)
		numeric.EncodeE4M3(want, x, inv)
		for i := range x {
			if got[i] != want[i] {
				t.Fatalf("encodeE4M3(%v * %v) = %#02x, want %#02x", x[i], inv, got[i], want[i])
			}
		}
	}

	for _, k := range []int{0, 1, 15, 16, 17, 100, 4096 + 3} {
		v := make([]float32, k)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
			if rng.IntN(50) == 0 {
				v[i] = float32(math.NaN())
			}
		}
		if k > 20 {
			v[k/2] = -float32(math.Inf(1))
		}
		if got, want := absMax(v), absMaxGo(v); got != want {
			t.Fatalf("absMax of %d values = %v, want %v", k, got, want)
		}
	}
}

// TestReadDotsNaNCode checks that the fused fp8 and fp16 reads keep a NaN
// element's NaN (a poisoned state must not read as a number).
func TestReadDotsNaNCode(t *testing.T) {
	const rows, n = 4, 128
	V := make([]float32, n)
	for i := range V {
		V[i] = 1
	}
	for _, f := range []numeric.Format{numeric.E4M3, numeric.F16} {
		m, err := newMatrices(f, rows*n, 1)
		if err != nil {
			t.Fatal(err)
		}
		src := make([]float32, rows*n)
		for i := range src {
			src[i] = 0.5
		}
		m.store(0, src, nil)
		if f == numeric.E4M3 {
			m.u8[2*n+5] = 0x7f
		} else {
			m.u16[2*n+5] = 0x7e00
		}
		out := make([]float32, rows)
		rb := newReadBuffers(rows*n, n)
		readDots(m, 0, rows, n, V, n, 1, out, &rb)
		for p, v := range out {
			if (p == 2) != math.IsNaN(float64(v)) {
				t.Errorf("%v: row %d read %v (NaN only in row 2)", f, p, v)
			}
		}
	}
}

// FuzzCodecs compares the SIMD fp16 and e4m3 encoders with package
// numeric's on arbitrary float32 bit patterns (any length, so the SIMD
// blocks and the Go tail both run).
func FuzzCodecs(f *testing.F) {
	f.Add([]byte{0, 0, 0x80, 0x7f, 1, 2, 3, 4}, float32(1))
	f.Add(make([]byte, 4*33), float32(0.5))
	f.Fuzz(func(t *testing.T, raw []byte, inv float32) {
		x := make([]float32, len(raw)/4)
		for i := range x {
			x[i] = math.Float32frombits(uint32(raw[4*i]) | uint32(raw[4*i+1])<<8 | uint32(raw[4*i+2])<<16 | uint32(raw[4*i+3])<<24)
		}
		h, wh := make([]uint16, len(x)), make([]uint16, len(x))
		encodeF16(h, x)
		numeric.EncodeF16(wh, x)
		c, wc := make([]uint8, len(x)), make([]uint8, len(x))
		encodeE4M3(c, x, inv)
		numeric.EncodeE4M3(wc, x, inv)
		for i := range x {
			if h[i] != wh[i] || c[i] != wc[i] {
				t.Fatalf("%#08x (inv %v): fp16 %#04x want %#04x, e4m3 %#02x want %#02x", math.Float32bits(x[i]), inv, h[i], wh[i], c[i], wc[i])
			}
		}
	})
}

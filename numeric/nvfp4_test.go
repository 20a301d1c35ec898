package numeric

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestE2M1AllCodes(t *testing.T) {
	checkAllCodes(t, refE2M1,
		func(c uint32) float32 { return F32FromE2M1(uint8(c)) },
		func(f float32) uint32 { return uint32(E2M1FromF32(f)) })
}

func TestE2M1Rounding(t *testing.T) {
	in := roundingInputs(t, refE2M1, 200_000, 21)
	checkRounding(t, refE2M1, in, func(f float32) uint32 { return uint32(E2M1FromF32(f)) })
}

// TestE2M1SpotValues pins every tie of the e2m1 grid: each goes to the even
// magnitude index.
func TestE2M1SpotValues(t *testing.T) {
	tests := []struct {
		in   float32
		want uint8
	}{
		{0.25, 0}, {0.2500001, 1}, {0.75, 2}, {0.7499999, 1}, {1.25, 2}, {1.75, 4},
		{2.5, 4}, {2.5000002, 5}, {3.5, 6}, {5, 6}, {5.0000005, 7}, {6, 7}, {1e30, 7},
		{-0.75, 0xa}, {-5.5, 0xf}, {float32(math.Copysign(0, -1)), 0x8},
		{float32(math.Inf(-1)), 0xf}, {float32(math.NaN()), 0},
	}
	for _, tt := range tests {
		if got := E2M1FromF32(tt.in); got != tt.want {
			t.Errorf("E2M1FromF32(%g) = %#x, want %#x", tt.in, got, tt.want)
		}
	}
}

// nvfp4Case is a named tensor generator for the NVFP4 tests.
type nvfp4Case struct {
	name string
	gen  func(r *rand.Rand, n int) []float32
}

// nvfp4Cases covers the situations the block scales must handle.
var nvfp4Cases = []nvfp4Case{
	{"normal", func(r *rand.Rand, n int) []float32 {
		return fill(n, func(int) float64 { return r.NormFloat64() })
	}},
	{"negative", func(r *rand.Rand, n int) []float32 {
		return fill(n, func(int) float64 { return -math.Abs(r.NormFloat64()) * 3e-2 })
	}},
	{"block magnitudes spanning 1e-9..1", func(r *rand.Rand, n int) []float32 {
		// Block maxima this far below the tensor's amax give subnormal
		// and zero e4m3 scales.
		scale := make([]float64, n/NVFP4Block+1)
		for i := range scale {
			scale[i] = math.Pow(10, -9*r.Float64())
		}
		return fill(n, func(i int) float64 { return r.NormFloat64() * scale[i/NVFP4Block] })
	}},
	{"zero blocks", func(r *rand.Rand, n int) []float32 {
		return fill(n, func(i int) float64 {
			if (i/NVFP4Block)%3 == 1 {
				return 0
			}
			return r.NormFloat64() * 7
		})
	}},
	{"all-equal blocks", func(r *rand.Rand, n int) []float32 {
		v := make([]float64, n/NVFP4Block+1)
		for i := range v {
			v[i] = r.NormFloat64()
		}
		return fill(n, func(i int) float64 { return v[i/NVFP4Block] })
	}},
	{"one outlier", func(r *rand.Rand, n int) []float32 {
		return fill(n, func(i int) float64 {
			if i == n/3 {
				return -5e4
			}
			return r.NormFloat64()
		})
	}},
	{"tiny", func(r *rand.Rand, n int) []float32 {
		return fill(n, func(int) float64 { return r.NormFloat64() * 1e-30 })
	}},
	{"huge", func(r *rand.Rand, n int) []float32 {
		return fill(n, func(int) float64 { return r.NormFloat64() * 1e35 })
	}},
}

func fill(n int, f func(i int) float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(f(i))
	}
	return x
}

// nvfp4Sizes are tensor lengths: whole blocks, and short tails.
var nvfp4Sizes = []int{16, 256, 1024, 1, 7, 17, 33, 250}

// unpack returns element i's code under the documented packing: element 2i
// in the low nibble of byte i, element 2i+1 in the high nibble.
func unpack(packed []byte, i int) uint8 {
	if i%2 == 0 {
		return packed[i/2] & 0xf
	}
	return packed[i/2] >> 4
}

// refQuantizeNVFP4 follows docs/DESIGN.md 2.4 step by step with the reference
// roundings, in float32 arithmetic as the package documents, and returns
// unpacked codes.
func refQuantizeNVFP4(src []float32) (codes, scales []uint8, global float32) {
	e4m3, e2m1 := newRefRounder(refE4M3), newRefRounder(refE2M1)
	codes = make([]uint8, len(src))
	scales = make([]uint8, (len(src)+15)/16)
	finiteAbs := func(x float32) float32 {
		a := float32(math.Abs(float64(x)))
		if math.IsInf(float64(a), 0) || math.IsNaN(float64(a)) {
			return 0
		}
		return a
	}
	var amax float32
	for _, x := range src {
		amax = max(amax, finiteAbs(x))
	}
	global = amax / (6 * 448)
	if global == 0 {
		return codes, scales, 0
	}
	for b := range scales {
		var bmax float32
		for i := b * 16; i < min(len(src), b*16+16); i++ {
			bmax = max(bmax, finiteAbs(src[i]))
		}
		scales[b] = uint8(e4m3.encode(bmax / (6 * global)))
		if scales[b] == 0 {
			continue
		}
		d := float32(refE4M3.value(uint32(scales[b]))) * global
		for i := b * 16; i < min(len(src), b*16+16); i++ {
			codes[i] = uint8(e2m1.encode(src[i] / d))
		}
	}
	return codes, scales, global
}

func quantize(src []float32) (packed, scales []byte, global float32) {
	packed = make([]byte, (len(src)+1)/2)
	scales = make([]byte, (len(src)+15)/16)
	for i := range packed {
		packed[i] = 0xa5 // poison: every byte must be written
	}
	for i := range scales {
		scales[i] = 0x5a
	}
	global = QuantizeNVFP4(packed, scales, src)
	return packed, scales, global
}

func dequantize(n int, packed, scales []byte, global float32) []float32 {
	dst := make([]float32, n)
	for i := range dst {
		dst[i] = float32(math.NaN()) // poison
	}
	DequantizeNVFP4(dst, packed, scales, global)
	return dst
}

func TestNVFP4MatchesSpec(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 16))
	for _, c := range nvfp4Cases {
		for _, n := range nvfp4Sizes {
			t.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(t *testing.T) {
				src := c.gen(r, n)
				packed, scales, global := quantize(src)
				wantCodes, wantScales, wantGlobal := refQuantizeNVFP4(src)
				if global != wantGlobal {
					t.Fatalf("global = %g, want %g", global, wantGlobal)
				}
				for b := range scales {
					if scales[b] != wantScales[b] {
						t.Fatalf("block %d scale = %#x, want %#x", b, scales[b], wantScales[b])
					}
				}
				for i := range src {
					if got := unpack(packed, i); got != wantCodes[i] {
						t.Fatalf("element %d (%g): code %#x, want %#x", i, src[i], got, wantCodes[i])
					}
				}
				if n%2 == 1 && packed[n/2]>>4 != 0 {
					t.Errorf("odd length: unused high nibble is %#x, want 0", packed[n/2]>>4)
				}
				got := dequantize(n, packed, scales, global)
				for i := range got {
					d := float32(refE4M3.value(uint32(scales[i/16]))) * global
					want := float32(refE2M1.value(uint32(wantCodes[i]))) * d
					if !sameFloat(got[i], float64(want)) {
						t.Fatalf("dequantised element %d = %g, want %g", i, got[i], want)
					}
				}
			})
		}
	}
}

// e4m3SpacingAbove returns the distance from the e4m3 value s (non-negative,
// finite) to the next larger code, pretending 480 follows 448.
func e4m3SpacingAbove(s float64) float64 {
	if s < 0x1p-6 {
		return 0x1p-9
	}
	return math.Pow(2, math.Floor(math.Log2(s))) / 8
}

// nvfp4Bound returns the largest reconstruction error allowed for element x
// of a block with e4m3 scale value s, tensor scale g and D = fl(s·g).
//
// Write u = 2^-24 for float32's unit roundoff and let y = fl(x/D), so
// x = y·D·(1+δ) with |δ| <= 2u.
//
// Unsaturated, |y| <= 6: round-to-nearest on the e2m1 grid picks v with
// |y - v| <= step/2, where step is the spacing of the grid around |y| (0.5
// below 2, 1 in [2,4), 2 in [4,6]), and x̂ = fl(v·D) = v·D·(1+δ') with
// |δ'| <= u. So |x - x̂| <= |x - yD| + |yD - vD| + |vD - x̂|
// <= step/2·D + 2u·|x| + u·6D.
//
// Saturated, |y| > 6: x̂ = ±fl(6D), and the error is at most
// amax_b - 6D (+ rounding). The scale is s = RNE_e4m3(t) with
// t = fl(amax_b / fl(6g)), so t - s <= h/2 for h the e4m3 spacing just above
// s (saturation to 448 never lowers it: t <= 448·(1+3u) since
// amax_b <= amax). Hence amax_b <= 6g·t·(1+3u) <= 6g·(s + h/2)·(1+3u) and
// |x - x̂| <= 3g·h + 6g·s·5u + 6D·u. For a normal scale (s >= 2^-6),
// h <= s/8, so this is at most 0.375·D, inside the unsaturated bound with
// step 2; for a subnormal scale h = 2^-9 and the error can reach 3g·2^-9,
// much more than D, because the scale itself was rounded coarsely.
//
// Zero scale: the block's codes are 0, and t <= 2^-10 (it rounded to 0), so
// |x| <= amax_b <= 6g·2^-10·(1+3u) = 3g·h with h = 2^-9 again.
//
// The returned bound adds every rounding term with a factor 2 to spare.
func nvfp4Bound(x float32, s, g float64) float64 {
	const u = 0x1p-24
	d := float64(float32(s) * float32(g))
	slack := 2 * (2*u*math.Abs(float64(x)) + 6*d*u + 30*g*s*u)
	if s == 0 {
		return 3*g*0x1p-9 + slack
	}
	y := math.Abs(float64(x / float32(d)))
	if y > 6 {
		return math.Max(3*g*e4m3SpacingAbove(s), 0.5*2*d) + slack
	}
	step := 2.0
	switch {
	case y < 2:
		step = 0.5
	case y < 4:
		step = 1
	}
	return step/2*d + slack
}

func TestNVFP4ErrorBound(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 16))
	for _, c := range nvfp4Cases {
		t.Run(c.name, func(t *testing.T) {
			for range 20 {
				src := c.gen(r, 1024)
				packed, scales, global := quantize(src)
				got := dequantize(len(src), packed, scales, global)
				for i, x := range src {
					s := float64(F32FromE4M3(scales[i/16]))
					bound := nvfp4Bound(x, s, float64(global))
					if err := math.Abs(float64(x) - float64(got[i])); err > bound {
						t.Fatalf("element %d: x = %g, x̂ = %g, error %g > bound %g (scale %g, global %g)",
							i, x, got[i], err, bound, s, global)
					}
					// The brief's bound, half a grid step of the block's
					// quantum, holds whenever the scale is a normal e4m3.
					if s >= 0x1p-6 {
						d := float64(F32FromE4M3(scales[i/16]) * global)
						if err := math.Abs(float64(x) - float64(got[i])); err > 1.0001*d {
							t.Fatalf("element %d: error %g above one quantum step %g with a normal scale", i, err, d)
						}
					}
				}
			}
		})
	}
}

// TestNVFP4AmaxBlock checks the block holding the tensor's largest magnitude:
// its scale must be 448 and its largest element must come back as ±6·D,
// which is amax up to float32 rounding.
func TestNVFP4AmaxBlock(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 16))
	for _, c := range nvfp4Cases {
		t.Run(c.name, func(t *testing.T) {
			src := c.gen(r, 512)
			im := 0
			for i, x := range src {
				if math.Abs(float64(x)) > math.Abs(float64(src[im])) {
					im = i
				}
			}
			packed, scales, global := quantize(src)
			if scales[im/16] != 0x7e {
				t.Fatalf("amax block scale = %#x (%g), want 0x7e (448)", scales[im/16], F32FromE4M3(scales[im/16]))
			}
			code := unpack(packed, im)
			if code&7 != 7 {
				t.Fatalf("amax element %g has code %#x, want magnitude index 7 (6)", src[im], code)
			}
			got := dequantize(len(src), packed, scales, global)[im]
			want := float64(6 * (448 * global))
			if src[im] < 0 {
				want = -want
			}
			if float64(got) != want {
				t.Errorf("amax element reconstructs to %g, want 6·fl(448·global) = %g", got, want)
			}
			if rel := math.Abs(float64(got-src[im]) / float64(src[im])); rel > 0x1p-21 {
				t.Errorf("amax element %g reconstructs to %g: relative error %g", src[im], got, rel)
			}
		})
	}
}

// TestNVFP4RoundTrip checks that quantising a dequantised tensor gives the
// same codes and scales back, bit for bit, for every block whose scale is a
// normal e4m3 value or zero. (With a normal scale the block's largest
// element always gets code ±6, so the block amax and hence the scale are
// reproduced. A subnormal scale can round so coarsely that the largest code
// is 3 or 4, and re-quantising then picks a different scale; see the package
// documentation.) The global scale may move by a few float32 ulps.
func TestNVFP4RoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 16))
	for _, c := range nvfp4Cases {
		for _, n := range nvfp4Sizes {
			t.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(t *testing.T) {
				src := c.gen(r, n)
				p1, s1, g1 := quantize(src)
				p2, s2, g2 := quantize(dequantize(n, p1, s1, g1))
				if math.Abs(float64(g2-g1)) > 4*0x1p-24*float64(g1) {
					t.Fatalf("global moved from %g to %g", g1, g2)
				}
				for b := range s1 {
					if s1[b] != 0 && s1[b] < 0x08 {
						continue // subnormal scale
					}
					if s2[b] != s1[b] {
						t.Fatalf("block %d: scale %#x became %#x", b, s1[b], s2[b])
					}
					for i := b * 16; i < min(n, b*16+16); i++ {
						if unpack(p2, i) != unpack(p1, i) {
							t.Fatalf("element %d: code %#x became %#x", i, unpack(p1, i), unpack(p2, i))
						}
					}
				}
			})
		}
	}
}

func TestNVFP4Special(t *testing.T) {
	inf := float32(math.Inf(1))
	nan := float32(math.NaN())
	tests := []struct {
		name       string
		src        []float32
		wantGlobal float32
		wantScales []uint8
		wantCodes  []uint8
	}{
		{
			name:       "all zero",
			src:        make([]float32, 16),
			wantGlobal: 0,
			wantScales: []uint8{0},
			wantCodes:  make([]uint8, 16),
		},
		{
			// amax = 2688 gives global 1, the scale 448 and x/D = x/448.
			name:       "hand-checked block",
			src:        []float32{2688, -2688, 448, -224, 112, 0, 1344, 1120, 896, 672, 2240, 1792, 1568, 336, 560, -1},
			wantGlobal: 1,
			wantScales: []uint8{0x7e},
			// x/448:      6, -6, 1, -0.5, 0.25→0, 0, 3, 2.5→2, 2, 1.5, 5→4, 4, 3.5→4, 0.75→1, 1.25→1, -0.002→-0
			wantCodes: []uint8{7, 0xf, 2, 0x9, 0, 0, 5, 4, 4, 3, 6, 6, 6, 2, 2, 0x8},
		},
		{
			// NaN and Inf do not count towards amax (2688 here): NaN stores
			// 0, Inf saturates to ±6.
			name:       "non-finite elements",
			src:        []float32{nan, inf, -inf, 2688, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
			wantGlobal: 1,
			wantScales: []uint8{0x7e},
			wantCodes:  []uint8{0, 7, 0xf, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		},
		{
			// Second block: amax_b/(6·global) = 2^-12, below half the
			// smallest e4m3 subnormal, so its scale and codes are 0.
			name: "block whose scale rounds to zero",
			src: append([]float32{2688, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
				-0x3p-11, 0x3p-12, -0x1p-11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
			wantGlobal: 1,
			wantScales: []uint8{0x7e, 0},
			wantCodes:  append([]uint8{7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, make([]uint8, 16)...),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			packed, scales, global := quantize(tt.src)
			if global != tt.wantGlobal {
				t.Fatalf("global = %g, want %g", global, tt.wantGlobal)
			}
			for b := range scales {
				if scales[b] != tt.wantScales[b] {
					t.Errorf("scale %d = %#x, want %#x", b, scales[b], tt.wantScales[b])
				}
			}
			for i := range tt.src {
				if got := unpack(packed, i); got != tt.wantCodes[i] {
					t.Errorf("element %d (%g): code %#x, want %#x", i, tt.src[i], got, tt.wantCodes[i])
				}
			}
		})
	}
}

func TestNVFP4Bytes(t *testing.T) {
	tests := []struct{ n, want int }{
		{0, 0}, {16, 9}, {32, 18}, {1 << 20, 1<<19 + 1<<16}, {1, 2}, {17, 11}, {15, 9},
	}
	for _, tt := range tests {
		if got := NVFP4Bytes(tt.n); got != tt.want {
			t.Errorf("NVFP4Bytes(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
}

// FuzzNVFP4 quantises arbitrary float32 data: it must not panic, must match
// the step-by-step reference, and must round-trip blocks with normal scales.
func FuzzNVFP4(f *testing.F) {
	seed := func(xs ...float32) []byte {
		b := make([]byte, 4*len(xs))
		for i, x := range xs {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		return b
	}
	f.Add(seed(1, 2, 3, -4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 1e-9))
	f.Add(seed(0, 0, 0))
	f.Add(seed(float32(math.NaN()), float32(math.Inf(1)), 1e38, -1e-40))
	f.Add(seed(0x1p-126, 0x1p-149, 3e-35))
	f.Fuzz(func(t *testing.T, data []byte) {
		src := make([]float32, len(data)/4)
		for i := range src {
			src[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		packed, scales, global := quantize(src)
		wantCodes, wantScales, wantGlobal := refQuantizeNVFP4(src)
		if global != wantGlobal && !(global != global && wantGlobal != wantGlobal) {
			t.Fatalf("global = %g, want %g", global, wantGlobal)
		}
		for b := range scales {
			if scales[b] != wantScales[b] {
				t.Fatalf("scale %d = %#x, want %#x", b, scales[b], wantScales[b])
			}
		}
		for i := range src {
			if got := unpack(packed, i); got != wantCodes[i] {
				t.Fatalf("element %d (%g): code %#x, want %#x", i, src[i], got, wantCodes[i])
			}
		}
		_ = dequantize(len(src), packed, scales, global)
	})
}

package cuda

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/replayssm/replayssm/numeric"
)

// The nvfp4 quantiser's quotients by one reciprocal a chunk (in
// replay_common.cu: nvfp4_write's chunk setup and nv_quotient) are checked
// here, on the CPU, as float32 arithmetic: nvQuotient below is the
// kernel's sequence operation for operation, each rounded once to float32
// (the fused multiply-adds through big.Float, so nothing rounds twice),
// against Go's float32 division, which is IEEE's. The kernel's own codes
// are checked against numeric's by TestReplayReadCopyIsNumerics on a GPU.

// roundF32 is x rounded to the nearest float32, ties to even (subnormals
// too: big.Float.Float32 rounds so).
func roundF32(x *big.Float) float32 {
	f, _ := x.Float32()
	return f
}

func bigF(f float32) *big.Float { return new(big.Float).SetPrec(256).SetFloat64(float64(f)) }

// fma32 is fmaf(a, b, c): a*b + c exactly, rounded once.
func fma32(a, b, c float32) float32 {
	if math.IsInf(float64(a), 0) || math.IsInf(float64(b), 0) || math.IsInf(float64(c), 0) ||
		math.IsNaN(float64(a)) || math.IsNaN(float64(b)) || math.IsNaN(float64(c)) {
		// No finite rounding to get wrong: float64 has the same
		// infinities and NaNs.
		return float32(math.FMA(float64(a), float64(b), float64(c)))
	}
	p := new(big.Float).SetPrec(256).Mul(bigF(a), bigF(b))
	return roundF32(p.Add(p, bigF(c)))
}

// rcp32 is __frcp_rn(d): 1/d rounded once.
func rcp32(d float32) float32 {
	return roundF32(new(big.Float).SetPrec(256).Quo(bigF(1), bigF(d)))
}

// nvQuotient is nvfp4_write's per-chunk setup (the chunk and d scaled by
// sc) and nv_quotient, as the kernel computes them under NV_QDIV.
func nvQuotient(v, d float32) float32 {
	sc := float32(1)
	if d < 0x1p-90 {
		sc = 0x1p100
	} else if d > 0x1p90 {
		sc = 0x1p-100
	}
	d2 := float32(d * sc)
	rd := rcp32(d2)
	x := float32(v * sc)
	q0 := float32(x * rd)
	rem := fma32(-q0, d2, x)
	q1 := fma32(rem, rd, q0)
	if math.Abs(float64(q0)) < 0.125 || rem != rem {
		return q0
	}
	return q1
}

// TestNVFP4Quotient checks that nvQuotient gives every element the e2m1
// code that numeric.QuantizeNVFP4's division gives it, and the quotient
// itself, bit for bit, wherever it is not below 1/8. The divisors are
// the quantiser's own, d = e4m3(s)*g for every nonzero scale code s and
// global scales from subnormal to 2^100; the dividends are elements at
// and beside every midpoint and grid value of e2m1 times d (the ties),
// uniform ones up to the block maximum, signed zeros, subnormals,
// infinities and NaN.
func TestNVFP4Quotient(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 33))
	points := []float32{0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 7}
	specials := []float32{0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32,
		0x1p-130, -0x1p-127, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())}
	// Global scales: amax/2688 for amax across the float32 range (a
	// subnormal g included), and random ones.
	var globals []float32
	for e := -149; e <= 100; e += 7 {
		globals = append(globals, float32(math.Ldexp(1+rng.Float64(), e)))
	}
	for range 8 {
		globals = append(globals, float32(rng.NormFloat64()*10)/2688)
	}
	checked, exact := 0, 0
	for _, g := range globals {
		g = float32(math.Abs(float64(g)))
		if g == 0 {
			continue
		}
		for s := uint8(1); s < 0x7f; s++ {
			d := float32(numeric.F32FromE4M3(s) * g)
			if d == 0 || math.IsInf(float64(d), 0) {
				continue
			}
			var vs []float32
			for _, p := range points {
				c := float32(p * d)
				if math.IsInf(float64(c), 0) {
					continue
				}
				for k := -3; k <= 3; k++ {
					x := c
					for range absInt(k) {
						x = math.Nextafter32(x, float32(k)*float32(math.Inf(1)))
					}
					vs = append(vs, x, -x)
				}
			}
			for range 16 {
				vs = append(vs, float32((2*rng.Float64()-1)*7*float64(d)))
			}
			vs = append(vs, specials...)
			for _, v := range vs {
				want := v / d
				got := nvQuotient(v, d)
				checked++
				if wc, gc := numeric.E2M1FromF32(want), numeric.E2M1FromF32(got); wc != gc {
					t.Fatalf("v=%g (%#08x) d=%g (%#08x): e2m1 %#x by division, %#x by reciprocal (quotients %g, %g)",
						v, math.Float32bits(v), d, math.Float32bits(d), wc, gc, want, got)
				}
				if math.Abs(float64(got)) >= 0.125 && !math.IsInf(float64(v), 0) && !math.IsNaN(float64(v)) {
					exact++
					if math.Float32bits(got) != math.Float32bits(want) {
						t.Fatalf("v=%g d=%g: quotient %g (%#08x) by reciprocal, %g (%#08x) by division",
							v, d, got, math.Float32bits(got), want, math.Float32bits(want))
					}
				}
			}
		}
	}
	// Enough of both kinds that the test means something.
	if checked < 100000 || exact < checked/2 {
		t.Fatalf("only %d quotients checked, %d of them exactly", checked, exact)
	}
	t.Logf("%d quotients, %d compared bit for bit", checked, exact)
}

func absInt(k int) int {
	if k < 0 {
		return -k
	}
	return k
}

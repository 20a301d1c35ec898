package cuda

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// codecKernel is appended to a replay module's source: each thread encodes
// four floats through encode_chunk (the path every flush and read copy
// stores by) as e4m3 with unit scale and as bf16, and writes the codes and
// the values encode_chunk leaves behind (what a read gives back).
const codecKernel = `
extern "C" __global__ void codec_check(const float* __restrict__ in, u32* __restrict__ e4m3,
                                       float* __restrict__ back, u32* __restrict__ bf16, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (4 * i + 3 >= n) {
        return;
    }
    float v[4], u[4];
    for (int k = 0; k < 4; k++) {
        v[k] = u[k] = in[4 * i + k];
    }
    u32 w[1], b[2];
    encode_chunk<FMT_E4M3, 4>(w, v, 1.0f, 1.0f);
    encode_chunk<FMT_BF16, 4>(b, u, 1.0f, 1.0f);
    e4m3[i] = w[0];
    for (int k = 0; k < 4; k++) {
        back[4 * i + k] = v[k];
    }
    bf16[2 * i] = b[0];
    bf16[2 * i + 1] = b[1];
}
`

// codecInputs are the floats the codec test encodes: every e4m3 value of
// either sign, the midpoints between neighbours (the ties) and the floats
// next to them, the saturation region up to infinity, NaNs of both signs,
// float32 subnormals, zeros, and random floats across e4m3's range and
// beyond; a multiple of four.
func codecInputs(rng *rand.Rand) []float32 {
	var in []float32
	var vals []float32
	for c := range 0x7f { // 0x7f is NaN
		vals = append(vals, numeric.F32FromE4M3(uint8(c)))
	}
	vals = append(vals, 480) // the code past 448 that e4m3fn lacks
	for i, v := range vals {
		in = append(in, v, -v, math.Nextafter32(v, 0), math.Nextafter32(v, 1e9))
		if i+1 < len(vals) {
			m := float32((float64(v) + float64(vals[i+1])) / 2)
			in = append(in, m, -m, math.Nextafter32(m, 0), math.Nextafter32(m, 1e9))
		}
	}
	nan := float32(math.NaN())
	in = append(in, float32(math.Inf(1)), float32(math.Inf(-1)), nan, -nan, 0, float32(math.Copysign(0, -1)),
		math.Float32frombits(1), math.Float32frombits(0x807fffff), 1e30, -1e30, math.MaxFloat32, 464, 464.0001, -463.9999)
	for range 1 << 14 {
		e := rng.Float64()*40 - 24 // 2^-24 .. 2^16
		in = append(in, float32(math.Copysign(math.Exp2(e), rng.Float64()-0.5)))
		in = append(in, math.Float32frombits(rng.Uint32()))
	}
	for len(in)%4 != 0 {
		in = append(in, 1)
	}
	return in
}

// TestReplayCodecs checks the kernels' e4m3 and bf16 encoders
// (encode_chunk: the hardware conversions where the GPU has them) against numeric's, code for code, and the values they leave
// behind against numeric's decoders, bit for bit (NaN for NaN, of either
// sign in e4m3): the CPU cache and the conformance suite take numeric's
// codes as the truth.
func TestReplayCodecs(t *testing.T) {
	d := gpu(t)
	ctx := context.Background()
	plan, err := planMamba2(nanoShape, replay.Options{Mode: replay.Replay, State: numeric.E4M3}, d.props())
	if err != nil {
		t.Fatal(err)
	}
	src, err := replaySource(plan.file)
	if err != nil {
		t.Fatal(err)
	}
	m, err := d.Compile(ctx, plan.file, src+codecKernel, plan.options(4)...)
	if err != nil {
		t.Fatal(err)
	}
	fn, err := m.Function("codec_check")
	if err != nil {
		t.Fatal(err)
	}
	in := codecInputs(rand.New(rand.NewPCG(7, 32)))
	n := len(in)
	inB, e4B, backB, bfB := alloc(t, d, 4*n), alloc(t, d, n), alloc(t, d, 4*n), alloc(t, d, 2*n)
	must(t, d.Memset32(e4B, poisonF32))
	must(t, d.Memset32(backB, poisonF32))
	must(t, d.Memset32(bfB, poisonF32))
	must(t, d.CopyToDeviceF32(inB, in))
	var a Args
	a.Ptr(inB)
	a.Ptr(e4B)
	a.Ptr(backB)
	a.Ptr(bfB)
	a.I32(int32(n))
	s := stream(t, d)
	must(t, d.Launch(fn, [3]uint32{uint32((n/4 + 127) / 128), 1, 1}, [3]uint32{128, 1, 1}, 0, s, &a))
	must(t, s.Synchronize())
	e4 := make([]byte, n)
	must(t, d.CopyFromDevice(e4, e4B))
	back := make([]float32, n)
	must(t, d.CopyFromDeviceF32(back, backB))
	bf := make([]byte, 2*n)
	must(t, d.CopyFromDevice(bf, bfB))
	bad := 0
	nanCodes := map[byte]int{} // the e4m3 codes of NaN inputs
	bfNaNCodes := map[uint16]int{}
	for i, f := range in {
		want := numeric.E4M3FromF32(f)
		wantBack := numeric.F32FromE4M3(want)
		gotBack := back[i]
		sameBack := math.Float32bits(gotBack) == math.Float32bits(wantBack) ||
			math.IsNaN(float64(gotBack)) && math.IsNaN(float64(wantBack))
		sameCode := e4[i] == want
		if math.IsNaN(float64(f)) {
			// A NaN code of either sign: the kernels scale before they
			// encode (v times the inverse scale), and the GPU's multiply
			// returns the canonical, positive NaN.
			sameCode = e4[i]&0x7f == 0x7f
			nanCodes[e4[i]]++
		}
		if !sameCode || !sameBack {
			if bad++; bad <= 10 {
				t.Errorf("e4m3 of %v (%#08x): code %#02x, read back %v; want %#02x, %v", f, math.Float32bits(f), e4[i], gotBack, want, wantBack)
			}
		}
		wantBF := numeric.BF16FromF32(f)
		got := uint16(bf[2*i]) | uint16(bf[2*i+1])<<8
		if math.IsNaN(float64(f)) {
			bfNaNCodes[got]++
		}
		if math.IsNaN(float64(f)) && got&0x7f80 == 0x7f80 && got&0x7f != 0 {
			continue // a NaN is stored with the conversion's own NaN code
		}
		if got != wantBF {
			if bad++; bad <= 10 {
				t.Errorf("bf16 of %v (%#08x): %#04x; want %#04x", f, math.Float32bits(f), got, wantBF)
			}
		}
	}
	t.Logf("e4m3 codes of the NaN inputs: %v; bf16 codes of the NaN inputs: %#x", nanCodes, bfNaNCodes)
	if bad > 0 {
		t.Fatalf("%d of %d floats encoded otherwise than numeric", bad, n)
	}

	// round_bf16, which rounds a bf16 ring's inputs (replay.Options.Ring),
	// on the same floats, as its two arrays: the first n0 into one buffer,
	// the rest into another. numeric's bf16 value bit for bit, NaNs
	// included (f32_to_bf16 keeps numeric's NaN code); untouched past each
	// count. Counts that are not multiples of four and a grid of fewer
	// threads than elements exercise its tails and its stride.
	fn, err = m.Function("round_bf16")
	if err != nil {
		t.Fatal(err)
	}
	second := alloc(t, d, 4*n)
	back2 := make([]float32, n)
	for _, n0 := range []int{n / 2, n/2 - 3, n - 5} {
		n1 := n - n0 - 2 // the second array stops two short
		src1, err := inB.Slice(4*n0, 4*(n-n0))
		must(t, err)
		if n0%4 != 0 {
			// the second source must be 16-byte aligned (checkInput
			// asks the same of the caches' inputs): copy it to its own.
			src1 = alloc(t, d, 4*(n-n0))
			must(t, d.CopyToDeviceF32(src1, in[n0:]))
		}
		must(t, d.Memset32(backB, poisonF32))
		must(t, d.Memset32(second, poisonF32))
		a.Reset()
		a.Ptr(backB)
		a.Ptr(inB)
		a.I32(int32(n0))
		a.Ptr(second)
		a.Ptr(src1)
		a.I32(int32(n1))
		must(t, d.Launch(fn, [3]uint32{3, 2, 1}, [3]uint32{64, 1, 1}, 0, s, &a))
		must(t, s.Synchronize())
		must(t, d.CopyFromDeviceF32(back, backB))
		must(t, d.CopyFromDeviceF32(back2, second))
		check := func(got []float32, vals []float32, cnt int, which string) {
			for i, f := range vals {
				want := numeric.F32FromBF16(numeric.BF16FromF32(f))
				if i >= cnt {
					want = math.Float32frombits(poisonF32)
				}
				if math.Float32bits(got[i]) != math.Float32bits(want) {
					if bad++; bad <= 10 {
						t.Errorf("round_bf16 %s of %v (%#08x), %d elements: %#08x; want %#08x", which, f, math.Float32bits(f), cnt, math.Float32bits(got[i]), math.Float32bits(want))
					}
				}
			}
		}
		check(back, in, n0, "first array")
		check(back2, in[n0:], n1, "second array")
	}
	if bad > 0 {
		t.Fatalf("round_bf16: %d floats otherwise than numeric", bad)
	}
}

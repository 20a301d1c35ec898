package numeric_test

import (
	"fmt"

	"github.com/replayssm/replayssm/numeric"
)

func ExampleF16FromF32() {
	for _, x := range []float32{1, 0.1, 65504, 65520, 1e-8} {
		h := numeric.F16FromF32(x)
		fmt.Printf("%-7g -> %#04x -> %g\n", x, h, numeric.F32FromF16(h))
	}
	// Output:
	// 1       -> 0x3c00 -> 1
	// 0.1     -> 0x2e66 -> 0.099975586
	// 65504   -> 0x7bff -> 65504
	// 65520   -> 0x7c00 -> +Inf
	// 1e-08   -> 0x0000 -> 0
}

func ExampleBF16FromF32() {
	for _, x := range []float32{1, 0.1, 3.14159, 1e38} {
		h := numeric.BF16FromF32(x)
		fmt.Printf("%-7g -> %#04x -> %g\n", x, h, numeric.F32FromBF16(h))
	}
	// Output:
	// 1       -> 0x3f80 -> 1
	// 0.1     -> 0x3dcd -> 0.100097656
	// 3.14159 -> 0x4049 -> 3.140625
	// 1e+38   -> 0x7e96 -> 9.96921e+37
}

func ExampleE4M3FromF32() {
	// e4m3 saturates: 1000 and +Inf both become 448.
	for _, x := range []float32{1, 0.3, 1000, 0.001} {
		c := numeric.E4M3FromF32(x)
		fmt.Printf("%-6g -> %#02x -> %g\n", x, c, numeric.F32FromE4M3(c))
	}
	// Output:
	// 1      -> 0x38 -> 1
	// 0.3    -> 0x2a -> 0.3125
	// 1000   -> 0x7e -> 448
	// 0.001  -> 0x01 -> 0.001953125
}

func ExampleEncodeE4M3() {
	// A per-tensor scale maps the tensor's amax onto 448.
	src := []float32{0.02, -0.013, 0.0071, 0.0004}
	scale := float32(0.02) / 448
	codes := make([]uint8, len(src))
	numeric.EncodeE4M3(codes, src, 1/scale)
	back := make([]float32, len(src))
	numeric.DecodeE4M3(back, codes, scale)
	fmt.Printf("% x\n%.4g\n", codes, back)
	// Output:
	// 7e f9 72 51
	// [0.02 -0.01286 0.007143 0.0004018]
}

func ExampleQuantizeNVFP4() {
	src := make([]float32, 32)
	for i := range src {
		src[i] = float32(i%16-8) / 4 // -2 .. 1.75
	}
	src[20] = 12 // the tensor's amax, in the second block
	// The first block's scale rounds from 74.7 down to 72, so its -2 and
	// -1.75 saturate at -6·72·global; the second block's step is 0.5·2 = 1
	// below 2.
	packed := make([]byte, len(src)/2)
	scales := make([]uint8, len(src)/16)
	global := numeric.QuantizeNVFP4(packed, scales, src)
	dst := make([]float32, len(src))
	numeric.DequantizeNVFP4(dst, packed, scales, global)
	fmt.Printf("global %g, scales %g %g, %d bytes\n", global,
		numeric.F32FromE4M3(scales[0]), numeric.F32FromE4M3(scales[1]), numeric.NVFP4Bytes(len(src)))
	fmt.Println(dst[:8])
	fmt.Println(dst[16:24])
	// Output:
	// global 0.004464286, scales 72 448, 18 bytes
	// [-1.9285716 -1.9285716 -1.2857144 -1.2857144 -0.9642858 -0.6428572 -0.4821429 -0.3214286]
	// [-2 -2 -2 -1 12 -1 -0 -0]
}

func ExampleParseFormat() {
	f, err := numeric.ParseFormat("fp8")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(f, f.BitsPerElement())
	_, err = numeric.ParseFormat("fp7")
	fmt.Println(err)
	// Output:
	// fp8-e4m3 8
	// parse format "fp7": unknown number format
}

func ExampleStochastic() {
	// 1 + 2^-12 lies a quarter of the way from 1 to the next fp16 value,
	// 1 + 2^-10: a quarter of the roundings go up, and the mean is the input.
	s := numeric.NewStochastic(42)
	x := float32(1 + 1.0/4096)
	const n = 100000
	var sum float64
	up := 0
	for range n {
		v := numeric.F32FromF16(s.F16FromF32(x))
		if v > 1 {
			up++
		}
		sum += float64(v)
	}
	fmt.Printf("input %.5f, mean %.5f, rounded up %.2f, round to nearest %g\n",
		x, sum/n, float64(up)/n, numeric.F32FromF16(numeric.F16FromF32(x)))
	// Output:
	// input 1.00024, mean 1.00024, rounded up 0.25, round to nearest 1
}

package numeric

import (
	"math/rand/v2"
	"testing"
)

// benchN is the slice length the throughput benchmarks convert: 1M
// elements, 4 MiB of float32, larger than the L2 cache of typical cores.
const benchN = 1 << 20

func benchInput() []float32 {
	r := rand.New(rand.NewPCG(1, 2))
	src := make([]float32, benchN)
	for i := range src {
		src[i] = float32(r.NormFloat64())
	}
	return src
}

// BenchmarkEncode reports float32 input bytes per second for each encoder.
func BenchmarkEncode(b *testing.B) {
	src := benchInput()
	h := make([]uint16, benchN)
	c := make([]uint8, benchN)
	packed := make([]byte, benchN/2)
	scales := make([]uint8, benchN/NVFP4Block)
	s := NewStochastic(1)
	cases := []struct {
		name string
		run  func()
	}{
		{"F16", func() { EncodeF16(h, src) }},
		{"BF16", func() { EncodeBF16(h, src) }},
		{"E4M3", func() { EncodeE4M3(c, src, 64) }},
		{"E5M2", func() { EncodeE5M2(c, src, 1) }},
		{"NVFP4", func() { QuantizeNVFP4(packed, scales, src) }},
		{"StochasticF16", func() { s.EncodeF16(h, src) }},
		{"StochasticBF16", func() { s.EncodeBF16(h, src) }},
		{"StochasticE4M3", func() { s.EncodeE4M3(c, src, 64) }},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(4 * benchN)
			for b.Loop() {
				tc.run()
			}
		})
	}
}

// BenchmarkDecode reports float32 output bytes per second for each decoder.
func BenchmarkDecode(b *testing.B) {
	src := benchInput()
	dst := make([]float32, benchN)
	h16 := make([]uint16, benchN)
	hb := make([]uint16, benchN)
	c4 := make([]uint8, benchN)
	c5 := make([]uint8, benchN)
	packed := make([]byte, benchN/2)
	scales := make([]uint8, benchN/NVFP4Block)
	EncodeF16(h16, src)
	EncodeBF16(hb, src)
	EncodeE4M3(c4, src, 64)
	EncodeE5M2(c5, src, 1)
	global := QuantizeNVFP4(packed, scales, src)
	cases := []struct {
		name string
		run  func()
	}{
		{"F16", func() { DecodeF16(dst, h16) }},
		{"BF16", func() { DecodeBF16(dst, hb) }},
		{"E4M3", func() { DecodeE4M3(dst, c4, 1.0/64) }},
		{"E5M2", func() { DecodeE5M2(dst, c5, 1) }},
		{"NVFP4", func() { DequantizeNVFP4(dst, packed, scales, global) }},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(4 * benchN)
			for b.Loop() {
				tc.run()
			}
		})
	}
}

// TestBulkDoesNotAllocate holds the bulk codecs to their promise of no
// allocation: they run on the state cache's flush path.
func TestBulkDoesNotAllocate(t *testing.T) {
	src := benchInput()[:4096]
	dst := make([]float32, len(src))
	h := make([]uint16, len(src))
	c := make([]uint8, len(src))
	packed := make([]byte, len(src)/2)
	scales := make([]uint8, len(src)/NVFP4Block)
	s := NewStochastic(1)
	for name, f := range map[string]func(){
		"F16":        func() { EncodeF16(h, src); DecodeF16(dst, h) },
		"BF16":       func() { EncodeBF16(h, src); DecodeBF16(dst, h) },
		"E4M3":       func() { EncodeE4M3(c, src, 2); DecodeE4M3(dst, c, 0.5) },
		"E5M2":       func() { EncodeE5M2(c, src, 2); DecodeE5M2(dst, c, 0.5) },
		"NVFP4":      func() { DequantizeNVFP4(dst, packed, scales, QuantizeNVFP4(packed, scales, src)) },
		"Stochastic": func() { s.EncodeF16(h, src); s.EncodeBF16(h, src); s.EncodeE4M3(c, src, 2) },
	} {
		if n := testing.AllocsPerRun(3, f); n != 0 {
			t.Errorf("%s: %g allocations per run, want 0", name, n)
		}
	}
}

package replay

import (
	"sync"
	"testing"

	"github.com/replayssm/replayssm/numeric"
)

// BenchmarkStreamDotRows reads 256 MiB of 80×128 fp32 state matrices with
// the output-read kernel on two goroutines: the non-flush step's memory
// pattern. Compare its MB/s with `replayssm bench copy`.
func BenchmarkStreamDotRows(b *testing.B) {
	const rows, n = 80, 128
	const mats = (256 << 20) / (rows * n * 4)
	S := make([]float32, mats*rows*n)
	for i := range S {
		S[i] = float32(i % 7)
	}
	v := make([]float32, n)
	b.SetBytes(int64(len(S) * 4))
	for b.Loop() {
		var wg sync.WaitGroup
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out := make([]float32, rows)
				for m := w; m < mats; m += 2 {
					dotRows(S[m*rows*n:(m+1)*rows*n], n, v, out)
				}
			}()
		}
		wg.Wait()
	}
}

// BenchmarkStreamUpdateRows updates 256 MiB of 80×128 fp32 state matrices
// in place with the baseline kernel on two goroutines (bytes counted once;
// the traffic is read plus write).
func BenchmarkStreamUpdateRows(b *testing.B) {
	const rows, n = 80, 128
	const mats = (256 << 20) / (rows * n * 4)
	S := make([]float32, mats*rows*n)
	for i := range S {
		S[i] = float32(i % 7)
	}
	B, C, c := make([]float32, n), make([]float32, n), make([]float32, rows)
	b.SetBytes(int64(len(S) * 4))
	for b.Loop() {
		var wg sync.WaitGroup
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out := make([]float32, rows)
				for m := w * mats / 2; m < (w+1)*mats/2; m++ {
					updateRows(S[m*rows*n:(m+1)*rows*n], n, 0.99, c, B, C, out)
				}
			}()
		}
		wg.Wait()
	}
}

// BenchmarkCodecs measures the cache's own SIMD conversions (bytes of
// float32 per second) over 1M elements: the bf16, fp16 and fp8 checkpoint
// codecs, the nvfp4 read-copy quantiser a flush runs, and the fp8 scale's
// amax.
func BenchmarkCodecs(b *testing.B) {
	src := make([]float32, 1<<20)
	for i := range src {
		src[i] = float32(i%1000)*0.001 - 0.5
	}
	u16 := make([]uint16, len(src))
	packed, scales := make([]byte, len(src)/2), make([]byte, len(src)/16)
	b.Run("EncodeBF16", func(b *testing.B) {
		b.SetBytes(4 << 20)
		for b.Loop() {
			encodeBF16(u16, src)
		}
	})
	b.Run("DecodeBF16", func(b *testing.B) {
		b.SetBytes(4 << 20)
		for b.Loop() {
			decodeBF16(src, u16)
		}
	})
	b.Run("QuantizeNVFP4", func(b *testing.B) {
		b.SetBytes(4 << 20)
		for b.Loop() {
			quantizeNVFP4(packed, scales, src)
		}
	})
	u8 := make([]uint8, len(src))
	for _, bc := range []struct {
		name string
		f    func()
	}{
		{"EncodeF16", func() { encodeF16(u16, src) }},
		{"DecodeF16", func() { decodeF16(src, u16) }},
		{"EncodeE4M3", func() { encodeE4M3(u8, src, 100) }},
		{"DecodeE4M3", func() { decodeE4M3(src, u8, 0.01) }},
		{"AbsMax", func() { _ = absMax(src) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(4 << 20)
			for b.Loop() {
				bc.f()
			}
		})
	}
}

// BenchmarkStreamNVFP4Rows reads 252 MiB worth of fp32 state (63M elements)
// stored as nvfp4 (80×128 matrices) with the output-read kernel on two
// goroutines: the nvfp4 non-flush step's state read. SetBytes counts the
// fp32-equivalent bytes, so MB/s compares with BenchmarkStreamDotRows.
func BenchmarkStreamNVFP4Rows(b *testing.B) {
	const rows, n = 80, 128
	const mats = (256 << 20) / (rows * n * 4)
	m := patternNVFP4(b, rows*n, mats)
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(i%5) * 0.1
	}
	b.SetBytes(int64(mats * rows * n * 4))
	for b.Loop() {
		var wg sync.WaitGroup
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out := make([]float32, rows)
				rb := newReadBuffers(rows*n, n)
				for i := w; i < mats; i += 2 {
					readDots(m, i, rows, n, v, n, 1, out, &rb)
				}
			}()
		}
		wg.Wait()
	}
}

// BenchmarkNVFP4RowsCached runs the nvfp4 output read on one goroutine over
// a few 80×128 matrices that stay in L2: the kernel's compute rate without
// memory traffic (fp32-equivalent bytes, as BenchmarkStreamNVFP4Rows).
func BenchmarkNVFP4RowsCached(b *testing.B) {
	const rows, n, mats = 80, 128, 16
	for _, nv := range []int{1, 2} {
		b.Run(map[int]string{1: "one", 2: "pair"}[nv], func(b *testing.B) {
			m := patternNVFP4(b, rows*n, mats)
			V := make([]float32, 2*n)
			for i := range V {
				V[i] = float32(i%5) * 0.1
			}
			out := make([]float32, 2*rows)
			rb := newReadBuffers(rows*n, n)
			b.SetBytes(int64(mats * rows * n * 4))
			for b.Loop() {
				for i := 0; i < mats; i++ {
					readDots(m, i, rows, n, V, n, nv, out, &rb)
				}
			}
		})
	}
}

// patternNVFP4 stores mats nvfp4 matrices of elems elements, each the same
// fixed pattern of small integers.
func patternNVFP4(b *testing.B, elems, mats int) *matrices {
	m, err := newMatrices(numeric.NVFP4, elems, mats)
	if err != nil {
		b.Fatal(err)
	}
	src := make([]float32, elems)
	for i := range src {
		src[i] = float32(i%13) - 6
	}
	for i := 0; i < mats; i++ {
		m.store(i, src, nil)
	}
	return m
}

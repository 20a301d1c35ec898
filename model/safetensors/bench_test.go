package safetensors

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkDecodeFloat32 measures conversion throughput per source dtype;
// bytes/s counts the float32 output, the size that lands in memory.
func BenchmarkDecodeFloat32(b *testing.B) {
	const n = 1 << 20
	rng := rand.New(rand.NewPCG(1, 1))
	for _, dt := range []DType{F32, BF16, F16, F8E4M3, F64} {
		src := make([]byte, n*dt.Size())
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		dst := make([]float32, n)
		b.Run(dt.String(), func(b *testing.B) {
			b.SetBytes(4 * n)
			for b.Loop() {
				if err := DecodeFloat32(dst, src, dt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkParseHeader parses the header of a file with as many tensors as a
// large shard (about 2000), the cost Open pays before any data is touched.
func BenchmarkParseHeader(b *testing.B) {
	var tensors []Tensor
	for i := range 2000 {
		tensors = append(tensors, Tensor{
			Name:  fmt.Sprintf("model.language_model.layers.%d.mlp.experts.%d.down_proj.weight", i/40, i%40),
			DType: BF16, Shape: []int{4, 2}, Data: make([]byte, 16),
		})
	}
	var buf bytes.Buffer
	if err := Write(&buf, tensors, map[string]string{"format": "pt"}); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := FromBytes("shard.safetensors", data); err != nil {
			b.Fatal(err)
		}
	}
}

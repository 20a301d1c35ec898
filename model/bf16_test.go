package model_test

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"unsafe"

	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/model/safetensors"
	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
)

// writeRounded copies the model in dir (config.json and model.safetensors)
// to a new directory with every tensor rounded to bfloat16, stored as dt
// (BF16, or F32 holding the rounded values: the same model converted to
// float32 first).
func writeRounded(tb testing.TB, dir string, dt safetensors.DType) string {
	tb.Helper()
	out := tb.TempDir()
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "config.json"), cfg, 0o644); err != nil {
		tb.Fatal(err)
	}
	src, err := safetensors.Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		tb.Fatal(err)
	}
	defer src.Close()
	var ts []safetensors.Tensor
	for _, name := range src.Names() {
		info, _ := src.Info(name)
		v, err := src.Float32(name)
		if err != nil {
			tb.Fatal(err)
		}
		data := make([]byte, dt.Size()*len(v))
		for i, f := range v {
			b := numeric.BF16FromF32(f)
			if dt == safetensors.BF16 {
				binary.LittleEndian.PutUint16(data[2*i:], b)
			} else {
				binary.LittleEndian.PutUint32(data[4*i:], uint32(b)<<16)
			}
		}
		ts = append(ts, safetensors.Tensor{Name: name, DType: dt, Shape: info.Shape, Data: data})
	}
	f, err := os.Create(filepath.Join(out, "model.safetensors"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := safetensors.Write(f, ts, nil); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// products is the CPU backend, counting the product weights placed on it
// by format.
type products struct {
	nn.Backend
	bytes  map[tensor.DType]int64
	values int64
}

func (p *products) Matrix(w tensor.Weights, rows, cols int) nn.Weight {
	p.bytes[w.DType()] += w.Bytes()
	p.values += int64(w.Len())
	return p.Backend.Matrix(w, rows, cols)
}

// TestBF16Checkpoint: a bfloat16 checkpoint's product weights stay
// bfloat16, in the mapped file (2 bytes a weight, no heap copy but the
// stacked projections), and give the logits of the same weights converted
// to float32 first, up to float32 sums' order.
func TestBF16Checkpoint(t *testing.T) {
	for _, fx := range []string{"qwen3_5", "nemotron_h", "qwen3_5_moe"} {
		t.Run(fx, func(t *testing.T) {
			fixture := filepath.Join("testdata", "fixtures", fx)
			bf := writeRounded(t, fixture, safetensors.BF16)
			f32 := writeRounded(t, fixture, safetensors.F32)

			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			d, err := model.Load(bf, model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			runtime.ReadMemStats(&after)
			heap := int64(after.TotalAlloc - before.TotalAlloc)

			be := &products{Backend: nn.CPU(), bytes: map[tensor.DType]int64{}}
			d.Place(be)
			if be.bytes[tensor.Float32] != 0 || be.bytes[tensor.BFloat16] != 2*be.values {
				t.Fatalf("product weights placed: %d bytes in float32, %d in bfloat16 for %d weights", be.bytes[tensor.Float32], be.bytes[tensor.BFloat16], be.values)
			}
			params := int64(d.Params())
			// The heap holds the float32 norms, vectors and conv kernels,
			// and the projections stacked into one (Qwen's GDN in_proj).
			t.Logf("%d parameters, %d product weights in %d bytes of bfloat16; %d bytes allocated while loading", params, be.values, be.bytes[tensor.BFloat16], heap)
			if heap >= 4*params {
				t.Errorf("loading allocated %d bytes, a float32 copy of the model or more (%d parameters)", heap, params)
			}

			want, err := model.Load(f32, model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer want.Close()
			if want.Embed.DType() != tensor.Float32 {
				t.Fatalf("an F32 checkpoint's embeddings bound as %v", want.Embed.DType())
			}
			got, ref := logits(t, d, be), logits(t, want, nn.CPU())
			if !inPlace(d) {
				t.Error("the embeddings are not the mapped checkpoint's bytes")
			}
			for r := range got {
				scale := 0.0
				for _, v := range ref[r] {
					scale = max(scale, math.Abs(float64(v)))
				}
				for i := range got[r] {
					if d := math.Abs(float64(got[r][i]-ref[r][i])) / scale; !(d <= 1e-5) {
						t.Fatalf("position %d logit %d: bfloat16 %v, float32 %v (%.1e of the largest)", r, i, got[r][i], ref[r][i], d)
					}
				}
			}
		})
	}
}

// inPlace reports whether d's embeddings are the bytes of its mapped
// checkpoint, not a copy.
func inPlace(d *nn.Decoder) bool {
	ckpt := d.Files.(*safetensors.Checkpoint)
	for _, name := range ckpt.Names() {
		if b, _ := ckpt.Bytes(name); len(b) == 2*d.Embed.Len() && &b[0] == (*byte)(unsafe.Pointer(&d.Embed.BF16[0])) {
			return true
		}
	}
	return false
}

// logits runs a short prompt through d on be and returns every position's
// logits.
func logits(t *testing.T, d *nn.Decoder, be nn.Backend) [][]float32 {
	t.Helper()
	d.Place(be)
	s, err := d.NewState(1, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q, err := s.Admit()
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{3, 17, 5, 99, 42, 8, 1, 64}
	rows := make([]nn.Row, len(prompt))
	for i, tok := range prompt {
		rows[i] = nn.Row{Seq: q, Token: tok % d.Vocab, Logits: true}
	}
	out := make([]float32, len(prompt)*d.Vocab)
	if err := d.Forward(context.Background(), s, rows, out); err != nil {
		t.Fatal(err)
	}
	res := make([][]float32, len(prompt))
	for i := range res {
		res[i] = out[i*d.Vocab : (i+1)*d.Vocab]
	}
	return res
}

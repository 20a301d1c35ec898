package model_test

import (
	"context"
	"math"
	"testing"

	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/models"
	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
)

// TestLoadRandom instantiates every shipped target config with random
// weights at its layer shapes (two layers, a 512-token vocabulary and at
// most 4 experts, so that CI can hold it), checks that the weights are
// reproducible (in bfloat16, the float32 draw rounded) and that a forward
// pass gives finite logits that are not all equal.
func TestLoadRandom(t *testing.T) {
	for _, name := range models.Configs() {
		t.Run(name, func(t *testing.T) {
			b, err := models.Config(name)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := hfconfig.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			cfg.VocabSize = 512
			if m := &cfg.MoE; m.NumExperts > 4 {
				m.NumExperts, m.NumExpertGroups, m.TopKGroups = 4, 1, 1
				m.TopK = min(m.TopK, 2)
			}
			layers := min(2, len(cfg.Layers))
			d, err := model.LoadRandom(cfg, 1, layers, tensor.BFloat16)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Layers) != layers || d.Hidden != cfg.HiddenSize || d.Vocab != cfg.VocabSize {
				t.Fatalf("%d layers, hidden %d, vocab %d", len(d.Layers), d.Hidden, d.Vocab)
			}
			again, err := model.LoadRandom(cfg, 1, layers, tensor.Float32)
			if err != nil {
				t.Fatal(err)
			}
			if d.Embed.DType() != tensor.BFloat16 || again.Embed.DType() != tensor.Float32 {
				t.Fatalf("embeddings in %v and %v, want bf16 and fp32", d.Embed.DType(), again.Embed.DType())
			}
			if f := again.Embed.F32[1234]; d.Embed.BF16[1234] != numeric.BF16FromF32(f) || f == 0 {
				t.Fatalf("embedding not reproducible: bf16 %v, fp32 %v", d.Embed.At(1234), f)
			}
			if got, want := d.WeightBytes(d.Embed.DType().Size()), 2*int64(d.Params()); got != want {
				t.Errorf("weight bytes %d, want 2 a parameter: %d", got, want)
			}
			st, err := d.NewState(1, replay.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			q, err := st.Admit()
			if err != nil {
				t.Fatal(err)
			}
			logits := make([]float32, d.Vocab)
			rows := []nn.Row{{Seq: q, Token: 17}, {Seq: q, Token: 424, Logits: true}}
			if err := d.Forward(context.Background(), st, rows, logits); err != nil {
				t.Fatal(err)
			}
			lo, hi := math.Inf(1), math.Inf(-1)
			for _, v := range logits {
				if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
					t.Fatalf("non-finite logit %v", v)
				}
				lo, hi = min(lo, float64(v)), max(hi, float64(v))
			}
			if !(hi > lo) {
				t.Fatalf("logits all %v", lo)
			}
			t.Logf("%d layers %v, %.1fM parameters, logits in [%.3g, %.3g]", layers, cfg.Layers[:layers], float64(d.Params())/1e6, lo, hi)
		})
	}
}

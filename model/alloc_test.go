package model_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
)

// TestDecodeAllocs holds a decode step of every fixture to a small
// allocation budget: scratch comes from the state's arena, so only the
// attention layers' growing KV caches (amortised) and the goroutines of
// products large enough to split may allocate.
func TestDecodeAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts are noisy under -short -race runs")
	}
	for _, fx := range fixtures {
		d, err := model.Load(filepath.Join("testdata", "fixtures", fx), model.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, mode := range []replay.Mode{replay.Replay, replay.Baseline} {
			s, err := d.NewState(2, replay.Options{Mode: mode})
			if err != nil {
				t.Fatal(err)
			}
			q1, _ := s.Admit()
			q2, _ := s.Admit()
			logits := make([]float32, 2*d.Vocab)
			rows := []nn.Row{{Seq: q1, Token: 1, Logits: true}, {Seq: q2, Token: 2, Logits: true}}
			ctx := context.Background()
			if err := d.Forward(ctx, s, rows, logits); err != nil {
				t.Fatal(err)
			}
			got := testing.AllocsPerRun(64, func() {
				if err := d.Forward(ctx, s, rows, logits); err != nil {
					t.Fatal(err)
				}
			})
			s.Close()
			// A latent attention layer (not absorbed) expands its latents
			// over the whole history each step: a product and an attention
			// that split across goroutines as the history grows.
			budget := 2 + 2*float64(d.Config.Count(hfconfig.Attention)) + 4*float64(d.Config.Count(hfconfig.LatentAttention))
			if got > budget {
				t.Errorf("%s %v: %.2f allocations per decode step, budget %.1f", fx, mode, got, budget)
			}
		}
	}
}

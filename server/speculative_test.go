package server

import (
	"fmt"
	"sync"
	"testing"

	"github.com/replayssm/replayssm/engine/spec"
	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/models"
	"github.com/replayssm/replayssm/replay"
)

// TestSpeculativeServe: a server that speculates answers greedy requests
// with plain decoding's text, several at once, whole and streamed, with
// long prompts in chunks; requests beside them with log-probabilities or a
// penalty decode without drafts and are answered too, by an n-gram
// drafter, the model drafting for itself and its MTP head. The metrics
// count the drafts: every one accepted when the model drafts for itself.
func TestSpeculativeServe(t *testing.T) {
	dir, err := models.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	self, err := model.Load(dir, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		draft func(st *nn.State, capacity int) (spec.Drafter, error)
	}{
		{"ngram", func(*nn.State, int) (spec.Drafter, error) { return &spec.NGram{}, nil }},
		{"self", func(_ *nn.State, capacity int) (spec.Drafter, error) {
			return spec.NewDraftModel(self, capacity, 3, replay.Options{})
		}},
		{"mtp", func(st *nn.State, capacity int) (spec.Drafter, error) {
			head, err := model.LoadMTP(dir, self)
			if err != nil {
				return nil, err
			}
			return spec.NewMTP(head, self, st, capacity, 3)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, Config{Model: self, MaxBatch: 3, PrefillChunk: 4,
				Speculation: &Speculation{NewDrafter: tt.draft, Drafts: 3}})
			prompts := []string{mosesPrompt, "In the beginning", "Blessed are the", "And it came to pass"}
			got := make([]string, len(prompts))
			streamed := make([]string, len(prompts))
			var wg sync.WaitGroup
			for i, p := range prompts {
				body := fmt.Sprintf(`{"prompt":%q,"max_tokens":20,"temperature":0}`, p)
				wg.Go(func() {
					var c completion
					f.post(t, "/v1/completions", body, &c)
					got[i] = c.text()
				})
				wg.Go(func() {
					streamed[i], _, _ = f.stream(t, "/v1/completions", `{"stream":true,`+body[1:])
				})
			}
			var logprobs, penalty completion
			wg.Go(func() {
				f.post(t, "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":12,"temperature":0,"logprobs":2}`, mosesPrompt), &logprobs)
			})
			wg.Go(func() {
				f.post(t, "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":12,"temperature":0,"presence_penalty":1}`, mosesPrompt), &penalty)
			})
			wg.Wait()
			for i, p := range prompts {
				want, _, _ := f.greedy(t, f.cfg.Tokenizer.Encode(p), 20)
				if got[i] != want || streamed[i] != want {
					t.Errorf("%q: got %q, streamed %q, want %q", p, got[i], streamed[i], want)
				}
			}
			if want, _, _ := f.greedy(t, f.cfg.Tokenizer.Encode(mosesPrompt), 12); logprobs.text() != want {
				t.Errorf("with log-probabilities: got %q, want %q", logprobs.text(), want)
			}
			if penalty.Usage == nil || penalty.Usage.CompletionTokens == 0 {
				t.Errorf("with a penalty: %+v", penalty)
			}
			fams := f.scrape(t)
			drafted, ok1 := value(fams, "replayssm_spec_decode_num_draft_tokens_total", lbl("model_name", models.Default))
			accepted, ok2 := value(fams, "replayssm_spec_decode_num_accepted_tokens_total", lbl("model_name", models.Default))
			t.Logf("%v of %v drafts accepted", accepted, drafted)
			if !ok1 || !ok2 || drafted == 0 || accepted > drafted || (tt.name == "self" && accepted != drafted) {
				t.Errorf("draft tokens %v (%v), accepted %v (%v)", drafted, ok1, accepted, ok2)
			}
			if ss := f.s.eng.SpecStats(); drafted != float64(ss.Drafted) || accepted != float64(ss.Accepted) {
				t.Errorf("draft tokens %v, accepted %v; the engine counted %+v", drafted, accepted, ss)
			}
		})
	}
}

package engine

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
)

// TestSamplerProcessing draws greedily from fixed logits with each
// penalty, bias and minimum length, several tokens in a row, and compares
// with the tokens worked out by hand from the definitions.
func TestSamplerProcessing(t *testing.T) {
	tests := []struct {
		name   string
		opt    SamplerOptions
		prompt []int
		logits []float32
		want   []int
	}{
		{"none", SamplerOptions{}, nil, []float32{1, 0.9, 0.8}, []int{0, 0, 0}},
		{"logit bias", SamplerOptions{LogitBias: map[int]float64{2: 0.5}}, nil, []float32{1, 0.9, 0.8}, []int{2, 2, 2}},
		// presence 0.15: 0 drawn → 0.85 < 0.9 → 1 → 0.85 beats 0.75 and 0.8 → 0, and stays.
		{"presence", SamplerOptions{PresencePenalty: 0.15}, nil, []float32{1, 0.9, 0.8}, []int{0, 1, 0, 0}},
		// frequency 0.06: 1 → 0.94 > 0.9 → 0 again → 0.88 < 0.9 → 1 → 0.84 (1) vs 0.88 (0) → 0.
		{"frequency", SamplerOptions{FrequencyPenalty: 0.06}, nil, []float32{1, 0.9, 0.8}, []int{0, 0, 1, 0}},
		// repetition 2 on the prompt's token 0: 2/2 = 1 < 1.5 → 1; then 1 is
		// penalised too: 1.5/2 = 0.75 < 1 → 0. Negative logits are
		// multiplied: −1·2 = −2 < −1.5 → 1; then −1.5·2 = −3 < −2 → 0.
		{"repetition positive", SamplerOptions{RepetitionPenalty: 2}, []int{0}, []float32{2, 1.5}, []int{1, 0}},
		{"repetition negative", SamplerOptions{RepetitionPenalty: 2}, []int{0}, []float32{-1, -1.5}, []int{1, 0}},
		{"min tokens", SamplerOptions{MinTokens: 2, Suppress: []int{0}}, nil, []float32{1, 0.9, 0.8}, []int{1, 1, 0, 0}},
	}
	for _, tt := range tests {
		s := NewSampler(tt.opt)
		s.Prompt(tt.prompt)
		var got []int
		for range tt.want {
			got = append(got, s.Sample(append([]float32(nil), tt.logits...)))
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: drew %v, want %v", tt.name, got, tt.want)
		}
		if s.Plain() != (tt.name == "none") {
			t.Errorf("%s: Plain() = %v", tt.name, s.Plain())
		}
	}
}

func TestSamplerProcessingValidate(t *testing.T) {
	for _, o := range []SamplerOptions{
		{RepetitionPenalty: -1}, {MinTokens: -1}, {LogitBias: map[int]float64{-3: 1}}, {Suppress: []int{-1}},
	} {
		if o.Validate() == nil {
			t.Errorf("%+v: accepted", o)
		}
	}
}

// TestLogprobs generates greedily on a fixture with log-probabilities: the
// first token's equals a float64 log-softmax of the logits Forward gives
// for the prompt, every chosen token is the top alternative, and the
// alternatives come likeliest first.
func TestLogprobs(t *testing.T) {
	d, err := model.Load(fixtureDir("qwen3_5"), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prompt := []int{5, 17, 33, 2, 9}
	var got []TokenLogprobs
	e, err := New(d, 1, replay.Options{Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	res, _, err := e.Generate(context.Background(), []Request{{Prompt: prompt, MaxTokens: 6, TopLogprobs: 3,
		OnLogprobs: func(lp TokenLogprobs) { got = append(got, lp) }}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(res[0].Tokens) {
		t.Fatalf("%d log-probabilities for %d tokens", len(got), len(res[0].Tokens))
	}
	for i, lp := range got {
		if lp.ID != res[0].Tokens[i] || len(lp.Top) != 3 || lp.Top[0] != lp.TokenLogprob || !(lp.Logprob <= 0) {
			t.Errorf("token %d: %+v for token %d", i, lp, res[0].Tokens[i])
		}
		for j := 1; j < len(lp.Top); j++ {
			if lp.Top[j].Logprob > lp.Top[j-1].Logprob {
				t.Errorf("token %d: alternatives out of order: %+v", i, lp.Top)
			}
		}
	}
	// The reference: the prompt's logits, log-softmax in float64.
	st, err := d.NewState(1, replay.Options{Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q, _ := st.Admit()
	var rows []nn.Row
	for i, id := range prompt {
		rows = append(rows, nn.Row{Seq: q, Token: id, Logits: i == len(prompt)-1})
	}
	logits := make([]float32, d.Vocab)
	if err := d.Forward(context.Background(), st, rows, logits); err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, l := range logits {
		sum += math.Exp(float64(l))
	}
	want := float64(logits[got[0].ID]) - math.Log(sum)
	if math.Abs(float64(got[0].Logprob)-want) > 1e-5 {
		t.Errorf("first token's log-probability %v, float64 reference %v", got[0].Logprob, want)
	}
}

// TestNonFiniteLogits: a model whose logits hold NaN fails the generation
// with a clear error instead of sampling garbage, whether the engine samples
// on the host (a penalty) or takes tokens where the model runs
// (Decoder.Greedy, Decoder.Sample).
func TestNonFiniteLogits(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sampling SamplerOptions
		want     string
	}{
		{"host", SamplerOptions{Temperature: 0.7, PresencePenalty: 0.5}, "non-finite value (NaN at token 3)"},
		{"sampled", SamplerOptions{Temperature: 0.7}, "row 0 of logits holds a non-finite value"},
		{"greedy", SamplerOptions{}, "row 0 of logits holds a non-finite value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := model.Load(fixtureDir("qwen3_5"), model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			// The loaded weights are read-only views of the checkpoint's
			// mapping: change a copy.
			w := slices.Clone(d.LMHead.W.F32)
			w[3*d.LMHead.In] = float32(math.NaN()) // token 3's logit
			d.LMHead.W = tensor.Weights{F32: w}
			if d.Tied {
				d.Embed = d.LMHead.W
			}
			e, err := New(d, 1, replay.Options{Window: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			_, _, err = e.Generate(context.Background(), []Request{{Prompt: []int{5, 17}, MaxTokens: 3, Sampling: tc.sampling}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

package engine

import (
	"fmt"
	"testing"
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

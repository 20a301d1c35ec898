package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
)

// countingBackend counts the draws a backend makes of whole batches.
type countingBackend struct {
	nn.Backend
	samples, argmaxes int
}

func (b *countingBackend) Sample(dst []int32, x nn.Tensor, p []nn.SampleParams) {
	b.samples++
	b.Backend.Sample(dst, x, p)
}

func (b *countingBackend) Argmax(dst []int32, x nn.Tensor) {
	b.argmaxes++
	b.Backend.Argmax(dst, x)
}

// TestSampleWhereModelRuns: seeded sampling drawn where the model runs
// (Decoder.Sample, here on the CPU backend) gives, token for token, what
// the host's sampler draws from downloaded logits with the same seeds,
// when the host path is forced by a logit bias of zero (which changes no
// logit) or by asking for log-probabilities; mixed batches of greedy and
// sampled sequences, with every kind of restriction.
func TestSampleWhereModelRuns(t *testing.T) {
	samplings := []SamplerOptions{
		{Temperature: 0.8, Seed: 1},
		{Temperature: 1.3, TopK: 5, Seed: 2},
		{Temperature: 0.9, TopP: 0.9, Seed: 3},
		{Temperature: 0.7, TopK: 20, TopP: 0.8, Seed: 4},
		{Seed: 5}, // greedy beside the others
		{Temperature: 2, TopP: 0.5, Seed: 6},
	}
	for _, fx := range []string{"qwen3_5", "nemotron_h"} {
		t.Run(fx, func(t *testing.T) {
			d, err := model.Load(fixtureDir(fx), model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			be := &countingBackend{Backend: nn.CPU()}
			d.Place(be)
			e, err := New(d, 3, replay.Options{Window: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			run := func(host func(*Request)) [][]int {
				var reqs []Request
				for i, s := range samplings {
					r := Request{Prompt: []int{3 + i, 17, 5 + 2*i}, MaxTokens: 24, Sampling: s}
					if host != nil {
						host(&r)
					}
					reqs = append(reqs, r)
				}
				res, _, err := e.Generate(context.Background(), reqs)
				if err != nil {
					t.Fatal(err)
				}
				var out [][]int
				for _, r := range res {
					out = append(out, r.Tokens)
				}
				return out
			}
			device := run(nil)
			if be.samples == 0 {
				t.Fatal("no batch was drawn where the model runs")
			}
			be.samples = 0
			for _, h := range []struct {
				name string
				set  func(*Request)
			}{
				{"zero bias", func(r *Request) { r.Sampling.LogitBias = map[int]float64{0: 0} }},
				{"log-probabilities", func(r *Request) { r.OnLogprobs = func(TokenLogprobs) {} }},
			} {
				host := run(h.set)
				if be.samples != 0 || be.argmaxes != 0 {
					t.Fatalf("%s: %d batches sampled and %d argmaxed on the backend, want the host's sampler", h.name, be.samples, be.argmaxes)
				}
				for i := range device {
					if !slices.Equal(device[i], host[i]) {
						t.Errorf("%s, %+v: on the backend %v, on the host %v", h.name, samplings[i], device[i], host[i])
					}
				}
			}
			distinct := map[string]bool{}
			for _, toks := range device {
				distinct[fmt.Sprint(toks)] = true
			}
			if len(distinct) < 3 {
				t.Errorf("the sequences drew only %d distinct continuations: %v", len(distinct), device)
			}
		})
	}
}

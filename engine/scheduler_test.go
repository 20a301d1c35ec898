package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/replayssm/replayssm/engine/spec"
	"github.com/replayssm/replayssm/replay"
)

// TestSchedulerMetamorphic: a greedy request's tokens are the tokens it
// gets alone (one sequence, whole prompt, no speculation), whatever runs
// beside it through the one loop: other greedy requests admitted as
// sequences free up, sampled ones, one with a penalty and one asking for
// log-probabilities (which moves the argmax from the model to the host);
// with prompts whole or in chunks of 3 or 5 tokens; without speculation,
// with an n-gram drafter and with the model drafting for itself; fed as a
// slice (Generate, GenerateSpeculative) or through a channel (Run).
func TestSchedulerMetamorphic(t *testing.T) {
	const T = 3
	for _, fx := range []string{"nemotron_h", "qwen3_5", "mamba2"} {
		t.Run(fx, func(t *testing.T) {
			ctx := context.Background()
			d := loadFixture(t, fx)
			prompts := specPrompts(t, fx)
			opt := StateOptions(replay.Options{Window: 4}, T)
			budget := func(i int) int { return 9 + 3*i }

			alone := make([][]int, len(prompts))
			e, err := New(d, 1, opt)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range prompts {
				res, _, err := e.Generate(ctx, []Request{{Prompt: p, MaxTokens: budget(i)}})
				if err != nil {
					t.Fatal(err)
				}
				alone[i] = res[0].Tokens
			}
			e.Close()

			// The greedy requests in reverse order, each followed by a
			// neighbour; want[k] is request k's tokens alone (nil: not
			// compared).
			var reqs []Request
			var want [][]int
			for i := len(prompts) - 1; i >= 0; i-- {
				r := Request{Prompt: prompts[i], MaxTokens: budget(i)}
				if i == 1 {
					r.OnLogprobs, r.TopLogprobs = func(TokenLogprobs) {}, 2
				}
				reqs, want = append(reqs, r), append(want, alone[i])
				other := Request{Prompt: prompts[(i+2)%len(prompts)], MaxTokens: 4 + i,
					Sampling: SamplerOptions{Temperature: 0.9, TopK: 20, Seed: uint64(i)}}
				if i == 3 {
					other.Sampling = SamplerOptions{RepetitionPenalty: 1.3}
				}
				reqs, want = append(reqs, other), append(want, nil)
			}

			for _, chunk := range []int{0, 3, 5} {
				for _, drafter := range []string{"none", "ngram", "self"} {
					for _, path := range []string{"slice", "channel"} {
						name := fmt.Sprintf("chunk %d, drafter %s, %s", chunk, drafter, path)
						e, err := New(d, 3, opt)
						if err != nil {
							t.Fatal(err)
						}
						e.PrefillChunk = chunk
						var sp *Speculation
						switch drafter {
						case "ngram":
							sp = &Speculation{Drafter: &spec.NGram{}, Drafts: T}
						case "self":
							dm, err := spec.NewDraftModel(d, 3, T, replay.Options{Window: 4})
							if err != nil {
								t.Fatal(err)
							}
							sp = &Speculation{Drafter: dm, Drafts: T}
						}
						got, err := generateVia(ctx, e, path, reqs, sp)
						if sp != nil {
							sp.Drafter.Close()
						}
						e.Close()
						if err != nil {
							t.Fatalf("%s: %v", name, err)
						}
						for k := range reqs {
							if want[k] != nil && !slices.Equal(got[k].Tokens, want[k]) {
								t.Errorf("%s: request %d:\n got %v\nwant %v (alone)", name, k, got[k].Tokens, want[k])
							}
							if got[k].Reason != StopLength && want[k] != nil {
								t.Errorf("%s: request %d stopped by %v", name, k, got[k].Reason)
							}
						}
					}
				}
			}
		})
	}
}

// generateVia runs reqs on e with speculation sp (nil: none) as Generate or
// GenerateSpeculative do (path "slice"), or through Run (path "channel").
func generateVia(ctx context.Context, e *Engine, path string, reqs []Request, sp *Speculation) ([]Result, error) {
	if path == "slice" {
		if sp == nil {
			res, _, err := e.Generate(ctx, reqs)
			return res, err
		}
		res, _, _, err := e.GenerateSpeculative(ctx, reqs, *sp)
		return res, err
	}
	jobs := make(chan *Job, len(reqs))
	res := make([]Result, len(reqs))
	errs := make([]error, len(reqs))
	for i, r := range reqs {
		jobs <- &Job{Request: r, Finish: func(r Result, err error) { res[i], errs[i] = r, err }}
	}
	close(jobs)
	if err := e.Run(ctx, jobs, sp); err != nil {
		return nil, err
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("request %d: %w", i, err)
		}
	}
	return res, nil
}

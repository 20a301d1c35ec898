package engine

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/replayssm/replayssm/engine/spec"
	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/model/safetensors"
	"github.com/replayssm/replayssm/replay"
)

var specFixtures = []string{"nemotron_h", "nemotron_h_dtclamp", "qwen3_5", "qwen3_5_moe", "qwen3_next", "mamba2"}

func loadFixture(t testing.TB, name string) *nn.Decoder {
	t.Helper()
	d, err := model.Load(fixtureDir(name), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// specPrompts are the fixture's five reference prompts and a repetitive one
// (for the n-gram drafter).
func specPrompts(t *testing.T, fx string) [][]int {
	ref, err := safetensors.Open(filepath.Join(fixtureDir(fx), "reference.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer ref.Close()
	var ps [][]int
	for i := range 5 {
		ps = append(ps, refIDs(t, ref, fmt.Sprintf("prompt.%d.ids", i)))
	}
	var rep []int
	for range 5 {
		rep = append(rep, 11, 250, 7, 93, 300, 42)
	}
	return append(ps, rep)
}

// TestSpeculativeGreedyMatchesGenerate: with greedy sampling and greedy
// acceptance, speculative output must be Generate's token for token, for
// every fixture, in replay and baseline modes, one sequence at a time and in
// mixed batches (requests of different lengths admitted as others finish),
// with drafters that are always right (the target itself), often wrong
// (another architecture; a truncated copy of the target) or hit-and-miss
// (n-gram).
func TestSpeculativeGreedyMatchesGenerate(t *testing.T) {
	const T = 3
	for _, fx := range specFixtures {
		t.Run(fx, func(t *testing.T) {
			t.Parallel()
			testSpeculativeGreedy(t, fx, T)
		})
	}
}

// testSpeculativeGreedy is one fixture's TestSpeculativeGreedyMatchesGenerate.
func testSpeculativeGreedy(t *testing.T, fx string, T int) {
	ctx := context.Background()
	d := loadFixture(t, fx)
	other := "mamba2"
	if fx == "mamba2" {
		other = "qwen3_5"
	}
	od := loadFixture(t, other)
	trunc := *d
	trunc.Layers = d.Layers[:2]
	prompts := specPrompts(t, fx)
	var reqs []Request
	for i, p := range prompts {
		reqs = append(reqs, Request{Prompt: p, MaxTokens: 14 + 2*i})
	}
	for _, mode := range []replay.Mode{replay.Replay, replay.Baseline} {
		opt := StateOptions(replay.Options{Mode: mode, Window: 4}, T)
		for _, capacity := range []int{1, 3} {
			e, err := New(d, capacity, opt)
			if err != nil {
				t.Fatal(err)
			}
			want, _, err := e.Generate(ctx, reqs)
			if err != nil {
				t.Fatal(err)
			}
			drafters := []struct {
				name string
				dec  *nn.Decoder // nil: n-gram
			}{{"ngram", nil}, {"self", d}, {other, od}, {"truncated", &trunc}}
			for _, dr := range drafters {
				name := fmt.Sprintf("%s/%v/batch%d/%s", fx, mode, capacity, dr.name)
				var drafter spec.Drafter = &spec.NGram{}
				if dr.dec != nil {
					if drafter, err = spec.NewDraftModel(dr.dec, capacity, T, replay.Options{Mode: mode}); err != nil {
						t.Fatal(err)
					}
				}
				got, _, ss, err := e.GenerateSpeculative(ctx, reqs, Speculation{Drafter: drafter, Drafts: T, Accept: spec.Greedy})
				drafter.Close()
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				for i := range reqs {
					if !slices.Equal(got[i].Tokens, want[i].Tokens) || got[i].Reason != want[i].Reason {
						t.Errorf("%s: request %d:\n got %v\nwant %v", name, i, got[i].Tokens, want[i].Tokens)
					}
				}
				switch dr.name {
				case "self":
					if ss.Accepted != ss.Drafted {
						t.Errorf("%s: the target drafting for itself had %d of %d drafts accepted", name, ss.Accepted, ss.Drafted)
					}
				case other, "truncated":
					if ss.Accepted == ss.Drafted {
						t.Errorf("%s: a mismatched draft model had every draft accepted (%d): rejections untested", name, ss.Drafted)
					}
				}
				if ss.Drafted == 0 {
					t.Errorf("%s: nothing drafted", name)
				}
			}
			e.Close()
		}
	}
}

// TestSpeculativeSampledGreedyAcceptance: greedy acceptance draws one sample
// per emitted token, as Generate does, so sampled output with the same seed
// is Generate's too. That needs bit-identical logits on both paths: the
// window is longer than the requests, so neither path folds its ring (a
// flush computes its output from the folded state, Generate's steps and the
// verify from checkpoint + ring: equal up to rounding, and a sample near a
// boundary of the inverse CDF may flip on a rounding difference). The
// prompts are one token each for the same reason: a longer one is
// prefilled into the checkpoint, and the step and the verify read a
// nonzero checkpoint in different orders of operations. Greedy identity
// across folds is TestSpeculativeGreedyMatchesGenerate's.
func TestSpeculativeSampledGreedyAcceptance(t *testing.T) {
	ctx := context.Background()
	d := loadFixture(t, "qwen3_5")
	e, err := New(d, 2, StateOptions(replay.Options{Window: 64}, 4))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var reqs []Request
	for i := range 4 {
		reqs = append(reqs, Request{Prompt: []int{3, 1, 4, 5}[i : i+1], MaxTokens: 24,
			Sampling: SamplerOptions{Temperature: 0.8, TopK: 50, Seed: uint64(i)}})
	}
	want, _, err := e.Generate(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	dm, err := spec.NewDraftModel(d, 2, 4, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dm.Close()
	got, _, ss, err := e.GenerateSpeculative(ctx, reqs, Speculation{Drafter: dm, Drafts: 4, Accept: spec.Greedy})
	if err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		if !slices.Equal(got[i].Tokens, want[i].Tokens) {
			t.Errorf("request %d:\n got %v\nwant %v", i, got[i].Tokens, want[i].Tokens)
		}
	}
	if ss.Accepted == 0 || ss.Accepted == ss.Drafted {
		t.Errorf("accepted %d of %d drafts: want some of each", ss.Accepted, ss.Drafted)
	}
}

// fixedDrafter proposes the same tokens for every sequence.
type fixedDrafter struct{ drafts []int }

func (f *fixedDrafter) Propose(_ context.Context, reqs []spec.Request) error {
	for i := range reqs {
		reqs[i].Drafts = append(reqs[i].Drafts[:0], f.drafts[:min(len(f.drafts), reqs[i].Max)]...)
	}
	return nil
}
func (f *fixedDrafter) Release(int) {}
func (f *fixedDrafter) Close()      {}

// chiSquareCritical is the upper 1e-4 quantile of the chi-square
// distribution with df degrees of freedom (Wilson–Hilferty; within 1% for
// df ≥ 10).
func chiSquareCritical(df int) float64 {
	const z = 3.719 // standard normal upper 1e-4 quantile
	k := float64(df)
	c := 1 - 2/(9*k) + z*math.Sqrt(2/(9*k))
	return k * c * c * c
}

// chiSquare bins counts against probabilities p (n draws), merging the
// tokens whose expected count is below 5 into one bin, and returns the
// statistic and its degrees of freedom.
func chiSquare(counts []int, p []float64, n int) (float64, int) {
	var stat, restP float64
	var restN, bins int
	for i := range p {
		e := p[i] * float64(n)
		if e < 5 {
			restP += p[i]
			restN += counts[i]
			continue
		}
		d := float64(counts[i]) - e
		stat += d * d / e
		bins++
	}
	if e := restP * float64(n); e > 0 {
		d := float64(restN) - e
		stat += d * d / e
		bins++
	}
	return stat, bins - 1
}

// TestSpeculativeStochasticDistribution: speculative rejection sampling
// must leave the target distribution intact. The first generated token of a
// fixture prompt, drawn through the engine under speculation (draft = the
// target's most likely token, accepted about half the time; rejections
// resample from the residual), is compared with the target's softmax by a
// chi-square test.
//
// Threshold: the statistic of a correct sampler follows chi-square with df
// degrees of freedom (bins with expected count ≥ 5, the rest merged); the
// test fails above the 1−1e-4 quantile, so a correct implementation fails
// for at most one seed in 10⁴ (the seed is fixed: it either passes or not,
// deterministically). The same statistic for two classic bugs — resampling
// from p instead of the residual, or always accepting — is checked to exceed
// the threshold by far, so the test has the power to see them.
func TestSpeculativeStochasticDistribution(t *testing.T) {
	ctx := context.Background()
	d := loadFixture(t, "mamba2")
	V := d.Vocab
	prompt := []int{17, 4, 250, 9, 88, 3, 120}
	const temp = 0.6
	sampling := SamplerOptions{Temperature: temp}
	// The target's distribution of the first token.
	e, err := New(d, 64, StateOptions(replay.Options{}, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	q, _ := e.State().Admit()
	var rows []nn.Row
	for i, id := range prompt {
		rows = append(rows, nn.Row{Seq: q, Token: id, Logits: i == len(prompt)-1})
	}
	logits := make([]float32, V)
	if err := d.Forward(ctx, e.State(), rows, logits); err != nil {
		t.Fatal(err)
	}
	_ = e.State().Evict(q)
	p := make([]float64, V)
	NewSampler(sampling).Probs(logits, p)
	top := 0
	for i := range p {
		if p[i] > p[top] {
			top = i
		}
	}
	t.Logf("draft token %d has target probability %.3f", top, p[top])

	const n = 2500
	reqs := make([]Request, n)
	for i := range reqs {
		s := sampling
		s.Seed = uint64(1000 + i)
		reqs[i] = Request{Prompt: prompt, MaxTokens: 2, Sampling: s}
	}
	res, _, ss, err := e.GenerateSpeculative(ctx, reqs, Speculation{Drafter: &fixedDrafter{drafts: []int{top, top}}, Drafts: 2, Accept: spec.Stochastic})
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, V)
	for _, r := range res {
		counts[r.Tokens[0]]++
	}
	stat, df := chiSquare(counts, p, n)
	crit := chiSquareCritical(df)
	t.Logf("chi-square %.1f with %d degrees of freedom (critical %.1f at 1e-4); %d of %d drafts accepted", stat, df, crit, ss.Accepted, ss.Drafted)
	if stat > crit {
		t.Errorf("first-token distribution differs from the target: chi-square %.1f > %.1f (df %d)", stat, crit, df)
	}

	// Power: the same statistic for two wrong samplers.
	wrong := func(name string, draw func(u1, u2 float64) int) {
		c := make([]int, V)
		rng := NewSampler(SamplerOptions{Temperature: 1, Seed: 5})
		for range n {
			c[draw(rng.Float64(), rng.Float64())]++
		}
		if s, _ := chiSquare(c, p, n); s < 10*crit {
			t.Errorf("%s: chi-square %.1f, want far above %.1f: the test cannot see this bug", name, s, crit)
		}
	}
	inverse := func(u float64, w func(i int) float64) int {
		var tot float64
		for i := range p {
			tot += w(i)
		}
		u *= tot
		for i := range p {
			if u -= w(i); u < 0 {
				return i
			}
		}
		return V - 1
	}
	wrong("resample from p", func(u1, u2 float64) int {
		if u1 < p[top] {
			return top
		}
		return inverse(u2, func(i int) float64 { return p[i] })
	})
	wrong("always accept", func(float64, float64) int { return top })
}

// TestSpeculativeStops: end tokens, budgets and callbacks stop a request in
// the middle of an accepted run of drafts.
func TestSpeculativeStops(t *testing.T) {
	ctx := context.Background()
	d := loadFixture(t, "mamba2")
	e, err := New(d, 2, StateOptions(replay.Options{}, 4))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	base, _, err := e.Generate(ctx, []Request{{Prompt: []int{1, 2, 3}, MaxTokens: 12}})
	if err != nil {
		t.Fatal(err)
	}
	ref := base[0].Tokens
	dm, err := spec.NewDraftModel(d, 2, 4, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dm.Close()
	n := 0
	end := ref[5]
	res, _, _, err := e.GenerateSpeculative(ctx, []Request{
		{Prompt: []int{1, 2, 3}, MaxTokens: 7},
		{Prompt: []int{1, 2, 3}, MaxTokens: 100, IsEnd: func(id int) bool { return id == end }},
		{Prompt: []int{1, 2, 3}, MaxTokens: 100, OnToken: func(int) bool { n++; return n < 6 }},
	}, Speculation{Drafter: dm, Drafts: 4})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res[0].Tokens, ref[:7]) || res[0].Reason != StopLength {
		t.Errorf("budget: %v (%v), want %v", res[0].Tokens, res[0].Reason, ref[:7])
	}
	if i := slices.Index(ref, end); !slices.Equal(res[1].Tokens, ref[:i+1]) || res[1].Reason != StopEnd {
		t.Errorf("end token: %v (%v), want %v", res[1].Tokens, res[1].Reason, ref[:i+1])
	}
	if !slices.Equal(res[2].Tokens, ref[:6]) || res[2].Reason != StopCallback {
		t.Errorf("callback: %v (%v), want %v", res[2].Tokens, res[2].Reason, ref[:6])
	}
	if _, _, _, err := e.GenerateSpeculative(ctx, []Request{{Prompt: []int{1}}}, Speculation{Drafter: dm, Drafts: 5}); err == nil {
		t.Error("5 drafts accepted by a state built for 4")
	}
}

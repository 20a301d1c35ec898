package spec

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"

	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
)

func TestNGram(t *testing.T) {
	tests := []struct {
		hist []int
		max  int
		want []int
	}{
		{[]int{1, 2, 3, 4, 1, 2, 3}, 3, []int{4, 1, 2}},             // 3-gram match, continues into the suffix
		{[]int{1, 2, 3, 9, 2, 3, 7, 1, 2, 3}, 2, []int{9, 2}},       // the 3-gram [1 2 3] wins over the later 2-gram
		{[]int{5, 6, 7, 8, 6, 7, 9, 0, 6, 7}, 4, []int{9, 0, 6, 7}}, // latest 2-gram
		{[]int{4, 4}, 3, []int{4, 4, 4}},                            // a cycle of period 1 repeats
		{[]int{1, 2, 1, 2}, 5, []int{1, 2, 1, 2, 1}},                // period 2, past the end of the history
		{[]int{1, 2, 3}, 3, nil},                                    // no earlier occurrence
		{[]int{7}, 3, nil},
		{[]int{1, 2, 1}, 0, nil},
	}
	g := &NGram{}
	for _, tc := range tests {
		reqs := []Request{{History: tc.hist, Max: tc.max}}
		if err := g.Propose(context.Background(), reqs); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(reqs[0].Drafts, tc.want) {
			t.Errorf("%v max %d: drafts %v, want %v", tc.hist, tc.max, reqs[0].Drafts, tc.want)
		}
	}
}

// tableTarget is a Target over fixed distributions.
type tableTarget struct {
	p   [][]float64
	rng *rand.Rand
}

func (t *tableTarget) Probs(j int) []float64 { return t.p[j] }
func (t *tableTarget) Float64() float64      { return t.rng.Float64() }
func (t *tableTarget) Sample(j int) int      { return draw(t.p[j], t.rng.Float64()) }

func draw(p []float64, u float64) int {
	for i, x := range p {
		if u -= x; u < 0 {
			return i
		}
	}
	return len(p) - 1
}

func TestAcceptGreedy(t *testing.T) {
	onehot := func(i int) []float64 { p := make([]float64, 4); p[i] = 1; return p }
	tg := &tableTarget{p: [][]float64{onehot(2), onehot(3), onehot(1)}, rng: rand.New(rand.NewPCG(1, 1))}
	for _, tc := range []struct {
		drafts   []int
		acc, tok int
	}{
		{[]int{2, 3}, 2, 1}, {[]int{2, 0}, 1, 3}, {[]int{1, 3}, 0, 2}, {nil, 0, 2},
	} {
		if acc, tok := Accept(Greedy, tg, tc.drafts, nil); acc != tc.acc || tok != tc.tok {
			t.Errorf("drafts %v: accepted %d then %d, want %d then %d", tc.drafts, acc, tok, tc.acc, tc.tok)
		}
	}
}

// TestAcceptStochasticPreservesTarget draws drafts from a draft distribution
// q (or takes a fixed draft: q one-hot) and checks that the first two
// emitted tokens are distributed as the target's p: the first by p0, the
// second (when the first draft was accepted, so it follows the draft) by
// p1. Chi-square with the 1−1e-4 quantile as threshold (see the engine's
// TestSpeculativeStochasticDistribution).
func TestAcceptStochasticPreservesTarget(t *testing.T) {
	p0 := []float64{0.05, 0.4, 0.1, 0.3, 0.15}
	p1 := []float64{0.25, 0.25, 0.2, 0.2, 0.1}
	q0 := []float32{0.3, 0.1, 0.4, 0.1, 0.1}
	q1 := []float32{0.1, 0.6, 0.1, 0.1, 0.1}
	const n = 200000
	for _, deterministic := range []bool{true, false} {
		t.Run(fmt.Sprint("deterministic=", deterministic), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 8))
			tg := &tableTarget{p: [][]float64{p0, p1, p1}, rng: rng}
			first := make([]int, 5)
			second := make([]int, 5) // after the first draft was accepted
			nSecond := 0
			for range n {
				var drafts []int
				var q [][]float32
				if deterministic {
					drafts = []int{3, 1}
				} else {
					drafts = []int{draw(f64(q0), rng.Float64()), draw(f64(q1), rng.Float64())}
					q = [][]float32{q0, q1}
				}
				acc, tok := Accept(Stochastic, tg, drafts, q)
				out := append(append([]int(nil), drafts[:acc]...), tok)
				first[out[0]]++
				if acc >= 1 && drafts[0] == 3 {
					second[out[1]]++
					nSecond++
				}
			}
			check := func(name string, counts []int, p []float64, n int) {
				var stat float64
				for i := range p {
					e := p[i] * float64(n)
					stat += (float64(counts[i]) - e) * (float64(counts[i]) - e) / e
				}
				// df 4: the upper 1e-4 quantile is 23.51.
				if stat > 23.51 {
					t.Errorf("%s: chi-square %.1f > 23.51: counts %v over %d, p %v", name, stat, counts, n, p)
				}
			}
			check("first token", first, p0, n)
			check("second token after draft 3", second, p1, nSecond)
		})
	}
}

func f64(q []float32) []float64 {
	out := make([]float64, len(q))
	for i, v := range q {
		out[i] = float64(v)
	}
	return out
}

// TestDraftModelFollowsHistory: a draft model that is the target itself
// proposes the target's greedy continuation, whatever prefix of its earlier
// proposals the history confirmed.
func TestDraftModelFollowsHistory(t *testing.T) {
	ctx := context.Background()
	d, err := model.Load(filepath.Join("..", "..", "model", "testdata", "fixtures", "qwen3_5"), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The greedy continuation, by plain decoding.
	prompt := []int{3, 14, 15, 92, 65}
	want := greedy(t, d, prompt, 40)

	dm, err := NewDraftModel(d, 2, 4, replay.Options{Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer dm.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	hist := append([]int(nil), prompt...)
	for len(hist) < len(prompt)+30 {
		reqs := []Request{{Seq: 1, History: hist, Max: 1 + rng.IntN(4)}}
		if err := dm.Propose(ctx, reqs); err != nil {
			t.Fatal(err)
		}
		g := len(hist) - len(prompt)
		if !slices.Equal(reqs[0].Drafts, want[g:g+reqs[0].Max]) {
			t.Fatalf("after %d tokens: drafts %v, want %v", g, reqs[0].Drafts, want[g:g+reqs[0].Max])
		}
		// Accept a random prefix, then the target's next token.
		a := rng.IntN(reqs[0].Max + 1)
		hist = append(hist, want[g:g+a+1]...)
	}
	dm.Release(1)
}

func greedy(t *testing.T, d *nn.Decoder, prompt []int, n int) []int {
	ctx := context.Background()
	st, err := d.NewState(1, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q, _ := st.Admit()
	lg := make([]float32, d.Vocab)
	var rows []nn.Row
	for i, id := range prompt {
		rows = append(rows, nn.Row{Seq: q, Token: id, Logits: i == len(prompt)-1})
	}
	var out []int
	for range n {
		if err := d.Forward(ctx, st, rows, lg); err != nil {
			t.Fatal(err)
		}
		best := 0
		for i, v := range lg {
			if v > lg[best] {
				best = i
			}
		}
		out = append(out, best)
		rows = []nn.Row{{Seq: q, Token: best, Logits: true}}
	}
	return out
}

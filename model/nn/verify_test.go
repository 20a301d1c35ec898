package nn_test

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/replayssm/replayssm/internal/ref64"
	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
)

var verifyFixtures = []string{"nemotron_h", "nemotron_h_dtclamp", "qwen3_5", "qwen3_5_moe", "qwen3_next", "mamba2"}

func loadFixture(t *testing.T, name string) *nn.Decoder {
	t.Helper()
	d, err := model.Load(filepath.Join("..", "testdata", "fixtures", name), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestVerifyCommitMatchesDecode feeds two sequences the same tokens two ways:
// one decode step at a time (Forward), and through verifies of random
// lengths whose rows past a random accepted prefix are junk tokens, committed
// with that prefix. Every accepted row's logits must equal the decode step's,
// in replay mode (across flushes and early flushes) and in baseline mode, with
// the two sequences verifying different counts in one call.
func TestVerifyCommitMatchesDecode(t *testing.T) {
	const T = 5 // verify positions
	modes := []struct {
		name string
		opt  replay.Options
	}{
		{"replay-w4", replay.Options{Mode: replay.Replay, Window: 4, MaxDraft: T}},
		{"replay-w16", replay.Options{Mode: replay.Replay, Window: 16, MaxDraft: T}},
		{"baseline", replay.Options{Mode: replay.Baseline, MaxDraft: T}},
	}
	ctx := context.Background()
	for _, fx := range verifyFixtures {
		d := loadFixture(t, fx)
		V := d.Vocab
		for _, m := range modes {
			t.Run(fx+"/"+m.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(1, 2))
				prompts := [][]int{{5, 9, 33, 2, 17, 101, 7}, {44, 3}}
				const steps = 30
				toks := make([][]int, 2)
				for q := range toks {
					for range steps {
						toks[q] = append(toks[q], rng.IntN(V))
					}
				}
				// Reference: prefill, then one decode step per token.
				ref, err := d.NewState(2, m.opt)
				if err != nil {
					t.Fatal(err)
				}
				defer ref.Close()
				want := make([][][]float32, 2) // [seq][i]: logits after toks[seq][i]
				for q := range 2 {
					s, _ := ref.Admit()
					var rows []nn.Row
					for _, id := range prompts[q] {
						rows = append(rows, nn.Row{Seq: s, Token: id})
					}
					if err := d.Forward(ctx, ref, rows, nil); err != nil {
						t.Fatal(err)
					}
					for _, id := range toks[q] {
						lg := make([]float32, V)
						if err := d.Forward(ctx, ref, []nn.Row{{Seq: s, Token: id, Logits: true}}, lg); err != nil {
							t.Fatal(err)
						}
						want[q] = append(want[q], lg)
					}
				}

				st, err := d.NewState(2, m.opt)
				if err != nil {
					t.Fatal(err)
				}
				defer st.Close()
				seqs := make([]nn.Seq, 2)
				for q := range 2 {
					seqs[q], _ = st.Admit()
					var rows []nn.Row
					for _, id := range prompts[q] {
						rows = append(rows, nn.Row{Seq: seqs[q], Token: id})
					}
					if err := d.Forward(ctx, st, rows, nil); err != nil {
						t.Fatal(err)
					}
				}
				done := []int{0, 0}
				worst := 0.0
				for round := 0; done[0] < steps || done[1] < steps; round++ {
					var rows []nn.Row
					var cseq []nn.Seq
					var acc, first []int
					for q := range 2 {
						left := steps - done[q]
						if left == 0 || (round%3 == 2 && q == 1) {
							continue // sequence 1 sits out some rounds
						}
						n := 1 + rng.IntN(T)          // rows verified
						a := min(left, rng.IntN(n+1)) // rows that are the true tokens
						first = append(first, len(rows))
						for k := range n {
							id := rng.IntN(V)
							if k < a {
								id = toks[q][done[q]+k]
							}
							rows = append(rows, nn.Row{Seq: seqs[q], Token: id, Logits: true})
						}
						cseq = append(cseq, seqs[q])
						acc = append(acc, a)
					}
					// Interleave the sequences' rows: order within one
					// sequence is what counts.
					if len(cseq) == 2 && round%2 == 0 {
						rows = interleave(rows, first[1])
					}
					lg := make([]float32, len(rows)*V)
					if err := d.Verify(ctx, st, rows, lg); err != nil {
						t.Fatal(err)
					}
					for i, q := range cseq {
						qi := 0
						if q == seqs[1] {
							qi = 1
						}
						k := 0
						for r, row := range rows {
							if row.Seq != q {
								continue
							}
							if k < acc[i] {
								rel := ref64.RelDiff(lg[r*V:(r+1)*V], want[qi][done[qi]+k])
								worst = max(worst, rel)
								if rel > 1e-4 {
									t.Fatalf("round %d seq %d token %d: logits differ from decode by %.2e", round, qi, done[qi]+k, rel)
								}
							}
							k++
						}
					}
					if err := d.Commit(st, cseq, acc); err != nil {
						t.Fatal(err)
					}
					for i, q := range cseq {
						qi := 0
						if q == seqs[1] {
							qi = 1
						}
						done[qi] += acc[i]
					}
				}
				for q := range 2 {
					if got, want := st.Len(seqs[q]), len(prompts[q])+steps; got != want {
						t.Errorf("sequence %d at position %d, want %d", q, got, want)
					}
				}
				t.Logf("worst relative logit difference %.2e", worst)
			})
		}
	}
}

// interleave merges rows[:split] and rows[split:] alternately.
func interleave(rows []nn.Row, split int) []nn.Row {
	a, b := rows[:split], rows[split:]
	var out []nn.Row
	for len(a) > 0 || len(b) > 0 {
		if len(a) > 0 {
			out = append(out, a[0])
			a = a[1:]
		}
		if len(b) > 0 {
			out = append(out, b[0])
			b = b[1:]
		}
	}
	return out
}

func TestVerifyErrors(t *testing.T) {
	d := loadFixture(t, "mamba2")
	ctx := context.Background()
	st, err := d.NewState(1, replay.Options{MaxDraft: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	q, _ := st.Admit()
	rows := []nn.Row{{Seq: q, Token: 1}, {Seq: q, Token: 2}, {Seq: q, Token: 3}}
	if err := d.Verify(ctx, st, rows, nil); err == nil {
		t.Error("verify of 3 rows with MaxDraft 2 accepted")
	}
	if err := d.Verify(ctx, st, rows[:2], nil); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(st, []nn.Seq{q}, []int{3}); err == nil {
		t.Error("commit of 3 rows after a verify of 2 accepted")
	}
	if err := d.Commit(st, []nn.Seq{q}, []int{2}); err != nil {
		t.Fatal(err)
	}
	if st.Len(q) != 2 {
		t.Errorf("position %d after committing 2, want 2", st.Len(q))
	}
}

// TestStateBytes checks the per-sequence accounting against the mamba2
// fixture's caches: one checkpoint plus the ring in replay mode, 1+MaxDraft
// states in baseline mode.
func TestStateBytes(t *testing.T) {
	d := loadFixture(t, "mamba2")
	r := d.StateBytes(replay.Options{Mode: replay.Replay, MaxDraft: 5})
	b := d.StateBytes(replay.Options{Mode: replay.Baseline, MaxDraft: 5})
	if r.Ring == 0 || b.Ring != 0 || b.States != 6*r.States || r.Conv != b.Conv || r.Conv == 0 {
		t.Errorf("replay %+v, baseline %+v", r, b)
	}
	// Every layer of the mamba2 fixture is a Mamba-2 mixer.
	if n := d.SSMLayers(); n != len(d.Layers) || n == 0 {
		t.Errorf("SSMLayers %d, the fixture has %d layers", n, len(d.Layers))
	}
}

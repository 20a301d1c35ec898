package engine

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/model/safetensors"
	"github.com/replayssm/replayssm/replay"
)

func TestSamplerGreedy(t *testing.T) {
	s := NewSampler(SamplerOptions{})
	if got := s.Sample([]float32{0, 3, 1, 3}); got != 1 {
		t.Fatalf("greedy picked %d, want 1 (first maximum)", got)
	}
	s = NewSampler(SamplerOptions{Temperature: 1, TopK: 1})
	if got := s.Sample([]float32{0, 1, 5, 2}); got != 2 {
		t.Fatalf("top-k 1 picked %d, want 2", got)
	}
}

func TestSamplerSeeded(t *testing.T) {
	logits := []float32{1, 2, 3, 2.5, 0.5, -1}
	draw := func(seed uint64) []int {
		s := NewSampler(SamplerOptions{Temperature: 1, Seed: seed})
		var ids []int
		for range 50 {
			ids = append(ids, s.Sample(logits))
		}
		return ids
	}
	a, b, c := draw(7), draw(7), draw(8)
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatal("same seed, different draws")
	}
	if fmt.Sprint(a) == fmt.Sprint(c) {
		t.Fatal("different seeds, same 50 draws")
	}
}

func TestSamplerSupport(t *testing.T) {
	logits := []float32{0, 4, 3, 2, 1, -1} // probabilities decrease 1 > 2 > 3 > 4 > 0 > 5
	tests := []struct {
		opt     SamplerOptions
		allowed string
	}{
		{SamplerOptions{Temperature: 1, TopK: 2}, "12"},
		{SamplerOptions{Temperature: 1, TopK: 3}, "123"},
		{SamplerOptions{Temperature: 1, TopP: 0.5}, "1"},  // p(1) ≈ 0.64
		{SamplerOptions{Temperature: 1, TopP: 0.8}, "12"}, // + p(2) ≈ 0.24
		{SamplerOptions{Temperature: 1, TopK: 4, TopP: 0.99}, "1234"},
		{SamplerOptions{Temperature: 1}, "012345"},
	}
	for _, tc := range tests {
		s := NewSampler(tc.opt)
		seen := map[int]bool{}
		for range 4000 {
			id := s.Sample(logits)
			if !strings.Contains(tc.allowed, fmt.Sprint(id)) {
				t.Fatalf("%+v: drew %d, allowed %s", tc.opt, id, tc.allowed)
			}
			seen[id] = true
		}
		if len(seen) != len(tc.allowed) {
			t.Errorf("%+v: drew %v, want every one of %s", tc.opt, seen, tc.allowed)
		}
	}
}

// TestSamplerDistribution checks the frequencies against softmax(logits/T).
func TestSamplerDistribution(t *testing.T) {
	logits := []float32{1, 0, -1, 0.5}
	const T, n = 0.7, 200000
	s := NewSampler(SamplerOptions{Temperature: T, Seed: 3})
	counts := make([]int, len(logits))
	for range n {
		counts[s.Sample(logits)]++
	}
	var z float64
	for _, l := range logits {
		z += math.Exp(float64(l) / T)
	}
	for i, l := range logits {
		p := math.Exp(float64(l)/T) / z
		got := float64(counts[i]) / n
		if math.Abs(got-p) > 5*math.Sqrt(p*(1-p)/n) {
			t.Errorf("token %d: frequency %.4f, probability %.4f", i, got, p)
		}
	}
}

func TestSamplerOptionsValidate(t *testing.T) {
	for _, o := range []SamplerOptions{{Temperature: -1}, {TopK: -2}, {TopP: 1.5}, {TopP: math.NaN()}} {
		if o.Validate() == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func TestStopText(t *testing.T) {
	tests := []struct {
		stops  []string
		pieces []string
		want   string
		stop   bool
	}{
		{[]string{"END"}, []string{"hello ", "E", "N", "D more"}, "hello ", true},
		{[]string{"END"}, []string{"hello ", "E", "N", "x"}, "hello ENx", false},
		{[]string{"\n\n", "###"}, []string{"a\n", "b##", "#c"}, "a\nb", true},
		{nil, []string{"a", "b"}, "ab", false},
	}
	for _, tc := range tests {
		st := NewStopText(tc.stops)
		var out strings.Builder
		stopped := false
		for _, p := range tc.pieces {
			e, s := st.Add(p)
			out.WriteString(e)
			if s {
				stopped = true
				break
			}
		}
		if !stopped {
			out.WriteString(st.Flush())
		}
		if out.String() != tc.want || stopped != tc.stop {
			t.Errorf("%q over %q: got %q stopped=%v, want %q stopped=%v", tc.stops, tc.pieces, out.String(), stopped, tc.want, tc.stop)
		}
	}
}

func fixtureDir(name string) string {
	return filepath.Join("..", "model", "testdata", "fixtures", name)
}

func refIDs(t *testing.T, f *safetensors.File, name string) []int {
	t.Helper()
	b, err := f.Bytes(name)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]int, len(b)/8)
	for i := range ids {
		ids[i] = int(int64(binary.LittleEndian.Uint64(b[8*i:])))
	}
	return ids
}

// TestGenerateGreedy runs the five fixture prompts through Generate with room
// for two sequences at a time, so prompts are admitted while others decode
// and prefill rows share forwards with decode rows, whole and in chunks of
// 3 and 7 tokens (Engine.PrefillChunk); every continuation must equal
// transformers' greedy tokens.
func TestGenerateGreedy(t *testing.T) {
	for _, fx := range []string{"nemotron_h", "qwen3_5", "qwen3_next", "mamba2"} {
		t.Run(fx, func(t *testing.T) {
			d, err := model.Load(fixtureDir(fx), model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ref, err := safetensors.Open(filepath.Join(fixtureDir(fx), "reference.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			e, err := New(d, 2, replay.Options{Window: 4})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			// Greedy takes the argmax where the model runs (Decoder.Greedy); a
			// temperature of 1e-6 samples there too (Decoder.Sample) and
			// picks the same tokens.
			for _, c := range []struct {
				chunk    int
				sampling SamplerOptions
			}{{0, SamplerOptions{}}, {0, SamplerOptions{Temperature: 1e-6, Seed: 3}}, {3, SamplerOptions{}}, {7, SamplerOptions{}}} {
				e.PrefillChunk = c.chunk
				sampling := c.sampling
				var reqs []Request
				for i := range 5 {
					reqs = append(reqs, Request{Prompt: refIDs(t, ref, fmt.Sprintf("prompt.%d.ids", i)), MaxTokens: 32, Sampling: sampling})
				}
				res, _, err := e.Generate(context.Background(), reqs)
				if err != nil {
					t.Fatal(err)
				}
				for i, r := range res {
					want := refIDs(t, ref, fmt.Sprintf("greedy.%d.ids", i))
					if fmt.Sprint(r.Tokens) != fmt.Sprint(want) || r.Reason != StopLength {
						t.Errorf("%+v, chunks of %d, prompt %d: got %v (%v), want %v", sampling, c.chunk, i, r.Tokens, r.Reason, want)
					}
				}
			}
			if st := e.Stats(); st.Flushes == 0 || st.Steps == 0 {
				t.Errorf("no flushes recorded: %+v", st)
			}
		})
	}
}

func TestGenerateStops(t *testing.T) {
	d, err := model.Load(fixtureDir("mamba2"), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(d, 1, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	n := 0
	res, _, err := e.Generate(context.Background(), []Request{
		{Prompt: []int{1, 2, 3}, MaxTokens: 100, OnToken: func(int) bool { n++; return n < 5 }},
		{Prompt: []int{4}, MaxTokens: 100, IsEnd: func(int) bool { return true }},
		{Prompt: []int{5}, MaxTokens: 3, Sampling: SamplerOptions{Temperature: 1, TopP: 0.9, Seed: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res[0].Tokens) != 5 || res[0].Reason != StopCallback {
		t.Errorf("callback stop: %+v", res[0])
	}
	if len(res[1].Tokens) != 1 || res[1].Reason != StopEnd {
		t.Errorf("end token: %+v", res[1])
	}
	if len(res[2].Tokens) != 3 || res[2].Reason != StopLength {
		t.Errorf("length: %+v", res[2])
	}
	if _, _, err := e.Generate(context.Background(), []Request{{}}); err == nil {
		t.Error("empty prompt accepted")
	}
}

// TestNLL checks teacher-forced NLL against reference.json's mean NLL.
func TestNLL(t *testing.T) {
	for _, fx := range []string{"nemotron_h", "nemotron_h_dtclamp", "qwen3_5", "qwen3_5_moe", "qwen3_next", "mamba2"} {
		t.Run(fx, func(t *testing.T) {
			d, err := model.Load(fixtureDir(fx), model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ref, err := safetensors.Open(filepath.Join(fixtureDir(fx), "reference.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			raw, err := os.ReadFile(filepath.Join(fixtureDir(fx), "reference.json"))
			if err != nil {
				t.Fatal(err)
			}
			var meta struct {
				PerPrompt []struct {
					NLL *float64 `json:"teacher_forced_mean_nll"`
				} `json:"per_prompt"`
			}
			if err := json.Unmarshal(raw, &meta); err != nil {
				t.Fatal(err)
			}
			e, err := New(d, 1, replay.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			for i, p := range meta.PerPrompt {
				if p.NLL == nil {
					continue
				}
				for _, chunk := range []int{0, 5} {
					sum, n, err := e.NLL(context.Background(), refIDs(t, ref, fmt.Sprintf("prompt.%d.ids", i)), chunk)
					if err != nil {
						t.Fatal(err)
					}
					if got := sum / float64(n); math.Abs(got-*p.NLL) > 1e-4**p.NLL {
						t.Errorf("prompt %d chunk %d: mean NLL %.7f, transformers %.7f", i, chunk, got, *p.NLL)
					}
				}
			}
		})
	}
}

// TestStepRows lays out steps of three prompts (5, 10 and 1 tokens) and a
// decoding sequence under a budget of 4 prompt tokens a step: chunks take
// what the budget leaves, never a last chunk of one token, never a chunk
// of one, and only rows that end a prompt or decode ask for logits.
func TestStepRows(t *testing.T) {
	sc := (&Engine{PrefillChunk: 4}).newScheduler(nil)
	for i, p := range [][]int{make([]int, 5), make([]int, 10), make([]int, 1), nil} {
		j := &Job{Request: Request{Prompt: p}}
		sc.running = append(sc.running, &sequence{job: j, seq: nn.Seq(i), hist: append(slices.Clone(p), 9)})
	}
	var steps []string
	for range 5 {
		prefill := sc.layout(true)
		per := make([]int, len(sc.running))
		for _, r := range sc.rows {
			per[r.Seq]++
		}
		steps = append(steps, fmt.Sprint(per, prefill, sc.asked))
	}
	want := []string{
		"[3 0 1 1] 4 [2 3]",     // 3 of 5, not 4 (that would leave 1); the 1-token prompt fits, the 10-token one does not
		"[2 2 1 1] 4 [0 2 3]",   // the 5-token prompt ends; 2 of the 10
		"[1 4 1 1] 4 [0 2 3]",   // 4 more
		"[1 4 1 1] 4 [0 1 2 3]", // the last 4
		"[1 1 1 1] 0 [0 1 2 3]", // every sequence decodes
	}
	if fmt.Sprint(steps) != fmt.Sprint(want) {
		t.Errorf("steps:\n got %q\nwant %q", steps, want)
	}
	// Under speculation the forward carries the prompts' chunks only.
	sc.running[1].done = 0
	if prefill := sc.layout(false); prefill != 4 || len(sc.rows) != 4 || fmt.Sprint(sc.asked) != "[]" {
		t.Errorf("speculation: %d prompt tokens in %d rows, asked %v; want 4 in 4, none", prefill, len(sc.rows), sc.asked)
	}
}

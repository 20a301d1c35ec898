package cuda

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/internal/ref64"
	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/model/nn/nntest"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
	"github.com/replayssm/replayssm/tokenizer"
)

// TestNNKernelsCompile compiles kernels/nn.cu with this machine's NVRTC (no
// GPU needed) and checks that every kernel NewNNBackend looks up is there.
func TestNNKernelsCompile(t *testing.T) {
	n, err := loadNVRTC(newSearchPlan(os.Getenv, nil))
	if err != nil {
		t.Skipf("no NVRTC on this machine (%v)", err)
	}
	src, err := KernelSource("nn.cu")
	if err != nil {
		t.Fatal(err)
	}
	best := 0
	for _, a := range n.archs {
		if a <= 90 {
			best = max(best, a)
		}
	}
	ptx, err := n.build("nn.cu", src, []string{fmt.Sprintf("--gpu-architecture=compute_%d", best), "--std=c++17"}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"nn_embed", "nn_embed_bf16", "nn_to_bf16", "nn_gemv_bf16", "nn_argmax", "nn_rmsnorm", "nn_rows", "nn_bias", "nn_gather", "nn_scatter", "nn_axpy_rows",
		"nn_unary", "nn_binary", "nn_mul_sigmoid_rows", "nn_clamp_delta", "nn_rope", "nn_kv_append", "nn_latent_move", "nn_attend", "nn_attend_combine", "nn_attend_mma_64", "nn_attend_mma_128", "nn_attend_tiles"} {
		if !strings.Contains(string(ptx), ".entry "+k+"(") {
			t.Errorf("no kernel %s", k)
		}
	}
}

func nnBackend(t *testing.T, weights DataType) *NNBackend {
	t.Helper()
	d := gpu(t)
	b, err := NewNNBackend(context.Background(), d, NNOptions{Weights: weights})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// TestNNBackend runs the nn.Backend conformance suite on the GPU: with
// float32 product weights, fp32 products by cuBLAS without TF32, so the
// CPU's bounds hold; with bfloat16 ones, the products (the matrix-vector
// kernel for one row, cuBLAS on rounded activations above) within 1e-2 of
// the row's largest value (weights and activations each within 2⁻⁹).
func TestNNBackend(t *testing.T) {
	t.Run("fp32", func(t *testing.T) { nntest.Run(t, nnBackend(t, Float32), nntest.Float32) })
	bf16 := nntest.Float32
	bf16.Product = 1e-2
	t.Run("bf16", func(t *testing.T) { nntest.Run(t, nnBackend(t, BFloat16), bf16) })
}

// TestNNModels runs every fixture architecture and both shipped models on
// the GPU and on the CPU, with float32 weights, over a prompt and 64 greedy
// steps, both fed the CPU's tokens: each position's logits within 1e-3 of
// the CPU's (‖Δ‖/‖cpu‖) and the same argmax, in replay and baseline mode.
func TestNNModels(t *testing.T) {
	be := nnBackend(t, Float32)
	for _, dir := range modelDirs() {
		for _, mode := range []replay.Mode{replay.Replay, replay.Baseline} {
			t.Run(filepath.Base(dir)+"/"+mode.String(), func(t *testing.T) {
				compareModel(t, dir, be, replay.Options{Mode: mode, Window: 4})
			})
		}
	}
}

// modelDirs lists the fixture architectures and the shipped models.
func modelDirs() []string {
	cfgs, _ := filepath.Glob("../../model/testdata/fixtures/*/config.json")
	cfgs = append(cfgs, "../../models/qwen35-kjv/config.json", "../../models/nemotronh-kjv/config.json")
	dirs := make([]string, len(cfgs))
	for i, c := range cfgs {
		dirs[i] = filepath.Dir(c)
	}
	return dirs
}

// loadPair loads the model in dir twice, placed on the CPU and on be.
func loadPair(t *testing.T, dir string, be nn.Backend) (cpu, onGPU *nn.Decoder) {
	t.Helper()
	return loadOn(t, dir, nn.CPU()), loadOn(t, dir, be)
}

// loadOn loads the model in dir placed on be.
func loadOn(t *testing.T, dir string, be nn.Backend) *nn.Decoder {
	t.Helper()
	d, err := model.Load(dir, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d.Place(be)
	if err := be.Err(); err != nil {
		t.Fatal(err)
	}
	return d
}

func compareModel(t *testing.T, dir string, be nn.Backend, opt replay.Options) {
	cpu, onGPU := loadPair(t, dir, be)
	const seqs = 2
	sc, err := cpu.NewState(seqs, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	sg, err := onGPU.NewState(seqs, opt)
	if errors.Is(err, ErrNoKDA) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer sg.Close()
	ctx := context.Background()
	var qs []nn.Seq
	for range seqs {
		a, err := sc.Admit()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sg.Admit(); err != nil {
			t.Fatal(err)
		}
		qs = append(qs, a)
	}
	V := cpu.Vocab
	// Two prompts in one pass, then decode steps of both together: 5 rows
	// for the per-row attention kernel and the sequential SSM prefill, 200
	// for the tiled attention (tiles of 32 rows, keys staged 32 at a time, a
	// short last tile) and the chunked SSM prefill (3 chunks of 64 and 8).
	var rows []nn.Row
	for i, q := range qs {
		n := []int{5, 200}[i]
		for p := range n {
			rows = append(rows, nn.Row{Seq: q, Token: (7*p + 13*i + 1) % V, Logits: p == n-1})
		}
	}
	worst := 0.0
	for step := range 65 {
		lc, lg := make([]float32, seqs*V), make([]float32, seqs*V)
		for i := range lg {
			lg[i] = float32(math.NaN())
		}
		if err := cpu.Forward(ctx, sc, rows, lc); err != nil {
			t.Fatal(err)
		}
		if err := onGPU.Forward(ctx, sg, rows, lg); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		rows = rows[:0]
		for i, q := range qs {
			c, g := lc[i*V:(i+1)*V], lg[i*V:(i+1)*V]
			rel := ref64.RelDiff(g, c)
			worst = max(worst, rel)
			if !(rel <= 1e-3) {
				t.Fatalf("step %d sequence %d: logits differ by %.3g of their norm", step, i, rel)
			}
			ac, ag := tensor.Argmax(c), tensor.Argmax(g)
			if ac != ag && math.Abs(float64(c[ac]-c[ag])) > 1e-4*math.Abs(float64(c[ac])) {
				t.Fatalf("step %d sequence %d: greedy token %d on the GPU, %d on the CPU (logits %v, %v)", step, i, ag, ac, c[ag], c[ac])
			}
			rows = append(rows, nn.Row{Seq: q, Token: ac, Logits: true})
		}
	}
	t.Logf("worst ‖Δ logits‖/‖logits‖ %.3g over 65 steps", worst)
}

// TestNNBF16Models runs the shipped models on the GPU with bfloat16
// weights, as users get them: the greedy continuations (device argmax) of
// the card's prompts match the CPU's float32 ones for 128 tokens, or part
// at a near-tie of the CPU's logits (within 2% of the largest), and the
// perplexity of the card's CI slice stays within 1% of transformers'.
func TestNNBF16Models(t *testing.T) {
	be := nnBackend(t, BFloat16)
	text, err := os.ReadFile("../../models/kjv-test.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"qwen35-kjv", "nemotronh-kjv"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("../../models", name)
			var card struct {
				Window       int
				Transformers map[string]struct {
					Windows    int
					Perplexity float64
				}
				GreedySamples []struct {
					PromptIDs []int `json:"prompt_ids"`
				} `json:"greedy_samples"`
			}
			raw, err := os.ReadFile(filepath.Join(dir, "eval.json"))
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &card); err != nil {
				t.Fatal(err)
			}
			before := be.WeightBytes()
			cpu, onGPU := loadPair(t, dir, be)
			// Two bytes a weight, but for the few float32 norms and biases.
			if placed, params := be.WeightBytes()-before, int64(onGPU.Params()); placed > 2*params+params/20 {
				t.Fatalf("placed %d bytes for %d weights: not bfloat16", placed, params)
			}
			opt := replay.Options{Mode: replay.Replay, Window: replay.DefaultWindow}
			for _, s := range card.GreedySamples {
				want := greedy(t, cpu, s.PromptIDs, 128, opt)
				got := greedy(t, onGPU, s.PromptIDs, 128, opt)
				k := 0
				for k < len(want) && got[k] == want[k] {
					k++
				}
				if k == len(want) {
					continue
				}
				lg := lastLogits(t, cpu, append(slices.Clone(s.PromptIDs), want[:k]...), opt)
				top := 0.0
				for _, v := range lg {
					top = max(top, math.Abs(float64(v)))
				}
				gap := float64(lg[want[k]] - lg[got[k]])
				t.Logf("prompt %v: token %d parts, GPU %d (CPU logit %.4f), CPU %d (%.4f)", s.PromptIDs, k, got[k], lg[got[k]], want[k], lg[want[k]])
				if gap > 0.02*top {
					t.Errorf("prompt %v: token %d is %d on the GPU, %d on the CPU, %.3g apart in the CPU's logits (largest %.3g): not a near-tie",
						s.PromptIDs, k, got[k], want[k], gap, top)
				}
			}
			tok, err := tokenizer.Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			ids := tok.Encode(string(text))
			ref := card.Transformers["test_slice"]
			eng, err := engine.New(onGPU, 1, opt)
			if err != nil {
				t.Fatal(err)
			}
			defer eng.Close()
			var sum float64
			var n int
			W := card.Window
			for w := range ref.Windows {
				s, c, err := eng.NLL(context.Background(), ids[w*W:(w+1)*W], W)
				if err != nil {
					t.Fatal(err)
				}
				sum, n = sum+s, n+c
			}
			ppl := math.Exp(sum / float64(n))
			rel := math.Abs(ppl-ref.Perplexity) / ref.Perplexity
			t.Logf("bf16 weights: perplexity %.4f, transformers (fp32) %.4f, %.2g apart", ppl, ref.Perplexity, rel)
			if !(rel <= 0.01) {
				t.Errorf("bf16 weights: perplexity %.4f, transformers %.4f: more than 1%% apart", ppl, ref.Perplexity)
			}
		})
	}
}

// greedy decodes n tokens after prompt with the engine (on the GPU the
// argmax is taken there).
func greedy(t *testing.T, d *nn.Decoder, prompt []int, n int, opt replay.Options) []int {
	t.Helper()
	eng, err := engine.New(d, 1, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	res, _, err := eng.Generate(context.Background(), []engine.Request{{Prompt: prompt, MaxTokens: n}})
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Tokens
}

// oneSequence is a state of d with one live sequence, closed when the test
// ends.
func oneSequence(t *testing.T, d *nn.Decoder, opt replay.Options) (*nn.State, nn.Seq) {
	t.Helper()
	st, err := d.NewState(1, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	q, err := st.Admit()
	if err != nil {
		t.Fatal(err)
	}
	return st, q
}

// lastLogits is the logits after ids.
func lastLogits(t *testing.T, d *nn.Decoder, ids []int, opt replay.Options) []float32 {
	t.Helper()
	st, q := oneSequence(t, d, opt)
	rows := make([]nn.Row, len(ids))
	for i, id := range ids {
		rows[i] = nn.Row{Seq: q, Token: id, Logits: i == len(ids)-1}
	}
	lg := make([]float32, d.Vocab)
	if err := d.Forward(context.Background(), st, rows, lg); err != nil {
		t.Fatal(err)
	}
	return lg
}

// BenchmarkNNMatMul times the decode step's products at Nemotron-3-Nano-4B's
// shapes with bfloat16 weights: the matrix-vector kernel against cuBLAS (on
// activations rounded to bfloat16) for one row, cuBLAS above. It reports
// the weights' bytes per second (the bound at few rows) and TFLOP/s, the
// median of 50 back-to-back runs (run it with -test.benchtime 1x).
func BenchmarkNNMatMul(b *testing.B) {
	d := gpu(b)
	be, err := NewNNBackend(context.Background(), d, NNOptions{Weights: BFloat16})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	mem := be.NewArena()
	defer mem.Close()
	timer, err := d.NewTimer(be.Stream())
	if err != nil {
		b.Fatal(err)
	}
	defer timer.Close()
	for _, sh := range []struct {
		name    string
		in, out int
		rows    []int
	}{{"in_proj", 3136, 17504, nil}, {"mlp_up", 3136, 12544, nil}, {"mlp_down", 12544, 3136, nil}, {"lm_head", 3136, 131072, nil},
		{"square", 8192, 8192, []int{8192}}} { // the tensor-core rate the others are a fraction of
		w := make([]float32, sh.in*sh.out)
		for i := range w {
			w[i] = float32(i%17) / 17
		}
		W := be.Matrix(tensor.Weights{F32: w}, sh.out, sh.in)
		rowsList := sh.rows
		if rowsList == nil {
			rowsList = []int{1, 2, 64, 256}
		}
		for _, rows := range rowsList {
			for _, path := range []struct {
				name string
				fn   *Function
			}{{"gemv", be.fn.gemvBF16}, {"cublas", nil}} {
				if path.fn != nil && rows > 1 {
					continue
				}
				b.Run(fmt.Sprintf("%s/rows=%d/%s", sh.name, rows, path.name), func(b *testing.B) {
					be.gemv = path.fn
					mem.Reset()
					x, y := mem.Zeros(rows, sh.in), mem.Zeros(rows, sh.out)
					tm, err := timer.Median(context.Background(), 50, func() error {
						be.MatMul(y, x, W, nn.Weight{})
						return be.Err()
					})
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(tm.GBps(int64(2*sh.in*sh.out)), "weight-GB/s")
					b.ReportMetric(2*float64(rows*sh.in*sh.out)/tm.Median.Seconds()/1e12, "TFLOP/s")
					b.ReportMetric(float64(tm.Median.Nanoseconds())/1e3, "us")
				})
			}
		}
	}
}

// TestNNPrefillThenDecode runs a Qwen3.5 fixture on the GPU twice: one
// forward over a whole sequence (logits at every position), and a prefill
// of its first half followed by one-token decode steps through the replay
// ring. The logits agree within 1e-4 of their norm at every position.
// (NemotronH is left out: its Δ clamp differs between the scan and decode
// paths by design, REFERENCE-NOTES point 1.)
func TestNNPrefillThenDecode(t *testing.T) {
	be := nnBackend(t, Float32)
	d := loadOn(t, "../../model/testdata/fixtures/qwen3_5", be)
	ids := []int{5, 17, 33, 2, 9, 41, 7, 7, 12, 30, 3, 18, 25, 6, 11, 40, 8, 19, 22, 1}
	V := d.Vocab
	opt := replay.Options{Mode: replay.Replay, Window: 4}
	run := func(split int) []float32 {
		st, q := oneSequence(t, d, opt)
		var out []float32
		step := func(lo, hi int) {
			rows := make([]nn.Row, 0, hi-lo)
			for i := lo; i < hi; i++ {
				rows = append(rows, nn.Row{Seq: q, Token: ids[i], Logits: true})
			}
			lg := make([]float32, len(rows)*V)
			if err := d.Forward(context.Background(), st, rows, lg); err != nil {
				t.Fatal(err)
			}
			out = append(out, lg...)
		}
		step(0, split)
		for i := split; i < len(ids); i++ {
			step(i, i+1)
		}
		return out
	}
	whole, split := run(len(ids)), run(len(ids)/2)
	for p := range len(ids) {
		if rel := ref64.RelDiff(split[p*V:(p+1)*V], whole[p*V:(p+1)*V]); !(rel <= 1e-4) {
			t.Errorf("position %d: prefill-then-decode logits differ from the whole forward by %.3g of their norm", p, rel)
		}
	}
}

// TestNNProfile checks the operation profile against what a forward must
// run: one state update per SSM layer and pass, products in every pass, and
// device times that are positive and no larger than the wall time.
func TestNNProfile(t *testing.T) {
	be := nnBackend(t, BFloat16)
	d := loadOn(t, "../../model/testdata/fixtures/qwen3_5", be)
	opt := replay.Options{Mode: replay.Replay, Window: 4}
	st, q := oneSequence(t, d, opt)
	be.Profile(true)
	const passes = 5
	start := time.Now()
	for i := range passes {
		rows := []nn.Row{{Seq: q, Token: 3 + i, Logits: true}}
		if err := d.Forward(context.Background(), st, rows, make([]float32, d.Vocab)); err != nil {
			t.Fatal(err)
		}
	}
	ops, err := be.OpTimes()
	wall := time.Since(start)
	be.Profile(false)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]OpTime{}
	var busy time.Duration
	for _, o := range ops {
		got[o.Op] = o
		busy += o.Time
		if o.Calls <= 0 || o.Time <= 0 {
			t.Errorf("%s: %d calls, %v", o.Op, o.Calls, o.Time)
		}
	}
	if n := got[opSSMStep].Calls; n != passes*d.SSMLayers() {
		t.Errorf("ssm-step ran %d times, want %d (%d passes × %d SSM layers)", n, passes*d.SSMLayers(), passes, d.SSMLayers())
	}
	if got[opGemv].Calls == 0 {
		t.Errorf("no one-row products in the profile: %v", ops)
	}
	if busy > wall {
		t.Errorf("the operations' device time %v exceeds the wall time %v", busy, wall)
	}
	if ops2, _ := be.OpTimes(); len(ops2) != 0 {
		t.Errorf("OpTimes did not reset: %v", ops2)
	}
}

// TestNNGraphs decodes two sequences step by step on a deferred backend,
// whose repeated steps run as CUDA graphs, and on an eager one, in both
// state modes, and requires the same logits at every step (‖Δ‖/‖eager‖ ≤
// 1e-6: the same kernels on the same inputs; cuBLAS may in principle pick
// another algorithm under capture) and most steps played as graphs.
func TestNNGraphs(t *testing.T) {
	d := gpu(t)
	eager, err := NewNNBackend(context.Background(), d, NNOptions{Weights: BFloat16, Eager: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { must(t, eager.Close()) })
	deferred := nnBackend(t, BFloat16)
	for _, dir := range modelDirs() {
		for _, mode := range []replay.Mode{replay.Replay, replay.Baseline} {
			t.Run(filepath.Base(dir)+"/"+mode.String(), func(t *testing.T) {
				opt := replay.Options{Mode: mode, Window: 4}
				const steps = 12
				var logits [2][][]float32
				for i, be := range []*NNBackend{eager, deferred} {
					m := loadOn(t, dir, be)
					before := be.Graphs()
					logits[i] = decodeSteps(t, m, opt, steps)
					after := be.Graphs()
					if be == deferred && after.Graphed-before.Graphed < steps-3 {
						t.Errorf("%d of %d decode steps ran as graphs (%+v)", after.Graphed-before.Graphed, steps, after)
					}
					if be == eager && after.Tapes != 0 {
						t.Errorf("the eager backend recorded tapes: %+v", after)
					}
				}
				for s := range logits[0] {
					if rel := ref64.RelDiff(logits[1][s], logits[0][s]); !(rel <= 1e-6) {
						t.Fatalf("step %d: graph logits differ from eager ones by %.3g of their norm", s, rel)
					}
				}
			})
		}
	}
}

// decodeSteps prefills two sequences with different prompts, then decodes
// steps greedy tokens for both, one pass per step, and returns every
// pass's logits.
func decodeSteps(t *testing.T, m *nn.Decoder, opt replay.Options, steps int) [][]float32 {
	t.Helper()
	st, err := m.NewState(2, opt)
	if errors.Is(err, ErrNoKDA) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var seqs [2]nn.Seq
	for i := range seqs {
		if seqs[i], err = st.Admit(); err != nil {
			t.Fatal(err)
		}
	}
	V := m.Vocab
	prompts := [2][]int{{5, 17, 33, 2, 9}, {41, 7, 12}}
	var rows []nn.Row
	for i, p := range prompts {
		for j, id := range p {
			rows = append(rows, nn.Row{Seq: seqs[i], Token: id % V, Logits: j == len(p)-1})
		}
	}
	var out [][]float32
	for range steps + 1 {
		lg := make([]float32, 2*V)
		if err := m.Forward(context.Background(), st, rows, lg); err != nil {
			t.Fatal(err)
		}
		out = append(out, lg)
		rows = rows[:0]
		for i := range seqs {
			rows = append(rows, nn.Row{Seq: seqs[i], Token: tensor.Argmax(lg[i*V : (i+1)*V]), Logits: true})
		}
	}
	return out
}

// TestNNEngineGraphs generates greedily at batch 1, 3 and 64 through the engine
// on the shipped models, as bench decode does, and requires that the decode
// steps run as graphs: a pass whose operations change from one step to the
// next (an address, an argument) would play op by op every time. A missed
// pass is logged with the first operation that differs from the last
// missed pass of the same length; a pass too short to capture, with its
// operations.
func TestNNEngineGraphs(t *testing.T) {
	be := nnBackend(t, BFloat16)
	tp := be.s.t
	type pass struct {
		key []byte
		at  []int
	}
	last := map[int]pass{}
	var longMisses, shortLogged int
	tp.missed = func(tp *tape) {
		names := make([]string, len(tp.ops))
		for i, op := range tp.ops {
			names[i] = fmt.Sprint(op.kind)
			if op.fn != nil {
				names[i] = op.fn.name
			}
		}
		if len(tp.ops) < tapeMinGraph {
			if shortLogged < 8 {
				shortLogged++
				t.Logf("a pass of %d operations, too short to capture: %v", len(tp.ops), names)
			}
			return
		}
		longMisses++
		if prev, ok := last[len(tp.ops)]; ok {
			for i := range tp.opKey {
				end, pend := len(tp.key), len(prev.key)
				if i+1 < len(tp.opKey) {
					end, pend = tp.opKey[i+1], prev.at[i+1]
				}
				if !bytes.Equal(tp.key[tp.opKey[i]:end], prev.key[prev.at[i]:pend]) {
					t.Logf("a pass of %d operations differs from the last first at operation %d (%s)", len(tp.ops), i, names[i])
					break
				}
			}
		} else {
			t.Logf("a pass of %d operations missed (timed %v)", len(tp.ops), tp.timed)
		}
		last[len(tp.ops)] = pass{bytes.Clone(tp.key), slices.Clone(tp.opKey)}
	}
	defer func() { tp.missed = nil }()
	for _, dir := range []string{"../../models/qwen35-kjv", "../../models/nemotronh-kjv"} {
		d := loadOn(t, dir, be)
		for _, B := range []int{1, 3, 64} {
			reqs := make([]engine.Request, B)
			for i := range reqs {
				reqs[i] = engine.Request{Prompt: []int{5 + i, 17, 33, 2, 9}, MaxTokens: 40}
			}
			// The first run sizes the backend's scratch; until then a pass
			// that outgrows it waits for the stream to free temporaries
			// and plays in pieces. The second run, on a fresh engine, is
			// the one measured.
			var before TapeStats
			for run := range 2 {
				eng, err := engine.New(d, B, replay.Options{})
				if err != nil {
					t.Fatal(err)
				}
				before, longMisses = be.Graphs(), 0
				_, _, err = eng.Generate(context.Background(), reqs)
				eng.Close()
				if err != nil {
					t.Fatalf("run %d: %v", run, err)
				}
			}
			after := be.Graphs()
			tapes, graphed := after.Tapes-before.Tapes, after.Graphed-before.Graphed
			ops, inGraphs := after.Ops-before.Ops, after.GraphedOps-before.GraphedOps
			t.Logf("%s batch %d: %d of %d passes as graphs, %d of %d operations", filepath.Base(dir), B, graphed, tapes, inGraphs, ops)
			// The prefill and the first two decode steps (seen once, then
			// captured) are the misses allowed.
			if longMisses > 3 {
				t.Errorf("%s batch %d: %d passes long enough to capture ran op by op, want at most the prefill and the first two steps", filepath.Base(dir), B, longMisses)
			}
		}
	}
}

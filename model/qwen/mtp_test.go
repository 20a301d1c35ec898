package qwen_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/internal/ref64"
	"github.com/replayssm/replayssm/internal/spectest"
	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/model/qwen"
	"github.com/replayssm/replayssm/model/safetensors"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
)

// mapSource serves random mtp.* tensors to qwen.BindMTP.
type mapSource map[string][]float32

func (m mapSource) Has(name string) bool { _, ok := m[name]; return ok }
func (m mapSource) Float32(name string, _ ...int) ([]float32, error) {
	t, ok := m[name]
	if !ok {
		return nil, safetensors.ErrNotFound
	}
	return append([]float32(nil), t...), nil
}

// headKind is the MTP head layer's feed-forward and how its experts are
// stored.
type headKind int

const (
	denseHead    headKind = iota // mlp.{gate,up,down}_proj
	moeHead                      // mlp.gate, mlp.experts.{e}.{gate,up,down}_proj, shared expert and gate
	moeHeadFused                 // the same experts as mlp.experts.gate_up_proj [E][2I][H], mlp.experts.down_proj [E][H][I]
)

// mtpWeights are a random head: w names every tensor as refMTP reads it
// (experts one by one), shape their shapes, and file is what a checkpoint
// stores (the fused layout packs the experts).
type mtpWeights struct {
	w     mapSource
	shape map[string][]int
	file  []string
}

func randomMTP(rng *rand.Rand, cfg *hfconfig.Config, kind headKind) *mtpWeights {
	H, ac := cfg.HiddenSize, cfg.Attention
	hd := ac.HeadDim
	m := &mtpWeights{w: mapSource{}, shape: map[string][]int{}}
	add := func(name string, scale float64, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		t := make([]float32, n)
		for i := range t {
			t[i] = float32(rng.NormFloat64() * scale)
		}
		m.w[name], m.shape[name] = t, shape
		m.file = append(m.file, name)
	}
	lp := "mtp.layers.0."
	add("mtp.fc.weight", 0.1, H, 2*H)
	for _, n := range []string{"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight",
		lp + "input_layernorm.weight", lp + "post_attention_layernorm.weight"} {
		add(n, 0.3, H)
	}
	add(lp+"self_attn.q_proj.weight", 0.15, 2*ac.NumHeads*hd, H)
	add(lp+"self_attn.k_proj.weight", 0.15, ac.NumKVHeads*hd, H)
	add(lp+"self_attn.v_proj.weight", 0.15, ac.NumKVHeads*hd, H)
	add(lp+"self_attn.o_proj.weight", 0.1, H, ac.NumHeads*hd)
	add(lp+"self_attn.q_norm.weight", 0.3, hd)
	add(lp+"self_attn.k_norm.weight", 0.3, hd)
	mlp := lp + "mlp."
	if kind == denseHead {
		I := cfg.IntermediateSize
		add(mlp+"gate_proj.weight", 0.15, I, H)
		add(mlp+"up_proj.weight", 0.15, I, H)
		add(mlp+"down_proj.weight", 0.1, H, I)
		return m
	}
	mc := cfg.MoE
	E, I, S := mc.NumExperts, mc.ExpertIntermediateSize, mc.SharedExpertIntermediateSize
	add(mlp+"gate.weight", 0.5, E, H) // router: logits spread enough for a clear top-k
	for e := range E {
		add(fmt.Sprintf("%sexperts.%d.gate_proj.weight", mlp, e), 0.15, I, H)
		add(fmt.Sprintf("%sexperts.%d.up_proj.weight", mlp, e), 0.15, I, H)
		add(fmt.Sprintf("%sexperts.%d.down_proj.weight", mlp, e), 0.15, H, I)
	}
	add(mlp+"shared_expert.gate_proj.weight", 0.15, S, H)
	add(mlp+"shared_expert.up_proj.weight", 0.15, S, H)
	add(mlp+"shared_expert.down_proj.weight", 0.1, H, S)
	add(mlp+"shared_expert_gate.weight", 0.3, 1, H)
	if kind == moeHeadFused {
		var gateUp, down []float32
		for e := range E {
			gateUp = append(gateUp, m.w[fmt.Sprintf("%sexperts.%d.gate_proj.weight", mlp, e)]...)
			gateUp = append(gateUp, m.w[fmt.Sprintf("%sexperts.%d.up_proj.weight", mlp, e)]...)
			down = append(down, m.w[fmt.Sprintf("%sexperts.%d.down_proj.weight", mlp, e)]...)
		}
		m.file = slices.DeleteFunc(m.file, func(n string) bool { return strings.HasPrefix(n, mlp+"experts.") })
		m.w[mlp+"experts.gate_up_proj"], m.shape[mlp+"experts.gate_up_proj"] = gateUp, []int{E, 2 * I, H}
		m.w[mlp+"experts.down_proj"], m.shape[mlp+"experts.down_proj"] = down, []int{E, H, I}
		m.file = append(m.file, mlp+"experts.gate_up_proj", mlp+"experts.down_proj")
	}
	return m
}

// write stores the head's checkpoint tensors (float32) in a safetensors file.
func (m *mtpWeights) write(t *testing.T, path string) {
	t.Helper()
	var ts []safetensors.Tensor
	for _, n := range m.file {
		b := make([]byte, 4*len(m.w[n]))
		for i, v := range m.w[n] {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
		ts = append(ts, safetensors.Tensor{Name: n, DType: safetensors.F32, Shape: m.shape[n], Data: b})
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Write(f, ts, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// refMTP is the MTP head in float64, written from the formulas (not from
// package nn): one sequence's rows 0..n−1 at positions 0..n−1, causal. The
// head layer's feed-forward is a SwiGLU MLP or, for a MoE head, a softmax
// router over all experts, the top-k (renormalised if norm_topk_prob), SwiGLU
// experts, plus the SwiGLU shared expert × sigmoid(shared_expert_gate(x)).
// It returns each row's output (after mtp.norm) and logits, and the smallest
// gap between the k-th and (k+1)-th router probabilities met (+Inf for a
// dense head), which says whether float32 routing can pick other experts.
func refMTP(cfg *hfconfig.Config, kind headKind, w mapSource, embed, lmHead []float32, tokens []int, hidden [][]float64) (outs, logits [][]float64, gap float64) {
	H, ac := cfg.HiddenSize, cfg.Attention
	nh, nkv, hd, V := ac.NumHeads, ac.NumKVHeads, ac.HeadDim, len(embed)/cfg.HiddenSize
	eps, rd, theta := cfg.RMSNormEps, ac.RotaryDim, ac.RopeTheta
	gap = math.Inf(1)
	g := func(name string) []float64 {
		t, ok := w[name]
		if !ok {
			panic("refMTP: no tensor " + name)
		}
		out := make([]float64, len(t))
		for i, v := range t {
			out[i] = float64(v)
		}
		return out
	}
	norm := func(x []float64, wname string) []float64 { // "1+w" RMSNorm
		wt := g(wname)
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		r := 1 / math.Sqrt(ss/float64(len(x))+eps)
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = v * r * (1 + wt[i])
		}
		return y
	}
	lin := func(W []float64, x []float64, out int) []float64 {
		in := len(x)
		y := make([]float64, out)
		for o := range out {
			for i := range in {
				y[o] += W[o*in+i] * x[i]
			}
		}
		return y
	}
	rope := func(x []float64, pos int) {
		half := rd / 2
		for i := range half {
			ang := float64(pos) / math.Pow(theta, float64(2*i)/float64(rd))
			c, s := math.Cos(ang), math.Sin(ang)
			a, b := x[i], x[i+half]
			x[i], x[i+half] = a*c-b*s, b*c+a*s
		}
	}
	sig := func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }
	swiglu := func(m string, x []float64) []float64 {
		wg, wu, wd := g(m+"gate_proj.weight"), g(m+"up_proj.weight"), g(m+"down_proj.weight")
		I := len(wg) / len(x)
		gt, up := lin(wg, x, I), lin(wu, x, I)
		for i := range gt {
			gt[i] = gt[i] * sig(gt[i]) * up[i]
		}
		return lin(wd, gt, len(x))
	}
	lp := "mtp.layers.0."
	ffn := func(x []float64) []float64 {
		if kind == denseHead {
			return swiglu(lp+"mlp.", x)
		}
		mc := cfg.MoE
		E := mc.NumExperts
		p := lin(g(lp+"mlp.gate.weight"), x, E)
		mx := math.Inf(-1)
		for _, v := range p {
			mx = math.Max(mx, v)
		}
		var z float64
		for e := range p {
			p[e] = math.Exp(p[e] - mx)
			z += p[e]
		}
		for e := range p {
			p[e] /= z
		}
		order := make([]int, E)
		for e := range order {
			order[e] = e
		}
		sort.SliceStable(order, func(a, b int) bool { return p[order[a]] > p[order[b]] })
		if mc.TopK < E {
			gap = math.Min(gap, p[order[mc.TopK-1]]-p[order[mc.TopK]])
		}
		var sum float64
		for _, e := range order[:mc.TopK] {
			sum += p[e]
		}
		y := make([]float64, H)
		for _, e := range order[:mc.TopK] {
			wt := p[e]
			if mc.NormTopKProb {
				wt /= sum
			}
			ye := swiglu(fmt.Sprintf("%smlp.experts.%d.", lp, e), x)
			for i := range y {
				y[i] += wt * ye[i]
			}
		}
		s := swiglu(lp+"mlp.shared_expert.", x)
		sg := sig(lin(g(lp+"mlp.shared_expert_gate.weight"), x, 1)[0])
		for i := range y {
			y[i] += sg * s[i]
		}
		return y
	}
	fc, wq, wk, wv, wo := g("mtp.fc.weight"), g(lp+"self_attn.q_proj.weight"), g(lp+"self_attn.k_proj.weight"), g(lp+"self_attn.v_proj.weight"), g(lp+"self_attn.o_proj.weight")
	n := len(tokens)
	xs := make([][]float64, n)
	var keys, vals [][]float64
	for t := range n {
		e := make([]float64, H)
		for i := range H {
			e[i] = float64(embed[tokens[t]*H+i])
		}
		in := append(norm(e, "mtp.pre_fc_norm_embedding.weight"), norm(hidden[t], "mtp.pre_fc_norm_hidden.weight")...)
		x := lin(fc, in, H)
		a := norm(x, lp+"input_layernorm.weight")
		qg := lin(wq, a, 2*nh*hd)
		k := lin(wk, a, nkv*hd)
		v := lin(wv, a, nkv*hd)
		q := make([]float64, nh*hd)
		gate := make([]float64, nh*hd)
		for h := range nh {
			qh := norm(qg[h*2*hd:h*2*hd+hd], lp+"self_attn.q_norm.weight")
			rope(qh, t)
			copy(q[h*hd:], qh)
			copy(gate[h*hd:], qg[h*2*hd+hd:(h+1)*2*hd])
		}
		for h := range nkv {
			kh := norm(k[h*hd:(h+1)*hd], lp+"self_attn.k_norm.weight")
			rope(kh, t)
			copy(k[h*hd:], kh)
		}
		keys, vals = append(keys, k), append(vals, v)
		o := ref64.Attend(q, keys, vals, nh, nkv, hd)
		for i := range o {
			o[i] *= sig(gate[i])
		}
		ao := lin(wo, o, H)
		for i := range x {
			x[i] += ao[i]
		}
		d := ffn(norm(x, lp+"post_attention_layernorm.weight"))
		for i := range x {
			x[i] += d[i]
		}
		xs[t] = norm(x, "mtp.norm.weight")
		logits = append(logits, ref64.Project(lmHead, xs[t], V))
	}
	return xs, logits, gap
}

// relErr is ref64.MaxRelErr: max |got − want| / max(max |want|, 1e-3).
var relErr = ref64.MaxRelErr

func maxRel(t *testing.T, what string, got []float32, want []float64, tol float64) float64 {
	t.Helper()
	e := relErr(got, want)
	if e > tol {
		t.Errorf("%s: max |diff| / max |want| = %.3g, tolerance %.1g", what, e, tol)
	}
	return e
}

// mtpCases are the heads TestMTPFloat64 binds: a dense head on the dense
// fixture, MoE heads (per-expert and fused expert tensors) on the MoE
// fixtures.
var mtpCases = []struct {
	name    string
	fixture string
	kind    headKind
}{
	{"qwen3_5 dense", "qwen3_5", denseHead},
	{"qwen3_5_moe moe", "qwen3_5_moe", moeHead},
	{"qwen3_next moe fused", "qwen3_next", moeHeadFused},
	{"qwen3_5_moe moe fused", "qwen3_5_moe", moeHeadFused},
}

// mtpTol bounds the float32 head's relative error against refMTP: float32
// sums over ≤ 2H = 128 terms, a few layers deep, stay below 1e-6; 2e-5 leaves
// room without hiding a wrong weight, order or routing (those give O(1)).
const mtpTol = 2e-5

// TestMTPFloat64 checks nn.MTP, bound by BindMTP from random weights written
// to a safetensors file, against refMTP: two sequences in one batch,
// committed rows over two calls, then chained uncommitted rows, then a
// committing call that drops them.
func TestMTPFloat64(t *testing.T) {
	for i, tc := range mtpCases {
		t.Run(tc.name, func(t *testing.T) {
			testMTPFloat64(t, tc.fixture, tc.kind, uint64(i))
		})
	}
}

func testMTPFloat64(t *testing.T, fixture string, kind headKind, seed uint64) {
	target, err := model.Load(filepath.Join("..", "testdata", "fixtures", fixture), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := target.Config
	rng := rand.New(rand.NewPCG(5+seed, 7))
	w := randomMTP(rng, cfg, kind)
	path := filepath.Join(t.TempDir(), qwen.MTPFile)
	w.write(t, path)
	f, err := safetensors.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head, err := qwen.BindMTP(cfg, f, target)
	if err != nil {
		t.Fatal(err)
	}
	ffn := head.Dec.Layers[0].Branches[1].Block
	if got, want := ffn.Kind(), map[bool]hfconfig.LayerKind{true: hfconfig.MLP, false: hfconfig.MoE}[kind == denseHead]; got != want {
		t.Fatalf("head feed-forward %v, want %v", got, want)
	}
	H, V := target.Hidden, target.Vocab
	st, err := head.Dec.NewState(2, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	qa, _ := st.Admit()
	qb, _ := st.Admit()
	type seqRows struct {
		tok []int
		hid [][]float64
	}
	committed := map[nn.Seq]*seqRows{qa: {}, qb: {}} // the reference's rows: committed ones
	cur := map[nn.Seq]*seqRows{qa: {}, qb: {}}       // and committed plus uncommitted
	newRow := func() (int, []float64) {
		h := make([]float64, H)
		for i := range h {
			h[i] = rng.NormFloat64()
		}
		return rng.IntN(V), h
	}
	ctx := context.Background()
	worst, gap := 0.0, math.Inf(1)
	// run feeds rows (counts per sequence), checks outputs and logits of
	// every row against the reference over committed + these rows.
	run := func(name string, counts map[nn.Seq]int, commit bool, chainFrom map[nn.Seq][]float32) map[nn.Seq][]float32 {
		var rows []nn.Row
		var hidden []float32
		want := map[int][]float64{}
		wantLg := map[int][]float64{}
		order := []nn.Seq{qa, qb}
		pend := map[nn.Seq]*seqRows{}
		for _, q := range order {
			s := cur[q]
			if commit {
				s = committed[q]
			}
			p := &seqRows{tok: append([]int(nil), s.tok...), hid: append([][]float64(nil), s.hid...)}
			pend[q] = p
			for range counts[q] {
				tok, h := newRow()
				if c, ok := chainFrom[q]; ok {
					for i := range h {
						h[i] = float64(c[i])
					}
				}
				p.tok, p.hid = append(p.tok, tok), append(p.hid, h)
				rows = append(rows, nn.Row{Seq: q, Token: tok, Logits: true})
				for _, v := range h {
					hidden = append(hidden, float32(v))
				}
			}
		}
		// reference per sequence over its whole row list
		k := 0
		for _, q := range order {
			p := pend[q]
			outs, lgs, g := refMTP(cfg, kind, w.w, target.Embed.Float32(), target.LMHead.W.Float32(), p.tok, p.hid)
			gap = math.Min(gap, g)
			for j := len(p.tok) - counts[q]; j < len(p.tok); j++ {
				want[k], wantLg[k] = outs[j], lgs[j]
				k++
			}
		}
		out := make([]float32, len(rows)*H)
		lg := make([]float32, len(rows)*V)
		if err := head.Forward(ctx, st, rows, hidden, commit, out, lg); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i := range rows {
			worst = math.Max(worst, maxRel(t, name+" output", out[i*H:(i+1)*H], want[i], mtpTol))
			worst = math.Max(worst, maxRel(t, name+" logits", lg[i*V:(i+1)*V], wantLg[i], mtpTol))
		}
		for _, q := range order {
			cur[q] = pend[q]
			if commit {
				committed[q] = pend[q]
			}
		}
		last := map[nn.Seq][]float32{}
		k = 0
		for _, q := range order {
			k += counts[q]
			if counts[q] > 0 {
				last[q] = out[(k-1)*H : k*H]
			}
		}
		return last
	}
	run("commit 5+3", map[nn.Seq]int{qa: 5, qb: 3}, true, nil)
	last := run("commit 2+1", map[nn.Seq]int{qa: 2, qb: 1}, true, nil)
	// Chained drafts: uncommitted rows after the committed ones, each
	// taking the previous output as its hidden state; the reference is the
	// committed rows plus the chain so far.
	for j := range 3 {
		last = run(fmt.Sprintf("chain %d", j+1), map[nn.Seq]int{qa: 1}, false,
			map[nn.Seq][]float32{qa: append([]float32(nil), last[qa]...)})
	}
	if st.Len(qa) != 7 || st.Len(qb) != 4 {
		t.Fatalf("positions %d, %d; want 7, 4", st.Len(qa), st.Len(qb))
	}
	// A committing call drops the chained row.
	run("commit after chain", map[nn.Seq]int{qa: 2, qb: 2}, true, nil)
	t.Logf("max relative error %.2g (tolerance %.0g); smallest router top-k gap %.2g", worst, mtpTol, gap)
	if kind != denseHead && gap < 1e-4 {
		t.Errorf("router top-k gap %.2g: too close for float32 routing to be checked; change the seed", gap)
	}
}

// TestMTPReference checks the shipped qwen35-kjv head against the PyTorch
// values of tools/train_mtp.py (testdata/qwen35-kjv-mtp-reference.safetensors:
// the first 16 test-split tokens, the target's final-normed hidden states,
// the head's outputs, three rows' logits, and one chained row).
func TestMTPReference(t *testing.T) {
	dir := filepath.Join("..", "..", "models", "qwen35-kjv")
	target, head := spectest.LoadWithHead(t, dir, qwen.LoadMTP)
	if _, err := qwen.LoadMTP(filepath.Join("..", "testdata", "fixtures", "qwen3_5"), target); !errors.Is(err, qwen.ErrNoMTP) {
		t.Errorf("fixture without mtp.*: %v, want ErrNoMTP", err)
	}
	f, err := safetensors.Open(filepath.Join("testdata", "qwen35-kjv-mtp-reference.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	get := func(name string) []float32 {
		v, err := f.Float32(name)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	ints := func(name string) []int {
		b, err := f.Bytes(name)
		if err != nil {
			t.Fatal(err)
		}
		v := make([]int, len(b)/4)
		for i := range v {
			v[i] = int(int32(binary.LittleEndian.Uint32(b[4*i:])))
		}
		return v
	}
	ids := ints("ids")
	N, H, V := len(ids), target.Hidden, target.Vocab
	th := get("target_hidden")

	// The target's final-normed hidden states, through State.OnLayer.
	tst, err := target.NewState(1, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tst.Close()
	q, _ := tst.Admit()
	got := make([]float32, N*H)
	tst.OnLayer = func(layer int, h []float32) {
		if layer == len(target.Layers)-1 {
			for i := range len(h) / H {
				_, pos := tst.Row(i)
				target.FinalNorm.Forward(got[pos*H:(pos+1)*H], h[i*H:(i+1)*H], 1)
			}
		}
	}
	rows := make([]nn.Row, N)
	for i, id := range ids {
		rows[i] = nn.Row{Seq: q, Token: id}
	}
	if err := target.Forward(context.Background(), tst, rows, nil); err != nil {
		t.Fatal(err)
	}
	maxRel(t, "target hidden", got, f64(th), 1e-3)

	// The head on PyTorch's hidden states.
	st, err := head.Dec.NewState(1, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mq, _ := st.Admit()
	mrows := make([]nn.Row, N-1)
	for i := range mrows {
		mrows[i] = nn.Row{Seq: mq, Token: ids[i+1], Logits: i >= N-4}
	}
	out := make([]float32, (N-1)*H)
	lg := make([]float32, 3*V)
	if err := head.Forward(context.Background(), st, mrows, th[:(N-1)*H], true, out, lg); err != nil {
		t.Fatal(err)
	}
	maxRel(t, "mtp outputs", out, f64(get("mtp_hidden")), 2e-4)
	maxRel(t, "mtp logits", lg, f64(get("mtp_logits")), 2e-4)
	ct := ints("chain_token")[0]
	if a := tensor.Argmax(lg[2*V : 3*V]); a != ct {
		t.Errorf("last row's argmax %d, PyTorch %d", a, ct)
	}
	clg := make([]float32, V)
	if err := head.Forward(context.Background(), st, []nn.Row{{Seq: mq, Token: ct, Logits: true}}, out[(N-2)*H:], false, nil, clg); err != nil {
		t.Fatal(err)
	}
	maxRel(t, "chained logits", clg, f64(get("chain_logits")), 2e-4)
}

func f64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// TestLoadMTPMoE: a MoE model's checkpoint with a MoE head is accepted end to
// end, the head beside it (mtp.safetensors) or inside it (a second shard):
// model.Load and LoadMTP bind it, its logits match refMTP, and greedy
// speculative generation with it as the drafter is plain greedy generation.
func TestLoadMTPMoE(t *testing.T) {
	fix := filepath.Join("..", "testdata", "fixtures", "qwen3_5_moe")
	for _, layout := range []string{"sidecar", "shard"} {
		t.Run(layout, func(t *testing.T) {
			dir := t.TempDir()
			copyFile(t, filepath.Join(fix, "config.json"), filepath.Join(dir, "config.json"))
			probe, err := model.Load(fix, model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			w := randomMTP(rand.New(rand.NewPCG(11, 13)), probe.Config, moeHeadFused)
			if layout == "sidecar" {
				copyFile(t, filepath.Join(fix, "model.safetensors"), filepath.Join(dir, "model.safetensors"))
				w.write(t, filepath.Join(dir, qwen.MTPFile))
			} else {
				copyFile(t, filepath.Join(fix, "model.safetensors"), filepath.Join(dir, "model-00001-of-00002.safetensors"))
				w.write(t, filepath.Join(dir, "model-00002-of-00002.safetensors"))
			}
			target, head := spectest.LoadWithHead(t, dir, qwen.LoadMTP)
			if k := head.Dec.Layers[0].Branches[1].Block.Kind(); k != hfconfig.MoE {
				t.Fatalf("head feed-forward %v, want MoE", k)
			}
			H, V := target.Hidden, target.Vocab
			rng := rand.New(rand.NewPCG(3, 4))
			toks := []int{5, 77, 300, 12}
			hid := make([][]float64, len(toks))
			var flat []float32
			rows := make([]nn.Row, len(toks))
			for i := range toks {
				hid[i] = make([]float64, H)
				for j := range hid[i] {
					hid[i][j] = rng.NormFloat64()
					flat = append(flat, float32(hid[i][j]))
				}
			}
			st, err := head.Dec.NewState(1, replay.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			q, _ := st.Admit()
			for i, tok := range toks {
				rows[i] = nn.Row{Seq: q, Token: tok, Logits: true}
			}
			lg := make([]float32, len(toks)*V)
			if err := head.Forward(context.Background(), st, rows, flat, true, nil, lg); err != nil {
				t.Fatal(err)
			}
			_, want, _ := refMTP(target.Config, moeHeadFused, w.w, target.Embed.Float32(), target.LMHead.W.Float32(), toks, hid)
			for i := range toks {
				maxRel(t, fmt.Sprintf("row %d logits", i), lg[i*V:(i+1)*V], want[i], mtpTol)
			}

			// The head as the drafter of greedy speculative generation.
			reqs := []engine.Request{{Prompt: []int{1, 2, 3, 4, 5, 6}, MaxTokens: 20}, {Prompt: []int{9, 8, 7}, MaxTokens: 16}}
			spectest.MTPMatchesGreedy(t, target, head, reqs, 3, []replay.Mode{replay.Replay}, nil)
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

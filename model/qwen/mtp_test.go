package qwen_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

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

func randomMTP(rng *rand.Rand, cfg *hfconfig.Config) mapSource {
	H, ac := cfg.HiddenSize, cfg.Attention
	hd, I := ac.HeadDim, cfg.IntermediateSize
	m := mapSource{}
	add := func(name string, n int, scale float64) {
		t := make([]float32, n)
		for i := range t {
			t[i] = float32(rng.NormFloat64() * scale)
		}
		m[name] = t
	}
	lp := "mtp.layers.0."
	add("mtp.fc.weight", H*2*H, 0.1)
	for _, n := range []string{"mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight", "mtp.norm.weight",
		lp + "input_layernorm.weight", lp + "post_attention_layernorm.weight"} {
		add(n, H, 0.3)
	}
	add(lp+"self_attn.q_proj.weight", 2*ac.NumHeads*hd*H, 0.15)
	add(lp+"self_attn.k_proj.weight", ac.NumKVHeads*hd*H, 0.15)
	add(lp+"self_attn.v_proj.weight", ac.NumKVHeads*hd*H, 0.15)
	add(lp+"self_attn.o_proj.weight", H*ac.NumHeads*hd, 0.1)
	add(lp+"self_attn.q_norm.weight", hd, 0.3)
	add(lp+"self_attn.k_norm.weight", hd, 0.3)
	add(lp+"mlp.gate_proj.weight", I*H, 0.15)
	add(lp+"mlp.up_proj.weight", I*H, 0.15)
	add(lp+"mlp.down_proj.weight", H*I, 0.1)
	return m
}

// refMTP is the MTP head in float64, written from the formulas (not from
// package nn): one sequence's rows 0..n−1 at positions 0..n−1, causal.
// It returns each row's output (after mtp.norm) and logits.
func refMTP(cfg *hfconfig.Config, w mapSource, embed, lmHead []float32, tokens []int, hidden [][]float64) (outs, logits [][]float64) {
	H, ac := cfg.HiddenSize, cfg.Attention
	nh, nkv, hd, I, V := ac.NumHeads, ac.NumKVHeads, ac.HeadDim, cfg.IntermediateSize, len(embed)/cfg.HiddenSize
	eps, rd, theta := cfg.RMSNormEps, ac.RotaryDim, ac.RopeTheta
	g := func(name string) []float64 {
		t := w[name]
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
	lp := "mtp.layers.0."
	fc, wq, wk, wv, wo := g("mtp.fc.weight"), g(lp+"self_attn.q_proj.weight"), g(lp+"self_attn.k_proj.weight"), g(lp+"self_attn.v_proj.weight"), g(lp+"self_attn.o_proj.weight")
	wg, wu, wd := g(lp+"mlp.gate_proj.weight"), g(lp+"mlp.up_proj.weight"), g(lp+"mlp.down_proj.weight")
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
		o := make([]float64, nh*hd)
		for h := range nh {
			kv := h / (nh / nkv)
			sc := make([]float64, t+1)
			mx := math.Inf(-1)
			for j := range t + 1 {
				for i := range hd {
					sc[j] += q[h*hd+i] * keys[j][kv*hd+i]
				}
				sc[j] /= math.Sqrt(float64(hd))
				mx = math.Max(mx, sc[j])
			}
			var z float64
			for j := range sc {
				sc[j] = math.Exp(sc[j] - mx)
				z += sc[j]
			}
			for j := range sc {
				for i := range hd {
					o[h*hd+i] += sc[j] / z * vals[j][kv*hd+i]
				}
			}
		}
		for i := range o {
			o[i] *= sig(gate[i])
		}
		ao := lin(wo, o, H)
		for i := range x {
			x[i] += ao[i]
		}
		m := norm(x, lp+"post_attention_layernorm.weight")
		gt, up := lin(wg, m, I), lin(wu, m, I)
		for i := range gt {
			gt[i] = gt[i] * sig(gt[i]) * up[i]
		}
		d := lin(wd, gt, H)
		for i := range x {
			x[i] += d[i]
		}
		xs[t] = norm(x, "mtp.norm.weight")
		lg := make([]float64, V)
		for vv := range V {
			for i := range H {
				lg[vv] += float64(lmHead[vv*H+i]) * xs[t][i]
			}
		}
		logits = append(logits, lg)
	}
	return xs, logits
}

func maxRel(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	var d, s float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-want[i]))
		s = math.Max(s, math.Abs(want[i]))
	}
	if d > tol*math.Max(s, 1e-3) {
		t.Errorf("%s: max |diff| %.3g (max |want| %.3g), tolerance %.1g relative", what, d, s, tol)
	}
}

// TestMTPFloat64 checks nn.MTP, bound by BindMTP from random weights, against
// refMTP: two sequences in one batch, committed rows over two calls, then
// chained uncommitted rows, then a committing call that drops them.
func TestMTPFloat64(t *testing.T) {
	target, err := model.Load(filepath.Join("..", "testdata", "fixtures", "qwen3_5"), model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := target.Config
	rng := rand.New(rand.NewPCG(5, 7))
	w := randomMTP(rng, cfg)
	head, err := qwen.BindMTP(cfg, w, target)
	if err != nil {
		t.Fatal(err)
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
			outs, lgs := refMTP(cfg, w, target.Embed, target.LMHead.W, p.tok, p.hid)
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
			maxRel(t, name+" output", out[i*H:(i+1)*H], want[i], 2e-4)
			maxRel(t, name+" logits", lg[i*V:(i+1)*V], wantLg[i], 2e-4)
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
}

// TestMTPReference checks the shipped qwen35-kjv head against the PyTorch
// values of tools/train_mtp.py (testdata/qwen35-kjv-mtp-reference.safetensors:
// the first 16 test-split tokens, the target's final-normed hidden states,
// the head's outputs, three rows' logits, and one chained row).
func TestMTPReference(t *testing.T) {
	dir := filepath.Join("..", "..", "models", "qwen35-kjv")
	target, err := model.Load(dir, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	head, err := qwen.LoadMTP(dir, target)
	if err != nil {
		t.Fatal(err)
	}
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

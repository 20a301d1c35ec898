package nemotronh_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/internal/ref64"
	"github.com/replayssm/replayssm/internal/spectest"
	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/nemotronh"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/model/safetensors"
	"github.com/replayssm/replayssm/replay"
)

var fixture = filepath.Join("..", "testdata", "fixtures", "nemotron_h")

// head is a random NemotronH MTP head ("*E": attention, then a latent MoE)
// for cfg, with its tensors' shapes; prefix is "" or "language_model.".
type head struct {
	w      map[string][]float32
	shape  map[string][]int
	prefix string
}

func randomHead(rng *rand.Rand, cfg *hfconfig.Config, prefix string) *head {
	H, ac, mc := cfg.HiddenSize, cfg.Attention, cfg.MoE
	hd := ac.HeadDim
	h := &head{w: map[string][]float32{}, shape: map[string][]int{}, prefix: prefix}
	add := func(name string, scale, mean float64, shape ...int) {
		n := 1
		for _, d := range shape {
			n *= d
		}
		t := make([]float32, n)
		for i := range t {
			t[i] = float32(mean + rng.NormFloat64()*scale)
		}
		h.w[name], h.shape[name] = t, shape
	}
	p := "mtp.layers."
	add(p+"0.enorm.weight", 0.3, 1, H) // plain-w norms: around 1
	add(p+"0.hnorm.weight", 0.3, 1, H)
	add(p+"0.eh_proj.weight", 0.1, 0, H, 2*H)
	add(p+"0.norm.weight", 0.3, 1, H)
	add(p+"0.mixer.q_proj.weight", 0.15, 0, ac.NumHeads*hd, H)
	add(p+"0.mixer.k_proj.weight", 0.15, 0, ac.NumKVHeads*hd, H)
	add(p+"0.mixer.v_proj.weight", 0.15, 0, ac.NumKVHeads*hd, H)
	add(p+"0.mixer.o_proj.weight", 0.1, 0, H, ac.NumHeads*hd)
	add(p+"1.norm.weight", 0.3, 1, H)
	m := p + "1.mixer."
	E, I, L := mc.NumExperts, mc.ExpertIntermediateSize, mc.LatentSize
	add(m+"gate.weight", 0.5, 0, E, H)
	add(m+"gate.e_score_correction_bias", 0.05, 0, E)
	add(m+"fc1_latent_proj.weight", 0.15, 0, L, H)
	add(m+"fc2_latent_proj.weight", 0.15, 0, H, L)
	for e := range E {
		add(fmt.Sprintf("%sexperts.%d.up_proj.weight", m, e), 0.2, 0, I, L)
		add(fmt.Sprintf("%sexperts.%d.down_proj.weight", m, e), 0.2, 0, L, I)
	}
	S := mc.SharedExpertIntermediateSize * mc.NumSharedExperts
	add(m+"shared_experts.up_proj.weight", 0.15, 0, S, H)
	add(m+"shared_experts.down_proj.weight", 0.1, 0, H, S)
	add(p+"1.final_layernorm.weight", 0.3, 1, H)
	return h
}

func (h *head) write(t *testing.T, path string) {
	t.Helper()
	var ts []safetensors.Tensor
	for n, v := range h.w {
		b := make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
		ts = append(ts, safetensors.Tensor{Name: h.prefix + n, DType: safetensors.F32, Shape: h.shape[n], Data: b})
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

// ref runs the head in float64 from the formulas (not package nn) over one
// sequence's rows 0..n−1 (causal, no position encoding):
//
//	x   = eh_proj([enorm(embed(tok)); hnorm(hidden)])
//	x  += attn(norm0(x))          GQA, softmax(q·k/√d), no RoPE, no gate
//	x  += moe(norm1(x))           s = sigmoid(gate(x)); top-k of s + bias;
//	                              w = s/(Σs + 1e-20) (norm_topk_prob) × scale;
//	                              fc2(Σ w·down(relu(up(fc1(x)))²)) + shared(x)
//	out = final_layernorm(x), logits = lm_head(out)
//
// RMSNorm is plain w. It returns outputs, logits and the smallest gap between
// the k-th and (k+1)-th selection scores.
func (h *head) ref(cfg *hfconfig.Config, embed, lmHead []float32, tokens []int, hidden [][]float64) (outs, logits [][]float64, gap float64) {
	H, ac, mc := cfg.HiddenSize, cfg.Attention, cfg.MoE
	nh, nkv, hd, V := ac.NumHeads, ac.NumKVHeads, ac.HeadDim, len(embed)/cfg.HiddenSize
	eps := cfg.RMSNormEps
	gap = math.Inf(1)
	g := func(name string) []float64 {
		t, ok := h.w[name]
		if !ok {
			panic("ref: no tensor " + name)
		}
		out := make([]float64, len(t))
		for i, v := range t {
			out[i] = float64(v)
		}
		return out
	}
	norm := func(x []float64, wname string) []float64 {
		wt := g(wname)
		var ss float64
		for _, v := range x {
			ss += v * v
		}
		r := 1 / math.Sqrt(ss/float64(len(x))+eps)
		y := make([]float64, len(x))
		for i, v := range x {
			y[i] = v * r * wt[i]
		}
		return y
	}
	lin := func(name string, x []float64) []float64 {
		W := g(name)
		in := len(x)
		y := make([]float64, len(W)/in)
		for o := range y {
			for i := range in {
				y[o] += W[o*in+i] * x[i]
			}
		}
		return y
	}
	relu2mlp := func(m string, x []float64) []float64 {
		u := lin(m+"up_proj.weight", x)
		for i, v := range u {
			v = math.Max(v, 0)
			u[i] = v * v
		}
		return lin(m+"down_proj.weight", u)
	}
	p := "mtp.layers."
	m := p + "1.mixer."
	moe := func(x []float64) []float64 {
		E := mc.NumExperts
		logit := lin(m+"gate.weight", x)
		bias := g(m + "gate.e_score_correction_bias")
		s, sel := make([]float64, E), make([]float64, E)
		order := make([]int, E)
		for e := range E {
			s[e] = 1 / (1 + math.Exp(-logit[e]))
			sel[e] = s[e] + bias[e]
			order[e] = e
		}
		sort.SliceStable(order, func(a, b int) bool { return sel[order[a]] > sel[order[b]] })
		if mc.TopK < E {
			gap = math.Min(gap, sel[order[mc.TopK-1]]-sel[order[mc.TopK]])
		}
		var sum float64
		for _, e := range order[:mc.TopK] {
			sum += s[e]
		}
		xl := lin(m+"fc1_latent_proj.weight", x)
		acc := make([]float64, len(xl))
		for _, e := range order[:mc.TopK] {
			w := s[e]
			if mc.NormTopKProb {
				w /= sum + 1e-20
			}
			w *= mc.RoutedScalingFactor
			y := relu2mlp(fmt.Sprintf("%sexperts.%d.", m, e), xl)
			for i := range acc {
				acc[i] += w * y[i]
			}
		}
		out := lin(m+"fc2_latent_proj.weight", acc)
		sh := relu2mlp(m+"shared_experts.", x)
		for i := range out {
			out[i] += sh[i]
		}
		return out
	}
	var keys, vals [][]float64
	for t := range tokens {
		e := make([]float64, H)
		for i := range H {
			e[i] = float64(embed[tokens[t]*H+i])
		}
		x := lin(p+"0.eh_proj.weight", append(norm(e, p+"0.enorm.weight"), norm(hidden[t], p+"0.hnorm.weight")...))
		a := norm(x, p+"0.norm.weight")
		q, k, v := lin(p+"0.mixer.q_proj.weight", a), lin(p+"0.mixer.k_proj.weight", a), lin(p+"0.mixer.v_proj.weight", a)
		keys, vals = append(keys, k), append(vals, v)
		o := ref64.Attend(q, keys, vals, nh, nkv, hd)
		ao := lin(p+"0.mixer.o_proj.weight", o)
		for i := range x {
			x[i] += ao[i]
		}
		d := moe(norm(x, p+"1.norm.weight"))
		for i := range x {
			x[i] += d[i]
		}
		out := norm(x, p+"1.final_layernorm.weight")
		outs = append(outs, out)
		logits = append(logits, ref64.Project(lmHead, out, V))
	}
	return outs, logits, gap
}

// tol bounds the float32 head's relative error against ref (measured:
// below 1e-6; a wrong weight, order or routing gives O(1)).
const tol = 2e-5

// relErr is ref64.MaxRelErr: max |got − want| / max(max |want|, 1e-3).
var relErr = ref64.MaxRelErr

// TestMTPFloat64 binds random heads written to a safetensors file (pattern
// from the tensors, and from the config; plain and "language_model."
// names) and checks every row's output and logits against ref: two
// sequences, committed rows over two calls, chained uncommitted rows, then a
// committing call that drops them.
func TestMTPFloat64(t *testing.T) {
	target, err := model.Load(fixture, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name       string
		prefix     string
		fromConfig bool
	}{
		{"pattern from tensors", "", false},
		{"pattern from config", "", true},
		{"language_model prefix", "language_model.", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := *target.Config
			if tc.fromConfig {
				cfg.MTP = hfconfig.MTPConfig{NumLayers: 1, Layers: []hfconfig.Layer{{Mixer: hfconfig.Attention}, {Mixer: hfconfig.MoE}}}
			}
			rng := rand.New(rand.NewPCG(uint64(i)+1, 9))
			h := randomHead(rng, &cfg, tc.prefix)
			path := filepath.Join(t.TempDir(), nemotronh.MTPFile)
			h.write(t, path)
			f, err := safetensors.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			m, err := nemotronh.BindMTP(&cfg, f, target)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(m.Dec.Layers); n != 2 || m.Dec.Layers[0].Branches[0].Block.Kind() != hfconfig.Attention ||
				m.Dec.Layers[1].Branches[0].Block.Kind() != hfconfig.MoE {
				t.Fatalf("head sublayers: %d, want attention then MoE", n)
			}
			checkHead(t, rng, &cfg, h, m, target)
		})
	}
}

func checkHead(t *testing.T, rng *rand.Rand, cfg *hfconfig.Config, h *head, m *nn.MTP, target *nn.Decoder) {
	H, V := target.Hidden, target.Vocab
	st, err := m.Dec.NewState(2, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	qa, _ := st.Admit()
	qb, _ := st.Admit()
	type rowsOf struct {
		tok []int
		hid [][]float64
	}
	committed := map[nn.Seq]rowsOf{}
	cur := map[nn.Seq]rowsOf{}
	worst, gap := 0.0, math.Inf(1)
	ctx := context.Background()
	run := func(name string, counts [2]int, commit bool, chain []float32) []float32 {
		var rows []nn.Row
		var hidden []float32
		pend := map[nn.Seq]rowsOf{}
		var want, wantLg [][]float64
		for qi, q := range []nn.Seq{qa, qb} {
			base := cur[q]
			if commit {
				base = committed[q]
			}
			r := rowsOf{tok: slices.Clone(base.tok), hid: slices.Clone(base.hid)}
			for range counts[qi] {
				tok, hv := rng.IntN(V), make([]float64, H)
				for i := range hv {
					hv[i] = rng.NormFloat64()
					if chain != nil {
						hv[i] = float64(chain[i])
					}
				}
				r.tok, r.hid = append(r.tok, tok), append(r.hid, hv)
				rows = append(rows, nn.Row{Seq: q, Token: tok, Logits: true})
				for _, v := range hv {
					hidden = append(hidden, float32(v))
				}
			}
			pend[q] = r
			outs, lgs, g := h.ref(cfg, target.Embed.Float32(), target.LMHead.W.Float32(), r.tok, r.hid)
			gap = math.Min(gap, g)
			want = append(want, outs[len(outs)-counts[qi]:]...)
			wantLg = append(wantLg, lgs[len(lgs)-counts[qi]:]...)
		}
		out := make([]float32, len(rows)*H)
		lg := make([]float32, len(rows)*V)
		if err := m.Forward(ctx, st, rows, hidden, commit, out, lg); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i := range rows {
			eo, el := relErr(out[i*H:(i+1)*H], want[i]), relErr(lg[i*V:(i+1)*V], wantLg[i])
			if eo > tol || el > tol {
				t.Errorf("%s row %d: relative error output %.3g, logits %.3g; tolerance %.0g", name, i, eo, el, tol)
			}
			worst = math.Max(worst, math.Max(eo, el))
		}
		for q, r := range pend {
			cur[q] = r
			if commit {
				committed[q] = r
			}
		}
		return out[(len(rows)-1)*H:]
	}
	run("commit 4+2", [2]int{4, 2}, true, nil)
	last := run("commit 1+3", [2]int{1, 3}, true, nil)
	// Chained drafts on qb (the last row run): uncommitted rows whose hidden
	// is the previous output.
	for j := range 3 {
		last = run(fmt.Sprintf("chain %d", j+1), [2]int{0, 1}, false, slices.Clone(last))
	}
	if st.Len(qa) != 5 || st.Len(qb) != 5 {
		t.Fatalf("positions %d, %d; want 5, 5", st.Len(qa), st.Len(qb))
	}
	run("commit after chain", [2]int{2, 1}, true, nil)
	t.Logf("max relative error %.2g (tolerance %.0g); smallest router top-k gap %.2g", worst, tol, gap)
	if gap < 1e-4 {
		t.Errorf("router top-k gap %.2g: too close for float32 routing to be checked; change the seed", gap)
	}
}

// TestLoadMTP: the fixture's checkpoint with num_nextn_predict_layers 1 and a
// head in a second shard (or beside it) is accepted end to end, and greedy
// speculative generation drafting with it is plain greedy generation; the
// fixture itself has no head (ErrNoMTP).
func TestLoadMTP(t *testing.T) {
	plainTarget, err := model.Load(fixture, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nemotronh.LoadMTP(fixture, plainTarget); !errors.Is(err, nemotronh.ErrNoMTP) {
		t.Errorf("fixture without mtp.*: %v, want ErrNoMTP", err)
	}
	raw, err := os.ReadFile(filepath.Join(fixture, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := json.Unmarshal(raw, &conf); err != nil {
		t.Fatal(err)
	}
	conf["num_nextn_predict_layers"] = 1
	raw, err = json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.ReadFile(filepath.Join(fixture, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	for _, layout := range []string{"shard", "sidecar"} {
		t.Run(layout, func(t *testing.T) {
			dir := t.TempDir()
			must(t, os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644))
			h := randomHead(rand.New(rand.NewPCG(21, 22)), plainTarget.Config, "")
			if layout == "shard" {
				must(t, os.WriteFile(filepath.Join(dir, "model-00001-of-00002.safetensors"), st, 0o644))
				h.write(t, filepath.Join(dir, "model-00002-of-00002.safetensors"))
			} else {
				must(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), st, 0o644))
				h.write(t, filepath.Join(dir, nemotronh.MTPFile))
			}
			target, m := spectest.LoadWithHead(t, dir, nemotronh.LoadMTP)
			if n := len(target.Config.MTP.Layers); n != 2 {
				t.Fatalf("config MTP pattern has %d sublayers, want 2", n)
			}
			checkHead(t, rand.New(rand.NewPCG(5, 6)), target.Config, h, m, target)

			reqs := []engine.Request{{Prompt: []int{1, 2, 3, 4, 5, 6}, MaxTokens: 20}, {Prompt: []int{9, 8, 7}, MaxTokens: 16}}
			spectest.MTPMatchesGreedy(t, target, m, reqs, 3, []replay.Mode{replay.Replay, replay.Baseline}, nil)
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

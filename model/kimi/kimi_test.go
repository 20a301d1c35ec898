package kimi_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/internal/ref64"
	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/model/safetensors"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
)

// The tiny config (testdata/tiny_config.json) is the kimi_linear parity
// fixture's (tools/make_fixtures.py): five layers [KDA, KDA, MLA, KDA, MLA],
// a dense first layer then MoE, three KDA heads of 16, three MLA heads with
// a latent of 24, nope 16, rope 8 and values of 12.

func tinyConfig(t testing.TB) (*hfconfig.Config, []byte) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "tiny_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := hfconfig.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, raw
}

func tinyModel(t testing.TB) *nn.Decoder {
	t.Helper()
	cfg, _ := tinyConfig(t)
	d, err := model.LoadRandom(cfg, 7, 0, tensor.Float32)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func prompt(n, vocab int, seed uint64) []int {
	rng := rand.New(rand.NewPCG(seed, 1))
	ids := make([]int, n)
	for i := range ids {
		ids[i] = rng.IntN(vocab)
	}
	return ids
}

// TestBind checks the layer layout the tiny config binds to.
func TestBind(t *testing.T) {
	d := tinyModel(t)
	want := []string{"kimi_delta_attention+mlp", "kimi_delta_attention+moe", "latent_attention+moe", "kimi_delta_attention+moe", "latent_attention+moe"}
	if len(d.Layers) != len(want) {
		t.Fatalf("%d layers, want %d", len(d.Layers), len(want))
	}
	for i, l := range d.Layers {
		if got := l.Branches[0].Block.Kind().String() + "+" + l.Branches[1].Block.Kind().String(); got != want[i] {
			t.Errorf("layer %d is %s, want %s", i, got, want[i])
		}
	}
	m := d.Layers[1].Branches[1].Block.(*nn.MoE)
	if m.Routing != nn.SigmoidRouter || m.TopK != 2 || !m.NormTopK || m.Scale != 2.446 || len(m.CorrectionBias) != 8 || m.Shared == nil {
		t.Errorf("MoE routing %v top-%d norm %v scale %v bias %d shared %v", m.Routing, m.TopK, m.NormTopK, m.Scale, len(m.CorrectionBias), m.Shared != nil)
	}
	a := d.Layers[2].Branches[0].Block.(*nn.MLA)
	if a.Heads != 3 || a.NopeDim != 16 || a.RopeDim != 8 || a.VDim != 12 || a.Rank != 24 || a.QA != nil || a.KVNorm.Eps != 1e-6 {
		t.Errorf("MLA %+v", a)
	}
	k := d.Layers[0].Branches[0].Block.(*nn.KDAMixer)
	if k.Conv.Channels != 3*48 || k.FB.In != 16 || len(k.DtBias) != 48 || k.Norm.Eps != 1e-5 {
		t.Errorf("KDA conv %d channels, gate rank %d, %d dt_bias", k.Conv.Channels, k.FB.In, len(k.DtBias))
	}
	if st := d.StateBytes(replay.Options{}); st.States != 3*3*16*16*4 {
		t.Errorf("state bytes %d, want 3 layers × 3 heads × 16×16 × 4", st.States)
	}
	if n := d.KVBytesPerToken(); n != 2*4*(24+8) {
		t.Errorf("%d cache bytes a position, want two latents of 32 float32", n)
	}
}

// greedy decodes n tokens after each prompt, the prompts batched.
func greedy(t *testing.T, d *nn.Decoder, opt replay.Options, prompts [][]int, n int) [][]int {
	t.Helper()
	ctx := context.Background()
	s, err := d.NewState(len(prompts), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	seqs := make([]nn.Seq, len(prompts))
	var rows []nn.Row
	for i, p := range prompts {
		seqs[i], _ = s.Admit()
		for k, id := range p {
			rows = append(rows, nn.Row{Seq: seqs[i], Token: id, Logits: k == len(p)-1})
		}
	}
	ids := make([]int32, len(prompts))
	out := make([][]int, len(prompts))
	for range n {
		if err := d.Greedy(ctx, s, rows, ids); err != nil {
			t.Fatal(err)
		}
		rows = rows[:0]
		for i, id := range ids {
			out[i] = append(out[i], int(id))
			rows = append(rows, nn.Row{Seq: seqs[i], Token: int(id), Logits: true})
		}
	}
	return out
}

// TestModesAgree: replay (windows 16 and 3, the exact fold, an fp32 and a
// bf16 ring) and baseline modes give the same greedy tokens on a batch of
// prompts of different lengths.
func TestModesAgree(t *testing.T) {
	d := tinyModel(t)
	prompts := [][]int{prompt(19, d.Vocab, 5), prompt(1, d.Vocab, 6), prompt(6, d.Vocab, 7)}
	const n = 40
	base := greedy(t, d, replay.Options{Mode: replay.Baseline}, prompts, n)
	for _, m := range []struct {
		name string
		opt  replay.Options
	}{
		{"replay-w16", replay.Options{Mode: replay.Replay, Window: 16}},
		{"replay-w3", replay.Options{Mode: replay.Replay, Window: 3}},
		{"replay-w5-exact", replay.Options{Mode: replay.Replay, Window: 5, ExactFold: true}},
	} {
		got := greedy(t, d, m.opt, prompts, n)
		for i := range prompts {
			for k := range got[i] {
				if got[i][k] != base[i][k] {
					t.Fatalf("%s: prompt %d token %d is %d, baseline %d (%v vs %v)", m.name, i, k, got[i][k], base[i][k], got[i], base[i])
				}
			}
		}
	}
	t.Logf("greedy continuations %v", base)
}

// TestVerifyCommitMatchesDecode: drafts verified and a prefix committed
// leave the model where decoding the prefix would, in replay and baseline
// modes: the KDA caches move their cursors, the latent caches drop the
// rejected positions.
func TestVerifyCommitMatchesDecode(t *testing.T) {
	d := tinyModel(t)
	ctx := context.Background()
	V := d.Vocab
	for _, opt := range []replay.Options{{Mode: replay.Replay, Window: 4, MaxDraft: 4}, {Mode: replay.Baseline, MaxDraft: 4}} {
		s, err := d.NewState(2, opt)
		if err != nil {
			t.Fatal(err)
		}
		spec, _ := s.Admit()
		plain, _ := s.Admit()
		p := prompt(9, V, 11)
		var rows []nn.Row
		for _, id := range p {
			rows = append(rows, nn.Row{Seq: spec, Token: id}, nn.Row{Seq: plain, Token: id})
		}
		if err := d.Forward(ctx, s, rows, nil); err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(4, 4))
		vl, one := make([]float32, 4*V), make([]float32, V)
		for round := range 6 {
			toks := []int{rng.IntN(V), rng.IntN(V), rng.IntN(V), rng.IntN(V)}
			accept := rng.IntN(5)
			vr := make([]nn.Row, len(toks))
			for i, id := range toks {
				vr[i] = nn.Row{Seq: spec, Token: id, Logits: true}
			}
			if err := d.Verify(ctx, s, vr, vl); err != nil {
				t.Fatal(err)
			}
			if err := d.Commit(s, []nn.Seq{spec}, []int{accept}); err != nil {
				t.Fatal(err)
			}
			for i := range accept {
				if err := d.Forward(ctx, s, []nn.Row{{Seq: plain, Token: toks[i], Logits: true}}, one); err != nil {
					t.Fatal(err)
				}
				if rel := ref64.RelDiff(vl[i*V:(i+1)*V], one); rel > 1e-5 {
					t.Fatalf("%v round %d row %d: verify and decode differ by %.2e", opt.Mode, round, i, rel)
				}
			}
			if s.Len(spec) != s.Len(plain) {
				t.Fatalf("lengths %d and %d", s.Len(spec), s.Len(plain))
			}
		}
		s.Close()
	}
}

// TestUnsupported: the kimi_linear options Kimi-Linear does not use are
// refused when binding, naming the field.
func TestUnsupported(t *testing.T) {
	_, raw := tinyConfig(t)
	for _, c := range []struct {
		field string
		value any
		want  string
	}{
		{"mla_use_nope", false, "mla_use_nope"},
		{"mla_use_output_gate", true, "mla_use_output_gate"},
		{"attn_res_block_size", 4, "attn_res_block_size"},
		{"hidden_act", "situ", "hidden_act"},
		{"moe_router_activation_func", "softmax", "router"},
	} {
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		m[c.field] = c.value
		edited, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := hfconfig.Parse(edited)
		if err != nil {
			t.Fatalf("%s: %v", c.field, err)
		}
		_, err = model.LoadRandom(cfg, 1, 0, tensor.Float32)
		if !errors.Is(err, hfconfig.ErrUnsupported) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s = %v: error %v, want one naming %s", c.field, c.value, err, c.want)
		}
	}
}

// recorder answers every tensor a binding asks for with seeded random
// values in the ranges of real weights, and keeps them.
type recorder struct {
	t map[string]safetensors.Tensor
}

func (r *recorder) Has(name string) bool { return true }

func (r *recorder) Float32(name string, shape ...int) ([]float32, error) {
	n := 1
	for _, s := range shape {
		n *= s
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	rng := rand.New(rand.NewPCG(h.Sum64(), 9))
	v := make([]float32, n)
	for i := range v {
		g := rng.NormFloat64()
		switch {
		case strings.HasSuffix(name, "A_log"):
			v[i] = float32(math.Log(1 + 15*rng.Float64()))
		case strings.HasSuffix(name, "dt_bias"):
			v[i] = float32(-2 + g)
		case strings.Contains(name, "norm"):
			v[i] = float32(1 + 0.2*g)
		case strings.HasSuffix(name, "bias"):
			v[i] = float32(0.05 * g)
		default:
			v[i] = float32(g / math.Sqrt(float64(shape[len(shape)-1])))
		}
	}
	r.t[name] = f32Tensor(name, shape, v)
	return v, nil
}

func f32Tensor(name string, shape []int, v []float32) safetensors.Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return safetensors.Tensor{Name: name, DType: safetensors.F32, Shape: append([]int(nil), shape...), Data: b}
}

// split cuts a fused [n][...] tensor into n tensors named by name(i).
func split(x safetensors.Tensor, name func(i int) string) []safetensors.Tensor {
	n := x.Shape[0]
	per := len(x.Data) / n
	var out []safetensors.Tensor
	for i := range n {
		out = append(out, safetensors.Tensor{Name: name(i), DType: x.DType, Shape: x.Shape[1:], Data: x.Data[i*per : (i+1)*per]})
	}
	return out
}

// TestCheckpointLayouts binds the same weights saved in the checkpoint's
// own layout (remote code: separate q/k/v convolutions, A_log
// [1, 1, heads, 1], per-expert w1/w2/w3 under block_sparse_moe) and in
// transformers' (one conv1d, renamed gates, A_log [heads, 1], dt_bias
// [heads, dk], fused gate_up_proj under mlp), and checks that both give the
// logits of the weights bound directly.
func TestCheckpointLayouts(t *testing.T) {
	cfg, raw := tinyConfig(t)
	rec := &recorder{t: map[string]safetensors.Tensor{}}
	want, err := model.Bind(cfg, nn.NewSourceLoader(rec))
	if err != nil {
		t.Fatal(err)
	}
	E, I, H, K, heads, dk := cfg.MoE.NumExperts, cfg.MoE.ExpertIntermediateSize, cfg.HiddenSize, cfg.KDA.Dim(), cfg.KDA.NumHeads, cfg.KDA.HeadDim
	checkpoint := func(name string, x safetensors.Tensor) []safetensors.Tensor {
		switch {
		case strings.HasSuffix(name, ".A_log"):
			x.Shape = []int{1, 1, heads, 1}
		case strings.Contains(name, "block_sparse_moe.experts."):
			p := strings.LastIndex(name, ".")
			return split(x, func(i int) string { return name[:p] + "." + strconv.Itoa(i) + name[p:] + ".weight" })
		}
		return []safetensors.Tensor{x}
	}
	transformers := func(name string, x safetensors.Tensor) []safetensors.Tensor {
		for old, nw := range map[string]string{".f_a_proj.": ".forget_gate_down.", ".f_b_proj.": ".forget_gate_up.",
			".b_proj.": ".beta_proj.", ".g_a_proj.": ".output_gate_down.", ".g_b_proj.": ".output_gate_up.", ".block_sparse_moe.": ".mlp."} {
			name = strings.Replace(name, old, nw, 1)
		}
		x.Name = name
		switch {
		case strings.HasSuffix(name, ".A_log"):
			x.Shape = []int{heads, 1}
		case strings.HasSuffix(name, ".dt_bias"):
			x.Shape = []int{heads, dk}
		case strings.HasSuffix(name, ".k_conv1d.weight"), strings.HasSuffix(name, ".v_conv1d.weight"):
			return nil // fused into conv1d with q's
		case strings.HasSuffix(name, ".q_conv1d.weight"):
			p := strings.TrimSuffix(name, ".q_conv1d.weight")
			var data []byte
			for _, c := range []string{"q", "k", "v"} {
				data = append(data, rec.t[p+"."+c+"_conv1d.weight"].Data...)
			}
			return []safetensors.Tensor{{Name: p + ".conv1d.weight", DType: x.DType, Shape: []int{3 * K, 1, x.Shape[2]}, Data: data}}
		case strings.HasSuffix(name, ".experts.w3"):
			return nil // fused into gate_up_proj with w1's
		case strings.HasSuffix(name, ".experts.w1"):
			up := rec.t[strings.Replace(strings.TrimSuffix(name, "w1"), ".mlp.", ".block_sparse_moe.", 1)+"w3"]
			var data []byte
			per := I * H * 4
			for e := range E {
				data = append(data, x.Data[e*per:(e+1)*per]...)
				data = append(data, up.Data[e*per:(e+1)*per]...)
			}
			return []safetensors.Tensor{{Name: strings.TrimSuffix(name, "w1") + "gate_up_proj", DType: x.DType, Shape: []int{E, 2 * I, H}, Data: data}}
		case strings.HasSuffix(name, ".experts.w2"):
			x.Name = strings.TrimSuffix(name, "w2") + "down_proj"
		}
		return []safetensors.Tensor{x}
	}
	ctx := context.Background()
	ids := prompt(12, cfg.VocabSize, 2)
	logits := func(d *nn.Decoder) []float32 {
		s, err := d.NewState(1, replay.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		q, _ := s.Admit()
		var rows []nn.Row
		for _, id := range ids {
			rows = append(rows, nn.Row{Seq: q, Token: id, Logits: true})
		}
		out := make([]float32, len(ids)*d.Vocab)
		if err := d.Forward(ctx, s, rows, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	ref := logits(want)
	for _, layout := range []struct {
		name string
		edit func(string, safetensors.Tensor) []safetensors.Tensor
	}{{"checkpoint", checkpoint}, {"transformers", transformers}} {
		t.Run(layout.name, func(t *testing.T) {
			var list []safetensors.Tensor
			for name, x := range rec.t {
				list = append(list, layout.edit(name, x)...)
			}
			dir := t.TempDir()
			f, err := os.Create(filepath.Join(dir, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			if err := safetensors.Write(f, list, nil); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
				t.Fatal(err)
			}
			d, err := model.Load(dir, model.Options{})
			if err != nil {
				t.Fatal(err)
			}
			got := logits(d)
			for i := range got {
				if got[i] != ref[i] {
					t.Fatalf("logit %d: %v, want %v", i, got[i], ref[i])
				}
			}
		})
	}
}

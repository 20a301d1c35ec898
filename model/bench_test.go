package model_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/model/safetensors"
	"github.com/replayssm/replayssm/replay"
)

// writeRandomModel writes config.json and a float32 model.safetensors of
// random weights for the given tensor shapes into a new directory.
func writeRandomModel(tb testing.TB, config string, shapes map[string][]int) string {
	tb.Helper()
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644); err != nil {
		tb.Fatal(err)
	}
	names := make([]string, 0, len(shapes))
	for n := range shapes {
		names = append(names, n)
	}
	sort.Strings(names)
	r := rand.New(rand.NewPCG(1, 1))
	var ts []safetensors.Tensor
	for _, n := range names {
		sh := shapes[n]
		size := 1
		for _, d := range sh {
			size *= d
		}
		data := make([]byte, 4*size)
		for i := range size {
			v := float32(r.NormFloat64() * 0.02)
			switch filepath.Ext(n) {
			case ".A_log":
				v = float32(math.Log(1 + 15*r.Float64()))
			case ".dt_bias":
				v = -4
			case ".D":
				v = 1
			}
			if filepath.Ext(n) == ".weight" && len(sh) == 1 {
				v = 1
			}
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
		ts = append(ts, safetensors.Tensor{Name: n, DType: safetensors.F32, Shape: sh, Data: data})
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		tb.Fatal(err)
	}
	if err := safetensors.Write(f, ts, nil); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
	return dir
}

// qwen35Random is a Qwen3.5-style model of about 30M parameters: hidden 512,
// 10 layers (GDN×4, attention) ×2, SwiGLU 1024, vocab 8192, tied embeddings.
func qwen35Random(tb testing.TB) string {
	const H, V, L, inter = 512, 8192, 10, 1024
	const Hk, Hv, dk, dv, K = 4, 8, 64, 64, 4
	const heads, kv, hd = 8, 2, 64
	cfg := fmt.Sprintf(`{"model_type":"qwen3_5_text","hidden_size":%d,"vocab_size":%d,"num_hidden_layers":%d,
"intermediate_size":%d,"layer_types":["linear_attention","linear_attention","linear_attention","linear_attention","full_attention",
"linear_attention","linear_attention","linear_attention","linear_attention","full_attention"],
"linear_num_key_heads":%d,"linear_num_value_heads":%d,"linear_key_head_dim":%d,"linear_value_head_dim":%d,"linear_conv_kernel_dim":%d,
"num_attention_heads":%d,"num_key_value_heads":%d,"head_dim":%d,"rms_norm_eps":1e-6,"tie_word_embeddings":true,
"rope_parameters":{"rope_type":"default","rope_theta":10000000.0,"partial_rotary_factor":0.25,"mrope_section":[2,3,3]}}`,
		H, V, L, inter, Hk, Hv, dk, dv, K, heads, kv, hd)
	s := map[string][]int{"model.embed_tokens.weight": {V, H}, "model.norm.weight": {H}}
	for i := range L {
		p := fmt.Sprintf("model.layers.%d.", i)
		s[p+"input_layernorm.weight"] = []int{H}
		s[p+"post_attention_layernorm.weight"] = []int{H}
		s[p+"mlp.gate_proj.weight"] = []int{inter, H}
		s[p+"mlp.up_proj.weight"] = []int{inter, H}
		s[p+"mlp.down_proj.weight"] = []int{H, inter}
		if i%5 == 4 {
			a := p + "self_attn."
			s[a+"q_proj.weight"] = []int{2 * heads * hd, H}
			s[a+"k_proj.weight"] = []int{kv * hd, H}
			s[a+"v_proj.weight"] = []int{kv * hd, H}
			s[a+"o_proj.weight"] = []int{H, heads * hd}
			s[a+"q_norm.weight"] = []int{hd}
			s[a+"k_norm.weight"] = []int{hd}
			continue
		}
		g := p + "linear_attn."
		s[g+"in_proj_qkv.weight"] = []int{2*Hk*dk + Hv*dv, H}
		s[g+"in_proj_z.weight"] = []int{Hv * dv, H}
		s[g+"in_proj_a.weight"] = []int{Hv, H}
		s[g+"in_proj_b.weight"] = []int{Hv, H}
		s[g+"conv1d.weight"] = []int{2*Hk*dk + Hv*dv, 1, K}
		s[g+"A_log"] = []int{Hv}
		s[g+"dt_bias"] = []int{Hv}
		s[g+"norm.weight"] = []int{dv}
		s[g+"out_proj.weight"] = []int{H, Hv * dv}
	}
	return writeRandomModel(tb, cfg, s)
}

// nemotronHRandom is a NemotronH-style model of about 30M parameters: hidden
// 512, pattern M-M*M-M- (Mamba H16 P64 N64 G4), relu² MLP 2048, vocab 8192.
func nemotronHRandom(tb testing.TB) string {
	const H, V, inter = 512, 8192, 2048
	const mh, mp, N, G, K = 16, 64, 64, 4, 4
	const heads, kv, hd = 8, 2, 64
	pattern := "M-M*M-M-M-"
	cfg := fmt.Sprintf(`{"model_type":"nemotron_h","hidden_size":%d,"vocab_size":%d,"hybrid_override_pattern":%q,
"intermediate_size":%d,"mamba_num_heads":%d,"mamba_head_dim":%d,"ssm_state_size":%d,"n_groups":%d,"conv_kernel":%d,
"num_attention_heads":%d,"num_key_value_heads":%d,"head_dim":%d,"layer_norm_epsilon":1e-5,"tie_word_embeddings":false,
"use_conv_bias":true,"mlp_hidden_act":"relu2","time_step_min":0.001}`, H, V, pattern, inter, mh, mp, N, G, K, heads, kv, hd)
	I, C := mh*mp, mh*mp+2*G*N
	s := map[string][]int{"backbone.embeddings.weight": {V, H}, "backbone.norm_f.weight": {H}, "lm_head.weight": {V, H}}
	for i, c := range pattern {
		p := fmt.Sprintf("backbone.layers.%d.", i)
		s[p+"norm.weight"] = []int{H}
		m := p + "mixer."
		switch c {
		case 'M':
			s[m+"in_proj.weight"] = []int{2*I + 2*G*N + mh, H}
			s[m+"conv1d.weight"] = []int{C, 1, K}
			s[m+"conv1d.bias"] = []int{C}
			s[m+"A_log"] = []int{mh}
			s[m+"dt_bias"] = []int{mh}
			s[m+"D"] = []int{mh}
			s[m+"norm.weight"] = []int{I}
			s[m+"out_proj.weight"] = []int{H, I}
		case '*':
			s[m+"q_proj.weight"] = []int{heads * hd, H}
			s[m+"k_proj.weight"] = []int{kv * hd, H}
			s[m+"v_proj.weight"] = []int{kv * hd, H}
			s[m+"o_proj.weight"] = []int{H, heads * hd}
		case '-':
			s[m+"up_proj.weight"] = []int{inter, H}
			s[m+"down_proj.weight"] = []int{H, inter}
		}
	}
	return writeRandomModel(tb, cfg, s)
}

// bf16 is model's copy in bfloat16 (writeRounded), as models are released.
func bf16(model func(testing.TB) string) func(testing.TB) string {
	return func(tb testing.TB) string { return writeRounded(tb, model(tb), safetensors.BF16) }
}

// BenchmarkDecode measures decode tokens/s (batch 1 and 8, after a 64-token
// prompt) on a fixture and on the ~30M-parameter random models.
func BenchmarkDecode(b *testing.B) {
	models := []struct {
		name string
		dir  func(testing.TB) string
	}{
		{"fixture-qwen3_5", func(testing.TB) string { return filepath.Join("testdata", "fixtures", "qwen3_5") }},
		{"fixture-nemotron_h", func(testing.TB) string { return filepath.Join("testdata", "fixtures", "nemotron_h") }},
		{"qwen3_5-30M", qwen35Random},
		{"nemotron_h-30M", nemotronHRandom},
		{"qwen3_5-30M-bf16", bf16(qwen35Random)},
		{"nemotron_h-30M-bf16", bf16(nemotronHRandom)},
	}
	for _, m := range models {
		dir := m.dir(b)
		start := time.Now()
		d, err := model.Load(dir, model.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s: %.1fM parameters, loaded in %v", m.name, float64(d.Params())/1e6, time.Since(start).Round(time.Millisecond))
		for _, mode := range []replay.Mode{replay.Replay, replay.Baseline} {
			for _, batch := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/%v/batch%d", m.name, mode, batch), func(b *testing.B) {
					benchDecode(b, d, replay.Options{Mode: mode}, batch)
				})
			}
		}
	}
}

// benchDecode times one-token decode steps of batch sequences whose context
// stays between 64 and 64+maxSteps tokens: every maxSteps steps the
// sequences restart from a fresh 64-token prompt, outside the timer.
func benchDecode(b *testing.B, d *nn.Decoder, opt replay.Options, batch int) {
	const prompt, maxSteps = 64, 192
	ctx := context.Background()
	s, err := d.NewState(batch, opt)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	seqs := make([]nn.Seq, batch)
	logits := make([]float32, batch*d.Vocab)
	restart := func() {
		var rows []nn.Row
		for k := range seqs {
			if s.Len(seqs[k]) > 0 {
				if err := s.Evict(seqs[k]); err != nil {
					b.Fatal(err)
				}
			}
			seqs[k], _ = s.Admit()
			for i := range prompt {
				rows = append(rows, nn.Row{Seq: seqs[k], Token: (i*7 + k) % d.Vocab, Logits: i == prompt-1})
			}
		}
		if err := d.Forward(ctx, s, rows, logits); err != nil {
			b.Fatal(err)
		}
	}
	restart()
	step := make([]nn.Row, batch)
	tokens, steps := 0, 0
	for b.Loop() {
		if steps == maxSteps {
			b.StopTimer()
			restart()
			steps = 0
			b.StartTimer()
		}
		for k := range step {
			step[k] = nn.Row{Seq: seqs[k], Token: (tokens + k) % d.Vocab, Logits: true}
		}
		if err := d.Forward(ctx, s, step, logits); err != nil {
			b.Fatal(err)
		}
		tokens += batch
		steps++
	}
	b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tok/s")
}

// BenchmarkPrefill measures prompt tokens/s: one forward over a 256-token
// prompt (matrix products over all rows, SSM layers stepping token by token).
func BenchmarkPrefill(b *testing.B) {
	for _, m := range []struct {
		name string
		dir  func(testing.TB) string
	}{{"qwen3_5-30M", qwen35Random}, {"nemotron_h-30M", nemotronHRandom},
		{"qwen3_5-30M-bf16", bf16(qwen35Random)}, {"nemotron_h-30M-bf16", bf16(nemotronHRandom)}} {
		d, err := model.Load(m.dir(b), model.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(m.name, func(b *testing.B) {
			const L = 256
			s, err := d.NewState(1, replay.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			logits := make([]float32, d.Vocab)
			rows := make([]nn.Row, L)
			tokens := 0
			for b.Loop() {
				q, _ := s.Admit()
				for i := range rows {
					rows[i] = nn.Row{Seq: q, Token: (i * 13) % d.Vocab, Logits: i == L-1}
				}
				if err := d.Forward(context.Background(), s, rows, logits); err != nil {
					b.Fatal(err)
				}
				if err := s.Evict(q); err != nil {
					b.Fatal(err)
				}
				tokens += L
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tok/s")
		})
	}
}

package model_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"testing"

	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/model/safetensors"
	"github.com/replayssm/replayssm/replay"
)

// rewriteFixture copies a fixture with its tensors passed through edit (which
// may rename, merge or drop them) and its config.json through editConfig.
func rewriteFixture(t *testing.T, fx string, edit func(map[string]safetensors.Tensor) map[string]safetensors.Tensor, editConfig func(map[string]any) map[string]any) string {
	t.Helper()
	src := filepath.Join("testdata", "fixtures", fx)
	f, err := safetensors.Open(filepath.Join(src, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ts := map[string]safetensors.Tensor{}
	for _, n := range f.Names() {
		info, _ := f.Info(n)
		b, err := f.Bytes(n)
		if err != nil {
			t.Fatal(err)
		}
		ts[n] = safetensors.Tensor{Name: n, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), b...)}
	}
	ts = edit(ts)
	var list []safetensors.Tensor
	for _, x := range ts {
		list = append(list, x)
	}
	dir := t.TempDir()
	out, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Write(out, list, nil); err != nil {
		t.Fatal(err)
	}
	out.Close()
	raw, err := os.ReadFile(filepath.Join(src, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if editConfig != nil {
		cfg = editConfig(cfg)
	}
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fuseExperts replaces per-expert tensors <m>.experts.<e>.<proj>.weight by
// one <m>.experts.<proj> [E][out][in] per projection; with gateUp, gate_proj
// and up_proj become one gate_up_proj [E][2·out][in] (gate rows first).
func fuseExperts(gateUp bool) func(map[string]safetensors.Tensor) map[string]safetensors.Tensor {
	re := regexp.MustCompile(`^(.*\.experts)\.(\d+)\.(\w+)\.weight$`)
	return func(ts map[string]safetensors.Tensor) map[string]safetensors.Tensor {
		type key struct{ module, proj string }
		parts := map[key]map[int]safetensors.Tensor{}
		for n, x := range ts {
			m := re.FindStringSubmatch(n)
			if m == nil {
				continue
			}
			e, _ := strconv.Atoi(m[2])
			k := key{m[1], m[3]}
			if parts[k] == nil {
				parts[k] = map[int]safetensors.Tensor{}
			}
			parts[k][e] = x
			delete(ts, n)
		}
		stack := func(name string, es map[int]safetensors.Tensor) safetensors.Tensor {
			idx := make([]int, 0, len(es))
			for e := range es {
				idx = append(idx, e)
			}
			sort.Ints(idx)
			var data []byte
			for _, e := range idx {
				data = append(data, es[e].Data...)
			}
			sh := es[idx[0]].Shape
			return safetensors.Tensor{Name: name, DType: es[idx[0]].DType, Shape: []int{len(idx), sh[0], sh[1]}, Data: data}
		}
		for k, es := range parts {
			if gateUp && k.proj == "up_proj" {
				continue
			}
			if gateUp && k.proj == "gate_proj" {
				ups := parts[key{k.module, "up_proj"}]
				var data []byte
				sh := es[0].Shape
				for e := range len(es) {
					data = append(data, es[e].Data...)
					data = append(data, ups[e].Data...)
				}
				name := k.module + ".gate_up_proj"
				ts[name] = safetensors.Tensor{Name: name, DType: es[0].DType, Shape: []int{len(es), 2 * sh[0], sh[1]}, Data: data}
				continue
			}
			name := k.module + "." + k.proj
			ts[name] = stack(name, es)
		}
		return ts
	}
}

// promptLogits runs prompt 0 of a fixture through the model in dir.
func promptLogits(t *testing.T, dir, fx string) []float32 {
	t.Helper()
	d, err := model.Load(dir, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ref := openReference(t, filepath.Join("testdata", "fixtures", fx))
	s, err := d.NewState(1, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q, _ := s.Admit()
	var rows []nn.Row
	for _, id := range ref.ids(t, "prompt.0.ids") {
		rows = append(rows, nn.Row{Seq: q, Token: id, Logits: true})
	}
	logits := make([]float32, len(rows)*d.Vocab)
	if err := d.Forward(context.Background(), s, rows, logits); err != nil {
		t.Fatal(err)
	}
	return logits
}

// TestCheckpointLayouts loads the fixtures re-saved in the other layouts real
// checkpoints use: fused 3-D expert tensors, and Qwen3.5 inside a VLM wrapper
// (weights under model.language_model., config under text_config).
func TestCheckpointLayouts(t *testing.T) {
	tests := []struct {
		name, fx string
		edit     func(map[string]safetensors.Tensor) map[string]safetensors.Tensor
		config   func(map[string]any) map[string]any
	}{
		{"nemotron_h fused experts", "nemotron_h", fuseExperts(false), nil},
		{"qwen3_5_moe fused gate_up", "qwen3_5_moe", fuseExperts(true), nil},
		{"qwen3_next fused experts", "qwen3_next", fuseExperts(false), nil},
		{"qwen3_5 VLM wrapper", "qwen3_5", func(ts map[string]safetensors.Tensor) map[string]safetensors.Tensor {
			out := map[string]safetensors.Tensor{}
			for n, x := range ts {
				n = "model.language_model." + n[len("model."):]
				x.Name = n
				out[n] = x
			}
			out["model.visual.patch_embed.weight"] = safetensors.Tensor{Name: "model.visual.patch_embed.weight", DType: safetensors.F32, Shape: []int{2}, Data: make([]byte, 8)}
			return out
		}, func(cfg map[string]any) map[string]any {
			cfg["model_type"] = "qwen3_5_text"
			return map[string]any{"model_type": "qwen3_5", "text_config": cfg, "tie_word_embeddings": true}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := promptLogits(t, filepath.Join("testdata", "fixtures", tc.fx), tc.fx)
			got := promptLogits(t, rewriteFixture(t, tc.fx, tc.edit, tc.config), tc.fx)
			if rel, _ := relErr(got, want); rel != 0 {
				t.Errorf("logits differ from the per-expert layout: rel err %.2e", rel)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	dir := rewriteFixture(t, "qwen3_5", func(ts map[string]safetensors.Tensor) map[string]safetensors.Tensor {
		delete(ts, "model.layers.3.self_attn.k_norm.weight")
		return ts
	}, nil)
	_, err := model.Load(dir, model.Options{})
	if err == nil || !regexp.MustCompile(`k_norm.weight`).MatchString(err.Error()) {
		t.Errorf("missing tensor: error %v", err)
	}
	dir = rewriteFixture(t, "nemotron_h", func(ts map[string]safetensors.Tensor) map[string]safetensors.Tensor {
		x := ts["backbone.layers.0.mixer.out_proj.weight"]
		x.Shape = []int{128, 64}
		ts[x.Name] = x
		return ts
	}, nil)
	_, err = model.Load(dir, model.Options{})
	if err == nil || !regexp.MustCompile(`out_proj.weight.*shape \[128 64\], want \[64 128\]`).MatchString(err.Error()) {
		t.Errorf("wrong shape: error %v", err)
	}

}

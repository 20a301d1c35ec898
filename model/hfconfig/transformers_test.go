package hfconfig

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// expectation is what transformers 5.17 itself built from a config
// (testdata/hf/CASE.expect.json, written by gen_reference.py): the module
// class of each layer's branches and the parameter shapes of one layer of
// each kind, on the meta device.
type expectation struct {
	ModelType              string                      `json:"model_type"`
	TextModelType          string                      `json:"text_model_type"`
	TieWordEmbeddings      bool                        `json:"tie_word_embeddings"`
	Layers                 [][2]*string                `json:"layers"`
	LayerParams            map[string]map[string][]int `json:"layer_params"`
	TopParams              map[string][]int            `json:"top_params"`
	Attrs                  map[string]any              `json:"attrs"`
	OuterTieWordEmbeddings bool                        `json:"outer_tie_word_embeddings"`
}

// kindOfClass maps a transformers module class to a LayerKind.
func kindOfClass(name *string) LayerKind {
	if name == nil {
		return None
	}
	n := strings.ToLower(*name)
	switch {
	case strings.Contains(n, "mamba"):
		return Mamba
	case strings.Contains(n, "gateddeltanet"):
		return GatedDeltaNet
	case strings.Contains(n, "attention"):
		return Attention
	case strings.Contains(n, "moe"):
		return MoE
	case strings.Contains(n, "mlp"):
		return MLP
	}
	return LayerKind(255)
}

// expectedShapes gives the parameter shapes of one layer that follow from the
// parsed Config, named as transformers names them in memory.
func expectedShapes(c *Config, l Layer) map[string][]int {
	h := c.HiddenSize
	s := map[string][]int{}
	add := func(prefix string, m map[string][]int) {
		for k, v := range m {
			s[prefix+k] = v
		}
	}
	m, g, a, e := c.Mamba, c.GDN, c.Attention, c.MoE
	qwen := c.Family != NemotronH && c.Family != Mamba2
	switch l.Mixer {
	case Mamba:
		add("mixer.", map[string][]int{
			"in_proj.weight": {m.InProjSize(), h}, "conv1d.weight": {m.ConvDim(), 1, m.ConvKernel},
			"A_log": {m.NumHeads}, "D": {m.NumHeads}, "dt_bias": {m.NumHeads},
			"norm.weight": {m.InnerSize}, "out_proj.weight": {h, m.InnerSize},
		})
		if m.ConvBias {
			s["mixer.conv1d.bias"] = []int{m.ConvDim()}
		}
	case GatedDeltaNet:
		add("linear_attn.", map[string][]int{
			"conv1d.weight": {g.ConvDim(), 1, g.ConvKernel}, "A_log": {g.NumValueHeads}, "dt_bias": {g.NumValueHeads},
			"norm.weight": {g.ValueHeadDim}, "out_proj.weight": {h, g.ValueDim()},
		})
		if c.Family == Qwen3Next { // packed per key head (MODELS.md 2)
			s["linear_attn.in_proj_qkvz.weight"] = []int{2*g.KeyDim() + 2*g.ValueDim(), h}
			s["linear_attn.in_proj_ba.weight"] = []int{2 * g.NumValueHeads, h}
		} else {
			s["linear_attn.in_proj_qkv.weight"] = []int{g.ConvDim(), h}
			s["linear_attn.in_proj_z.weight"] = []int{g.ValueDim(), h}
			s["linear_attn.in_proj_b.weight"] = []int{g.NumValueHeads, h}
			s["linear_attn.in_proj_a.weight"] = []int{g.NumValueHeads, h}
		}
	case Attention:
		prefix, q := "mixer.", a.NumHeads*a.HeadDim
		if qwen {
			prefix = "self_attn."
		}
		qRows := q
		if a.OutputGate {
			qRows = 2 * q
		}
		add(prefix, map[string][]int{
			"q_proj.weight": {qRows, h}, "k_proj.weight": {a.NumKVHeads * a.HeadDim, h},
			"v_proj.weight": {a.NumKVHeads * a.HeadDim, h}, "o_proj.weight": {h, q},
		})
		if a.QKNorm {
			s[prefix+"q_norm.weight"] = []int{a.HeadDim}
			s[prefix+"k_norm.weight"] = []int{a.HeadDim}
		}
	}
	ffn := l.FFN
	if !qwen {
		ffn = l.Mixer
	}
	switch ffn {
	case MLP:
		if qwen {
			add("mlp.", map[string][]int{"gate_proj.weight": {c.IntermediateSize, h}, "up_proj.weight": {c.IntermediateSize, h}, "down_proj.weight": {h, c.IntermediateSize}})
		} else {
			add("mixer.", map[string][]int{"up_proj.weight": {c.IntermediateSize, h}, "down_proj.weight": {h, c.IntermediateSize}})
		}
	case MoE:
		if qwen {
			add("mlp.", map[string][]int{
				"gate.weight": {e.NumExperts, h}, "experts.gate_up_proj": {e.NumExperts, 2 * e.ExpertIntermediateSize, h},
				"experts.down_proj": {e.NumExperts, h, e.ExpertIntermediateSize}, "shared_expert_gate.weight": {1, h},
				"shared_expert.gate_proj.weight": {e.SharedExpertIntermediateSize, h},
				"shared_expert.up_proj.weight":   {e.SharedExpertIntermediateSize, h},
				"shared_expert.down_proj.weight": {h, e.SharedExpertIntermediateSize},
			})
		} else {
			width := h // experts run in the latent space when there is one
			if e.LatentSize > 0 {
				width = e.LatentSize
				s["mixer.fc1_latent_proj.weight"] = []int{width, h}
				s["mixer.fc2_latent_proj.weight"] = []int{h, width}
			}
			add("mixer.", map[string][]int{
				"gate.weight": {e.NumExperts, h}, "experts.up_proj": {e.NumExperts, e.ExpertIntermediateSize, width},
				"experts.down_proj":               {e.NumExperts, width, e.ExpertIntermediateSize},
				"shared_experts.up_proj.weight":   {e.SharedExpertIntermediateSize, h},
				"shared_experts.down_proj.weight": {h, e.SharedExpertIntermediateSize},
			})
		}
	}
	return s
}

// attr digs a dotted path out of transformers' normalised attributes.
func attr(e *expectation, path string) (any, bool) {
	var v any = e.Attrs
	for _, p := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[p]; !ok {
			return nil, false
		}
	}
	return v, v != nil
}

func asFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case string: // jsonable() writes non-finite floats as repr()
		switch x {
		case "inf":
			return math.Inf(1)
		case "-inf":
			return math.Inf(-1)
		}
	}
	return math.NaN()
}

// TestTransformersConfigs parses configs saved by transformers 5.17 and checks
// the result against what transformers built from the same files.
func TestTransformersConfigs(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "hf", "*.expect.json"))
	if err != nil || len(paths) < 7 {
		t.Fatalf("expectations: %v, %v", paths, err)
	}
	for _, ep := range paths {
		name := strings.TrimSuffix(filepath.Base(ep), ".expect.json")
		t.Run(name, func(t *testing.T) {
			var e expectation
			raw, err := os.ReadFile(ep)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(raw, &e); err != nil {
				t.Fatal(err)
			}
			c, err := Load(filepath.Join("testdata", "hf", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if c.ModelType != e.TextModelType {
				t.Errorf("ModelType = %q, transformers: %q", c.ModelType, e.TextModelType)
			}
			if e.ModelType != e.TextModelType && c.WrapperModelType != e.ModelType {
				t.Errorf("WrapperModelType = %q, transformers: %q", c.WrapperModelType, e.ModelType)
			}
			if len(c.Layers) != len(e.Layers) {
				t.Fatalf("%d layers, transformers built %d", len(c.Layers), len(e.Layers))
			}
			for i, l := range e.Layers {
				want := Layer{Mixer: kindOfClass(l[0]), FFN: kindOfClass(l[1])}
				if c.Layers[i] != want {
					t.Errorf("layer %d = %v, transformers built %v (%s, %v)", i, c.Layers[i], want, *l[0], l[1])
				}
			}
			for idx, params := range e.LayerParams {
				var i int
				fmt.Sscan(idx, &i)
				want := expectedShapes(c, c.Layers[i])
				for p, shape := range want {
					if got, ok := params[p]; !ok || !slices.Equal(got, shape) {
						t.Errorf("layer %d (%v) %s: transformers has %v, Config implies %v", i, c.Layers[i], p, got, shape)
					}
				}
				for p := range params {
					if _, ok := want[p]; !ok && !strings.Contains(p, "norm") {
						t.Errorf("layer %d: transformers parameter %s %v not covered", i, p, params[p])
					}
				}
			}
			// Tied embeddings: transformers lists a tied lm_head only once.
			_, hasHead := e.TopParams["lm_head.weight"]
			if c.TieWordEmbeddings != e.TieWordEmbeddings || hasHead == c.TieWordEmbeddings {
				t.Errorf("TieWordEmbeddings = %v; transformers: %v, lm_head listed %v", c.TieWordEmbeddings, e.TieWordEmbeddings, hasHead)
			}
			for _, p := range []string{"model.embeddings.weight", "backbone.embeddings.weight", "model.embed_tokens.weight", "model.language_model.embed_tokens.weight"} {
				if s, ok := e.TopParams[p]; ok && !slices.Equal(s, []int{c.VocabSize, c.HiddenSize}) {
					t.Errorf("%s = %v, Config implies [%d %d]", p, s, c.VocabSize, c.HiddenSize)
				}
			}
			checkAttrs(t, c, &e)
		})
	}
}

// checkAttrs compares scalar fields with transformers' attributes after its
// own normalisation (defaults filled in, rope settings standardised).
func checkAttrs(t *testing.T, c *Config, e *expectation) {
	t.Helper()
	eq := func(path string, got float64) {
		t.Helper()
		v, ok := attr(e, path)
		if !ok {
			t.Errorf("transformers has no attribute %s", path)
			return
		}
		if want := asFloat(v); got != want {
			t.Errorf("%s = %v, transformers: %v", path, got, want)
		}
	}
	eq("hidden_size", float64(c.HiddenSize))
	eq("vocab_size", float64(c.VocabSize))
	switch c.Family {
	case NemotronH, Mamba2:
		eq("layer_norm_epsilon", c.RMSNormEps)
		eq("chunk_size", float64(c.Mamba.ChunkSize))
		eq("n_groups", float64(c.Mamba.NumGroups))
		eq("time_step_min", c.Mamba.TimeStepMin)
		eq("time_step_max", c.Mamba.TimeStepMax)
		if v, _ := attr(e, "time_step_limit"); asFloat(v.([]any)[0]) != c.Mamba.TimeStepLimit[0] || asFloat(v.([]any)[1]) != c.Mamba.TimeStepLimit[1] {
			t.Errorf("time_step_limit = %v, transformers: %v", c.Mamba.TimeStepLimit, v)
		}
	default:
		eq("rms_norm_eps", c.RMSNormEps)
		eq("rope_parameters.rope_theta", c.Attention.RopeTheta)
		eq("rope_parameters.partial_rotary_factor", c.Attention.PartialRotaryFactor)
		eq("num_key_value_heads", float64(c.Attention.NumKVHeads))
		if v, ok := attr(e, "rope_parameters.mrope_section"); ok {
			var want []int
			for _, x := range v.([]any) {
				want = append(want, int(asFloat(x)))
			}
			if !slices.Equal(c.Attention.MRopeSection, want) {
				t.Errorf("MRopeSection = %v, transformers: %v", c.Attention.MRopeSection, want)
			}
		}
	}
	if c.Family == NemotronH {
		eq("num_nextn_predict_layers", float64(c.MTP.NumLayers))
		eq("routed_scaling_factor", c.MoE.RoutedScalingFactor)
		eq("n_routed_experts", float64(c.MoE.NumExperts))
		eq("num_key_value_heads", float64(c.Attention.NumKVHeads))
		if v, ok := attr(e, "moe_latent_size"); ok && asFloat(v) != float64(c.MoE.LatentSize) {
			t.Errorf("LatentSize = %d, transformers: %v", c.MoE.LatentSize, v)
		}
		if c.MTP.NumLayers > 0 {
			v, _ := attr(e, "mtp_layers_block_type")
			var got []string
			for _, l := range c.MTP.Layers {
				got = append(got, map[LayerKind]string{Attention: "full_attention", MoE: "moe", Mamba: "linear_attention", MLP: "mlp"}[l.Mixer])
			}
			if fmt.Sprint(v) != fmt.Sprint(got) {
				t.Errorf("MTP layers = %v, transformers: %v", got, v)
			}
		}
	}
	if c.Family == Qwen35 {
		eq("mtp_num_hidden_layers", float64(c.MTP.NumLayers))
	}
}

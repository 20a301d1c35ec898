package hfconfig

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

var inf = math.Inf(1)

// nemotronMamba fills the NemotronH defaults that the hub configs below leave
// as transformers' defaults, so each case spells out only what differs.
func nemotronMamba(h, p, n, g, chunk int) MambaConfig {
	return MambaConfig{
		NumHeads: h, HeadDim: p, StateSize: n, NumGroups: g, ConvKernel: 4, InnerSize: h * p, Expand: 2,
		ChunkSize: chunk, ConvBias: true, HiddenAct: "silu", TimeStepLimit: [2]float64{0, inf},
		TimeStepMin: 0.001, TimeStepMax: 0.1, TimeStepFloor: 1e-4, NormGroupSize: h * p / g,
	}
}

// TestHubConfigs parses configs in the shapes found on the Hub (hand-written
// from MODELS.md's tables and the checkpoints' published configs) and checks
// every normalised field.
func TestHubConfigs(t *testing.T) {
	nemotronMoE := MoEConfig{NumExperts: 8, TopK: 2, ExpertIntermediateSize: 7688, NumSharedExperts: 1,
		SharedExpertIntermediateSize: 7688, Router: Sigmoid, CorrectionBias: true, NormTopKProb: true,
		RoutedScalingFactor: 1, NumExpertGroups: 1, TopKGroups: 1}
	qwenRope := AttentionConfig{OutputGate: true, QKNorm: true, Rope: true, RopeTheta: 1e7,
		PartialRotaryFactor: 0.25, RopeType: "default"}
	withHeads := func(a AttentionConfig, heads, kv, hd int) AttentionConfig {
		a.NumHeads, a.NumKVHeads, a.HeadDim, a.RotaryDim = heads, kv, hd, int(float64(hd)*a.PartialRotaryFactor)
		return a
	}
	mrope := func(a AttentionConfig) AttentionConfig {
		a.MRopeSection, a.MRopeInterleaved = []int{11, 11, 10}, true
		return a
	}
	qwenGDN := GDNConfig{NumKeyHeads: 16, NumValueHeads: 32, KeyHeadDim: 128, ValueHeadDim: 128, ConvKernel: 4}

	tests := []struct {
		file         string
		family       Family
		modelType    string
		wrapper      string
		hidden       int
		vocab        int
		intermediate int
		act          string
		tie          bool
		eps          float64
		eos          []int
		counts       map[LayerKind]int
		mamba        MambaConfig
		gdn          GDNConfig
		attn         AttentionConfig
		moe          MoEConfig
		mtp          MTPConfig
	}{
		{
			file: "hub/nemotron3_nano4b.json", family: NemotronH, modelType: "nemotron_h",
			hidden: 3136, vocab: 131072, intermediate: 12544, act: "relu2", eps: 1e-5, eos: []int{11},
			counts: map[LayerKind]int{Mamba: 21, Attention: 4, MLP: 17}, // MODELS.md: 21 M, 4 *, 17 -
			mamba:  nemotronMamba(96, 80, 128, 8, 128),
			attn:   AttentionConfig{NumHeads: 40, NumKVHeads: 8, HeadDim: 128},
			moe:    nemotronMoE,
		},
		{
			// Legacy spellings: mamba_n_groups, mamba_d_conv, mamba_chunk_size,
			// mamba_dt_limit, attention_head_dim, num_key_value_heads null.
			file: "hub/nemotron_h_8b_legacy.json", family: NemotronH, modelType: "nemotron_h",
			hidden: 4096, vocab: 131072, intermediate: 21504, act: "relu2", eps: 1e-5, eos: []int{2, 11},
			counts: map[LayerKind]int{Mamba: 24, Attention: 4, MLP: 24},
			mamba:  nemotronMamba(128, 64, 128, 8, 256),
			attn:   AttentionConfig{NumHeads: 32, NumKVHeads: 32, HeadDim: 128},
			moe:    nemotronMoE,
		},
		{
			file: "hub/nemotron3_super_hub.json", family: NemotronH, modelType: "nemotron_h",
			hidden: 4096, vocab: 131072, intermediate: 21504, act: "relu2", eps: 1e-5,
			counts: map[LayerKind]int{Mamba: 40, Attention: 8, MoE: 40}, // MODELS.md: 40 M, 8 *, 40 E
			mamba:  nemotronMamba(128, 64, 128, 8, 128),
			attn:   AttentionConfig{NumHeads: 32, NumKVHeads: 2, HeadDim: 128},
			moe: MoEConfig{NumExperts: 512, TopK: 22, ExpertIntermediateSize: 2688, NumSharedExperts: 1,
				SharedExpertIntermediateSize: 5376, Router: Sigmoid, CorrectionBias: true, NormTopKProb: true,
				RoutedScalingFactor: 5, LatentSize: 1024, NumExpertGroups: 1, TopKGroups: 1},
			mtp: MTPConfig{NumLayers: 1, Layers: []Layer{{Mixer: Attention}, {Mixer: MoE}}},
		},
		{
			// A VLM wrapper: fields under text_config, eos and tie outside it,
			// layout from full_attention_interval.
			file: "hub/qwen3_5_122b_a10b.json", family: Qwen35MoE, modelType: "qwen3_5_moe_text", wrapper: "qwen3_5_moe",
			hidden: 3072, vocab: 248320, act: "silu", eps: 1e-6, eos: []int{248046},
			counts: map[LayerKind]int{GatedDeltaNet: 36, Attention: 12, MoE: 48},
			gdn:    GDNConfig{NumKeyHeads: 16, NumValueHeads: 64, KeyHeadDim: 128, ValueHeadDim: 128, ConvKernel: 4},
			attn:   mrope(withHeads(qwenRope, 32, 2, 256)),
			moe: MoEConfig{NumExperts: 256, TopK: 8, ExpertIntermediateSize: 1024, NumSharedExperts: 1,
				SharedExpertIntermediateSize: 1024, SharedExpertGate: true, Router: Softmax, NormTopKProb: true,
				RoutedScalingFactor: 1, NumExpertGroups: 1, TopKGroups: 1},
			mtp: MTPConfig{NumLayers: 1},
		},
		{
			// Flat, RoPE at the top level, MoE on every layer (decoder_sparse_step 1).
			file: "hub/qwen3_next_80b_a3b.json", family: Qwen3Next, modelType: "qwen3_next",
			hidden: 2048, vocab: 151936, intermediate: 5120, act: "silu", eps: 1e-6, eos: []int{151645},
			counts: map[LayerKind]int{GatedDeltaNet: 36, Attention: 12, MoE: 48},
			gdn:    qwenGDN,
			attn:   withHeads(qwenRope, 16, 2, 256),
			moe: MoEConfig{NumExperts: 512, TopK: 10, ExpertIntermediateSize: 512, NumSharedExperts: 1,
				SharedExpertIntermediateSize: 512, SharedExpertGate: true, Router: Softmax, NormTopKProb: true,
				RoutedScalingFactor: 1, NumExpertGroups: 1, TopKGroups: 1, DecoderSparseStep: 1},
		},
		{
			// A text-only save, RoPE in the legacy rope_scaling object.
			file: "hub/qwen3_5_4b_text.json", family: Qwen35, modelType: "qwen3_5_text",
			hidden: 2560, vocab: 248320, intermediate: 9216, act: "silu", tie: true, eps: 1e-6, eos: []int{248044},
			counts: map[LayerKind]int{GatedDeltaNet: 24, Attention: 8, MLP: 32},
			gdn:    qwenGDN,
			attn:   mrope(withHeads(qwenRope, 16, 4, 256)),
		},
		{
			// state-spaces/mamba2-130m: mamba_ssm's format, no model_type; the
			// vocabulary is padded to a multiple of 16 as mamba_ssm does.
			file: "hub/mamba2_130m_ssm.json", family: Mamba2, modelType: "mamba2",
			hidden: 768, vocab: 50288, tie: true, eps: 1e-5,
			counts: map[LayerKind]int{Mamba: 24},
			mamba: MambaConfig{NumHeads: 24, HeadDim: 64, StateSize: 128, NumGroups: 1, ConvKernel: 4, InnerSize: 1536,
				Expand: 2, ChunkSize: 256, ConvBias: true, HiddenAct: "silu", TimeStepLimit: [2]float64{0, inf},
				TimeStepMin: 0.001, TimeStepMax: 0.1, TimeStepFloor: 1e-4, NormGroupSize: 1536},
			attn: AttentionConfig{Bias: true, RopeTheta: 10000, RopeType: "default"},
		},
		{
			// The tiny model behind safetensors' testdata/hf_sharded, as saved by transformers.
			file: "hf/nemotron_h_tiny.json", family: NemotronH, modelType: "nemotron_h",
			hidden: 64, vocab: 128, intermediate: 96, act: "relu2", eps: 1e-5, eos: []int{2},
			counts: map[LayerKind]int{Mamba: 1, Attention: 1, MLP: 1, MoE: 1},
			mamba:  nemotronMamba(4, 16, 8, 2, 128),
			attn:   AttentionConfig{NumHeads: 4, NumKVHeads: 2, HeadDim: 16},
			moe: MoEConfig{NumExperts: 4, TopK: 2, ExpertIntermediateSize: 32, NumSharedExperts: 1,
				SharedExpertIntermediateSize: 48, Router: Sigmoid, CorrectionBias: true, NormTopKProb: true,
				RoutedScalingFactor: 2.5, LatentSize: 32, NumExpertGroups: 1, TopKGroups: 1},
			mtp: MTPConfig{},
		},
	}
	for _, tc := range tests {
		t.Run(strings.TrimSuffix(filepath.Base(tc.file), ".json"), func(t *testing.T) {
			c, err := Load(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			check := func(what string, got, want any) {
				t.Helper()
				if !reflect.DeepEqual(got, want) {
					t.Errorf("%s =\n  %+v\nwant\n  %+v", what, got, want)
				}
			}
			check("Family", c.Family, tc.family)
			check("ModelType", c.ModelType, tc.modelType)
			check("WrapperModelType", c.WrapperModelType, tc.wrapper)
			check("HiddenSize", c.HiddenSize, tc.hidden)
			check("VocabSize", c.VocabSize, tc.vocab)
			check("IntermediateSize", c.IntermediateSize, tc.intermediate)
			check("HiddenAct", c.HiddenAct, tc.act)
			check("TieWordEmbeddings", c.TieWordEmbeddings, tc.tie)
			check("RMSNormEps", c.RMSNormEps, tc.eps)
			check("EOSTokenIDs", c.EOSTokenIDs, tc.eos)
			n := 0
			for k := None; k <= MoE; k++ {
				check("Count("+k.String()+")", c.Count(k), tc.counts[k])
				if k == Mamba || k == Attention || k == GatedDeltaNet || (tc.family == NemotronH && k > GatedDeltaNet) {
					n += tc.counts[k]
				}
			}
			check("NumLayers", c.NumLayers, n)
			check("Mamba", c.Mamba, tc.mamba)
			check("GDN", c.GDN, tc.gdn)
			check("Attention", c.Attention, tc.attn)
			check("MoE", c.MoE, tc.moe)
			check("MTP", c.MTP, tc.mtp)
		})
	}
}

// TestLayerOrder checks where the layers go, not just how many there are.
func TestLayerOrder(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "hub", "nemotron3_nano4b.json"))
	if err != nil {
		t.Fatal(err)
	}
	letter := map[LayerKind]byte{Mamba: 'M', Attention: '*', MLP: '-', MoE: 'E'}
	var b []byte
	for _, l := range c.Layers {
		b = append(b, letter[l.Mixer])
		if l.FFN != None {
			t.Errorf("NemotronH layer %v has an FFN", l)
		}
	}
	if want := "M-M-M-MM-M-M*-M-M*-M-M-M*-M-M-MM*-MMM-M-M-"; string(b) != want {
		t.Errorf("layers %s, want %s", b, want)
	}
	c, err = Load(filepath.Join("testdata", "hub", "qwen3_next_80b_a3b.json"))
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range c.Layers {
		want := Layer{Mixer: GatedDeltaNet, FFN: MoE}
		if i%4 == 3 { // full_attention_interval 4: layers 3, 7, ...
			want.Mixer = Attention
		}
		if l != want {
			t.Errorf("layer %d = %v, want %v", i, l, want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	nemo := func(extra string) string {
		return `{"model_type":"nemotron_h","hidden_size":64,"vocab_size":100,"hybrid_override_pattern":"M*-E"` + extra + `}`
	}
	qwen := func(extra string) string {
		return `{"model_type":"qwen3_next","hidden_size":64,"vocab_size":100,"num_hidden_layers":4` + extra + `}`
	}
	tests := []struct {
		name string
		json string
		want string
		is   error
	}{
		{"unknown model_type", `{"model_type":"llama","hidden_size":4}`,
			`model_type "llama" is not supported (supported: kimi_linear, mamba2, nemotron_h, qwen3_5, qwen3_5_moe, qwen3_5_moe_text, qwen3_5_text, qwen3_next): unsupported model`, ErrUnsupported},
		{"no model_type", `{"hidden_size":4}`,
			`no model_type (supported: kimi_linear, mamba2, nemotron_h, qwen3_5, qwen3_5_moe, qwen3_5_moe_text, qwen3_5_text, qwen3_next): unsupported model`, ErrUnsupported},
		{"unknown wrapped model_type", `{"model_type":"qwen3_vl","text_config":{"model_type":"qwen3_vl_text"}}`,
			`model_type "qwen3_vl_text" is not supported (supported: kimi_linear, mamba2, nemotron_h, qwen3_5, qwen3_5_moe, qwen3_5_moe_text, qwen3_5_text, qwen3_next): unsupported model`, ErrUnsupported},
		{"not json", `{"model_type":`, `invalid JSON at byte 14: unexpected end of JSON input`, nil},
		{"syntax", `{"model_type" "x"}`, `invalid JSON at byte 15: invalid character '"' after object key`, nil},
		{"not object", `[1,2]`, `config is not a JSON object (found array)`, nil},
		{"null", `null`, `config is not a JSON object`, nil},
		{"model_type not string", `{"model_type":3}`, `model_type: want a string, got 3`, nil},
		{"missing hidden_size", `{"model_type":"nemotron_h","vocab_size":5,"hybrid_override_pattern":"M"}`, `hidden_size is missing`, nil},
		{"missing layout", `{"model_type":"nemotron_h","hidden_size":64,"vocab_size":5}`,
			`hybrid_override_pattern and "layers_block_type", "layer_types" are both missing: the layer layout is unknown`, nil},
		{"string size", nemo(`,"mamba_num_heads":"big"`), `mamba_num_heads: want an integer, got "big"`, nil},
		{"fractional size", nemo(`,"mamba_num_heads":4.5`), `mamba_num_heads: want an integer, got 4.5`, nil},
		{"huge size", nemo(`,"mamba_num_heads":1e30`), `mamba_num_heads: want an integer, got 1e30`, nil},
		{"size past int32", nemo(`,"mamba_num_heads":4294967296`), `mamba_num_heads: 4294967296 is out of range`, nil},
		{"bool as string", nemo(`,"use_conv_bias":"yes"`), `use_conv_bias: want true or false, got "yes"`, nil},
		{"negative hidden", `{"model_type":"nemotron_h","hidden_size":-5,"vocab_size":100,"hybrid_override_pattern":"M"}`, `hidden_size must be positive, got -5`, nil},
		{"bad pattern", nemo(`,"hybrid_override_pattern":"M*X"`), `hybrid_override_pattern[2] = 'X': want one of M, *, -, E`, nil},
		{"bad list", `{"model_type":"nemotron_h","hidden_size":64,"vocab_size":100,"layers_block_type":["mamba","ssm"]}`,
			`layers_block_type[1] = "ssm": want one of mamba, attention, mlp, moe (or linear_attention, full_attention)`, nil},
		{"list not strings", `{"model_type":"nemotron_h","hidden_size":64,"vocab_size":100,"layers_block_type":[1]}`,
			`layers_block_type: want a list of strings, got [1]`, nil},
		{"pattern vs list", nemo(`,"layers_block_type":["mamba","attention","moe","moe"]`),
			`hybrid_override_pattern and layers_block_type disagree: layer 2 is mlp vs moe`, nil},
		{"layer count", nemo(`,"num_hidden_layers":5`), `num_hidden_layers is 5 but the layer layout has 4 layers`, nil},
		{"groups", nemo(`,"mamba_num_heads":96,"n_groups":7`), `mamba_num_heads (96) must be divisible by n_groups (7)`, nil},
		{"zero state", nemo(`,"ssm_state_size":0`), `ssm_state_size must be positive, got 0`, nil},
		{"time step limit order", nemo(`,"time_step_limit":[1.0, 0.5]`), `time_step_limit [1, 0.5] must satisfy 0 <= min <= max`, nil},
		{"time step limit length", nemo(`,"time_step_limit":[0.0]`), `time_step_limit: want [min, max], got 1 values`, nil},
		{"time step limit NaN", nemo(`,"time_step_limit":[NaN, 1]`), `time_step_limit [NaN, 1] must satisfy 0 <= min <= max`, nil},
		{"bad float tag", nemo(`,"time_step_limit":[0, {"__float__":"big"}]`), `time_step_limit[1]: want a number, got {"__float__":"big"}`, nil},
		{"kv heads", nemo(`,"num_attention_heads":40,"num_key_value_heads":6`), `num_attention_heads (40) must be divisible by num_key_value_heads (6)`, nil},
		{"top k", nemo(`,"n_routed_experts":4,"num_experts_per_tok":5`), `num_experts_per_tok (5) exceeds the 4 experts`, nil},
		{"expert groups", nemo(`,"n_routed_experts":6,"n_group":4`), `n_group (4) must divide the 6 experts and be at least topk_group (1)`, nil},
		{"zero eps", nemo(`,"layer_norm_epsilon":0`), `the RMSNorm epsilon must be positive and finite, got 0`, nil},
		{"mamba2 expand", `{"model_type":"mamba2","hidden_size":768,"vocab_size":100,"num_hidden_layers":2,"num_heads":24,"head_dim":80,"n_groups":1}`,
			`num_heads*head_dim (24*80 = 1920) must equal expand*hidden_size (2*768 = 1536)`, nil},
		{"qwen layer types", qwen(`,"layer_types":["linear_attention","mamba","full_attention","full_attention"]`),
			`layer_types[1] = "mamba": want linear_attention or full_attention`, nil},
		{"qwen layer count", qwen(`,"layer_types":["linear_attention","full_attention"]`),
			`num_hidden_layers is 4 but the layer layout has 2 layers`, nil},
		{"qwen interval", qwen(`,"full_attention_interval":0`), `full_attention_interval must be positive, got 0`, nil},
		{"qwen too many layers", `{"model_type":"qwen3_next","hidden_size":64,"vocab_size":100,"num_hidden_layers":2000000000}`,
			`num_hidden_layers = 2000000000 is out of range [0, 65536]`, nil},
		{"qwen no layout", `{"model_type":"qwen3_next","hidden_size":64,"vocab_size":100}`,
			`num_hidden_layers and layer_types are both missing: the layer layout is unknown`, nil},
		{"gdn heads", qwen(`,"linear_num_key_heads":16,"linear_num_value_heads":24`),
			`linear_num_value_heads (24) must be a multiple of linear_num_key_heads (16)`, nil},
		{"sparse step", qwen(`,"decoder_sparse_step":0`), `decoder_sparse_step must be positive, got 0`, nil},
		{"mlp only layers", qwen(`,"mlp_only_layers":[9]`), `mlp_only_layers: layer 9 is outside [0, 4)`, nil},
		{"odd rotary", qwen(`,"head_dim":256,"partial_rotary_factor":0.123`),
			`the rotary dimension head_dim*partial_rotary_factor (256*0.123 = 31) must be even and in (0, head_dim]`, nil},
		{"mrope sum", qwen(`,"rope_parameters":{"mrope_section":[11,11,11]}`),
			`mrope_section [11 11 11] sums to 33, want rotary dimension/2 = 32`, nil},
		{"text_config path", `{"model_type":"qwen3_5","text_config":{"hidden_size":"x","vocab_size":10}}`,
			`text_config.hidden_size: want an integer, got "x"`, nil},
		{"text_config not object", `{"model_type":"qwen3_5","text_config":[]}`, `text_config: want an object, got []`, nil},
		{"mamba1", `{"d_model":768,"n_layer":2,"vocab_size":10,"ssm_cfg":{}}`,
			`ssm_cfg.layer is "Mamba1": only Mamba2 is supported: unsupported model`, ErrUnsupported},
		{"implausible state", nemo(`,"mamba_num_heads":2147483647,"mamba_head_dim":2147483647,"n_groups":1`),
			`the Mamba state (heads*head_dim*state) is implausibly large (over 1099511627776 elements)`, nil},
		{"mamba_ssm headdim", `{"d_model":100,"n_layer":2,"vocab_size":10,"ssm_cfg":{"layer":"Mamba2","headdim":64}}`,
			`ssm_cfg: d_ssm (200) must be a multiple of headdim (64)`, nil},
		{"mamba_ssm attn idx", `{"d_model":128,"n_layer":2,"vocab_size":10,"ssm_cfg":{"layer":"Mamba2"},"attn_layer_idx":[2]}`,
			`attn_layer_idx: layer 2 is outside [0, 2)`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse([]byte(tc.json))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c)
			}
			if err.Error() != tc.want {
				t.Errorf("error\n got %s\nwant %s", err, tc.want)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error is not %v", tc.is)
			}
		})
	}
}

func TestLoadNamesFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, []byte(`{"model_type":"nemotron_h","hidden_size":64,"vocab_size":100,"hybrid_override_pattern":"M","mamba_num_heads":96,"n_groups":7}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadDir(dir)
	if want := path + ": mamba_num_heads (96) must be divisible by n_groups (7)"; err == nil || err.Error() != want {
		t.Errorf("error\n got %v\nwant %s", err, want)
	}
	if _, err := LoadDir(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing config: %v", err)
	}
}

func TestNonFinite(t *testing.T) {
	tests := []struct {
		in   string
		want [2]float64
	}{
		{`[0.0, Infinity]`, [2]float64{0, inf}},
		{`[0.0,Infinity]`, [2]float64{0, inf}},
		{`[-Infinity, 1]`, [2]float64{math.Inf(-1), 1}},
		{`[0.0, {"__float__": "Infinity"}]`, [2]float64{0, inf}},
		{`[{"__float__":"-Infinity"}, 2]`, [2]float64{math.Inf(-1), 2}},
		{`[0, 1e999]`, [2]float64{0, inf}},
		{`[0.5, 2E-1]`, [2]float64{0.5, 0.2}},
	}
	for _, tc := range tests {
		o, err := newObject(replaceNonFinite([]byte(`{"k":` + tc.in + `}`)))
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if got := timeStepLimit(o, "k"); got != tc.want || *o.err != nil {
			t.Errorf("%s = %v (%v), want %v", tc.in, got, *o.err, tc.want)
		}
	}
	// Strings stay strings, escapes included.
	for _, s := range []string{`{"a":"Infinity"}`, `{"a":"x\"NaN"}`, `{"a":"\\","b":"-Infinity"}`} {
		if got := string(replaceNonFinite([]byte(s))); got != s {
			t.Errorf("replaceNonFinite(%s) = %s", s, got)
		}
	}
	if got := string(replaceNonFinite([]byte(`{"a":NaN,"b":"NaN","c":[-Infinity]}`))); got != `{"a":{"__float__":"NaN"},"b":"NaN","c":[{"__float__":"-Infinity"}]}` {
		t.Errorf("replaceNonFinite = %s", got)
	}
	o, _ := newObject(replaceNonFinite([]byte(`{"a":NaN}`)))
	if v := o.float(0, "a"); !math.IsNaN(v) {
		t.Errorf("NaN parsed as %v", v)
	}
}

func TestStrings(t *testing.T) {
	if got := (Layer{Mixer: GatedDeltaNet, FFN: MoE}).String(); got != "gated_deltanet+moe" {
		t.Errorf("Layer.String = %q", got)
	}
	if got := (Layer{Mixer: Mamba}).String(); got != "mamba" {
		t.Errorf("Layer.String = %q", got)
	}
	for f := NemotronH; f <= Mamba2; f++ {
		if _, ok := modelTypes[f.String()]; !ok {
			t.Errorf("Family %d prints as %q, not a model_type", f, f)
		}
	}
	if Sigmoid.String() != "sigmoid" || Softmax.String() != "softmax" || NoRouter.String() != "none" {
		t.Error("Router.String")
	}
}

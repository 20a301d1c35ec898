package hfconfig

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestKimiLinear48B parses Kimi-Linear-48B-A3B-Instruct's published
// config.json (testdata/hub, the checkpoint's own spelling) and checks
// every normalised field.
func TestKimiLinear48B(t *testing.T) {
	c, err := Load("testdata/hub/kimi_linear_48b_a3b.json")
	if err != nil {
		t.Fatal(err)
	}
	if c.Family != KimiLinear || c.ModelType != "kimi_linear" || c.HiddenSize != 2304 || c.VocabSize != 163840 ||
		c.IntermediateSize != 9216 || c.HiddenAct != "silu" || c.TieWordEmbeddings || c.RMSNormEps != 1e-5 ||
		c.MaxPositionEmbeddings != 1048576 || c.BOSTokenID != 163584 || c.PadTokenID != 163839 ||
		!reflect.DeepEqual(c.EOSTokenIDs, []int{163586}) || c.MTP.NumLayers != 0 || c.AttnResBlockSize != 0 {
		t.Errorf("top level: %+v", c)
	}
	if want := (KDAConfig{NumHeads: 32, HeadDim: 128, ConvKernel: 4}); c.KDA != want {
		t.Errorf("KDA %+v, want %+v", c.KDA, want)
	}
	if want := (MLAConfig{NumHeads: 32, NumKVHeads: 32, KVLoraRank: 512, QKNopeHeadDim: 128, QKRopeHeadDim: 64,
		VHeadDim: 128, NoPE: true, RopeTheta: 10000}); c.MLA != want {
		t.Errorf("MLA %+v, want %+v", c.MLA, want)
	}
	if want := (MoEConfig{NumExperts: 256, TopK: 8, ExpertIntermediateSize: 1024, NumSharedExperts: 1,
		SharedExpertIntermediateSize: 1024, Router: Sigmoid, CorrectionBias: true, NormTopKProb: true,
		RoutedScalingFactor: 2.446, NumExpertGroups: 1, TopKGroups: 1}); !reflect.DeepEqual(c.MoE, want) {
		t.Errorf("MoE %+v, want %+v", c.MoE, want)
	}
	// full_attn_layers [4, 8, ..., 24, 27] counting from 1; layer 0 dense.
	if len(c.Layers) != 27 || c.Count(KimiDeltaAttention) != 20 || c.Count(LatentAttention) != 7 || c.Count(MLP) != 1 || c.Count(MoE) != 26 {
		t.Fatalf("layers %v", c.Layers)
	}
	for i, l := range c.Layers {
		mixer, ffn := KimiDeltaAttention, MoE
		if (i+1)%4 == 0 || i == 26 {
			mixer = LatentAttention
		}
		if i == 0 {
			ffn = MLP
		}
		if l != (Layer{Mixer: mixer, FFN: ffn}) {
			t.Errorf("layer %d is %v, want %v", i, l, Layer{Mixer: mixer, FFN: ffn})
		}
	}
	if got := c.MLA.LatentDim(); got != 576 {
		t.Errorf("latent %d a position, want 512 + 64", got)
	}
}

// TestKimiLinearSpellings: transformers' spelling of the same layout
// (layer_types, mlp_layer_types, top-level linear sizes) and the defaults.
func TestKimiLinearSpellings(t *testing.T) {
	c, err := Parse([]byte(`{"model_type": "kimi_linear", "hidden_size": 64, "vocab_size": 100,
		"layer_types": ["linear_attention", "full_attention", "kda_attention"],
		"mlp_layer_types": ["sparse", "dense", "sparse"],
		"linear_num_heads": 3, "linear_head_dim": 16, "linear_conv_kernel_dim": 3,
		"num_local_experts": 4, "num_experts_per_tok": 2, "n_shared_experts": 2, "norm_topk_prob": false,
		"q_lora_rank": 48, "qk_rope_head_dim": 0}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Layer{{KimiDeltaAttention, MoE}, {LatentAttention, MLP}, {KimiDeltaAttention, MoE}}
	if !reflect.DeepEqual(c.Layers, want) {
		t.Errorf("layers %v, want %v", c.Layers, want)
	}
	if c.KDA != (KDAConfig{NumHeads: 3, HeadDim: 16, ConvKernel: 3}) {
		t.Errorf("KDA %+v", c.KDA)
	}
	if c.MoE.NumExperts != 4 || c.MoE.TopK != 2 || c.MoE.NumSharedExperts != 2 || c.MoE.NormTopKProb || c.MoE.RoutedScalingFactor != 2.446 {
		t.Errorf("MoE %+v", c.MoE)
	}
	// A rope part of 0 means NoPE where mla_use_nope is absent, as in
	// transformers.
	if c.MLA.QLoraRank != 48 || !c.MLA.NoPE || c.MLA.KVLoraRank != 512 || c.RMSNormEps != 1e-5 || c.IntermediateSize != 9216 {
		t.Errorf("MLA %+v, eps %g, intermediate %d", c.MLA, c.RMSNormEps, c.IntermediateSize)
	}

	// No lists at all: every fourth layer is latent attention, MoE from
	// first_k_dense_replace (1) on.
	c, err = Parse([]byte(`{"model_type": "kimi_linear", "hidden_size": 64, "vocab_size": 100, "num_hidden_layers": 8,
		"first_k_dense_replace": 2, "moe_layer_freq": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	want = []Layer{{KimiDeltaAttention, MLP}, {KimiDeltaAttention, MLP}, {KimiDeltaAttention, MoE}, {LatentAttention, MLP},
		{KimiDeltaAttention, MoE}, {KimiDeltaAttention, MLP}, {KimiDeltaAttention, MoE}, {LatentAttention, MLP}}
	if !reflect.DeepEqual(c.Layers, want) {
		t.Errorf("default layout %v, want %v", c.Layers, want)
	}
}

// TestKimiLinearErrors: layouts that do not describe every layer once,
// and bad values, are errors naming the field.
func TestKimiLinearErrors(t *testing.T) {
	base := `"model_type": "kimi_linear", "hidden_size": 64, "vocab_size": 100, `
	for _, c := range []struct{ json, want string }{
		{`"num_hidden_layers": 4, "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [3]}`, "listed twice"},
		{`"num_hidden_layers": 4, "linear_attn_config": {"kda_layers": [1, 2], "full_attn_layers": [4]}`, "leave layer 3"},
		{`"num_hidden_layers": 4, "linear_attn_config": {"kda_layers": [0, 1, 2], "full_attn_layers": [4]}`, "outside [1, 4]"},
		{`"layer_types": ["linear_attention", "sliding"]`, "layer_types[1]"},
		{`"layer_types": ["linear_attention"], "num_hidden_layers": 2`, "num_hidden_layers is 2"},
		{`"num_hidden_layers": 2, "mlp_layer_types": ["dense"]`, "mlp_layer_types has 1"},
		{`"num_hidden_layers": 2, "moe_layer_freq": 0`, "moe_layer_freq"},
		{`"num_hidden_layers": 2, "moe_router_activation_func": "relu"`, "moe_router_activation_func"},
		{`"num_hidden_layers": 2, "linear_attn_config": {"head_dim": 0}`, "head_dim must be positive"},
		{`"num_hidden_layers": 4, "kv_lora_rank": -1`, "kv_lora_rank"},
		{`"num_hidden_layers": 2, "num_experts_per_token": 300`, "exceeds the 256 experts"},
	} {
		_, err := Parse([]byte("{" + base + c.json + "}"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one containing %q", c.json, err, c.want)
		}
		if errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: a bad config is not an unsupported model: %v", c.json, err)
		}
	}
}

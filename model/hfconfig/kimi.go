package hfconfig

import "fmt"

// parseKimiLinear reads a Kimi-Linear config (moonshotai/Kimi-Linear-48B-A3B:
// the checkpoint's own remote-code spelling, or transformers' kimi_linear
// class). Defaults are transformers' KimiLinearConfig's, which are the 48B
// model's sizes.
func parseKimiLinear(c *Config, o *object) error {
	if err := required(o, "hidden_size"); err != nil {
		return err
	}
	if err := required(o, "vocab_size"); err != nil {
		return err
	}
	common(c, o, false)
	// The checkpoint calls the context model_max_length.
	c.MaxPositionEmbeddings = o.int(c.MaxPositionEmbeddings, "model_max_length")
	c.IntermediateSize = o.int(o.int(9216, "intermediate_size"), "dense_ffn_hidden")
	c.HiddenAct = o.str("silu", "hidden_act")
	c.RMSNormEps = o.float(1e-5, "rms_norm_eps")
	c.AttnResBlockSize = o.int(0, "attn_res_block_size")

	// The KDA sizes live in linear_attn_config in the checkpoint's config
	// and at the top level in transformers' saves.
	lac := o.object("linear_attn_config")
	k := &c.KDA
	k.NumHeads = lac.int(o.int(32, "linear_num_heads", "linear_num_key_heads"), "num_heads")
	k.HeadDim = lac.int(o.int(128, "linear_head_dim", "linear_key_head_dim"), "head_dim")
	k.ConvKernel = lac.int(o.int(4, "linear_conv_kernel_dim"), "short_conv_kernel_size")
	k.GateLowerBound = lac.float(0, "gate_lower_bound")
	k.FullRankGate = lac.bool(false, "use_full_rank_gate")

	m := &c.MLA
	m.NumHeads = o.int(32, "num_attention_heads")
	m.NumKVHeads = o.int(m.NumHeads, "num_key_value_heads")
	m.QLoraRank = o.int(0, "q_lora_rank") // null: no query compression
	m.KVLoraRank = o.int(512, "kv_lora_rank")
	m.QKNopeHeadDim = o.int(128, "qk_nope_head_dim")
	m.QKRopeHeadDim = o.int(64, "qk_rope_head_dim")
	m.VHeadDim = o.int(128, "v_head_dim")
	// transformers infers NoPE from a rope part of size 0 when the field
	// is absent; the checkpoint writes it.
	m.NoPE = o.bool(m.QKRopeHeadDim == 0, "mla_use_nope")
	m.OutputGate = o.bool(false, "mla_use_output_gate")
	m.RopeTheta = o.object("rope_parameters").float(o.float(10000, "rope_theta"), "rope_theta")

	e := &c.MoE
	e.NumExperts = o.int(256, "num_experts", "n_routed_experts", "num_local_experts")
	e.TopK = o.int(8, "num_experts_per_token", "num_experts_per_tok")
	e.ExpertIntermediateSize = o.int(1024, "moe_intermediate_size")
	e.NumSharedExperts = o.int(1, "num_shared_experts", "n_shared_experts")
	// Each shared expert is as wide as a routed one; the shared MLP is
	// NumSharedExperts of them side by side.
	e.SharedExpertIntermediateSize = e.ExpertIntermediateSize
	switch r := o.str("sigmoid", "moe_router_activation_func", "scoring_func"); r {
	case "sigmoid":
		e.Router = Sigmoid
	case "softmax":
		e.Router = Softmax
	default:
		return fmt.Errorf("%smoe_router_activation_func = %q: want sigmoid or softmax", o.path, r)
	}
	// The checkpoints carry gate.e_score_correction_bias (noaux_tc routing);
	// the binding reads it where it exists.
	e.CorrectionBias = true
	e.NormTopKProb = o.bool(true, "moe_renormalize", "norm_topk_prob")
	e.RoutedScalingFactor = o.float(2.446, "routed_scaling_factor")
	e.NumExpertGroups = o.int(1, "num_expert_group", "n_group")
	e.TopKGroups = o.int(1, "topk_group")

	layers, err := kimiLayers(o, lac)
	if err != nil {
		return err
	}
	c.Layers = layers
	if err := kimiFFNs(o, e, c.Layers); err != nil {
		return err
	}
	c.MTP.NumLayers = o.int(0, "num_nextn_predict_layers", "num_mtp_layers")
	return nil
}

// kimiLayers reads the mixer of every layer: from layer_types (transformers'
// saves), else from linear_attn_config's 1-based kda_layers and
// full_attn_layers (the checkpoint's), which must split the layers between
// them, else every fourth layer (4, 8, ... counting from 1) is latent
// attention, as transformers' default.
func kimiLayers(o, lac *object) ([]Layer, error) {
	layers, n, err := typedLayers(o, KimiDeltaAttention, LatentAttention, []string{"linear_attention", "kda_attention", "kda", "linear"},
		[]string{"full_attention", "attention", "mla", "full"}, "layer_types")
	if err != nil || layers != nil {
		return layers, err
	}
	layers = make([]Layer, n)
	if !lac.has("kda_layers") && !lac.has("full_attn_layers") {
		for i := range layers {
			layers[i].Mixer = KimiDeltaAttention
			if (i+1)%4 == 0 {
				layers[i].Mixer = LatentAttention
			}
		}
		return layers, nil
	}
	for _, list := range []struct {
		key  string
		kind LayerKind
	}{{"kda_layers", KimiDeltaAttention}, {"full_attn_layers", LatentAttention}} {
		for _, l := range lac.ints(list.key) {
			if l < 1 || l > n {
				return nil, fmt.Errorf("%s%s: layer %d is outside [1, %d] (the lists count from 1)", lac.path, list.key, l, n)
			}
			if layers[l-1].Mixer != None {
				return nil, fmt.Errorf("%s%s: layer %d is listed twice", lac.path, list.key, l)
			}
			layers[l-1].Mixer = list.kind
		}
	}
	if *o.err != nil {
		return nil, *o.err
	}
	for i, l := range layers {
		if l.Mixer == None {
			return nil, fmt.Errorf("%skda_layers and full_attn_layers leave layer %d (from 1) out", lac.path, i+1)
		}
	}
	return layers, nil
}

// kimiFFNs sets every layer's feed-forward block: from mlp_layer_types
// ("dense" or "sparse") when written, else MoE on the layers from
// first_k_dense_replace on that are multiples of moe_layer_freq (when the
// model has experts), a dense SwiGLU MLP elsewhere.
func kimiFFNs(o *object, e *MoEConfig, layers []Layer) error {
	if o.has("mlp_layer_types") {
		names := o.strs("mlp_layer_types")
		if *o.err != nil {
			return *o.err
		}
		if len(names) != len(layers) {
			return fmt.Errorf("%smlp_layer_types has %d entries for %d layers", o.path, len(names), len(layers))
		}
		for i, n := range names {
			switch n {
			case "dense", "mlp":
				layers[i].FFN = MLP
			case "sparse", "moe":
				layers[i].FFN = MoE
			default:
				return fmt.Errorf("%smlp_layer_types[%d] = %q: want dense or sparse", o.path, i, n)
			}
		}
		return nil
	}
	firstDense := o.int(1, "first_k_dense_replace")
	freq := o.int(1, "moe_layer_freq")
	if freq <= 0 {
		return fmt.Errorf("%smoe_layer_freq must be positive, got %d", o.path, freq)
	}
	for i := range layers {
		layers[i].FFN = MLP
		if e.NumExperts > 0 && i >= firstDense && i%freq == 0 {
			layers[i].FFN = MoE
		}
	}
	return nil
}

func (c *Config) validateKDA() error {
	k := &c.KDA
	for _, f := range []struct {
		name string
		v    int
	}{{"linear_attn_config.num_heads", k.NumHeads}, {"linear_attn_config.head_dim", k.HeadDim}, {"linear_attn_config.short_conv_kernel_size", k.ConvKernel}} {
		if f.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", f.name, f.v)
		}
	}
	if k.GateLowerBound > 0 {
		return fmt.Errorf("linear_attn_config.gate_lower_bound must not be positive, got %g", k.GateLowerBound)
	}
	return nil
}

func (c *Config) validateMLA() error {
	m := &c.MLA
	for _, f := range []struct {
		name string
		v    int
	}{{"num_attention_heads", m.NumHeads}, {"kv_lora_rank", m.KVLoraRank}, {"qk_nope_head_dim", m.QKNopeHeadDim}, {"v_head_dim", m.VHeadDim}} {
		if f.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", f.name, f.v)
		}
	}
	if m.QKRopeHeadDim < 0 || m.QLoraRank < 0 {
		return fmt.Errorf("qk_rope_head_dim (%d) and q_lora_rank (%d) must not be negative", m.QKRopeHeadDim, m.QLoraRank)
	}
	if m.NumKVHeads <= 0 || m.NumHeads%m.NumKVHeads != 0 {
		return fmt.Errorf("num_attention_heads (%d) must be divisible by num_key_value_heads (%d)", m.NumHeads, m.NumKVHeads)
	}
	if !m.NoPE && !(m.RopeTheta > 0) {
		return fmt.Errorf("rope_theta must be positive, got %g", m.RopeTheta)
	}
	return nil
}

package hfconfig

import (
	"fmt"
	"math"
	"slices"
)

// maxLayers bounds layer counts so that a corrupt num_hidden_layers cannot
// make Parse allocate gigabytes. The largest targets have under 100 layers.
const maxLayers = 1 << 16

// Defaults below are those of the transformers 5.x configuration classes
// (NemotronHConfig, Qwen3NextConfig, Qwen3_5TextConfig, Qwen3_5MoeTextConfig,
// Mamba2Config) and of mamba_ssm's MambaConfig and Mamba2 module.

func parseNemotronH(c *Config, o *object) error {
	if err := required(o, "hidden_size"); err != nil {
		return err
	}
	if err := required(o, "vocab_size"); err != nil {
		return err
	}
	common(c, o, false)
	c.IntermediateSize = o.int(21504, "intermediate_size")
	c.HiddenAct = o.str("relu2", "mlp_hidden_act")
	c.RMSNormEps = o.float(1e-5, "layer_norm_epsilon", "rms_norm_eps")

	m := &c.Mamba
	m.NumHeads = o.int(128, "mamba_num_heads")
	m.HeadDim = o.int(64, "mamba_head_dim")
	m.StateSize = o.int(128, "ssm_state_size", "mamba_d_state")
	m.NumGroups = o.int(8, "n_groups", "mamba_n_groups")
	m.ConvKernel = o.int(4, "conv_kernel", "mamba_d_conv")
	m.Expand = o.float(2, "expand", "mamba_expand")
	m.ChunkSize = o.int(128, "chunk_size", "mamba_chunk_size")
	m.ConvBias = o.bool(true, "use_conv_bias", "mamba_conv_bias")
	m.ProjBias = o.bool(false, "mamba_proj_bias")
	m.HiddenAct = o.str("silu", "mamba_hidden_act")
	m.TimeStepMin = o.float(0.001, "time_step_min", "mamba_dt_min")
	m.TimeStepMax = o.float(0.1, "time_step_max", "mamba_dt_max")
	m.TimeStepFloor = o.float(1e-4, "time_step_floor", "mamba_dt_init_floor")
	m.TimeStepLimit = timeStepLimit(o, "time_step_limit", "mamba_dt_limit")
	// NemotronH sizes the mixer from heads×head_dim, not expand×hidden, and
	// normalises y·silu(z) per group (docs/DESIGN.md 1.1).
	m.InnerSize = m.NumHeads * m.HeadDim
	if m.NumGroups > 0 {
		m.NormGroupSize = m.InnerSize / m.NumGroups
	}

	a := &c.Attention
	a.NumHeads = o.int(32, "num_attention_heads")
	a.NumKVHeads = o.int(8, "num_key_value_heads")
	if o.isNull("num_key_value_heads") {
		a.NumKVHeads = a.NumHeads // transformers: None means multi-head attention
	}
	a.HeadDim = o.int(128, "head_dim", "attention_head_dim")
	a.Bias = o.bool(false, "attention_bias")
	a.SlidingWindow = o.int(0, "sliding_window")

	e := &c.MoE
	e.NumExperts = o.int(8, "n_routed_experts", "num_local_experts", "num_experts")
	e.TopK = o.int(2, "num_experts_per_tok")
	e.ExpertIntermediateSize = o.int(7688, "moe_intermediate_size")
	e.NumSharedExperts = o.int(1, "n_shared_experts")
	e.SharedExpertIntermediateSize = o.int(7688, "moe_shared_expert_intermediate_size", "shared_expert_intermediate_size")
	e.Router = Sigmoid
	e.CorrectionBias = true
	e.NormTopKProb = o.bool(true, "norm_topk_prob")
	e.RoutedScalingFactor = o.float(1, "routed_scaling_factor")
	e.LatentSize = o.int(0, "moe_latent_size")
	e.NumExpertGroups = o.int(1, "n_group")
	e.TopKGroups = o.int(1, "topk_group")

	layers, err := nemotronLayers(o, "hybrid_override_pattern", "layers_block_type", "layer_types")
	if err != nil {
		return err
	}
	c.Layers = layers
	if err := checkLayerCount(o, len(layers)); err != nil {
		return err
	}

	c.MTP.NumLayers = o.int(0, "num_nextn_predict_layers", "mtp_num_hidden_layers")
	if c.MTP.NumLayers > 0 {
		mtp, err := nemotronLayers(o, "mtp_hybrid_override_pattern", "mtp_layers_block_type", "mtp_layer_types")
		if err != nil && (o.has("mtp_hybrid_override_pattern", "mtp_layers_block_type", "mtp_layer_types")) {
			return err
		}
		if mtp == nil {
			mtp = []Layer{{Mixer: Attention}, {Mixer: MoE}} // transformers' default
		}
		c.MTP.Layers = mtp
	}
	return nil
}

// nemotronLayers reads a NemotronH layer layout from the pattern string
// (M * - E) or either list spelling; given more than one, they must agree.
func nemotronLayers(o *object, patternKey string, listKeys ...string) ([]Layer, error) {
	var found []Layer
	var foundKey string
	if o.has(patternKey) {
		pattern := o.str("", patternKey)
		if *o.err != nil {
			return nil, *o.err
		}
		found, foundKey = make([]Layer, 0, len(pattern)), patternKey
		for i := 0; i < len(pattern); i++ {
			var k LayerKind
			switch pattern[i] {
			case 'M':
				k = Mamba
			case '*':
				k = Attention
			case '-':
				k = MLP
			case 'E':
				k = MoE
			default:
				return nil, fmt.Errorf("%s%s[%d] = %q: want one of M, *, -, E", o.path, patternKey, i, pattern[i])
			}
			found = append(found, Layer{Mixer: k})
		}
	}
	for _, key := range listKeys {
		if !o.has(key) {
			continue
		}
		names := o.strs(key)
		if *o.err != nil {
			return nil, *o.err
		}
		list := make([]Layer, len(names))
		for i, n := range names {
			var k LayerKind
			switch n {
			case "mamba", "linear_attention":
				k = Mamba
			case "attention", "full_attention":
				k = Attention
			case "mlp":
				k = MLP
			case "moe":
				k = MoE
			default:
				return nil, fmt.Errorf("%s%s[%d] = %q: want one of mamba, attention, mlp, moe (or linear_attention, full_attention)", o.path, key, i, n)
			}
			list[i] = Layer{Mixer: k}
		}
		if found != nil && !slices.Equal(found, list) {
			return nil, fmt.Errorf("%s%s and %s disagree: %s", o.path, foundKey, key, firstDifference(found, list))
		}
		found, foundKey = list, key
	}
	if found == nil {
		return nil, fmt.Errorf("%s%s and %s are both missing: the layer layout is unknown", o.path, patternKey, quoteList(listKeys))
	}
	if len(found) > maxLayers {
		return nil, fmt.Errorf("%s%s has %d layers, more than %d", o.path, foundKey, len(found), maxLayers)
	}
	return found, nil
}

func firstDifference(a, b []Layer) string {
	if len(a) != len(b) {
		return fmt.Sprintf("%d layers vs %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			return fmt.Sprintf("layer %d is %v vs %v", i, a[i], b[i])
		}
	}
	return "equal"
}

// checkLayerCount checks num_hidden_layers, when written, against the layout.
func checkLayerCount(o *object, n int) error {
	if !o.has("num_hidden_layers") {
		return nil
	}
	if got := o.int(0, "num_hidden_layers"); got != n {
		return fmt.Errorf("%snum_hidden_layers is %d but the layer layout has %d layers", o.path, got, n)
	}
	return nil
}

func timeStepLimit(o *object, keys ...string) [2]float64 {
	limit := [2]float64{0, math.Inf(1)}
	if !o.has(keys...) {
		return limit
	}
	v := o.floats(keys...)
	if v == nil {
		return limit // o.err says why
	}
	if len(v) != 2 {
		k, _, _ := o.lookup(keys...)
		o.fail(k, "want [min, max], got %d values", len(v))
		return limit
	}
	return [2]float64{v[0], v[1]}
}

func parseQwen(c *Config, o *object) error {
	if err := required(o, "hidden_size"); err != nil {
		return err
	}
	if err := required(o, "vocab_size"); err != nil {
		return err
	}
	common(c, o, false)
	var intermediate, kvHeads int
	switch c.Family {
	case Qwen3Next:
		intermediate, kvHeads = 5632, 2
	case Qwen35:
		intermediate, kvHeads = 12288, 4
	case Qwen35MoE:
		intermediate, kvHeads = 0, 2
	}
	c.IntermediateSize = o.int(intermediate, "intermediate_size")
	c.HiddenAct = o.str("silu", "hidden_act")
	c.RMSNormEps = o.float(1e-6, "rms_norm_eps")

	g := &c.GDN
	g.NumKeyHeads = o.int(16, "linear_num_key_heads")
	g.NumValueHeads = o.int(32, "linear_num_value_heads")
	g.KeyHeadDim = o.int(128, "linear_key_head_dim")
	g.ValueHeadDim = o.int(128, "linear_value_head_dim")
	g.ConvKernel = o.int(4, "linear_conv_kernel_dim")

	a := &c.Attention
	a.NumHeads = o.int(16, "num_attention_heads")
	a.NumKVHeads = o.int(kvHeads, "num_key_value_heads")
	a.HeadDim = o.int(256, "head_dim")
	a.Bias = o.bool(false, "attention_bias")
	a.OutputGate, a.QKNorm, a.Rope = true, true, true
	// transformers 5 keeps RoPE settings in rope_parameters; older saves put
	// them at the top level or in rope_scaling. The most specific one wins.
	rs, rp := o.object("rope_scaling"), o.object("rope_parameters")
	a.RopeTheta = rp.float(rs.float(o.float(10000, "rope_theta"), "rope_theta"), "rope_theta")
	a.PartialRotaryFactor = rp.float(o.float(0.25, "partial_rotary_factor"), "partial_rotary_factor")
	a.RopeType = rp.str(rs.str("default", "rope_type", "type"), "rope_type")
	a.RopeScalingFactor = rp.float(rs.float(0, "factor"), "factor")
	a.MRopeSection = rs.ints("mrope_section")
	if rp.has("mrope_section") {
		a.MRopeSection = rp.ints("mrope_section")
	}
	a.MRopeInterleaved = rp.bool(rs.bool(false, "mrope_interleaved"), "mrope_interleaved")
	a.RotaryDim = int(float64(a.HeadDim) * a.PartialRotaryFactor) // as transformers truncates

	layers, err := qwenLayers(o)
	if err != nil {
		return err
	}
	c.Layers = layers

	e := &c.MoE
	if c.Family == Qwen3Next || c.Family == Qwen35MoE {
		experts, top := 512, 10
		if c.Family == Qwen35MoE {
			experts, top = 256, 8
		}
		e.NumExperts = o.int(experts, "num_experts", "n_routed_experts", "num_local_experts")
		e.TopK = o.int(top, "num_experts_per_tok")
		e.ExpertIntermediateSize = o.int(512, "moe_intermediate_size")
		e.SharedExpertIntermediateSize = o.int(512, "shared_expert_intermediate_size")
		if e.SharedExpertIntermediateSize > 0 {
			e.NumSharedExperts, e.SharedExpertGate = 1, true
		}
		e.Router = Softmax
		e.NormTopKProb = o.bool(true, "norm_topk_prob")
		e.RoutedScalingFactor = 1
		e.NumExpertGroups, e.TopKGroups = 1, 1
	}
	for i := range c.Layers {
		switch c.Family {
		case Qwen35:
			c.Layers[i].FFN = MLP
		case Qwen35MoE:
			c.Layers[i].FFN = MoE
		}
	}
	if c.Family == Qwen3Next {
		// transformers' rule: MoE unless listed in mlp_only_layers or off the
		// decoder_sparse_step grid (or there are no experts).
		e.DecoderSparseStep = o.int(1, "decoder_sparse_step")
		if e.MLPOnlyLayers = o.ints("mlp_only_layers"); len(e.MLPOnlyLayers) == 0 {
			e.MLPOnlyLayers = nil // [] and absent mean the same
		}
		if e.NumExperts > 0 && e.DecoderSparseStep <= 0 {
			return fmt.Errorf("%sdecoder_sparse_step must be positive, got %d", o.path, e.DecoderSparseStep)
		}
		for i := range c.Layers {
			c.Layers[i].FFN = MLP
			if e.NumExperts > 0 && !slices.Contains(e.MLPOnlyLayers, i) && (i+1)%e.DecoderSparseStep == 0 {
				c.Layers[i].FFN = MoE
			}
		}
	}
	c.MTP.NumLayers = o.int(0, "mtp_num_hidden_layers", "num_nextn_predict_layers")
	return nil
}

// qwenLayers reads a Qwen layout from layer_types, or else from
// num_hidden_layers and full_attention_interval (every interval-th layer,
// counting from 1, is attention).
func qwenLayers(o *object) ([]Layer, error) {
	layers, n, err := typedLayers(o, GatedDeltaNet, Attention, []string{"linear_attention", "linear"},
		[]string{"full_attention", "attention", "full"}, "layer_types", "layers_block_type")
	if err != nil || layers != nil {
		return layers, err
	}
	interval := o.int(4, "full_attention_interval")
	if interval <= 0 {
		return nil, fmt.Errorf("%sfull_attention_interval must be positive, got %d", o.path, interval)
	}
	layers = make([]Layer, n)
	for i := range layers {
		layers[i].Mixer = GatedDeltaNet
		if (i+1)%interval == 0 {
			layers[i].Mixer = Attention
		}
	}
	return layers, nil
}

// typedLayers reads a hybrid's per-layer list (the first of keys present:
// each entry one of linear's names, a linear-attention layer, or of full's,
// an attention layer) into layers. Without the list it returns no layers
// and num_hidden_layers, checked, for the caller's own rule.
func typedLayers(o *object, linearKind, fullKind LayerKind, linear, full []string, keys ...string) ([]Layer, int, error) {
	if key, _, ok := o.lookup(keys...); ok {
		names := o.strs(key)
		if *o.err != nil {
			return nil, 0, *o.err
		}
		if len(names) > maxLayers {
			return nil, 0, fmt.Errorf("%s%s has %d layers, more than %d", o.path, key, len(names), maxLayers)
		}
		layers := make([]Layer, len(names))
		for i, n := range names {
			switch {
			case slices.Contains(linear, n):
				layers[i].Mixer = linearKind
			case slices.Contains(full, n):
				layers[i].Mixer = fullKind
			default:
				return nil, 0, fmt.Errorf("%s%s[%d] = %q: want linear_attention or full_attention", o.path, key, i, n)
			}
		}
		return layers, len(layers), checkLayerCount(o, len(layers))
	}
	if !o.has("num_hidden_layers") {
		return nil, 0, fmt.Errorf("%snum_hidden_layers and layer_types are both missing: the layer layout is unknown", o.path)
	}
	n := o.int(0, "num_hidden_layers")
	if n < 0 || n > maxLayers {
		return nil, 0, fmt.Errorf("%snum_hidden_layers = %d is out of range [0, %d]", o.path, n, maxLayers)
	}
	return nil, n, nil
}

// parseMamba2 reads transformers' Mamba2Config: every layer is a Mamba-2 mixer.
func parseMamba2(c *Config, o *object) error {
	for _, k := range []string{"hidden_size", "vocab_size", "num_hidden_layers"} {
		if err := required(o, k); err != nil {
			return err
		}
	}
	common(c, o, false)
	c.RMSNormEps = o.float(1e-5, "layer_norm_epsilon", "rms_norm_eps")
	m := &c.Mamba
	m.NumHeads = o.int(128, "num_heads")
	m.HeadDim = o.int(64, "head_dim")
	m.StateSize = o.int(128, "state_size")
	m.NumGroups = o.int(8, "n_groups")
	m.ConvKernel = o.int(4, "conv_kernel")
	m.Expand = o.float(2, "expand")
	m.ChunkSize = o.int(256, "chunk_size")
	m.ConvBias = o.bool(true, "use_conv_bias")
	m.ProjBias = o.bool(false, "use_bias")
	m.HiddenAct = o.str("silu", "hidden_act")
	m.TimeStepMin = o.float(0.001, "time_step_min")
	m.TimeStepMax = o.float(0.1, "time_step_max")
	m.TimeStepFloor = o.float(1e-4, "time_step_floor")
	m.TimeStepLimit = timeStepLimit(o, "time_step_limit")
	m.InnerSize = m.NumHeads * m.HeadDim
	// transformers' Mamba2 gated norm (torch path) takes the RMS over all of I.
	m.NormGroupSize = m.InnerSize
	n := o.int(0, "num_hidden_layers")
	if n < 0 || n > maxLayers {
		return fmt.Errorf("num_hidden_layers = %d is out of range [0, %d]", n, maxLayers)
	}
	c.Layers = make([]Layer, n)
	for i := range c.Layers {
		c.Layers[i].Mixer = Mamba
	}
	return nil
}

// parseMambaSSM reads the config.json of state-spaces checkpoints (mamba_ssm's
// MambaConfig: d_model, n_layer, ssm_cfg, ...), which has no model_type.
func parseMambaSSM(c *Config, o *object) error {
	for _, k := range []string{"d_model", "n_layer", "vocab_size"} {
		if err := required(o, k); err != nil {
			return err
		}
	}
	c.HiddenSize = o.int(0, "d_model")
	c.VocabSize = o.int(0, "vocab_size")
	// mamba_ssm pads the vocabulary (and so the embedding) to a multiple.
	if pad := o.int(8, "pad_vocab_size_multiple"); pad > 0 && c.VocabSize%pad != 0 {
		c.VocabSize += pad - c.VocabSize%pad
	}
	c.TieWordEmbeddings = o.bool(true, "tie_embeddings")
	c.RMSNormEps = o.float(1e-5, "norm_epsilon")
	c.BOSTokenID, c.PadTokenID = -1, -1
	if !o.bool(true, "rms_norm") {
		return fmt.Errorf("rms_norm is false: LayerNorm models are not supported: %w", ErrUnsupported)
	}

	ssm := o.object("ssm_cfg")
	if layer := ssm.str("Mamba1", "layer"); layer != "Mamba2" {
		return fmt.Errorf("ssm_cfg.layer is %q: only Mamba2 is supported: %w", layer, ErrUnsupported)
	}
	if !ssm.bool(true, "rmsnorm") {
		return fmt.Errorf("ssm_cfg.rmsnorm is false: only the gated-RMSNorm Mamba2 is supported: %w", ErrUnsupported)
	}
	m := &c.Mamba
	m.StateSize = ssm.int(128, "d_state")
	m.ConvKernel = ssm.int(4, "d_conv")
	m.Expand = ssm.float(2, "expand")
	m.HeadDim = ssm.int(64, "headdim")
	m.NumGroups = ssm.int(1, "ngroups")
	m.ChunkSize = ssm.int(256, "chunk_size")
	m.NormBeforeGate = ssm.bool(false, "norm_before_gate")
	m.ConvBias = ssm.bool(true, "conv_bias")
	m.ProjBias = ssm.bool(false, "bias")
	m.HiddenAct = "silu"
	m.TimeStepMin = ssm.float(0.001, "dt_min")
	m.TimeStepMax = ssm.float(0.1, "dt_max")
	m.TimeStepFloor = ssm.float(1e-4, "dt_init_floor")
	m.TimeStepLimit = timeStepLimit(ssm, "dt_limit")
	inner := m.Expand * float64(c.HiddenSize)
	if inner != math.Trunc(inner) || inner > maxInt {
		return fmt.Errorf("ssm_cfg.expand*d_model (%g*%d) is not a valid size", m.Expand, c.HiddenSize)
	}
	m.InnerSize = ssm.int(int(inner), "d_ssm")
	if m.HeadDim > 0 {
		if m.InnerSize%m.HeadDim != 0 {
			return fmt.Errorf("ssm_cfg: d_ssm (%d) must be a multiple of headdim (%d)", m.InnerSize, m.HeadDim)
		}
		m.NumHeads = m.InnerSize / m.HeadDim
	}
	if m.NumGroups > 0 {
		m.NormGroupSize = m.InnerSize / m.NumGroups
	}

	n := o.int(0, "n_layer")
	if n < 0 || n > maxLayers {
		return fmt.Errorf("n_layer = %d is out of range [0, %d]", n, maxLayers)
	}
	c.Layers = make([]Layer, n)
	ffn := None
	if c.IntermediateSize = o.int(0, "d_intermediate"); c.IntermediateSize > 0 {
		ffn, c.HiddenAct = MLP, "silu" // mamba_ssm's GatedMLP
	}
	for i := range c.Layers {
		c.Layers[i] = Layer{Mixer: Mamba, FFN: ffn}
	}
	for _, i := range o.ints("attn_layer_idx") {
		if i < 0 || i >= n {
			return fmt.Errorf("attn_layer_idx: layer %d is outside [0, %d)", i, n)
		}
		c.Layers[i].Mixer = Attention
	}
	attn := o.object("attn_cfg")
	a := &c.Attention
	a.NumHeads = attn.int(0, "num_heads")
	a.NumKVHeads = attn.int(a.NumHeads, "num_heads_kv")
	if a.NumHeads > 0 {
		a.HeadDim = attn.int(c.HiddenSize/a.NumHeads, "head_dim")
	}
	a.Bias = attn.bool(true, "qkv_proj_bias")
	a.RotaryDim = attn.int(0, "rotary_emb_dim")
	a.Rope = a.RotaryDim > 0
	a.RopeTheta = attn.float(10000, "rotary_emb_base")
	a.RopeType = "default"
	if a.Rope && a.HeadDim > 0 {
		a.PartialRotaryFactor = float64(a.RotaryDim) / float64(a.HeadDim)
	}
	return nil
}

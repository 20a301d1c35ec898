package hfconfig

import (
	"fmt"
	"math"
	"slices"
)

// mambaNames is how a family's config.json spells the Mamba-2 fields, so that
// errors point at the field the user must fix.
type mambaNames struct {
	heads, headDim, state, groups, conv, chunk, expand, limit string
}

func (c *Config) mambaNames() mambaNames {
	switch {
	case c.MambaSSM:
		return mambaNames{"nheads (d_ssm/headdim)", "ssm_cfg.headdim", "ssm_cfg.d_state", "ssm_cfg.ngroups", "ssm_cfg.d_conv", "ssm_cfg.chunk_size", "ssm_cfg.expand", "ssm_cfg.dt_limit"}
	case c.Family == Mamba2:
		return mambaNames{"num_heads", "head_dim", "state_size", "n_groups", "conv_kernel", "chunk_size", "expand", "time_step_limit"}
	}
	return mambaNames{"mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel", "chunk_size", "expand", "time_step_limit"}
}

// Validate checks that the sizes are positive and consistent for the layer
// kinds the model uses. Parse calls it; call it again after editing a Config.
func (c *Config) Validate() error {
	pos := func(name string, v int) error {
		if v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", name, v)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"hidden_size", c.HiddenSize}, {"vocab_size", c.VocabSize}, {"the layer count", len(c.Layers)}} {
		if err := pos(f.name, f.v); err != nil {
			return err
		}
	}
	if c.NumLayers != len(c.Layers) {
		return fmt.Errorf("NumLayers is %d but there are %d layers", c.NumLayers, len(c.Layers))
	}
	if !(c.RMSNormEps > 0) || math.IsInf(c.RMSNormEps, 0) {
		return fmt.Errorf("the RMSNorm epsilon must be positive and finite, got %g", c.RMSNormEps)
	}

	if err := c.checkSizes(); err != nil {
		return err
	}
	used := map[LayerKind]bool{}
	for _, l := range slices.Concat(c.Layers, c.MTP.Layers) {
		used[l.Mixer], used[l.FFN] = true, true
	}
	if used[Mamba] {
		if err := c.validateMamba(); err != nil {
			return err
		}
	}
	if used[GatedDeltaNet] {
		if err := c.validateGDN(); err != nil {
			return err
		}
	}
	if used[Attention] {
		if err := c.validateAttention(); err != nil {
			return err
		}
	}
	if used[KimiDeltaAttention] {
		if err := c.validateKDA(); err != nil {
			return err
		}
	}
	if used[LatentAttention] {
		if err := c.validateMLA(); err != nil {
			return err
		}
	}
	if used[MLP] {
		if err := pos("intermediate_size", c.IntermediateSize); err != nil {
			return err
		}
	}
	if used[MoE] {
		if err := c.validateMoE(); err != nil {
			return err
		}
	}
	for _, i := range c.MoE.MLPOnlyLayers {
		if i < 0 || i >= len(c.Layers) {
			return fmt.Errorf("mlp_only_layers: layer %d is outside [0, %d)", i, len(c.Layers))
		}
	}
	if c.MTP.NumLayers < 0 || c.MTP.NumLayers > maxLayers {
		return fmt.Errorf("the MTP layer count %d is out of range", c.MTP.NumLayers)
	}
	return nil
}

func (c *Config) validateMamba() error {
	m, n := &c.Mamba, c.mambaNames()
	for _, f := range []struct {
		name string
		v    int
	}{{n.heads, m.NumHeads}, {n.headDim, m.HeadDim}, {n.state, m.StateSize}, {n.groups, m.NumGroups}, {n.conv, m.ConvKernel}, {n.chunk, m.ChunkSize}} {
		if f.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", f.name, f.v)
		}
	}
	if m.NumHeads%m.NumGroups != 0 {
		return fmt.Errorf("%s (%d) must be divisible by %s (%d)", n.heads, m.NumHeads, n.groups, m.NumGroups)
	}
	if m.InnerSize != m.NumHeads*m.HeadDim {
		return fmt.Errorf("the Mamba inner size %d must equal %s*%s (%d*%d)", m.InnerSize, n.heads, n.headDim, m.NumHeads, m.HeadDim)
	}
	// transformers' Mamba2 splits in_proj by expand*hidden_size and views it as
	// heads×head_dim, so the two must agree; NemotronH sizes by heads×head_dim alone.
	if c.Family == Mamba2 && !c.MambaSSM && float64(m.InnerSize) != m.Expand*float64(c.HiddenSize) {
		return fmt.Errorf("%s*%s (%d*%d = %d) must equal %s*hidden_size (%g*%d = %g)",
			n.heads, n.headDim, m.NumHeads, m.HeadDim, m.InnerSize, n.expand, m.Expand, c.HiddenSize, m.Expand*float64(c.HiddenSize))
	}
	if m.NormGroupSize <= 0 || m.InnerSize%m.NormGroupSize != 0 {
		return fmt.Errorf("the gated-norm group size %d must divide the Mamba inner size %d", m.NormGroupSize, m.InnerSize)
	}
	lo, hi := m.TimeStepLimit[0], m.TimeStepLimit[1]
	if math.IsNaN(lo) || math.IsNaN(hi) || lo < 0 || lo > hi {
		return fmt.Errorf("%s [%g, %g] must satisfy 0 <= min <= max", n.limit, lo, hi)
	}
	return nil
}

func (c *Config) validateGDN() error {
	g := &c.GDN
	for _, f := range []struct {
		name string
		v    int
	}{{"linear_num_key_heads", g.NumKeyHeads}, {"linear_num_value_heads", g.NumValueHeads}, {"linear_key_head_dim", g.KeyHeadDim}, {"linear_value_head_dim", g.ValueHeadDim}, {"linear_conv_kernel_dim", g.ConvKernel}} {
		if f.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", f.name, f.v)
		}
	}
	if g.NumValueHeads%g.NumKeyHeads != 0 {
		return fmt.Errorf("linear_num_value_heads (%d) must be a multiple of linear_num_key_heads (%d)", g.NumValueHeads, g.NumKeyHeads)
	}
	return nil
}

func (c *Config) validateAttention() error {
	a := &c.Attention
	for _, f := range []struct {
		name string
		v    int
	}{{"num_attention_heads", a.NumHeads}, {"num_key_value_heads", a.NumKVHeads}, {"head_dim", a.HeadDim}} {
		if f.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", f.name, f.v)
		}
	}
	if a.NumHeads%a.NumKVHeads != 0 {
		return fmt.Errorf("num_attention_heads (%d) must be divisible by num_key_value_heads (%d)", a.NumHeads, a.NumKVHeads)
	}
	if a.SlidingWindow < 0 {
		return fmt.Errorf("sliding_window must not be negative, got %d", a.SlidingWindow)
	}
	if !a.Rope {
		return nil
	}
	if !(a.RopeTheta > 0) || math.IsInf(a.RopeTheta, 0) {
		return fmt.Errorf("rope_theta must be positive and finite, got %g", a.RopeTheta)
	}
	if !(a.PartialRotaryFactor > 0 && a.PartialRotaryFactor <= 1) {
		return fmt.Errorf("partial_rotary_factor must be in (0, 1], got %g", a.PartialRotaryFactor)
	}
	if a.RotaryDim <= 0 || a.RotaryDim%2 != 0 || a.RotaryDim > a.HeadDim {
		return fmt.Errorf("the rotary dimension head_dim*partial_rotary_factor (%d*%g = %d) must be even and in (0, head_dim]",
			a.HeadDim, a.PartialRotaryFactor, a.RotaryDim)
	}
	if a.MRopeSection != nil {
		sum := 0
		for _, s := range a.MRopeSection {
			if s < 0 {
				return fmt.Errorf("mrope_section %v has a negative entry", a.MRopeSection)
			}
			sum += s
		}
		if 2*sum != a.RotaryDim {
			return fmt.Errorf("mrope_section %v sums to %d, want rotary dimension/2 = %d", a.MRopeSection, sum, a.RotaryDim/2)
		}
	}
	return nil
}

func (c *Config) validateMoE() error {
	e := &c.MoE
	for _, f := range []struct {
		name string
		v    int
	}{{"the expert count (num_experts / n_routed_experts)", e.NumExperts}, {"num_experts_per_tok", e.TopK}, {"moe_intermediate_size", e.ExpertIntermediateSize}, {"n_group", e.NumExpertGroups}, {"topk_group", e.TopKGroups}} {
		if f.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", f.name, f.v)
		}
	}
	if e.TopK > e.NumExperts {
		return fmt.Errorf("num_experts_per_tok (%d) exceeds the %d experts", e.TopK, e.NumExperts)
	}
	if e.NumSharedExperts < 0 || e.SharedExpertIntermediateSize < 0 || e.LatentSize < 0 {
		return fmt.Errorf("shared-expert and latent sizes must not be negative (n_shared_experts %d, shared size %d, moe_latent_size %d)",
			e.NumSharedExperts, e.SharedExpertIntermediateSize, e.LatentSize)
	}
	if e.NumSharedExperts > 0 && e.SharedExpertIntermediateSize == 0 {
		return fmt.Errorf("%d shared experts of intermediate size 0", e.NumSharedExperts)
	}
	if e.NumExperts%e.NumExpertGroups != 0 || e.TopKGroups > e.NumExpertGroups {
		return fmt.Errorf("n_group (%d) must divide the %d experts and be at least topk_group (%d)", e.NumExpertGroups, e.NumExperts, e.TopKGroups)
	}
	if !(e.RoutedScalingFactor > 0) || math.IsInf(e.RoutedScalingFactor, 0) {
		return fmt.Errorf("routed_scaling_factor must be positive and finite, got %g", e.RoutedScalingFactor)
	}
	return nil
}

// maxElements bounds every weight or state size derived from a Config. Each
// field is at most 2^31, so products of three could wrap int; checking them
// here, stepwise, keeps ConvDim, InProjSize, StateElements and the loaders'
// own products exact. 2^40 elements is far beyond any real tensor.
const maxElements = 1 << 40

func product(factors ...int) (int, bool) {
	p := 1
	for _, f := range factors {
		if f < 0 {
			return 0, true // negative sizes are reported by the checks that follow
		}
		if f != 0 && p > maxElements/f {
			return 0, false
		}
		p *= f
	}
	return p, true
}

func (c *Config) checkSizes() error {
	m, g, a, e, k, l := c.Mamba, c.GDN, c.Attention, c.MoE, c.KDA, c.MLA
	width := max(e.LatentSize, c.HiddenSize)
	for _, s := range []struct {
		what    string
		factors []int
	}{
		{"the embedding (vocab_size*hidden_size)", []int{c.VocabSize, c.HiddenSize}},
		{"the MLP (intermediate_size*hidden_size)", []int{c.IntermediateSize, c.HiddenSize}},
		{"the Mamba state (heads*head_dim*state)", []int{m.NumHeads, m.HeadDim, m.StateSize}},
		{"the Mamba in_proj", []int{2, m.InnerSize + m.NumGroups*m.StateSize + m.NumHeads, c.HiddenSize}},
		{"the Mamba conv (groups*state*kernel)", []int{2, m.NumGroups, m.StateSize, m.ConvKernel}},
		{"the GDN state (value heads*dk*dv)", []int{g.NumValueHeads, g.KeyHeadDim, g.ValueHeadDim}},
		{"the GDN projections", []int{2, g.NumKeyHeads*g.KeyHeadDim + g.NumValueHeads*g.ValueHeadDim, c.HiddenSize}},
		{"the attention projections", []int{2, a.NumHeads + a.NumKVHeads, a.HeadDim, c.HiddenSize}},
		{"the KDA state (heads*head_dim*head_dim)", []int{k.NumHeads, k.HeadDim, k.HeadDim}},
		{"the KDA projections", []int{6, k.NumHeads, k.HeadDim, c.HiddenSize}},
		{"the MLA projections", []int{2, l.NumHeads, l.QKNopeHeadDim + l.QKRopeHeadDim + l.VHeadDim, c.HiddenSize + l.KVLoraRank + l.QLoraRank}},
		{"the experts (experts*moe_intermediate_size*width)", []int{2, e.NumExperts, e.ExpertIntermediateSize, width}},
		{"the shared experts", []int{2, e.NumSharedExperts, e.SharedExpertIntermediateSize, c.HiddenSize}},
	} {
		if _, ok := product(s.factors...); !ok {
			return fmt.Errorf("%s is implausibly large (over %d elements)", s.what, maxElements)
		}
	}
	return nil
}

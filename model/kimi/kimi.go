// Package kimi binds Kimi-Linear checkpoints (model_type kimi_linear:
// moonshotai/Kimi-Linear-48B-A3B) to the blocks of package nn. Each layer
// has two residual branches:
//
//	h += mixer(norm1(h))   Kimi Delta Attention (three layers in four), or
//	                        multi-head latent attention without RoPE
//	h += ffn(norm2(h))     SwiGLU MLP (the first layer), or MoE: sigmoid
//	                        router with correction bias, top-k renormalised
//	                        × routed_scaling_factor, SwiGLU experts, shared
//	                        SwiGLU expert added
//
// then the final norm and an untied LM head. Every norm weight is plain w.
//
// Tensors are read under the checkpoint's own names (its remote code:
// q_conv1d/k_conv1d/v_conv1d, f_a_proj/f_b_proj, b_proj, g_a_proj/g_b_proj,
// block_sparse_moe.experts.{i}.w1/w2/w3) or transformers' (one conv1d over
// [q | k | v], forget_gate_down/up, beta_proj, output_gate_down/up,
// mlp.experts.gate_up_proj fused).
package kimi

import (
	"fmt"

	"github.com/replayssm/replayssm/model/arch"
	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

func init() {
	arch.Register(arch.Architecture{Name: "kimi", Families: []hfconfig.Family{hfconfig.KimiLinear}, Bind: Load})
}

// latentNormEps is kv_a_layernorm's (and q_a_layernorm's) epsilon: the
// module is built without one, so it takes the norm class's default, not
// rms_norm_eps.
const latentNormEps = 1e-6

// Load binds the checkpoint behind ld to a Decoder for cfg.
func Load(cfg *hfconfig.Config, ld *nn.Loader) (*nn.Decoder, error) {
	if cfg.Family != hfconfig.KimiLinear {
		return nil, fmt.Errorf("kimi: model family is %v", cfg.Family)
	}
	if err := supported(cfg); err != nil {
		return nil, fmt.Errorf("kimi: %w", err)
	}
	H, V := cfg.HiddenSize, cfg.VocabSize
	eps := float32(cfg.RMSNormEps)
	d := &nn.Decoder{Config: cfg, Hidden: H, Vocab: V}
	d.Embed = ld.Matrix("model.embed_tokens.weight", V, H)
	for i, l := range cfg.Layers {
		lp := fmt.Sprintf("model.layers.%d.", i)
		var mixer, ffn nn.Block
		switch l.Mixer {
		case hfconfig.KimiDeltaAttention:
			mixer = kda(cfg, ld, lp+"self_attn")
		case hfconfig.LatentAttention:
			mixer = mla(cfg, ld, lp+"self_attn")
		default:
			return nil, fmt.Errorf("kimi: layer %d: mixer %v not supported", i, l.Mixer)
		}
		switch l.FFN {
		case hfconfig.MLP:
			// The checkpoint's dense layers are under mlp; transformers'
			// saves put them under block_sparse_moe, as the experts.
			m := lp + "mlp"
			if !ld.Has(m + ".gate_proj.weight") {
				m = lp + "block_sparse_moe"
			}
			ffn = swiglu(ld, m, "gate_proj", "up_proj", "down_proj", cfg.IntermediateSize, H)
		case hfconfig.MoE:
			ffn = moe(cfg, ld, lp)
		default:
			return nil, fmt.Errorf("kimi: layer %d: feed-forward %v not supported", i, l.FFN)
		}
		d.Layers = append(d.Layers, nn.Layer{Branches: []nn.Branch{
			{Norm: nn.RMSNorm{W: ld.Vector(lp+"input_layernorm.weight", H), Eps: eps}, Block: mixer},
			{Norm: nn.RMSNorm{W: ld.Vector(lp+"post_attention_layernorm.weight", H), Eps: eps}, Block: ffn},
		}})
	}
	d.FinalNorm = nn.RMSNorm{W: ld.Vector("model.norm.weight", H), Eps: eps}
	ld.LMHead(d, cfg.TieWordEmbeddings)
	if err := ld.Err(); err != nil {
		return nil, fmt.Errorf("kimi: %w", err)
	}
	return d, nil
}

// supported refuses the options of the kimi_linear config class that
// Kimi-Linear does not use and these blocks do not compute (Kimi K3's among
// them), rather than running them wrongly.
func supported(cfg *hfconfig.Config) error {
	kda, mla, moe := cfg.Count(hfconfig.KimiDeltaAttention) > 0, cfg.Count(hfconfig.LatentAttention) > 0, cfg.Count(hfconfig.MoE) > 0
	for _, c := range []struct {
		bad  bool
		what string
	}{
		{kda && cfg.KDA.GateLowerBound != 0, "the bounded forget gate (linear_attn_config.gate_lower_bound)"},
		{kda && cfg.KDA.FullRankGate, "full-rank gates (linear_attn_config.use_full_rank_gate)"},
		{mla && !cfg.MLA.NoPE, "latent attention with RoPE (mla_use_nope false)"},
		{mla && cfg.MLA.OutputGate, "the latent attention output gate (mla_use_output_gate)"},
		{cfg.AttnResBlockSize > 0, "block attention residuals (attn_res_block_size)"},
		{cfg.HiddenAct != "silu", fmt.Sprintf("hidden_act %q (want silu)", cfg.HiddenAct)},
		{moe && cfg.MoE.Router != hfconfig.Sigmoid, fmt.Sprintf("the %v router (want sigmoid)", cfg.MoE.Router)},
	} {
		if c.bad {
			return fmt.Errorf("%s is not supported: %w", c.what, hfconfig.ErrUnsupported)
		}
	}
	return nil
}

// vector binds a tensor of n values whatever its shape: A_log is stored
// [1, 1, heads, 1] by the checkpoint and [heads, 1] by transformers, dt_bias
// [heads·dk] and [heads, dk].
func vector(ld *nn.Loader, name string, n int) []float32 {
	shape := ld.Shape(name)
	if shape == nil {
		return ld.Vector(name, n)
	}
	p := 1
	for _, s := range shape {
		p *= s
	}
	if p != n {
		ld.Fail(fmt.Errorf("%s has shape %v, want %d values", name, shape, n))
		return nil
	}
	return ld.Tensor(name, shape...)
}

// kda binds a Kimi Delta Attention layer, its in_proj the rows
// [q | k | v | b | f_a | g_a].
func kda(cfg *hfconfig.Config, ld *nn.Loader, m string) *nn.KDAMixer {
	kc := cfg.KDA
	H, h, dk, K := cfg.HiddenSize, kc.NumHeads, kc.HeadDim, kc.Dim()
	rank := dk // the low-rank gates' width is the head size
	names := map[string]string{"b": "b_proj", "fa": "f_a_proj", "fb": "f_b_proj", "ga": "g_a_proj", "gb": "g_b_proj"}
	if !ld.Has(m+".f_a_proj.weight") && ld.Has(m+".forget_gate_down.weight") { // transformers' names
		names = map[string]string{"b": "beta_proj", "fa": "forget_gate_down", "fb": "forget_gate_up", "ga": "output_gate_down", "gb": "output_gate_up"}
	}
	in, err := nn.StackRows(
		ld.Linear(m+".q_proj", K, H, false),
		ld.Linear(m+".k_proj", K, H, false),
		ld.Linear(m+".v_proj", K, H, false),
		ld.Linear(m+"."+names["b"], h, H, false),
		ld.Linear(m+"."+names["fa"], rank, H, false),
		ld.Linear(m+"."+names["ga"], rank, H, false))
	ld.Fail(err)
	C, kw := 3*K, kc.ConvKernel
	conv := replay.ConvWeights{Channels: C, Kernel: kw}
	if ld.Has(m + ".q_conv1d.weight") {
		for _, p := range []string{"q", "k", "v"} {
			conv.Weight = append(conv.Weight, ld.Tensor(m+"."+p+"_conv1d.weight", K, 1, kw)...)
		}
	} else {
		conv.Weight = ld.Tensor(m+".conv1d.weight", C, 1, kw)
	}
	return &nn.KDAMixer{
		Shape:   ssm.GDNShape{KeyHeads: h, ValueHeads: h, KeyDim: dk, ValueDim: dk},
		InProj:  in,
		Conv:    conv,
		FB:      ld.Linear(m+"."+names["fb"], K, rank, false),
		GB:      ld.Linear(m+"."+names["gb"], K, rank, false),
		ALog:    vector(ld, m+".A_log", h),
		DtBias:  vector(ld, m+".dt_bias", K),
		Norm:    nn.RMSNorm{W: ld.Vector(m+".o_norm.weight", dk), Eps: float32(cfg.RMSNormEps)},
		OutProj: ld.Linear(m+".o_proj", H, K, false),
	}
}

// mla binds a latent-attention layer.
func mla(cfg *hfconfig.Config, ld *nn.Loader, m string) *nn.MLA {
	mc := cfg.MLA
	H, n := cfg.HiddenSize, mc.NumHeads
	a := &nn.MLA{
		Heads: n, NopeDim: mc.QKNopeHeadDim, RopeDim: mc.QKRopeHeadDim, VDim: mc.VHeadDim, Rank: mc.KVLoraRank,
		KVA:    ld.Linear(m+".kv_a_proj_with_mqa", mc.LatentDim(), H, false),
		KVNorm: nn.RMSNorm{W: ld.Vector(m+".kv_a_layernorm.weight", mc.KVLoraRank), Eps: latentNormEps},
		KVB:    ld.Linear(m+".kv_b_proj", n*(mc.QKNopeHeadDim+mc.VHeadDim), mc.KVLoraRank, false),
		O:      ld.Linear(m+".o_proj", H, n*mc.VHeadDim, false),
	}
	if mc.QLoraRank > 0 {
		qa := ld.Linear(m+".q_a_proj", mc.QLoraRank, H, false)
		a.QA = &qa
		a.QNorm = &nn.RMSNorm{W: ld.Vector(m+".q_a_layernorm.weight", mc.QLoraRank), Eps: latentNormEps}
		a.Q = ld.Linear(m+".q_b_proj", n*mc.QKHeadDim(), mc.QLoraRank, false)
	} else {
		a.Q = ld.Linear(m+".q_proj", n*mc.QKHeadDim(), H, false)
	}
	return a
}

func swiglu(ld *nn.Loader, m, gate, up, down string, inter, H int) *nn.MLP {
	return &nn.MLP{Act: nn.SwiGLU,
		Gate: ld.Linear(m+"."+gate, inter, H, false),
		Up:   ld.Linear(m+"."+up, inter, H, false),
		Down: ld.Linear(m+"."+down, H, inter, false)}
}

// moe binds layer lp's mixture of experts: under block_sparse_moe with
// per-expert w1 (gate), w3 (up), w2 (down) in the checkpoint, under mlp
// with fused experts in transformers' saves.
func moe(cfg *hfconfig.Config, ld *nn.Loader, lp string) *nn.MoE {
	mc := cfg.MoE
	H, E, inter := cfg.HiddenSize, mc.NumExperts, mc.ExpertIntermediateSize
	m := lp + "block_sparse_moe"
	remote := ld.Has(m + ".gate.weight")
	if !remote {
		m = lp + "mlp"
	}
	blk := &nn.MoE{
		Router:  ld.Linear(m+".gate", E, H, false),
		Routing: nn.SigmoidRouter,
		TopK:    mc.TopK,
		// The checkpoint's router renormalises only several experts' weights:
		// one expert keeps its sigmoid score.
		NormTopK:   mc.NormTopKProb && mc.TopK > 1,
		Scale:      float32(mc.RoutedScalingFactor),
		Groups:     mc.NumExpertGroups,
		TopKGroups: mc.TopKGroups,
	}
	if ld.Has(m + ".gate.e_score_correction_bias") {
		blk.CorrectionBias = ld.Vector(m+".gate.e_score_correction_bias", E)
	}
	var gates, ups, downs []nn.Linear
	if remote {
		gates = ld.Experts(m, "w1", E, inter, H)
		ups = ld.Experts(m, "w3", E, inter, H)
		downs = ld.Experts(m, "w2", E, H, inter)
	} else {
		var ok bool
		if gates, ups, ok = ld.FusedGateUp(m, E, inter, H); !ok {
			gates = ld.Experts(m, "gate_proj", E, inter, H)
			ups = ld.Experts(m, "up_proj", E, inter, H)
		}
		downs = ld.Experts(m, "down_proj", E, H, inter)
	}
	for e := range E {
		blk.Experts = append(blk.Experts, nn.MLP{Act: nn.SwiGLU, Gate: gates[e], Up: ups[e], Down: downs[e]})
	}
	if mc.NumSharedExperts > 0 {
		blk.Shared = swiglu(ld, m+".shared_experts", "gate_proj", "up_proj", "down_proj", mc.SharedExpertIntermediateSize*mc.NumSharedExperts, H)
	}
	return blk
}

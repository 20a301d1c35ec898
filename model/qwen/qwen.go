// Package qwen binds Qwen3.5 (qwen3_5, qwen3_5_moe, text-only or inside a VLM
// wrapper) and Qwen3-Next checkpoints to the blocks of package nn. Each layer
// has two residual branches:
//
//	h += mixer(norm1(h))   Gated DeltaNet, or gated attention (q/k norm,
//	                        partial RoPE, output × sigmoid(gate))
//	h += ffn(norm2(h))     SwiGLU MLP, or MoE (softmax router, top-k
//	                        renormalised, SwiGLU experts, shared expert ×
//	                        sigmoid(shared_expert_gate(x)))
//
// then the final norm and the LM head (tied for some checkpoints). Layer,
// final and q/k norms are "1+w" (bound as 1+w); the GDN gated norm is plain w.
package qwen

import (
	"fmt"

	"github.com/replayssm/replayssm/model/arch"
	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
	"github.com/replayssm/replayssm/tensor"
)

func init() {
	arch.Register(arch.Architecture{Name: "qwen", Families: []hfconfig.Family{hfconfig.Qwen35, hfconfig.Qwen35MoE, hfconfig.Qwen3Next}, Bind: Load, BindMTP: LoadMTP})
}

// Load binds the checkpoint behind ld to a Decoder for cfg.
func Load(cfg *hfconfig.Config, ld *nn.Loader) (*nn.Decoder, error) {
	switch cfg.Family {
	case hfconfig.Qwen35, hfconfig.Qwen35MoE, hfconfig.Qwen3Next:
	default:
		return nil, fmt.Errorf("qwen: model family is %v", cfg.Family)
	}
	p := "model."
	if ld.Has("model.language_model.embed_tokens.weight") { // VLM wrapper
		p = "model.language_model."
	}
	H, V := cfg.HiddenSize, cfg.VocabSize
	eps := float32(cfg.RMSNormEps)
	d := &nn.Decoder{Config: cfg, Hidden: H, Vocab: V}
	d.Embed = ld.Matrix(p+"embed_tokens.weight", V, H)
	var rope *tensor.Rope
	if cfg.Attention.Rope && cfg.Count(hfconfig.Attention) > 0 {
		var err error
		if rope, err = ropeFor(cfg); err != nil {
			return nil, fmt.Errorf("qwen: %w", err)
		}
	}
	for i, l := range cfg.Layers {
		lp := fmt.Sprintf("%slayers.%d.", p, i)
		var mixer, ffn nn.Block
		switch l.Mixer {
		case hfconfig.GatedDeltaNet:
			mixer = gdn(cfg, ld, lp+"linear_attn")
		case hfconfig.Attention:
			mixer = attention(cfg, ld, lp+"self_attn", rope)
		default:
			return nil, fmt.Errorf("qwen: layer %d: mixer %v not supported", i, l.Mixer)
		}
		switch l.FFN {
		case hfconfig.MLP:
			ffn = swiglu(ld, lp+"mlp", cfg.IntermediateSize, H)
		case hfconfig.MoE:
			ffn = moe(cfg, ld, lp+"mlp")
		default:
			return nil, fmt.Errorf("qwen: layer %d: feed-forward %v not supported", i, l.FFN)
		}
		d.Layers = append(d.Layers, nn.Layer{Branches: []nn.Branch{
			{Norm: nn.RMSNorm{W: ld.OnePlus(lp+"input_layernorm.weight", H), Eps: eps}, Block: mixer},
			{Norm: nn.RMSNorm{W: ld.OnePlus(lp+"post_attention_layernorm.weight", H), Eps: eps}, Block: ffn},
		}})
	}
	d.FinalNorm = nn.RMSNorm{W: ld.OnePlus(p+"norm.weight", H), Eps: eps}
	ld.LMHead(d, cfg.TieWordEmbeddings)
	if err := ld.Err(); err != nil {
		return nil, fmt.Errorf("qwen: %w", err)
	}
	return d, nil
}

// ropeFor builds the partial RoPE of the attention layers. Qwen3.5's
// multi-axis RoPE gives every axis the same position for text, which is
// plain RoPE over the rotary dimensions.
func ropeFor(cfg *hfconfig.Config) (*tensor.Rope, error) {
	ac := cfg.Attention
	if ac.RopeType != "" && ac.RopeType != "default" {
		return nil, fmt.Errorf("rope type %q not supported", ac.RopeType)
	}
	return tensor.NewRope(ac.RotaryDim, ac.RopeTheta)
}

func gdn(cfg *hfconfig.Config, ld *nn.Loader, m string) *nn.GDNMixer {
	gc := cfg.GDN
	H := cfg.HiddenSize
	Hk, Hv, dk, dv := gc.NumKeyHeads, gc.NumValueHeads, gc.KeyHeadDim, gc.ValueHeadDim
	K, Vd := gc.KeyDim(), gc.ValueDim()
	var in nn.Linear
	if ld.Has(m + ".in_proj_qkvz.weight") {
		in = unpackQwen3Next(ld, m, H, Hk, Hv, dk, dv)
	} else {
		var err error
		in, err = nn.StackRows(
			ld.Linear(m+".in_proj_qkv", 2*K+Vd, H, false),
			ld.Linear(m+".in_proj_z", Vd, H, false),
			ld.Linear(m+".in_proj_b", Hv, H, false),
			ld.Linear(m+".in_proj_a", Hv, H, false))
		ld.Fail(err)
	}
	C := gc.ConvDim()
	return &nn.GDNMixer{
		Shape:   ssm.GDNShape{KeyHeads: Hk, ValueHeads: Hv, KeyDim: dk, ValueDim: dv},
		InProj:  in,
		Conv:    replay.ConvWeights{Channels: C, Kernel: gc.ConvKernel, Weight: ld.Tensor(m+".conv1d.weight", C, 1, gc.ConvKernel)},
		ALog:    ld.Vector(m+".A_log", Hv),
		DtBias:  ld.Vector(m+".dt_bias", Hv),
		Norm:    nn.RMSNorm{W: ld.Vector(m+".norm.weight", dv), Eps: float32(cfg.RMSNormEps)},
		OutProj: ld.Linear(m+".out_proj", H, Vd, false),
	}
}

// unpackQwen3Next reorders Qwen3-Next's per-key-head packing into the flat
// [q | k | v | z | b | a] rows: in_proj_qkvz holds, per key head kh,
// [q_kh; k_kh; v and z of its r = Hv/Hk value heads]; in_proj_ba holds per key
// head [b (r); a (r)]. Value head kh·r+i is the i-th of key head kh.
func unpackQwen3Next(ld *nn.Loader, m string, H, Hk, Hv, dk, dv int) nn.Linear {
	r := Hv / Hk
	per := 2*dk + 2*r*dv
	qkvz := ld.Matrix(m+".in_proj_qkvz.weight", Hk*per, H)
	ba := ld.Matrix(m+".in_proj_ba.weight", Hk*2*r, H)
	K, V := Hk*dk, Hv*dv
	out := nn.Linear{In: H, Out: 2*K + 2*V + 2*Hv}
	if qkvz.Len() == 0 || ba.Len() == 0 {
		return out
	}
	// The rows of each output part, in order: part p's key head kh takes
	// rows [lo, lo+n) of its source.
	type run struct {
		from  tensor.Weights
		lo, n int
	}
	parts := make([][]run, 6)
	for kh := range Hk {
		base := kh * per
		parts[0] = append(parts[0], run{qkvz, base, dk})                   // q
		parts[1] = append(parts[1], run{qkvz, base + dk, dk})              // k
		parts[2] = append(parts[2], run{qkvz, base + 2*dk, r * dv})        // v
		parts[3] = append(parts[3], run{qkvz, base + 2*dk + r*dv, r * dv}) // z
		parts[4] = append(parts[4], run{ba, kh * 2 * r, r})                // b
		parts[5] = append(parts[5], run{ba, kh*2*r + r, r})                // a
	}
	var rows []tensor.Weights
	for _, p := range parts {
		for _, q := range p {
			rows = append(rows, q.from.Slice(q.lo*H, (q.lo+q.n)*H))
		}
	}
	out.W = tensor.Concat(rows...)
	return out
}

func attention(cfg *hfconfig.Config, ld *nn.Loader, m string, rope *tensor.Rope) *nn.Attention {
	ac := cfg.Attention
	H, hd := cfg.HiddenSize, ac.HeadDim
	qOut := ac.NumHeads * hd
	if ac.OutputGate {
		qOut *= 2
	}
	a := &nn.Attention{
		Heads: ac.NumHeads, KVHeads: ac.NumKVHeads, HeadDim: hd,
		Q:     ld.Linear(m+".q_proj", qOut, H, ac.Bias),
		K:     ld.Linear(m+".k_proj", ac.NumKVHeads*hd, H, ac.Bias),
		V:     ld.Linear(m+".v_proj", ac.NumKVHeads*hd, H, ac.Bias),
		O:     ld.Linear(m+".o_proj", H, ac.NumHeads*hd, ac.Bias),
		Gated: ac.OutputGate,
		Rope:  rope,
	}
	if ac.QKNorm {
		eps := float32(cfg.RMSNormEps)
		a.QNorm = &nn.RMSNorm{W: ld.OnePlus(m+".q_norm.weight", hd), Eps: eps}
		a.KNorm = &nn.RMSNorm{W: ld.OnePlus(m+".k_norm.weight", hd), Eps: eps}
	}
	return a
}

func swiglu(ld *nn.Loader, m string, inter, H int) *nn.MLP {
	return &nn.MLP{Act: nn.SwiGLU,
		Gate: ld.Linear(m+".gate_proj", inter, H, false),
		Up:   ld.Linear(m+".up_proj", inter, H, false),
		Down: ld.Linear(m+".down_proj", H, inter, false)}
}

func moe(cfg *hfconfig.Config, ld *nn.Loader, m string) *nn.MoE {
	mc := cfg.MoE
	H, E, inter := cfg.HiddenSize, mc.NumExperts, mc.ExpertIntermediateSize
	blk := &nn.MoE{
		Router:   ld.Linear(m+".gate", E, H, false),
		Routing:  nn.SoftmaxRouter,
		TopK:     mc.TopK,
		NormTopK: mc.NormTopKProb,
		Scale:    1,
	}
	gates, ups, ok := ld.FusedGateUp(m, E, inter, H)
	if !ok {
		gates = ld.Experts(m, "gate_proj", E, inter, H)
		ups = ld.Experts(m, "up_proj", E, inter, H)
	}
	downs := ld.Experts(m, "down_proj", E, H, inter)
	for e := range E {
		blk.Experts = append(blk.Experts, nn.MLP{Act: nn.SwiGLU, Gate: gates[e], Up: ups[e], Down: downs[e]})
	}
	if mc.SharedExpertIntermediateSize > 0 {
		blk.Shared = swiglu(ld, m+".shared_expert", mc.SharedExpertIntermediateSize, H)
		if mc.SharedExpertGate {
			g := ld.Linear(m+".shared_expert_gate", 1, H, false)
			blk.SharedGate = &g
		}
	}
	return blk
}

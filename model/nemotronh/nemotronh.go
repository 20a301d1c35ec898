// Package nemotronh binds NemotronH / Nemotron-3 checkpoints (model_type
// nemotron_h) to the blocks of package nn. Each layer is one residual branch,
// h += mixer(RMSNorm(h)), whose mixer is one of:
//
//	M  Mamba-2: gate before a per-group RMS norm (groups of I/G channels)
//	*  attention: GQA, no RoPE, no q/k norm, no output gate
//	-  MLP: down(relu(up(x))²)
//	E  MoE: sigmoid router with correction bias, relu² experts in a latent
//	   space (fc1_latent_proj → experts → fc2_latent_proj), shared relu² expert
//
// then norm_f and an untied lm_head. Norm weights are plain w.
package nemotronh

import (
	"fmt"
	"math"

	"github.com/replayssm/replayssm/model/arch"
	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

func init() {
	arch.Register(arch.Architecture{Name: "nemotronh", Families: []hfconfig.Family{hfconfig.NemotronH}, Bind: Load, BindMTP: LoadMTP})
}

// Load binds the checkpoint behind ld to a Decoder for cfg.
func Load(cfg *hfconfig.Config, ld *nn.Loader) (*nn.Decoder, error) {
	if cfg.Family != hfconfig.NemotronH {
		return nil, fmt.Errorf("nemotronh: model family is %v", cfg.Family)
	}
	p := "backbone."
	if !ld.Has(p+"embeddings.weight") && ld.Has("model.embeddings.weight") {
		p = "model."
	}
	H, V := cfg.HiddenSize, cfg.VocabSize
	eps := float32(cfg.RMSNormEps)
	d := &nn.Decoder{Config: cfg, Hidden: H, Vocab: V}
	d.Embed = ld.Matrix(p+"embeddings.weight", V, H)
	for i, l := range cfg.Layers {
		m := fmt.Sprintf("%slayers.%d.mixer", p, i)
		var blk nn.Block
		switch l.Mixer {
		case hfconfig.Mamba:
			blk = mamba(cfg, ld, m)
		case hfconfig.Attention:
			blk = attention(cfg, ld, m)
		case hfconfig.MLP:
			blk = &nn.MLP{Act: nn.ReLU2,
				Up:   ld.Linear(m+".up_proj", cfg.IntermediateSize, H, false),
				Down: ld.Linear(m+".down_proj", H, cfg.IntermediateSize, false)}
		case hfconfig.MoE:
			blk = moe(cfg, ld, m)
		default:
			return nil, fmt.Errorf("nemotronh: layer %d: mixer %v not supported", i, l.Mixer)
		}
		norm := nn.RMSNorm{W: ld.Vector(fmt.Sprintf("%slayers.%d.norm.weight", p, i), H), Eps: eps}
		d.Layers = append(d.Layers, nn.Layer{Branches: []nn.Branch{{Norm: norm, Block: blk}}})
	}
	d.FinalNorm = nn.RMSNorm{W: ld.Vector(p+"norm_f.weight", H), Eps: eps}
	ld.LMHead(d, cfg.TieWordEmbeddings)
	if err := ld.Err(); err != nil {
		return nil, fmt.Errorf("nemotronh: %w", err)
	}
	return d, nil
}

func mamba(cfg *hfconfig.Config, ld *nn.Loader, m string) *nn.Mamba2Mixer {
	mc := cfg.Mamba
	sh := ssm.Mamba2Shape{Heads: mc.NumHeads, HeadDim: mc.HeadDim, StateSize: mc.StateSize, Groups: mc.NumGroups}
	I, C := mc.InnerSize, mc.ConvDim()
	conv := replay.ConvWeights{Channels: C, Kernel: mc.ConvKernel, Weight: ld.Tensor(m+".conv1d.weight", C, 1, mc.ConvKernel)}
	if mc.ConvBias {
		conv.Bias = ld.Vector(m+".conv1d.bias", C)
	}
	lim := mc.TimeStepLimit
	return &nn.Mamba2Mixer{
		Shape:   sh,
		InProj:  ld.Linear(m+".in_proj", mc.InProjSize(), cfg.HiddenSize, mc.ProjBias),
		Conv:    conv,
		ALog:    ld.Vector(m+".A_log", mc.NumHeads),
		DtBias:  ld.Vector(m+".dt_bias", mc.NumHeads),
		D:       ld.Vector(m+".D", mc.NumHeads),
		Norm:    nn.RMSNorm{W: ld.Vector(m+".norm.weight", I), Eps: float32(cfg.RMSNormEps), Group: mc.NormGroupSize},
		OutProj: ld.Linear(m+".out_proj", cfg.HiddenSize, I, mc.ProjBias),
		// transformers' scan path clamps Δ to time_step_min; its one-token
		// decode path does not (REFERENCE-NOTES point 1).
		ScanDelta: [2]float64{math.Max(mc.TimeStepMin, lim[0]), lim[1]},
		StepDelta: [2]float64{0, math.Inf(1)},
	}
}

func attention(cfg *hfconfig.Config, ld *nn.Loader, m string) *nn.Attention {
	ac := cfg.Attention
	H, hd := cfg.HiddenSize, ac.HeadDim
	return &nn.Attention{
		Heads: ac.NumHeads, KVHeads: ac.NumKVHeads, HeadDim: hd,
		Q: ld.Linear(m+".q_proj", ac.NumHeads*hd, H, ac.Bias),
		K: ld.Linear(m+".k_proj", ac.NumKVHeads*hd, H, ac.Bias),
		V: ld.Linear(m+".v_proj", ac.NumKVHeads*hd, H, ac.Bias),
		O: ld.Linear(m+".o_proj", H, ac.NumHeads*hd, ac.Bias),
	}
}

func moe(cfg *hfconfig.Config, ld *nn.Loader, m string) *nn.MoE {
	mc := cfg.MoE
	H, E, inter := cfg.HiddenSize, mc.NumExperts, mc.ExpertIntermediateSize
	din := H
	blk := &nn.MoE{
		Router:     ld.Linear(m+".gate", E, H, false),
		Routing:    nn.SigmoidRouter,
		TopK:       mc.TopK,
		NormTopK:   mc.NormTopKProb,
		Scale:      float32(mc.RoutedScalingFactor),
		Groups:     mc.NumExpertGroups,
		TopKGroups: mc.TopKGroups,
	}
	if mc.CorrectionBias {
		blk.CorrectionBias = ld.Vector(m+".gate.e_score_correction_bias", E)
	}
	if mc.LatentSize > 0 {
		din = mc.LatentSize
		in := ld.Linear(m+".fc1_latent_proj", din, H, false)
		out := ld.Linear(m+".fc2_latent_proj", H, din, false)
		blk.LatentIn, blk.LatentOut = &in, &out
	}
	ups := ld.Experts(m, "up_proj", E, inter, din)
	downs := ld.Experts(m, "down_proj", E, din, inter)
	for e := range E {
		blk.Experts = append(blk.Experts, nn.MLP{Act: nn.ReLU2, Up: ups[e], Down: downs[e]})
	}
	if mc.NumSharedExperts > 0 {
		si := mc.SharedExpertIntermediateSize * mc.NumSharedExperts
		blk.Shared = &nn.MLP{Act: nn.ReLU2,
			Up:   ld.Linear(m+".shared_experts.up_proj", si, H, false),
			Down: ld.Linear(m+".shared_experts.down_proj", H, si, false)}
	}
	return blk
}

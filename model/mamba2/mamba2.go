// Package mamba2 binds plain Mamba-2 checkpoints (transformers' model_type
// mamba2, or state-spaces mamba_ssm configs) to the blocks of package nn:
// every layer is h += Mamba2(RMSNorm(h)), then norm_f and an LM head that is
// usually tied to the embeddings. transformers' gated norm takes its RMS over
// all I channels (hfconfig's NormGroupSize says which), gate first.
package mamba2

import (
	"fmt"

	"github.com/replayssm/replayssm/model/arch"
	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

func init() {
	arch.Register(arch.Architecture{Name: "mamba2", Families: []hfconfig.Family{hfconfig.Mamba2}, Bind: Load})
}

// Load binds the checkpoint behind ld to a Decoder for cfg.
func Load(cfg *hfconfig.Config, ld *nn.Loader) (*nn.Decoder, error) {
	if cfg.Family != hfconfig.Mamba2 {
		return nil, fmt.Errorf("mamba2: model family is %v", cfg.Family)
	}
	H, V := cfg.HiddenSize, cfg.VocabSize
	eps := float32(cfg.RMSNormEps)
	d := &nn.Decoder{Config: cfg, Hidden: H, Vocab: V}
	embed := "backbone.embeddings.weight"
	if !ld.Has(embed) && ld.Has("backbone.embedding.weight") { // mamba_ssm naming
		embed = "backbone.embedding.weight"
	}
	d.Embed = ld.Matrix(embed, V, H)
	mc := cfg.Mamba
	I, C := mc.InnerSize, mc.ConvDim()
	for i, l := range cfg.Layers {
		if l.Mixer != hfconfig.Mamba || l.FFN != hfconfig.None {
			return nil, fmt.Errorf("mamba2: layer %d is %v; only Mamba-2 layers are supported", i, l)
		}
		m := fmt.Sprintf("backbone.layers.%d.mixer", i)
		conv := replay.ConvWeights{Channels: C, Kernel: mc.ConvKernel, Weight: ld.Tensor(m+".conv1d.weight", C, 1, mc.ConvKernel)}
		if mc.ConvBias {
			conv.Bias = ld.Vector(m+".conv1d.bias", C)
		}
		mixer := &nn.Mamba2Mixer{
			Shape:   ssm.Mamba2Shape{Heads: mc.NumHeads, HeadDim: mc.HeadDim, StateSize: mc.StateSize, Groups: mc.NumGroups},
			InProj:  ld.Linear(m+".in_proj", mc.InProjSize(), H, mc.ProjBias),
			Conv:    conv,
			ALog:    ld.Vector(m+".A_log", mc.NumHeads),
			DtBias:  ld.Vector(m+".dt_bias", mc.NumHeads),
			D:       ld.Vector(m+".D", mc.NumHeads),
			Norm:    nn.RMSNorm{W: ld.Vector(m+".norm.weight", I), Eps: eps, Group: mc.NormGroupSize},
			OutProj: ld.Linear(m+".out_proj", H, I, mc.ProjBias),
			// transformers clamps Δ to time_step_limit on both paths.
			ScanDelta: mc.TimeStepLimit,
			StepDelta: mc.TimeStepLimit,
		}
		norm := nn.RMSNorm{W: ld.Vector(fmt.Sprintf("backbone.layers.%d.norm.weight", i), H), Eps: eps}
		d.Layers = append(d.Layers, nn.Layer{Branches: []nn.Branch{{Norm: norm, Block: mixer}}})
	}
	d.FinalNorm = nn.RMSNorm{W: ld.Vector("backbone.norm_f.weight", H), Eps: eps}
	ld.LMHead(d, true) // Mamba-2 checkpoints without lm_head.weight tie it
	if err := ld.Err(); err != nil {
		return nil, fmt.Errorf("mamba2: %w", err)
	}
	return d, nil
}

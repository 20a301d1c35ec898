package qwen

import (
	"errors"
	"fmt"

	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/nn"
)

// MTPFile is the file beside a checkpoint that may hold its MTP head
// (nn.MTPFile).
const MTPFile = nn.MTPFile

// ErrNoMTP reports a checkpoint without an MTP head.
var ErrNoMTP = errors.New("the checkpoint has no MTP head (mtp.* tensors)")

// tensorSource is what binding reads: a checkpoint or one safetensors file.
type tensorSource = nn.Source

// LoadMTP binds the multi-token-prediction head of the Qwen3.5 / Qwen3-Next
// checkpoint in dir to target (its decoder): the mtp.* tensors of
// dir/mtp.safetensors when that file exists, else of the checkpoint. It
// returns ErrNoMTP when there are none. The head is one decoder layer whose
// feed-forward is a SwiGLU MLP (Qwen3.5's dense models) or a MoE block like
// the model's own (Qwen3.5-MoE, Qwen3-Next).
func LoadMTP(dir string, target *nn.Decoder) (*nn.MTP, error) {
	cfg := target.Config
	if cfg == nil {
		return nil, errors.New("mtp: the target has no config")
	}
	switch cfg.Family {
	case hfconfig.Qwen35, hfconfig.Qwen35MoE, hfconfig.Qwen3Next:
	default:
		return nil, fmt.Errorf("mtp: model family %v has no MTP head binding", cfg.Family)
	}
	src, closeSrc, err := nn.OpenMTPSource(dir)
	if err != nil {
		return nil, err
	}
	defer closeSrc()
	if !src.Has("mtp.fc.weight") {
		return nil, fmt.Errorf("%s: %w", dir, ErrNoMTP)
	}
	m, err := BindMTP(cfg, src, target)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return m, nil
}

// BindMTP binds the mtp.* tensors of src for target (config cfg):
//
//	mtp.pre_fc_norm_embedding.weight, mtp.pre_fc_norm_hidden.weight   [H]  "1+w"
//	mtp.fc.weight                                                      [H][2H]
//	mtp.layers.0.*   a full-attention decoder layer, named as the model's
//	                 layers (input_layernorm, self_attn.{q,k,v,o}_proj,
//	                 q_norm, k_norm, post_attention_layernorm, mlp.*)
//	mtp.norm.weight                                                    [H]  "1+w"
//
// The layer's mlp is a SwiGLU MLP (mlp.{gate,up,down}_proj) or, when
// mlp.gate.weight is present, a MoE block bound as the model's MoE layers
// are (router mlp.gate, experts per expert or fused, shared expert and its
// gate; the config's top-k and norm_topk_prob), which is how the public
// reference implementations build the MoE models' heads: the model's
// decoder layer class with full attention.
func BindMTP(cfg *hfconfig.Config, src tensorSource, target *nn.Decoder) (*nn.MTP, error) {
	if src.Has("mtp.layers.1.input_layernorm.weight") {
		return nil, errors.New("mtp: heads of more than one layer are not supported")
	}
	ld := nn.NewSourceLoader(src)
	H := cfg.HiddenSize
	eps := float32(cfg.RMSNormEps)
	rope, err := ropeFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("mtp: %w", err)
	}
	lp := "mtp.layers.0."
	var ffn nn.Block
	switch {
	case src.Has(lp + "mlp.gate.weight"):
		if cfg.MoE.NumExperts <= 0 {
			return nil, errors.New("mtp: the head layer is a MoE but the config has no experts")
		}
		ffn = moe(cfg, ld, lp+"mlp")
	case src.Has(lp + "mlp.gate_proj.weight"):
		inter := cfg.IntermediateSize
		if sh := ld.Shape(lp + "mlp.gate_proj.weight"); len(sh) == 2 {
			inter = sh[0] // a MoE model's dense head has its own width
		}
		ffn = swiglu(ld, lp+"mlp", inter, H)
	default:
		return nil, errors.New("mtp: the head layer has neither a SwiGLU MLP (mlp.gate_proj) nor a MoE (mlp.gate)")
	}
	dec := &nn.Decoder{Config: cfg, Hidden: H, Vocab: target.Vocab, Embed: target.Embed,
		Layers: []nn.Layer{{Branches: []nn.Branch{
			{Norm: nn.RMSNorm{W: ld.OnePlus(lp+"input_layernorm.weight", H), Eps: eps}, Block: attention(cfg, ld, lp+"self_attn", rope)},
			{Norm: nn.RMSNorm{W: ld.OnePlus(lp+"post_attention_layernorm.weight", H), Eps: eps}, Block: ffn},
		}}},
		FinalNorm: nn.RMSNorm{W: ld.OnePlus("mtp.norm.weight", H), Eps: eps},
		LMHead:    target.LMHead, Tied: target.Tied}
	m := &nn.MTP{
		EmbedNorm:  nn.RMSNorm{W: ld.OnePlus("mtp.pre_fc_norm_embedding.weight", H), Eps: eps},
		HiddenNorm: nn.RMSNorm{W: ld.OnePlus("mtp.pre_fc_norm_hidden.weight", H), Eps: eps},
		FC:         ld.Linear("mtp.fc", H, 2*H, false),
		Dec:        dec,
	}
	if err := ld.Err(); err != nil {
		return nil, fmt.Errorf("mtp: %w", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

package nemotronh

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
var ErrNoMTP = errors.New("the checkpoint has no MTP head (mtp.layers.0.eh_proj)")

// LoadMTP binds the multi-token-prediction head of the NemotronH checkpoint
// in dir (Nemotron-3-Super's) to target, its decoder: the mtp.* tensors of
// dir/mtp.safetensors when that file exists, else of the checkpoint. It
// returns ErrNoMTP when there are none.
func LoadMTP(dir string, target *nn.Decoder) (*nn.MTP, error) {
	cfg := target.Config
	if cfg == nil {
		return nil, errors.New("mtp: the target has no config")
	}
	if cfg.Family != hfconfig.NemotronH {
		return nil, fmt.Errorf("mtp: model family is %v, not nemotron_h", cfg.Family)
	}
	src, closeSrc, err := nn.OpenMTPSource(dir)
	if err != nil {
		return nil, err
	}
	defer closeSrc()
	if mtpPrefix(src) == "" && !src.Has("mtp.layers.0.eh_proj.weight") {
		return nil, fmt.Errorf("%s: %w", dir, ErrNoMTP)
	}
	m, err := BindMTP(cfg, src, target)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return m, nil
}

// mtpPrefix is "language_model." for a multimodal wrapper's head, else "".
func mtpPrefix(src nn.Source) string {
	if src.Has("language_model.mtp.layers.0.eh_proj.weight") {
		return "language_model."
	}
	return ""
}

// BindMTP binds the NemotronH MTP head of src for target (config cfg). The
// head is one prediction step of sublayers, the config's MTP pattern
// (mtp_hybrid_override_pattern / mtp_layers_block_type; "*E" for
// Nemotron-3-Super and by default), each a model layer of that kind with its
// norm and mixer named as the model's (mtp.layers.{i}.norm.weight,
// mtp.layers.{i}.mixer.*: attention q/k/v/o_proj, or the MoE's gate, experts,
// latent projections and shared experts), the first also holding the input
// fusion and the last the output norm:
//
//	mtp.layers.0.enorm.weight, mtp.layers.0.hnorm.weight   [H]      RMSNorm (plain w)
//	mtp.layers.0.eh_proj.weight                             [H][2H]  over [enorm(embed); hnorm(hidden)]
//	mtp.layers.{last}.final_layernorm.weight                [H]
//
// so that, as for Qwen's head, x = eh_proj(...), x += mixer_i(norm_i(x)) for
// each sublayer, out = final_layernorm(x), logits = lm_head(out), with the
// target's embedding and LM head (the public reference implementations
// build it so). A multimodal wrapper's "language_model." prefix is accepted.
// With no MTP pattern in the config, the sublayers are read from the
// tensors (a mixer.q_proj: attention; a mixer.gate: MoE).
func BindMTP(cfg *hfconfig.Config, src nn.Source, target *nn.Decoder) (*nn.MTP, error) {
	p := mtpPrefix(src) + "mtp.layers."
	kinds := make([]hfconfig.LayerKind, 0, len(cfg.MTP.Layers))
	for _, l := range cfg.MTP.Layers {
		kinds = append(kinds, l.Mixer)
	}
	if len(kinds) == 0 {
		for i := 0; src.Has(fmt.Sprintf("%s%d.norm.weight", p, i)); i++ {
			m := fmt.Sprintf("%s%d.mixer.", p, i)
			switch {
			case src.Has(m + "q_proj.weight"):
				kinds = append(kinds, hfconfig.Attention)
			case src.Has(m + "gate.weight"):
				kinds = append(kinds, hfconfig.MoE)
			default:
				return nil, fmt.Errorf("mtp: sublayer %d is neither attention (mixer.q_proj) nor MoE (mixer.gate)", i)
			}
		}
	}
	if len(kinds) == 0 {
		return nil, errors.New("mtp: no MTP sublayers (mtp.layers.0.norm.weight)")
	}
	if cfg.MTP.NumLayers > 1 {
		return nil, fmt.Errorf("mtp: %d MTP steps; only one is supported", cfg.MTP.NumLayers)
	}
	ld := nn.NewSourceLoader(src)
	H := cfg.HiddenSize
	eps := float32(cfg.RMSNormEps)
	dec := &nn.Decoder{Config: cfg, Hidden: H, Vocab: target.Vocab, Embed: target.Embed,
		LMHead: target.LMHead, Tied: target.Tied}
	for i, k := range kinds {
		m := fmt.Sprintf("%s%d.mixer", p, i)
		var blk nn.Block
		switch k {
		case hfconfig.Attention:
			blk = attention(cfg, ld, m)
		case hfconfig.MoE:
			blk = moe(cfg, ld, m)
		default:
			// The references build only attention and MoE sublayers.
			return nil, fmt.Errorf("mtp: sublayer %d: kind %v not supported (attention or MoE)", i, k)
		}
		norm := nn.RMSNorm{W: ld.Vector(fmt.Sprintf("%s%d.norm.weight", p, i), H), Eps: eps}
		dec.Layers = append(dec.Layers, nn.Layer{Branches: []nn.Branch{{Norm: norm, Block: blk}}})
	}
	dec.FinalNorm = nn.RMSNorm{W: ld.Vector(fmt.Sprintf("%s%d.final_layernorm.weight", p, len(kinds)-1), H), Eps: eps}
	m := &nn.MTP{
		EmbedNorm:  nn.RMSNorm{W: ld.Vector(p+"0.enorm.weight", H), Eps: eps},
		HiddenNorm: nn.RMSNorm{W: ld.Vector(p+"0.hnorm.weight", H), Eps: eps},
		FC:         ld.Linear(p+"0.eh_proj", H, 2*H, false),
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

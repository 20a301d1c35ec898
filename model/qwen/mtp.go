package qwen

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/model/safetensors"
)

// MTPFile is the file beside a checkpoint that may hold its MTP head's mtp.*
// tensors (the shipped qwen35-kjv keeps them there, so that its
// model.safetensors stays the transformers checkpoint).
const MTPFile = "mtp.safetensors"

// ErrNoMTP reports a checkpoint without an MTP head.
var ErrNoMTP = errors.New("the checkpoint has no MTP head (mtp.* tensors)")

// tensorSource is what binding reads: a checkpoint or one safetensors file.
type tensorSource interface {
	Has(name string) bool
	Float32(name string, shape ...int) ([]float32, error)
}

// LoadMTP binds the multi-token-prediction head of the Qwen3.5 / Qwen3-Next
// checkpoint in dir to target (its decoder): the mtp.* tensors of
// dir/mtp.safetensors when that file exists, else of the checkpoint. It
// returns ErrNoMTP when there are none. Only a head of one dense layer is
// supported (Qwen3.5's dense models; the MoE models' heads are MoE layers).
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
	var src tensorSource
	if p := filepath.Join(dir, MTPFile); fileExists(p) {
		f, err := safetensors.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		src = f
	} else {
		c, err := safetensors.OpenDir(dir)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		src = c
	}
	if !src.Has("mtp.fc.weight") {
		return nil, fmt.Errorf("%s: %w", dir, ErrNoMTP)
	}
	m, err := BindMTP(cfg, src, target)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return m, nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// BindMTP binds the mtp.* tensors of src for target (config cfg):
//
//	mtp.pre_fc_norm_embedding.weight, mtp.pre_fc_norm_hidden.weight   [H]  "1+w"
//	mtp.fc.weight                                                      [H][2H]
//	mtp.layers.0.*   a full-attention decoder layer, named as the model's
//	                 layers (input_layernorm, self_attn.{q,k,v,o}_proj,
//	                 q_norm, k_norm, post_attention_layernorm, mlp.*)
//	mtp.norm.weight                                                    [H]  "1+w"
func BindMTP(cfg *hfconfig.Config, src tensorSource, target *nn.Decoder) (*nn.MTP, error) {
	if src.Has("mtp.layers.1.input_layernorm.weight") {
		return nil, errors.New("mtp: heads of more than one layer are not supported")
	}
	if !src.Has("mtp.layers.0.mlp.gate_proj.weight") {
		return nil, errors.New("mtp: only a dense (SwiGLU MLP) head layer is supported")
	}
	b := &binder{src: src}
	H := cfg.HiddenSize
	eps := float32(cfg.RMSNormEps)
	rope, err := ropeFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("mtp: %w", err)
	}
	ac := cfg.Attention
	hd := ac.HeadDim
	qOut := ac.NumHeads * hd
	if ac.OutputGate {
		qOut *= 2
	}
	lp := "mtp.layers.0."
	attn := &nn.Attention{
		Heads: ac.NumHeads, KVHeads: ac.NumKVHeads, HeadDim: hd,
		Q:     b.linear(lp+"self_attn.q_proj", qOut, H, ac.Bias),
		K:     b.linear(lp+"self_attn.k_proj", ac.NumKVHeads*hd, H, ac.Bias),
		V:     b.linear(lp+"self_attn.v_proj", ac.NumKVHeads*hd, H, ac.Bias),
		O:     b.linear(lp+"self_attn.o_proj", H, ac.NumHeads*hd, ac.Bias),
		Gated: ac.OutputGate,
		Rope:  rope,
	}
	if ac.QKNorm {
		attn.QNorm = &nn.RMSNorm{W: b.onePlus(lp+"self_attn.q_norm.weight", hd), Eps: eps}
		attn.KNorm = &nn.RMSNorm{W: b.onePlus(lp+"self_attn.k_norm.weight", hd), Eps: eps}
	}
	inter := cfg.IntermediateSize
	if sh, ok := b.shape(lp + "mlp.gate_proj.weight"); ok && len(sh) == 2 {
		inter = sh[0] // a MoE model's dense head has its own width
	}
	mlp := &nn.MLP{Act: nn.SwiGLU,
		Gate: b.linear(lp+"mlp.gate_proj", inter, H, false),
		Up:   b.linear(lp+"mlp.up_proj", inter, H, false),
		Down: b.linear(lp+"mlp.down_proj", H, inter, false)}
	dec := &nn.Decoder{Config: cfg, Hidden: H, Vocab: target.Vocab, Embed: target.Embed,
		Layers: []nn.Layer{{Branches: []nn.Branch{
			{Norm: nn.RMSNorm{W: b.onePlus(lp+"input_layernorm.weight", H), Eps: eps}, Block: attn},
			{Norm: nn.RMSNorm{W: b.onePlus(lp+"post_attention_layernorm.weight", H), Eps: eps}, Block: mlp},
		}}},
		FinalNorm: nn.RMSNorm{W: b.onePlus("mtp.norm.weight", H), Eps: eps},
		LMHead:    target.LMHead, Tied: target.Tied}
	m := &nn.MTP{
		EmbedNorm:  nn.RMSNorm{W: b.onePlus("mtp.pre_fc_norm_embedding.weight", H), Eps: eps},
		HiddenNorm: nn.RMSNorm{W: b.onePlus("mtp.pre_fc_norm_hidden.weight", H), Eps: eps},
		FC:         b.linear("mtp.fc", H, 2*H, false),
		Dec:        dec,
	}
	if b.err != nil {
		return nil, fmt.Errorf("mtp: %w", b.err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// binder reads tensors and keeps the first error, as nn.Loader does.
type binder struct {
	src tensorSource
	err error
}

func (b *binder) tensor(name string, shape ...int) []float32 {
	if b.err != nil {
		return nil
	}
	t, err := b.src.Float32(name, shape...)
	if err != nil {
		b.err = err
	}
	return t
}

func (b *binder) shape(name string) ([]int, bool) {
	if s, ok := b.src.(interface {
		Info(string) (safetensors.TensorInfo, bool)
	}); ok {
		if info, ok := s.Info(name); ok {
			return info.Shape, true
		}
	}
	return nil, false
}

func (b *binder) linear(module string, out, in int, bias bool) nn.Linear {
	l := nn.Linear{In: in, Out: out, W: b.tensor(module+".weight", out, in)}
	if bias {
		l.B = b.tensor(module+".bias", out)
	}
	return l
}

func (b *binder) onePlus(name string, n int) []float32 {
	w := b.tensor(name, n)
	for i := range w {
		w[i]++
	}
	return w
}

// Package model opens a Hugging Face model directory (config.json and
// safetensors weights) as a runnable nn.Decoder, choosing the architecture
// package registered for the config's model family (package arch).
package model

import (
	"fmt"

	archreg "github.com/replayssm/replayssm/model/arch"
	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/model/safetensors"

	// The architectures register their families with package arch.
	_ "github.com/replayssm/replayssm/model/kimi"
	_ "github.com/replayssm/replayssm/model/mamba2"
	_ "github.com/replayssm/replayssm/model/nemotronh"
	_ "github.com/replayssm/replayssm/model/qwen"
)

// Options configure Load.
type Options struct {
	// Progress, if not nil, is called as weights load with the bytes read so
	// far and the checkpoint's total.
	Progress func(done, total int64)
}

// Load reads dir/config.json and binds the checkpoint in dir to a Decoder.
// The product weights stay in the checkpoint's format (bfloat16 as models
// are released, or float32), as views of the memory-mapped files, so a
// model takes no host memory beyond the mapping; the rest is converted to
// float32. The files stay open until the Decoder's Close.
func Load(dir string, opt Options) (*nn.Decoder, error) {
	cfg, err := hfconfig.LoadDir(dir)
	if err != nil {
		return nil, err
	}
	ckpt, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	d, err := Bind(cfg, nn.NewLoader(ckpt, opt.Progress))
	if err != nil {
		ckpt.Close()
		return nil, err
	}
	d.Files = ckpt
	return d, nil
}

// Bind builds the Decoder of cfg's family from the tensors behind ld.
func Bind(cfg *hfconfig.Config, ld *nn.Loader) (*nn.Decoder, error) {
	bind, err := arch(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ld.Dir(), err)
	}
	d, err := bind(cfg, ld)
	if err != nil {
		return nil, err
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", ld.Dir(), err)
	}
	return d, nil
}

// LoadMTP binds the multi-token-prediction head of the checkpoint in dir
// for target, by target's family.
func LoadMTP(dir string, target *nn.Decoder) (*nn.MTP, error) {
	if target.Config == nil {
		return nil, fmt.Errorf("%s: the target model has no config to choose its MTP head by", dir)
	}
	a, err := archreg.For(target.Config.Family)
	if err != nil {
		return nil, err
	}
	if a.BindMTP == nil {
		return nil, fmt.Errorf("%s: %s models have no MTP head", dir, a.Name)
	}
	return a.BindMTP(dir, target)
}

// arch returns the binding of cfg's family.
func arch(cfg *hfconfig.Config) (func(*hfconfig.Config, *nn.Loader) (*nn.Decoder, error), error) {
	a, err := archreg.For(cfg.Family)
	if err != nil {
		return nil, err
	}
	return a.Bind, nil
}

// Package model opens a Hugging Face model directory (config.json and
// safetensors weights) as a runnable nn.Decoder, choosing the architecture
// package from the config's model family.
package model

import (
	"fmt"

	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/mamba2"
	"github.com/replayssm/replayssm/model/nemotronh"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/model/qwen"
	"github.com/replayssm/replayssm/model/safetensors"
)

// Options configure Load.
type Options struct {
	// Progress, if not nil, is called as weights load with the bytes read so
	// far and the checkpoint's total.
	Progress func(done, total int64)
}

// Load reads dir/config.json and binds the checkpoint in dir to a Decoder.
// The weights are converted to float32 and copied; the files are closed
// before Load returns.
func Load(dir string, opt Options) (*nn.Decoder, error) {
	cfg, err := hfconfig.LoadDir(dir)
	if err != nil {
		return nil, err
	}
	ckpt, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	defer ckpt.Close()
	return Bind(cfg, nn.NewLoader(ckpt, opt.Progress))
}

// Bind builds the Decoder of cfg's family from the tensors behind ld.
func Bind(cfg *hfconfig.Config, ld *nn.Loader) (*nn.Decoder, error) {
	var (
		d   *nn.Decoder
		err error
	)
	switch cfg.Family {
	case hfconfig.NemotronH:
		d, err = nemotronh.Load(cfg, ld)
	case hfconfig.Qwen35, hfconfig.Qwen35MoE, hfconfig.Qwen3Next:
		d, err = qwen.Load(cfg, ld)
	case hfconfig.Mamba2:
		d, err = mamba2.Load(cfg, ld)
	default:
		return nil, fmt.Errorf("%s: model family %v: %w", ld.Dir(), cfg.Family, hfconfig.ErrUnsupported)
	}
	if err != nil {
		return nil, err
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", ld.Dir(), err)
	}
	return d, nil
}

// Package arch is the registry of model architectures. Each architecture
// package (model/nemotronh, model/qwen, model/mamba2, model/kimi) registers
// the model families it binds from its init function; package model imports
// them all and looks a checkpoint's family up here, so adding an
// architecture is one new package and one import, not a new case in a
// switch.
package arch

import (
	"fmt"

	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/model/nn"
)

// Architecture binds checkpoints of some model families to nn blocks.
type Architecture struct {
	// Name names the package in errors ("qwen").
	Name string
	// Families are the config families it binds.
	Families []hfconfig.Family
	// Bind builds the Decoder of cfg from the tensors behind ld.
	Bind func(cfg *hfconfig.Config, ld *nn.Loader) (*nn.Decoder, error)
	// BindMTP binds the checkpoint's multi-token-prediction head in dir for
	// target; nil when the architecture has none.
	BindMTP func(dir string, target *nn.Decoder) (*nn.MTP, error)
}

// registry is written only by Register, from init functions, before any
// lookup.
var registry = map[hfconfig.Family]Architecture{}

// Register adds a's families. It panics when a family is registered twice:
// two packages claiming one family is a build mistake, found at start-up.
func Register(a Architecture) {
	for _, f := range a.Families {
		if old, ok := registry[f]; ok {
			panic(fmt.Sprintf("arch: family %v registered by %s and %s", f, old.Name, a.Name))
		}
		registry[f] = a
	}
}

// For returns the architecture that binds family f.
func For(f hfconfig.Family) (Architecture, error) {
	a, ok := registry[f]
	if !ok {
		return Architecture{}, fmt.Errorf("model family %v: %w", f, hfconfig.ErrUnsupported)
	}
	return a, nil
}

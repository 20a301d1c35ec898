// Package bench measures the ReplaySSM state cache against its baselines on
// the four target layer shapes, on the CPU or another backend, and reports
// each figure next to the machine's measured copy bandwidth (the physical
// limit of a memory-bound kernel) and the baseline measured in the same run.
package bench

import (
	"fmt"
	"strings"

	"github.com/replayssm/replayssm/ssm"
)

// LayerShape is one target model's SSM layer (MODELS.md).
type LayerShape struct {
	Name   string // e.g. "nemotron-3-nano-4b"
	Layer  string // "mamba2" or "gdn"
	Mamba2 ssm.Mamba2Shape
	GDN    ssm.GDNShape
	// SSMLayers is the number of SSM layers of the whole model, to turn a
	// layer's time into a model's.
	SSMLayers int
}

// StateElems is the number of state elements per sequence.
func (s LayerShape) StateElems() int {
	if s.Layer == "mamba2" {
		return s.Mamba2.StateElems()
	}
	return s.GDN.StateElems()
}

// Shapes returns the four target layer shapes.
func Shapes() []LayerShape {
	return []LayerShape{
		{Name: "nemotron-3-nano-4b", Layer: "mamba2", Mamba2: ssm.Mamba2Shape{Heads: 96, HeadDim: 80, StateSize: 128, Groups: 8}, SSMLayers: 21},
		{Name: "nemotron-3-super", Layer: "mamba2", Mamba2: ssm.Mamba2Shape{Heads: 128, HeadDim: 64, StateSize: 128, Groups: 8}, SSMLayers: 40},
		{Name: "qwen3.5-4b", Layer: "gdn", GDN: ssm.GDNShape{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128}, SSMLayers: 24},
		{Name: "qwen3.5-122b", Layer: "gdn", GDN: ssm.GDNShape{KeyHeads: 16, ValueHeads: 64, KeyDim: 128, ValueDim: 128}, SSMLayers: 36},
	}
}

// SelectShapes returns the shapes named in names ("all" or empty for all).
func SelectShapes(names []string) ([]LayerShape, error) {
	all := Shapes()
	if len(names) == 0 || (len(names) == 1 && names[0] == "all") {
		return all, nil
	}
	var out []LayerShape
	for _, n := range names {
		found := false
		for _, s := range all {
			if s.Name == n || s.Layer == n {
				out = append(out, s)
				found = true
			}
		}
		if !found {
			var known []string
			for _, s := range all {
				known = append(known, s.Name)
			}
			return nil, fmt.Errorf("unknown shape %q (known: %s, mamba2, gdn, all)", n, strings.Join(known, ", "))
		}
	}
	return out, nil
}

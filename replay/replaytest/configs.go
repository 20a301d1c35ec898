package replaytest

import (
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// Config is one cache the suite builds: its layer kind and shape, its
// options as the suite asks for them (before defaults) and its capacity.
// A backend whose caches compile kernels can build them all ahead, in
// parallel, before it runs the suite.
type Config struct {
	Kind     string // "mamba2" or "gdn"
	Mamba2   ssm.Mamba2Shape
	GDN      ssm.GDNShape
	Options  replay.Options
	Capacity int
}

// Configs lists the caches Run builds for its cases (the refusal checks
// build none that a backend takes).
func Configs() []Config {
	var cs []Config
	for _, k := range []struct {
		layers [2]*layer
		cases  []testCase
	}{{mamba2Layers(), mamba2Cases()}, {gdnLayers(), gdnCases()}} {
		for _, tc := range k.cases {
			l := k.layers[tc.shape]
			cs = append(cs, Config{Kind: l.kind, Mamba2: l.m2, GDN: l.gdn, Options: tc.opt, Capacity: capacity})
		}
	}
	return cs
}

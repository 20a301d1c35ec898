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
	Kind     string // "mamba2", "gdn" or "kda"
	Mamba2   ssm.Mamba2Shape
	GDN      ssm.GDNShape // a "gdn" or "kda" layer's
	Options  replay.Options
	Capacity int
}

// Configs lists the Mamba-2 and Gated DeltaNet caches Run builds for its
// cases (the refusal checks build none that a backend takes). The Kimi
// Delta Attention caches, which Run builds only on a KDABackend, are
// KDAConfigs'.
func Configs() []Config {
	return configs(table{mamba2Layers(), mamba2Cases()}, table{gdnLayers(), gdnCases()})
}

// KDAConfigs lists the Kimi Delta Attention caches Run builds on a
// KDABackend.
func KDAConfigs() []Config { return configs(table{kdaLayers(), kdaCases()}) }

// table is one layer kind's shapes and cases.
type table struct {
	layers [2]*layer
	cases  []testCase
}

// configs lists the caches of the cases of the tables.
func configs(tables ...table) []Config {
	var cs []Config
	for _, k := range tables {
		for _, tc := range k.cases {
			l := k.layers[tc.shape]
			cs = append(cs, Config{Kind: l.kind, Mamba2: l.m2, GDN: l.gdn, Options: tc.opt, Capacity: capacity})
		}
	}
	return cs
}

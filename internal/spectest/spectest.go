// Package spectest holds what the tests of MTP heads share: greedy
// speculative generation with a head as the drafter must give the tokens of
// plain greedy generation.
package spectest

import (
	"context"
	"slices"
	"testing"

	"github.com/replayssm/replayssm/engine"
	"github.com/replayssm/replayssm/engine/spec"
	"github.com/replayssm/replayssm/model"
	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
)

// LoadWithHead loads the model in dir and its MTP head with loadHead
// (qwen.LoadMTP, nemotronh.LoadMTP), failing t on an error.
func LoadWithHead(t *testing.T, dir string, loadHead func(string, *nn.Decoder) (*nn.MTP, error)) (*nn.Decoder, *nn.MTP) {
	t.Helper()
	target, err := model.Load(dir, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	head, err := loadHead(dir, target)
	if err != nil {
		t.Fatal(err)
	}
	return target, head
}

// MTPMatchesGreedy generates reqs with target plainly, then for each state
// mode speculatively with head drafting T tokens (greedy acceptance), and
// fails t where a request's tokens differ or the head drafted nothing. It
// returns each mode's speculation statistics. check, if not nil, runs after
// the drafter is closed and before the engine is (hooks left behind, say).
func MTPMatchesGreedy(t *testing.T, target *nn.Decoder, head *nn.MTP, reqs []engine.Request, T int, modes []replay.Mode,
	check func(replay.Mode, *engine.Engine)) []engine.SpecStats {
	t.Helper()
	ctx := context.Background()
	plain, err := engine.New(target, 2, replay.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := plain.Generate(ctx, reqs)
	plain.Close()
	if err != nil {
		t.Fatal(err)
	}
	var stats []engine.SpecStats
	for _, mode := range modes {
		eng, err := engine.New(target, 2, engine.StateOptions(replay.Options{Mode: mode}, T))
		if err != nil {
			t.Fatal(err)
		}
		dr, err := spec.NewMTP(head, target, eng.State(), 2, T)
		if err != nil {
			eng.Close()
			t.Fatal(err)
		}
		got, _, ss, err := eng.GenerateSpeculative(ctx, reqs, engine.Speculation{Drafter: dr, Drafts: T, Accept: spec.Greedy})
		dr.Close()
		if check != nil {
			check(mode, eng)
		}
		eng.Close()
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if !slices.Equal(got[i].Tokens, want[i].Tokens) {
				t.Errorf("%v request %d: speculative %v\nplain %v", mode, i, got[i].Tokens, want[i].Tokens)
			}
		}
		if ss.Drafted == 0 {
			t.Errorf("%v: the head drafted nothing", mode)
		}
		stats = append(stats, ss)
	}
	return stats
}

// Package replaytest is the conformance suite of the replay.Cache contract:
// every check a backend's Mamba-2, Gated DeltaNet and (where it has them)
// Kimi Delta Attention caches must pass, against the float64 references of
// package ssm. A backend runs it from its
// own tests through a small Backend adapter, as the CPU caches do in
// package replay's tests; only test code imports this package.
//
// Every output is compared with an independent reference on fresh random
// inputs (never zeros), with output buffers poisoned (NaN) before each call
// and every element the call writes checked: the layer references of
// package ssm in float64, a direct convolution over each slot's accepted
// inputs, and a model of the contract's cursor and counter rules
// (docs/DESIGN.md 2, 2.3, 3) kept apart from any backend's.
//
// Each distinct (layer shape, Options) may cost a backend a kernel build
// (several seconds on the GPU), so the suite uses a fixed table of them,
// about twenty per layer kind over two shapes per kind (one small, one
// with the target models' head dimensions), and runs every check on one
// cache per entry, admitting fresh slots or resetting them between checks.
// Entries whose options the backend's Capabilities refuse are skipped.
package replaytest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// Backend is what the suite needs of a backend: its caches and its buffers
// of float32 values.
type Backend[Buf any] interface {
	// Name names the backend in the suite's messages ("cpu", "cuda").
	Name() string
	// Capabilities is what the backend's caches take; the suite skips
	// options that Options.Check refuses under it, and checks that the
	// constructors refuse those too.
	Capabilities() replay.Capabilities
	// NewMamba2 and NewGDN build caches. The suite calls them from several
	// goroutines at once, to build a layer kind's caches together (a
	// backend that compiles kernels for them compiles them in parallel);
	// it makes every other call from the test's goroutine.
	NewMamba2(shape ssm.Mamba2Shape, prm replay.Mamba2Params, conv replay.ConvWeights, capacity int, opt replay.Options) (replay.Mamba2State[Buf], error)
	NewGDN(shape ssm.GDNShape, prm replay.GDNParams, conv replay.ConvWeights, capacity int, opt replay.Options) (replay.GDNState[Buf], error)
	// Upload returns a new buffer holding v.
	Upload(v []float32) (Buf, error)
	// Poisoned returns a new buffer of n NaNs.
	Poisoned(n int) (Buf, error)
	// Download copies the first len(dst) values of b into dst.
	Download(b Buf, dst []float32) error
	// Free releases a buffer from Upload or Poisoned.
	Free(Buf)
}

// KDABackend is a Backend that also builds Kimi Delta Attention caches.
// It is optional: the suite runs its KDA checks on a backend that
// implements it and skips them on one that does not.
type KDABackend[Buf any] interface {
	Backend[Buf]
	// NewKDA builds a cache, from several goroutines at once as NewGDN.
	NewKDA(shape ssm.GDNShape, conv replay.ConvWeights, capacity int, opt replay.Options) (replay.KDAState[Buf], error)
}

// Run runs the whole suite: RunMamba2, RunGDN and RunKDA.
func Run[Buf any](t *testing.T, b Backend[Buf]) {
	t.Run("mamba2", func(t *testing.T) { RunMamba2(t, b) })
	t.Run("gdn", func(t *testing.T) { RunGDN(t, b) })
	t.Run("kda", func(t *testing.T) { RunKDA(t, b) })
}

// RunMamba2 checks the backend's Mamba-2 caches: every mode and precision
// the backend takes against the float64 reference through random sequences
// of admissions, evictions, resets, forks, exports and imports, steps,
// verifies and commits; early folds; every error case; a bf16 ring against
// an fp32 ring fed rounded inputs; replay with a window of 1 against the
// baseline; and the refusal of options the backend does not take.
func RunMamba2[Buf any](t *testing.T, b Backend[Buf]) {
	runKind(t, b, mamba2Layers(), mamba2Cases())
}

// RunGDN is RunMamba2 for the Gated DeltaNet caches, whose cases add the
// exact fold (replay.Options.ExactFold) next to the fold of cached updates.
func RunGDN[Buf any](t *testing.T, b Backend[Buf]) {
	runKind(t, b, gdnLayers(), gdnCases())
}

// RunKDA is RunGDN for the Kimi Delta Attention caches, with the same
// cases, on shapes of their own and with a decay per key channel. It skips
// on a backend that does not implement KDABackend.
func RunKDA[Buf any](t *testing.T, b Backend[Buf]) {
	if _, ok := b.(KDABackend[Buf]); !ok {
		t.Skipf("the %s backend builds no Kimi Delta Attention caches (it does not implement replaytest.KDABackend)", b.Name())
	}
	runKind(t, b, kdaLayers(), kdaCases())
}

// runKind runs the cases of one layer kind, each on one cache kept for the
// checks that compare two caches, then those checks and the refusals. The
// caches are built first, all at once: a backend that compiles kernels for
// them compiles them in parallel.
func runKind[Buf any](t *testing.T, b Backend[Buf], layers [2]*layer, cases []testCase) {
	caps := b.Capabilities()
	type build struct {
		c   *cache[Buf]
		err error
	}
	builds := make([]build, len(cases))
	var wg sync.WaitGroup
	for i, tc := range cases {
		if _, err := tc.opt.Check(layers[tc.shape].kind, caps); err != nil {
			continue
		}
		wg.Go(func() {
			defer func() {
				if r := recover(); r != nil {
					builds[i].err = fmt.Errorf("panic: %v", r)
				}
			}()
			builds[i].c, builds[i].err = newCache(b, layers[tc.shape], capacity, tc.opt, true)
		})
	}
	wg.Wait()
	built := map[string]*harness[Buf]{}
	defer func() {
		for _, bd := range builds {
			if bd.c != nil {
				if err := bd.c.Close(); err != nil {
					t.Errorf("close: %v", err)
				}
			}
		}
	}()
	var lastBlob []byte // a slot exported by the previous case: another cache's
	for i, tc := range cases {
		l := layers[tc.shape]
		name := l.name + "/" + tc.name
		t.Run(name, func(t *testing.T) {
			opt, err := tc.opt.Check(l.kind, caps)
			if err != nil {
				t.Skipf("not taken by %s: %v", b.Name(), err)
			}
			if err := builds[i].err; err != nil {
				t.Fatalf("Options.Check takes %+v, the constructor refuses it: %v", tc.opt, err)
			}
			h := newHarness(b, l, name, builds[i].c, opt)
			built[name] = h
			h.run(t, lastBlob)
			lastBlob = h.blob
		})
	}
	t.Run("pairs", func(t *testing.T) {
		for _, tc := range cases {
			if tc.twin == "" {
				continue
			}
			l := layers[tc.shape]
			a, b := built[l.name+"/"+tc.name], built[l.name+"/"+tc.twin]
			if a == nil || b == nil {
				t.Logf("%s against %s: not built", tc.name, tc.twin)
				continue
			}
			t.Run(tc.name+"~"+tc.twin, func(t *testing.T) { lockstep(t, a, b) })
		}
	})
	for _, l := range layers {
		t.Run(l.name+"/refusals", func(t *testing.T) { refusals(t, b, l) })
	}
}

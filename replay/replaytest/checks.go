package replaytest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// room evicts live slots until n more can be admitted.
func (h *harness[Buf]) room(t *testing.T, n int) {
	t.Helper()
	for _, s := range h.slots() {
		if len(h.live)+n <= capacity {
			return
		}
		h.evict(t, s)
	}
}

// earlyFold brings a fresh slot's committed history to where a verify of
// MaxDraft drafts must fold it first (history > 0 and history + 2·MaxDraft
// > Window + MaxDraft, docs/DESIGN.md 2.3) with steps, and with verifies
// of one accepted draft where a step would flush, then runs that verify
// and checks the fold against the references and the flush count.
func (h *harness[Buf]) earlyFold(t *testing.T) {
	t.Helper()
	W, D := h.opt.Window, h.opt.MaxDraft
	if h.opt.Mode != replay.Replay || D < 2 {
		return
	}
	h.room(t, 1)
	s := h.admit(t)
	m := h.live[s]
	for m.hist < max(1, W-D+1) {
		if m.hist+1 < W {
			h.step(t, []replay.Slot{s})
		} else if h.verify(t, []replay.Slot{s}, 1, nil, []int{1}, nil) != 0 {
			t.Fatal("a verify of one draft folded while bringing the history up")
		}
	}
	hist := m.hist
	if h.verify(t, []replay.Slot{s}, D, nil, []int{h.rng.IntN(D + 1)}, nil) != 1 {
		t.Fatalf("history %d, %d drafts, ring %d: the model did not fold", hist, D, W+D)
	}
	h.checkStats(t, fmt.Sprintf("after an early fold of %d entries", hist))
}

// errorCases makes every kind of bad call the contract names (dead,
// out-of-range and duplicate slots, buffers a row short, draft counts and
// accepted counts out of range, a full cache, foreign and broken slot
// states) and requires an error, never a panic, and no change: the models
// are left as they were, and the calls that follow check them.
func (h *harness[Buf]) errorCases(t *testing.T, foreign []byte) {
	t.Helper()
	h.room(t, 3)
	for len(h.live) < 2 {
		h.admit(t)
	}
	dead := h.admit(t)
	h.evict(t, dead)
	live := h.slots()
	s0, s1 := live[0], live[1]
	l, D := h.l, h.opt.MaxDraft
	rows := func(n int) [][]float32 { return l.draw(h.rng, n) }
	short := func(in [][]float32, f int) [][]float32 {
		out := slices.Clone(in)
		out[f] = out[f][:len(out[f])-l.perRow[f]]
		return out
	}
	// call runs a Step (T = 0) or Verify of T on the slots and requires an
	// error; rowsIn and rowsOut are the rows the buffers get.
	call := func(what string, slots []replay.Slot, T int, counts []int, in [][]float32, outRows int) {
		t.Helper()
		_, err := h.io(t, what, in, outRows*l.width, func(in []Buf, y Buf) error {
			if T == 0 {
				return h.c.step(slots, in, 0, y)
			}
			return h.c.verify(slots, T, counts, in, 0, y)
		})
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
	}
	for _, tc := range []struct {
		what  string
		slots []replay.Slot
	}{
		{"dead slot", []replay.Slot{s0, dead}},
		{"slot past the capacity", []replay.Slot{replay.Slot(capacity)}},
		{"negative slot", []replay.Slot{-1}},
		{"duplicate slot", []replay.Slot{s0, s1, s0}},
	} {
		n := len(tc.slots)
		call("step, "+tc.what, tc.slots, 0, nil, rows(n), n)
		if D > 0 {
			call("verify, "+tc.what, tc.slots, 1, nil, rows(n), n)
		}
		mustFail(t, "conv, "+tc.what, func() error { return h.convCall(t, tc.slots, 0, n*l.conv.Channels, n*l.conv.Channels) })
		mustFail(t, "commit, "+tc.what, func() error { return h.c.Commit(tc.slots, make([]int, n)) })
	}
	pair := []replay.Slot{s0, s1}
	for f := range l.perRow {
		call(fmt.Sprintf("step, input field %d a row short", f), pair, 0, nil, short(rows(2), f), 2)
	}
	call("step, output a row short", pair, 0, nil, rows(2), 1)
	C := l.conv.Channels
	mustFail(t, "conv, input a row short", func() error { return h.convCall(t, pair, 0, C, 2*C) })
	mustFail(t, "conv, output a row short", func() error { return h.convCall(t, pair, 0, 2*C, C) })
	mustFail(t, "conv verify, T 0", func() error { return h.convCall(t, pair, -1, 2*C, 2*C) })
	mustFail(t, "conv verify, T past MaxDraft", func() error {
		return h.convCall(t, pair, D+1, 2*(D+1)*C, 2*(D+1)*C)
	})
	if D == 0 {
		call("verify on a cache without drafts", pair, 1, nil, rows(2), 2)
	} else {
		T := min(2, D)
		call("verify, T past MaxDraft", pair, D+1, nil, rows(2*(D+1)), 2*(D+1))
		call("verify, counts for one slot of two", pair, T, []int{1}, rows(2*T), 2*T)
		call("verify, a count of 0", pair, T, []int{0, 1}, rows(2*T), 2*T)
		call("verify, a count past T", pair, T, []int{T + 1, 1}, rows(2*T), 2*T)
		call("verify, output a row short", pair, T, nil, rows(2*T), 2*T-1)
		call("verify, input field 0 a row short", pair, T, nil, short(rows(2*T), 0), 2*T)
		mustFail(t, "verify with T 0", func() error {
			_, err := h.io(t, "verify T 0", rows(2), 2*l.width, func(in []Buf, y Buf) error { return h.c.verify(pair, 0, nil, in, 0, y) })
			return err
		})
		// A valid verify whose commits are refused before the valid one.
		h.verify(t, pair, T, []int{T, 1}, []int{T, 0}, func() {
			mustFail(t, "commit past a slot's count", func() error { return h.c.Commit(pair, []int{T, 2}) })
			mustFail(t, "commit of a negative count", func() error { return h.c.Commit(pair, []int{-1, 0}) })
			mustFail(t, "commit of counts for one slot of two", func() error { return h.c.Commit(pair, []int{1}) })
		})
	}
	mustFail(t, "commit without a verify", func() error { return h.c.Commit([]replay.Slot{s0}, []int{1}) })
	mustFail(t, "reset of a dead slot", func() error { return h.c.Reset(dead) })
	mustFail(t, "evict of a dead slot", func() error { return h.c.Evict(dead) })
	mustFail(t, "fork of a dead slot", func() error { _, err := h.c.Fork(dead); return err })
	mustFail(t, "export of a dead slot", func() error { _, err := h.c.Export(dead); return err })
	blob := h.export(t, s1)
	mustFail(t, "import into a dead slot", func() error { return h.c.Import(dead, blob) })
	mustFail(t, "import of a truncated state", func() error { return h.c.Import(s0, blob[:len(blob)-1]) })
	mustFail(t, "import of a state with a byte more", func() error { return h.c.Import(s0, append(slices.Clip(blob), 0)) })
	mustFail(t, "import of nothing", func() error { return h.c.Import(s0, nil) })
	mustFail(t, "import of garbage", func() error { return h.c.Import(s0, []byte("not a slot state at all")) })
	if foreign != nil {
		mustFail(t, "import of another cache's state", func() error { return h.c.Import(s0, foreign) })
	}
	for len(h.live) < capacity {
		h.admit(t)
	}
	mustFail(t, "admit into a full cache", func() error { _, err := h.c.Admit(); return err })
	mustFail(t, "fork into a full cache", func() error { _, err := h.c.Fork(s0); return err })
	h.checkStats(t, "after the refused calls")
}

// acrossCaches moves a slot to a second cache of the same layer and options
// by Export and Import, and requires the two to continue identically, bit
// for bit (the same backend and options compute the same sums): conv
// steps, steps, and a verify and commit.
func (h *harness[Buf]) acrossCaches(t *testing.T) {
	t.Helper()
	c2, err := newCache(h.b, h.l, capacity, h.opt, true)
	if err != nil {
		t.Fatalf("a second cache: %v", err)
	}
	defer c2.Close()
	src := h.slots()[0]
	blob := h.export(t, src)
	var dst replay.Slot
	if err := guard(t, "admit", func() (err error) { dst, err = c2.Admit(); return }); err != nil {
		t.Fatal(err)
	}
	if err := guard(t, "import", func() error { return c2.Import(dst, blob) }); err != nil {
		t.Fatalf("import into a cache of the same options: %v", err)
	}
	defer h.evict(t, src) // its model no longer follows it
	caches, slots := []*cache[Buf]{h.c, c2}, [][]replay.Slot{{src}, {dst}}
	C, w := h.l.conv.Channels, h.l.width
	both := func(what string, in [][]float32, outN int, f func(c *cache[Buf], slots []replay.Slot, in []Buf, out Buf) error) {
		t.Helper()
		var outs [2][]float32
		for k, c := range caches {
			y, err := h.io(t, what, in, outN, func(in []Buf, out Buf) error { return f(c, slots[k], in, out) })
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			outs[k] = y
		}
		for i, v := range outs[0] {
			if u := outs[1][i]; math.Float32bits(u) != math.Float32bits(v) {
				t.Fatalf("%s: output %d = %v in the imported slot, %v in its source", what, i, u, v)
			}
		}
	}
	for k := range h.opt.Window + 2 {
		both(fmt.Sprintf("conv %d", k), [][]float32{h.normals(C)}, C, func(c *cache[Buf], s []replay.Slot, in []Buf, out Buf) error {
			return c.Conv(s, in[0], out)
		})
		both(fmt.Sprintf("step %d", k), h.l.draw(h.rng, 1), w, func(c *cache[Buf], s []replay.Slot, in []Buf, y Buf) error {
			return c.step(s, in, 0, y)
		})
	}
	if T := h.opt.MaxDraft; T > 0 {
		both("verify", h.l.draw(h.rng, T), T*w, func(c *cache[Buf], s []replay.Slot, in []Buf, y Buf) error {
			return c.verify(s, T, nil, in, 0, y)
		})
		for k, c := range caches {
			if err := guard(t, "commit", func() error { return c.Commit(slots[k], []int{T - 1}) }); err != nil {
				t.Fatalf("commit: %v", err)
			}
		}
		both("step after the commit", h.l.draw(h.rng, 1), w, func(c *cache[Buf], s []replay.Slot, in []Buf, y Buf) error {
			return c.step(s, in, 0, y)
		})
	}
}

// convCall runs Conv (T = 0) or ConvVerify of T on slots with inputs and
// outputs of the given lengths, and returns its error.
func (h *harness[Buf]) convCall(t *testing.T, slots []replay.Slot, T, inN, outN int) error {
	t.Helper()
	_, err := h.io(t, "conv", [][]float32{h.normals(inN)}, outN, func(in []Buf, out Buf) error {
		switch {
		case T == 0:
			return h.c.Conv(slots, in[0], out)
		case T < 0:
			return h.c.ConvVerify(slots, 0, in[0], out)
		}
		return h.c.ConvVerify(slots, T, in[0], out)
	})
	return err
}

// lockstep drives two caches of one layer through the same 40 random
// rounds of steps and verifies and commits (random batches, counts and
// acceptances) on fresh slots and compares their outputs element by
// element, rows past a count included. a and b are either a bf16 ring and
// the same cache with an fp32 ring, which is fed the inputs rounded as the
// bf16 ring keeps them (replay.Options.Ring) and must agree bit for bit,
// the rounding being the only difference; or replay with a window of 1 and
// the baseline (both fp32), whose flush every step computes a·S + Δ·x⊗B as
// the in-place update does: equal up to the order of float32 sums, within
// 1e-6·max(1, |y|).
func lockstep[Buf any](t *testing.T, a, b *harness[Buf]) {
	if !a.ok || !b.ok {
		t.Skip("a case failed")
	}
	ring := a.opt.Ring != b.opt.Ring
	if ring && a.opt.Ring != numeric.BF16 {
		a, b = b, a
	}
	for _, h := range []*harness[Buf]{a, b} {
		for _, s := range h.slots() {
			h.evict(t, s)
		}
	}
	// Slot i of a is slots[0][i], of b slots[1][i].
	const nslots = 4
	var slots [2][]replay.Slot
	for range nslots {
		slots[0], slots[1] = append(slots[0], a.admit(t)), append(slots[1], b.admit(t))
	}
	before := [2]replay.Stats{a.c.Stats(), b.c.Stats()}
	rng := rand.New(rand.NewPCG(uint64(len(a.name)), 11))
	D := min(a.opt.MaxDraft, b.opt.MaxDraft)
	w := a.l.width
	same := func(x, y float32) bool {
		if ring {
			return math.Float32bits(x) == math.Float32bits(y) || x != x && y != y
		}
		if x != x || y != y {
			return x != x && y != y
		}
		return math.Abs(float64(x)-float64(y)) <= 1e-6*max(1, math.Abs(float64(y)))
	}
	for round := range 40 {
		perm := rng.Perm(nslots)[:1+rng.IntN(nslots)]
		var sub [2][]replay.Slot
		for _, p := range perm {
			sub[0], sub[1] = append(sub[0], slots[0][p]), append(sub[1], slots[1][p])
		}
		T := 0
		var counts, acc []int
		if D > 0 && rng.IntN(3) == 0 {
			T = 1 + rng.IntN(D)
			for range perm {
				c := 1 + rng.IntN(T)
				counts, acc = append(counts, c), append(acc, rng.IntN(c+1))
			}
		}
		in := a.l.draw(rng, len(perm)*max(1, T))
		inB := in
		if ring {
			inB = a.l.roundRing(in)
		}
		outs := [2][]float32{}
		for k, h := range []*harness[Buf]{a, b} {
			x := []([][]float32){in, inB}[k]
			y, err := h.io(t, "lockstep", x, len(perm)*max(1, T)*w, func(in []Buf, y Buf) error {
				if T == 0 {
					return h.c.step(sub[k], in, 0, y)
				}
				return h.c.verify(sub[k], T, counts, in, 0, y)
			})
			if err != nil {
				t.Fatalf("%s round %d: %v", h.name, round, err)
			}
			if T > 0 {
				if err := guard(t, "commit", func() error { return h.c.Commit(sub[k], acc) }); err != nil {
					t.Fatalf("%s round %d: commit: %v", h.name, round, err)
				}
			}
			outs[k] = y
		}
		for i := range outs[0] {
			if !same(outs[0][i], outs[1][i]) {
				t.Fatalf("round %d (T %d) output %d: %s %v, %s %v", round, T, i, a.name, outs[0][i], b.name, outs[1][i])
			}
		}
	}
	da, db := diff(a.c.Stats(), before[0]), diff(b.c.Stats(), before[1])
	if ring {
		// The state moves are the same too: the ring is not counted.
		if da != db {
			t.Errorf("counters %+v and %+v", da, db)
		}
		if len(inputsRounded(a.l, rng)) == 0 {
			t.Fatal("rounding to bf16 changed none of the drawn inputs")
		}
		blob := a.export(t, slots[0][0])
		mustFail(t, "import of a bf16 ring's state into an fp32 ring's cache", func() error { return b.c.Import(slots[1][0], blob) })
	} else {
		da.Flushes, da.StateBytesRead, da.StateBytesWritten = 0, 0, 0
		db.Flushes, db.StateBytesRead, db.StateBytesWritten = 0, 0, 0
		if da != db {
			t.Errorf("counters of the same calls: %+v and %+v (flushes and state bytes aside)", da, db)
		}
	}
	for k, h := range []*harness[Buf]{a, b} {
		for _, s := range slots[k] {
			h.evict(t, s)
		}
	}
}

// inputsRounded draws a batch and returns the indices of the ring fields'
// values that rounding to bf16 changes.
func inputsRounded(l *layer, rng *rand.Rand) []int {
	in := l.draw(rng, 2)
	r := l.roundRing(in)
	var changed []int
	for _, f := range l.ringFields {
		for i := range in[f] {
			if in[f][i] != r[f][i] {
				changed = append(changed, i)
			}
		}
	}
	return changed
}

func diff(a, b replay.Stats) replay.Stats {
	return replay.Stats{Steps: a.Steps - b.Steps, Verifies: a.Verifies - b.Verifies, Drafts: a.Drafts - b.Drafts,
		Accepted: a.Accepted - b.Accepted, Flushes: a.Flushes - b.Flushes, StateBytesRead: a.StateBytesRead - b.StateBytesRead,
		StateBytesWritten: a.StateBytesWritten - b.StateBytesWritten, BaselineBytes: a.BaselineBytes - b.BaselineBytes}
}

// refusals checks that the backend's constructors refuse, with an error
// and before building anything, the options that Options.Check refuses
// under its capabilities, a capacity of 0, constants of the wrong length,
// conv weights of the wrong length and an invalid shape.
func refusals[Buf any](t *testing.T, b Backend[Buf], l *layer) {
	caps := b.Capabilities()
	opts := []replay.Options{
		{Window: -1},
		{Window: caps.MaxWindow + 1},
		{MaxDraft: -1},
		{MaxDraft: replay.MaxDraftLimit + 1},
		{Window: caps.MaxRing, MaxDraft: 1},
		{Mode: 7},
		{State: numeric.NVFP4},
		{State: numeric.E5M2},
		{Mode: replay.Baseline, State: numeric.NVFP4},
		{ReadCopy: numeric.F16},
		{Mode: replay.Baseline, ReadCopy: numeric.BF16},
		{Ring: numeric.F16},
		{Ring: numeric.BF16},
		{Mode: replay.Baseline, Ring: numeric.BF16},
		{State: numeric.BF16, Stochastic: true},
	}
	try := func(what string, build func() (*cache[Buf], error)) {
		t.Helper()
		var c *cache[Buf]
		err := guard(t, what, func() (err error) { c, err = build(); return })
		if err == nil {
			if c != nil {
				c.Close()
			}
			t.Errorf("%s: built", what)
		}
	}
	refused := 0
	for _, o := range opts {
		_, want := o.Check(l.kind, caps)
		if want == nil {
			continue
		}
		refused++
		try(fmt.Sprintf("options %+v (%v)", o, want), func() (*cache[Buf], error) { return newCache(b, l, capacity, o, true) })
	}
	t.Logf("%d of %d option sets refused", refused, len(opts))
	try("capacity 0", func() (*cache[Buf], error) { return newCache(b, l, 0, replay.Options{}, true) })
	short := *l
	short.conv.Weight = short.conv.Weight[1:]
	try("conv weights a value short", func() (*cache[Buf], error) { return newCache(b, &short, capacity, replay.Options{}, true) })
	bad := *l
	switch l.kind {
	case "mamba2":
		bad.m2prm.D = bad.m2prm.D[1:]
		try("D a value short", func() (*cache[Buf], error) { return newCache(b, &bad, capacity, replay.Options{}, false) })
		bad = *l
		bad.m2 = ssm.Mamba2Shape{Heads: 3, HeadDim: l.m2.HeadDim, StateSize: l.m2.StateSize, Groups: 2}
	case "gdn":
		bad.gdnPrm.ALog = bad.gdnPrm.ALog[1:]
		try("A_log a value short", func() (*cache[Buf], error) { return newCache(b, &bad, capacity, replay.Options{}, false) })
		bad = *l
		bad.gdn = ssm.GDNShape{KeyHeads: 3, ValueHeads: 4, KeyDim: l.gdn.KeyDim, ValueDim: l.gdn.ValueDim}
	case "kda": // no constants to get wrong
		bad.gdn = ssm.GDNShape{KeyHeads: 3, ValueHeads: 4, KeyDim: l.gdn.KeyDim, ValueDim: l.gdn.ValueDim}
	}
	try("3 heads in 2 groups", func() (*cache[Buf], error) { return newCache(b, &bad, capacity, replay.Options{}, false) })
}

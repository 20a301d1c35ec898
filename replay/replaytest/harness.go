package replaytest

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// common is what replay.Cache's methods do not take inputs of the layer's
// batch type for: what the suite calls on any layer kind directly.
type common[Buf any] interface {
	Options() replay.Options
	Capacity() int
	Stats() replay.Stats
	Admit() (replay.Slot, error)
	Reset(replay.Slot) error
	Evict(replay.Slot) error
	Fork(src replay.Slot) (replay.Slot, error)
	Export(replay.Slot) ([]byte, error)
	Import(replay.Slot, []byte) error
	Conv(slots []replay.Slot, in, out Buf) error
	ConvVerify(slots []replay.Slot, T int, in, out Buf) error
	Commit(slots []replay.Slot, accepted []int) error
	ConvPrefill(slots []replay.Slot, T int, counts []int, in, out Buf) error
	Close() error
}

// cache is a cache of any layer kind: its common methods, and Step and
// Verify on the layer's input fields in order.
type cache[Buf any] struct {
	common[Buf]
	step   func(slots []replay.Slot, in []Buf, dtMin float32, y Buf) error
	verify func(slots []replay.Slot, T int, counts []int, in []Buf, dtMin float32, y Buf) error
	// prefill is Prefill, as verify is Verify.
	prefill func(slots []replay.Slot, T int, counts []int, in []Buf, dtMin float32, y Buf) error
}

// newCache builds a cache of layer l on backend b; conv says whether it
// gets the layer's conv weights.
func newCache[Buf any](b Backend[Buf], l *layer, capacity int, opt replay.Options, conv bool) (*cache[Buf], error) {
	var w replay.ConvWeights
	if conv {
		w = l.conv
	}
	switch l.kind {
	case "mamba2":
		c, err := b.NewMamba2(l.m2, l.m2prm, w, capacity, opt)
		return wrap(c, err, func(f []Buf, dtMin float32) replay.Mamba2Batch[Buf] {
			return replay.Mamba2Batch[Buf]{X: f[0], B: f[1], C: f[2], Dt: f[3], DtMin: dtMin}
		})
	case "kda":
		kb, ok := b.(KDABackend[Buf])
		if !ok {
			return nil, fmt.Errorf("the %s backend builds no KDA caches", b.Name())
		}
		c, err := kb.NewKDA(l.gdn, w, capacity, opt)
		return wrap(c, err, func(f []Buf, _ float32) replay.KDABatch[Buf] {
			return replay.KDABatch[Buf]{Q: f[0], K: f[1], V: f[2], G: f[3], B: f[4]}
		})
	default:
		c, err := b.NewGDN(l.gdn, l.gdnPrm, w, capacity, opt)
		return wrap(c, err, func(f []Buf, _ float32) replay.GDNBatch[Buf] {
			return replay.GDNBatch[Buf]{Q: f[0], K: f[1], V: f[2], A: f[3], B: f[4]}
		})
	}
}

// wrap returns c, or err from its constructor, as a cache of the suite:
// its Step, Verify and Prefill take the layer's input fields in order, of
// which in makes the layer's batch (with Mamba2Batch.DtMin).
func wrap[Buf, In any](c replay.Cache[Buf, In], err error, in func(f []Buf, dtMin float32) In) (*cache[Buf], error) {
	if err != nil {
		return nil, err
	}
	return &cache[Buf]{common: c,
		step: func(slots []replay.Slot, f []Buf, dtMin float32, y Buf) error {
			return c.Step(slots, in(f, dtMin), y)
		},
		verify: func(slots []replay.Slot, T int, counts []int, f []Buf, dtMin float32, y Buf) error {
			return c.Verify(slots, T, counts, in(f, dtMin), y)
		},
		prefill: func(slots []replay.Slot, T int, counts []int, f []Buf, dtMin float32, y Buf) error {
			return c.Prefill(slots, T, counts, in(f, dtMin), y)
		}}, nil
}

// slotModel is the reference of one live slot: its float64 state as of its
// committed inputs, its committed raw conv inputs (the last K−1), and the
// committed ring entries since its checkpoint (replay).
type slotModel struct {
	state []float64
	conv  [][]float32
	hist  int
}

func (m *slotModel) clone() *slotModel {
	return &slotModel{state: slices.Clone(m.state), conv: slices.Clone(m.conv), hist: m.hist}
}

// capacity is the slots of every cache the suite builds.
const capacity = 6

// harness drives one cache under test next to its reference: the slots it
// holds, their models, and the counters replay.Stats must show.
type harness[Buf any] struct {
	b     Backend[Buf]
	l     *layer
	name  string
	c     *cache[Buf]
	opt   replay.Options // as Options.Check filled them in
	bound float64
	rng   *rand.Rand
	live  map[replay.Slot]*slotModel
	// want is the counters the cache must report, kept by the contract's
	// rules (docs/DESIGN.md 2, 2.3, 3); state, read and copy are one
	// slot's state transfer, non-flush output read and read-copy write.
	want              replay.Stats
	state, read, copy int64
	worst             float64
	blob              []byte // a slot exported at the end, for the next case's import
	ok                bool   // every check passed
}

// newHarness drives cache c of a case, built with options that
// Options.Check returned as checked.
func newHarness[Buf any](b Backend[Buf], l *layer, name string, c *cache[Buf], checked replay.Options) *harness[Buf] {
	seed := fnv.New64a()
	seed.Write([]byte(name))
	h := &harness[Buf]{b: b, l: l, name: name, c: c, opt: checked, bound: bound(l.kind, checked),
		rng: rand.New(rand.NewPCG(seed.Sum64(), 7)), live: map[replay.Slot]*slotModel{}}
	h.state = int64(l.heads) * matrixBytes(checked.State, l.matElems)
	h.read = h.state
	if checked.ReadCopy != numeric.F32 {
		h.copy = int64(l.heads) * matrixBytes(checked.ReadCopy, l.matElems)
		h.read = h.copy
	}
	return h
}

// run is every check of one case on its cache.
func (h *harness[Buf]) run(t *testing.T, foreign []byte) {
	h.checkOptions(t)
	h.sequence(t, 40+3*h.opt.Window)
	h.checkStats(t, "after the random sequence")
	h.prefills(t)
	h.checkStats(t, "after the prefills")
	h.earlyFold(t)
	h.errorCases(t, foreign)
	h.sequence(t, h.opt.Window+4) // still usable, and the failed calls changed nothing
	h.checkStats(t, "after the error cases")
	h.acrossCaches(t)
	h.blob = h.export(t, h.slots()[0])
	t.Logf("worst relative error %.3g (bound %.3g); %+v", h.worst, h.bound, h.want)
	h.ok = true
}

// checkOptions checks the options and capacity the cache reports.
func (h *harness[Buf]) checkOptions(t *testing.T) {
	t.Helper()
	got, want := h.c.Options(), h.opt
	got.Threads, want.Threads = 0, 0 // the backend's own business
	if got != want {
		t.Errorf("Options() = %+v, want %+v", got, want)
	}
	if n := h.c.Capacity(); n != capacity {
		t.Errorf("Capacity() = %d, want %d", n, capacity)
	}
}

// checkStats compares the cache's counters with the model's.
func (h *harness[Buf]) checkStats(t *testing.T, when string) {
	t.Helper()
	if got := h.c.Stats(); got != h.want {
		t.Fatalf("%s: Stats() = %+v, want %+v", when, got, h.want)
	}
}

// guard calls f, failing the test if it panics: a bad call must be an
// error, never a panic.
func guard(t *testing.T, what string, f func() error) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("%s panicked: %v", what, r)
		}
	}()
	return f()
}

// mustFail calls f and fails the test unless it returns an error.
func mustFail(t *testing.T, what string, f func() error) {
	t.Helper()
	if err := guard(t, what, f); err == nil {
		t.Fatalf("%s: no error", what)
	}
}

// io uploads the input fields, a poisoned output of outN values, calls f
// on them, and returns the output (nil if f failed) and f's error. It
// frees every buffer it made.
func (h *harness[Buf]) io(t *testing.T, what string, fields [][]float32, outN int, f func(in []Buf, out Buf) error) ([]float32, error) {
	t.Helper()
	var bufs []Buf
	defer func() {
		for _, b := range bufs {
			h.b.Free(b)
		}
	}()
	in := make([]Buf, len(fields))
	for i, v := range fields {
		b, err := h.b.Upload(v)
		if err != nil {
			t.Fatalf("%s: upload: %v", what, err)
		}
		in[i] = b
		bufs = append(bufs, b)
	}
	out, err := h.b.Poisoned(outN)
	if err != nil {
		t.Fatalf("%s: poisoned buffer: %v", what, err)
	}
	bufs = append(bufs, out)
	if err := guard(t, what, func() error { return f(in, out) }); err != nil {
		return nil, err
	}
	y := make([]float32, outN)
	if err := h.b.Download(out, y); err != nil {
		t.Fatalf("%s: download: %v", what, err)
	}
	return y, nil
}

// slots returns the live slots in ascending order.
func (h *harness[Buf]) slots() []replay.Slot {
	s := make([]replay.Slot, 0, len(h.live))
	for k := range h.live {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

func (h *harness[Buf]) admit(t *testing.T) replay.Slot {
	t.Helper()
	var s replay.Slot
	if err := guard(t, "admit", func() (err error) { s, err = h.c.Admit(); return }); err != nil {
		t.Fatalf("admit with %d of %d slots live: %v", len(h.live), capacity, err)
	}
	if h.live[s] != nil {
		t.Fatalf("admit returned live slot %d", s)
	}
	h.live[s] = &slotModel{state: make([]float64, h.l.stateElems())}
	return s
}

func (h *harness[Buf]) evict(t *testing.T, s replay.Slot) {
	t.Helper()
	if err := guard(t, "evict", func() error { return h.c.Evict(s) }); err != nil {
		t.Fatalf("evict slot %d: %v", s, err)
	}
	delete(h.live, s)
}

func (h *harness[Buf]) export(t *testing.T, s replay.Slot) []byte {
	t.Helper()
	var blob []byte
	if err := guard(t, "export", func() (err error) { blob, err = h.c.Export(s); return }); err != nil {
		t.Fatalf("export slot %d: %v", s, err)
	}
	return blob
}

// relErr is ‖got − want‖₂ / ‖want‖₂; NaN or Inf in got gives +Inf.
func relErr(got []float32, want []float64) float64 {
	var num, den float64
	for i, w := range want {
		g := float64(got[i])
		if math.IsNaN(g) || math.IsInf(g, 0) {
			return math.Inf(1)
		}
		num += (g - w) * (g - w)
		den += w * w
	}
	return math.Sqrt(num / den)
}

// checkRow compares one output row with the reference.
func (h *harness[Buf]) checkRow(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	e := relErr(got, want)
	h.worst = max(h.worst, e)
	if e > h.bound {
		t.Fatalf("%s: relative error %.3g > %.3g", what, e, h.bound)
	}
}

// convRef is the convolution of input x after the committed inputs hist
// (zero before the first), in float64.
func (l *layer) convRef(hist [][]float32, x []float32) []float64 {
	K, C := l.conv.Kernel, l.conv.Channels
	all := append(slices.Clip(hist), x)
	out := make([]float64, C)
	for ch := range C {
		sum := float64(l.conv.Bias[ch])
		for k := range K {
			if i := len(all) - K + k; i >= 0 {
				sum += float64(l.conv.Weight[ch*K+k]) * float64(all[i][ch])
			}
		}
		out[ch] = sum
	}
	return out
}

// checkConv compares conv outputs with convRef: each is a sum of K float32
// products and a bias, each rounding by at most 2^-24 of a partial sum no
// larger than Σ|w·x| (a few units for these draws), so 1e-5·(1 + |want|)
// holds with room to spare while a wrong tap or window row is off by O(1).
func checkConv(t *testing.T, what string, got []float32, want []float64) {
	t.Helper()
	for i, w := range want {
		if g := float64(got[i]); !(math.Abs(g-w) <= 1e-5*(1+math.Abs(w))) {
			t.Fatalf("%s: channel %d = %v, want %v", what, i, g, w)
		}
	}
}

// pushConv appends committed conv input rows to a slot's window, keeping
// the last K−1.
func (l *layer) pushConv(m *slotModel, rows ...[]float32) {
	m.conv = append(m.conv, rows...)
	if k := l.conv.Kernel - 1; len(m.conv) > k {
		m.conv = slices.Clone(m.conv[len(m.conv)-k:])
	}
}

// normals returns n standard normal values.
func (h *harness[Buf]) normals(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(h.rng.NormFloat64())
	}
	return x
}

// dtMin picks a Δ clamp (Mamba2Batch.DtMin) for a call: 0.2 on a quarter
// of Mamba-2 calls, which with dt_bias around −1 clamps many of the heads.
func (h *harness[Buf]) dtMin() float32 {
	if h.l.kind == "mamba2" && h.rng.IntN(4) == 0 {
		return 0.2
	}
	return 0
}

// refInput is in as the reference must see it: rounded as the ring keeps
// it.
func (h *harness[Buf]) refInput(in [][]float32) [][]float32 {
	if h.opt.Ring == numeric.BF16 {
		return h.l.roundRing(in)
	}
	return in
}

// The model's counters (docs/DESIGN.md 3): a baseline step moves one state
// in and out, a baseline verify reads one state and writes one per draft;
// a replay step reads its output from the read copy (or the checkpoint),
// and a flush, a step's or a verify's early fold, reads and writes the
// checkpoint and writes the read copy. BaselineBytes counts what the
// baseline would move for the same calls.

func (h *harness[Buf]) modelFlush() {
	h.want.Flushes++
	h.want.StateBytesRead += h.state
	h.want.StateBytesWritten += h.state + h.copy
}

func (h *harness[Buf]) modelStep(m *slotModel) {
	h.want.Steps++
	h.want.BaselineBytes += 2 * h.state
	switch {
	case h.opt.Mode == replay.Baseline:
		h.want.StateBytesRead += h.state
		h.want.StateBytesWritten += h.state
	case m.hist+1 >= h.opt.Window:
		h.modelFlush()
		m.hist = 0
	default:
		h.want.StateBytesRead += h.read
		m.hist++
	}
}

// modelVerify records a verify of n drafts of a slot and reports whether
// it folds the slot's history first: when there is one and history + 2n
// exceeds the ring of Window + MaxDraft entries (docs/DESIGN.md 2.3).
func (h *harness[Buf]) modelVerify(m *slotModel, n int) bool {
	h.want.Verifies++
	h.want.Drafts += int64(n)
	h.want.BaselineBytes += int64(1+n) * h.state
	if h.opt.Mode == replay.Baseline {
		h.want.StateBytesRead += h.state
		h.want.StateBytesWritten += int64(n) * h.state
		return false
	}
	fold := m.hist > 0 && m.hist+2*n > h.opt.Window+h.opt.MaxDraft
	if fold {
		h.modelFlush()
		m.hist = 0
	}
	h.want.StateBytesRead += h.read
	return fold
}

func (h *harness[Buf]) modelCommit(m *slotModel, n int) {
	h.want.Accepted += int64(n)
	if h.opt.Mode == replay.Replay {
		m.hist += n
	}
}

// step runs Conv then Step on the slots, checking every output against the
// references, and advances the models.
func (h *harness[Buf]) step(t *testing.T, slots []replay.Slot) {
	t.Helper()
	n, C, w := len(slots), h.l.conv.Channels, h.l.width
	x := h.normals(n * C)
	out, err := h.io(t, "conv", [][]float32{x}, n*C, func(in []Buf, out Buf) error { return h.c.Conv(slots, in[0], out) })
	if err != nil {
		t.Fatalf("conv %v: %v", slots, err)
	}
	for i, s := range slots {
		row := x[i*C : (i+1)*C]
		checkConv(t, fmt.Sprintf("conv slot %d", s), out[i*C:(i+1)*C], h.l.convRef(h.live[s].conv, row))
		h.l.pushConv(h.live[s], row)
	}
	in, dtMin := h.l.draw(h.rng, n), h.dtMin()
	y, err := h.io(t, "step", in, n*w, func(in []Buf, y Buf) error { return h.c.step(slots, in, dtMin, y) })
	if err != nil {
		t.Fatalf("step %v: %v", slots, err)
	}
	ref := h.refInput(in)
	for i, s := range slots {
		m := h.live[s]
		h.checkRow(t, fmt.Sprintf("step slot %d (history %d)", s, m.hist), y[i*w:(i+1)*w], h.l.step(m.state, ref, i, dtMin))
		h.modelStep(m)
	}
}

// verify runs ConvVerify and Verify of T drafts on the slots (counts nil:
// T each), checks every output against the references and that rows past
// a slot's count are not written, calls between (when not nil) with the
// drafts pending, then commits accepted[i] drafts of slots[i]. It returns
// the number of slots that folded their history first.
func (h *harness[Buf]) verify(t *testing.T, slots []replay.Slot, T int, counts, accepted []int, between func()) (folds int) {
	t.Helper()
	n, C, w := len(slots), h.l.conv.Channels, h.l.width
	x := h.normals(n * T * C)
	out, err := h.io(t, "conv verify", [][]float32{x}, n*T*C, func(in []Buf, out Buf) error {
		return h.c.ConvVerify(slots, T, in[0], out)
	})
	if err != nil {
		t.Fatalf("conv verify %v T %d: %v", slots, T, err)
	}
	for i, s := range slots {
		win := h.live[s].conv
		for k := range T {
			r := i*T + k
			row := x[r*C : (r+1)*C]
			checkConv(t, fmt.Sprintf("conv verify slot %d draft %d", s, k), out[r*C:(r+1)*C], h.l.convRef(win, row))
			win = append(slices.Clip(win), row)
		}
	}
	in, dtMin := h.l.draw(h.rng, n*T), h.dtMin()
	y, err := h.io(t, "verify", in, n*T*w, func(in []Buf, y Buf) error { return h.c.verify(slots, T, counts, in, dtMin, y) })
	if err != nil {
		t.Fatalf("verify %v T %d counts %v: %v", slots, T, counts, err)
	}
	ref := h.refInput(in)
	// after[i] is slots[i]'s state after its accepted drafts.
	after := make([][]float64, n)
	for i, s := range slots {
		m, cnt := h.live[s], T
		if counts != nil {
			cnt = counts[i]
		}
		work := slices.Clone(m.state)
		after[i] = m.state
		for k := range cnt {
			r := i*T + k
			h.checkRow(t, fmt.Sprintf("verify slot %d (history %d) draft %d of %d, T %d", s, m.hist, k, cnt, T),
				y[r*w:(r+1)*w], h.l.step(work, ref, r, dtMin))
			if k+1 == accepted[i] {
				after[i] = slices.Clone(work)
			}
		}
		for k := cnt; k < T; k++ {
			r := i*T + k
			if j := slices.IndexFunc(y[r*w:(r+1)*w], func(v float32) bool { return !math.IsNaN(float64(v)) }); j >= 0 {
				t.Fatalf("verify slot %d: row %d past its count %d was written (element %d = %v)", s, k, cnt, j, y[r*w+j])
			}
		}
		if h.modelVerify(m, cnt) {
			folds++
		}
	}
	if between != nil {
		between()
	}
	if err := guard(t, "commit", func() error { return h.c.Commit(slots, accepted) }); err != nil {
		t.Fatalf("commit %v of %v: %v", accepted, slots, err)
	}
	for i, s := range slots {
		m := h.live[s]
		m.state = after[i]
		for k := range accepted[i] {
			r := i*T + k
			h.l.pushConv(m, x[r*C:(r+1)*C])
		}
		h.modelCommit(m, accepted[i])
	}
	return folds
}

// sequence runs random rounds of operations on the cache: admissions,
// evictions, resets, forks, export and import between slots, and a step or
// a verify and commit of a random subset of the live slots in random order
// (so slots sit at different flush phases and no two calls see the same
// batch), checking every output against the references.
func (h *harness[Buf]) sequence(t *testing.T, rounds int) {
	t.Helper()
	rng := h.rng
	for round := range rounds {
		live := h.slots()
		if len(live) < 2 || len(live) < capacity-1 && rng.IntN(4) == 0 {
			h.admit(t)
		}
		if live = h.slots(); len(live) > 2 && rng.IntN(8) == 0 {
			h.evict(t, live[rng.IntN(len(live))])
		}
		if live = h.slots(); rng.IntN(12) == 0 {
			s := live[rng.IntN(len(live))]
			if err := guard(t, "reset", func() error { return h.c.Reset(s) }); err != nil {
				t.Fatalf("reset slot %d: %v", s, err)
			}
			h.live[s] = &slotModel{state: make([]float64, h.l.stateElems())}
		}
		if live = h.slots(); len(live) < capacity-1 && rng.IntN(10) == 0 {
			h.fork(t, live[rng.IntN(len(live))])
		}
		if live = h.slots(); len(live) >= 2 && rng.IntN(10) == 0 {
			p := rng.Perm(len(live))
			h.move(t, live[p[0]], live[p[1]])
		}
		live = h.slots()
		var slots []replay.Slot
		for _, i := range rng.Perm(len(live)) {
			if len(slots) == 0 || rng.IntN(4) != 0 {
				slots = append(slots, live[i])
			}
		}
		D := h.opt.MaxDraft
		if D == 0 || rng.IntN(3) != 0 {
			h.step(t, slots)
			continue
		}
		T := 1 + rng.IntN(D)
		var counts []int
		if rng.IntN(4) != 0 {
			counts = make([]int, len(slots))
			for i := range counts {
				counts[i] = 1 + rng.IntN(T)
			}
		}
		accepted := make([]int, len(slots))
		for i := range accepted {
			cnt := T
			if counts != nil {
				cnt = counts[i]
			}
			switch round % 5 {
			case 0: // nothing accepted
			case 1:
				accepted[i] = cnt // everything accepted
			default:
				accepted[i] = rng.IntN(cnt + 1)
			}
		}
		var between func()
		if len(live) < capacity && rng.IntN(5) == 0 {
			// A verified slot's state leaves it with drafts pending: a
			// fork or an exported copy holds the committed state alone.
			src := slots[rng.IntN(len(slots))]
			between = func() {
				var dst replay.Slot
				if rng.IntN(2) == 0 {
					dst = h.fork(t, src)
				} else {
					dst = h.admit(t)
					h.move(t, src, dst)
				}
				mustFail(t, "commit of a draft the fork or import did not take", func() error {
					return h.c.Commit([]replay.Slot{dst}, []int{1})
				})
			}
		}
		h.verify(t, slots, T, counts, accepted, between)
	}
}

// fork forks src and returns the new slot, whose model is src's committed
// one.
func (h *harness[Buf]) fork(t *testing.T, src replay.Slot) replay.Slot {
	t.Helper()
	var dst replay.Slot
	if err := guard(t, "fork", func() (err error) { dst, err = h.c.Fork(src); return }); err != nil {
		t.Fatalf("fork slot %d: %v", src, err)
	}
	if h.live[dst] != nil {
		t.Fatalf("fork returned live slot %d", dst)
	}
	h.live[dst] = h.live[src].clone()
	return dst
}

// move exports slot src and imports it over live slot dst.
func (h *harness[Buf]) move(t *testing.T, src, dst replay.Slot) {
	t.Helper()
	blob := h.export(t, src)
	if err := guard(t, "import", func() error { return h.c.Import(dst, blob) }); err != nil {
		t.Fatalf("import slot %d's state over slot %d: %v", src, dst, err)
	}
	h.live[dst] = h.live[src].clone()
}

package replay

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/ssm"
)

// layer is what the conformance tests need of a layer kind: build a cache,
// draw inputs, and run the float64 reference.
type layer interface {
	name() string
	build(opt Options, capacity int) (cache, error)
	refState() []float64
	draw(rows int) input
	ref(state []float64, in input, r int) []float64
	width() int // output values per row
}

// input is one batch of rows of a layer's inputs.
type input interface {
	rows() int
	pick(rows []int) input // a new input made of the given rows
}

// cache is the API both caches share, with inputs as the input interface.
type cache interface {
	Admit() (Slot, error)
	Evict(Slot) error
	Reset(Slot) error
	Fork(Slot) (Slot, error)
	Commit([]Slot, []int) error
	Stats() Stats
	Close() error
	step([]Slot, input, []float32) error
	verify([]Slot, int, []int, input, []float32) error
	export(Slot) ([]byte, error)
	import_(Slot, []byte) error
}

// --- Mamba-2 ---

type mamba2Layer struct{ *mamba2Fixture }

func (l mamba2Layer) name() string { return "mamba2" }
func (l mamba2Layer) build(opt Options, capacity int) (cache, error) {
	c, err := NewMamba2(l.shape, l.prm, ConvWeights{}, capacity, opt)
	if err != nil {
		return nil, err
	}
	return mamba2Cache{c}, nil
}
func (l mamba2Layer) refState() []float64 { return make([]float64, l.shape.StateElems()) }
func (l mamba2Layer) draw(rows int) input { return mamba2Rows{l.input(rows), l.shape} }
func (l mamba2Layer) ref(state []float64, in input, r int) []float64 {
	return l.refStep(state, in.(mamba2Rows).Mamba2Input, r)
}
func (l mamba2Layer) width() int { return l.shape.Heads * l.shape.HeadDim }

type mamba2Rows struct {
	Mamba2Input
	shape ssm.Mamba2Shape
}

func (m mamba2Rows) rows() int { return len(m.Dt) / m.shape.Heads }
func (m mamba2Rows) pick(rows []int) input {
	H, P, N, G := m.shape.Heads, m.shape.HeadDim, m.shape.StateSize, m.shape.Groups
	var out Mamba2Input
	for _, r := range rows {
		out.X = append(out.X, m.X[r*H*P:(r+1)*H*P]...)
		out.B = append(out.B, m.B[r*G*N:(r+1)*G*N]...)
		out.C = append(out.C, m.C[r*G*N:(r+1)*G*N]...)
		out.Dt = append(out.Dt, m.Dt[r*H:(r+1)*H]...)
	}
	return mamba2Rows{out, m.shape}
}

type mamba2Cache struct{ *Mamba2Cache }

func (c mamba2Cache) step(s []Slot, in input, y []float32) error {
	return c.Step(s, in.(mamba2Rows).Mamba2Input, y)
}
func (c mamba2Cache) verify(s []Slot, T int, counts []int, in input, y []float32) error {
	return c.Verify(s, T, counts, in.(mamba2Rows).Mamba2Input, y)
}
func (c mamba2Cache) export(s Slot) ([]byte, error)  { return c.Export(s) }
func (c mamba2Cache) import_(s Slot, b []byte) error { return c.Import(s, b) }

// --- Gated DeltaNet ---

type gdnLayer struct {
	shape   ssm.GDNShape
	prm     GDNParams
	ref64   ssm.GDNParams
	rng     *rand.Rand
	aShift  float32
	betaMul float32
	bShift  float32
}

func newGDNLayer(seed uint64, shape ssm.GDNShape) *gdnLayer {
	l := &gdnLayer{shape: shape, rng: rand.New(rand.NewPCG(seed, 2)), betaMul: 1}
	for j := 0; j < shape.ValueHeads; j++ {
		l.prm.ALog = append(l.prm.ALog, float32(math.Log(0.5+4*l.rng.Float64())))
		l.prm.DtBias = append(l.prm.DtBias, float32(l.rng.NormFloat64()*0.5-1))
	}
	l.ref64 = ssm.GDNParams{ALog: to64(l.prm.ALog), DtBias: to64(l.prm.DtBias)}
	return l
}

func (l *gdnLayer) name() string { return "gdn" }
func (l *gdnLayer) build(opt Options, capacity int) (cache, error) {
	c, err := NewGDN(l.shape, l.prm, ConvWeights{}, capacity, opt)
	if err != nil {
		return nil, err
	}
	return gdnCache{c}, nil
}
func (l *gdnLayer) refState() []float64 { return make([]float64, l.shape.StateElems()) }
func (l *gdnLayer) width() int          { return l.shape.ValueHeads * l.shape.ValueDim }
func (l *gdnLayer) draw(rows int) input {
	Hk, Hv, dk, dv := l.shape.KeyHeads, l.shape.ValueHeads, l.shape.KeyDim, l.shape.ValueDim
	in := GDNInput{
		Q: make([]float32, rows*Hk*dk), K: make([]float32, rows*Hk*dk),
		V: make([]float32, rows*Hv*dv), A: make([]float32, rows*Hv), B: make([]float32, rows*Hv),
	}
	for i := range in.Q {
		in.Q[i] = float32(l.rng.NormFloat64())
		in.K[i] = float32(l.rng.NormFloat64())
	}
	for i := range in.V {
		in.V[i] = float32(l.rng.NormFloat64())
	}
	for i := range in.A {
		in.A[i] = float32(l.rng.NormFloat64()) + l.aShift
		in.B[i] = float32(l.rng.NormFloat64())*l.betaMul + l.bShift
	}
	return gdnRows{in, l.shape}
}
func (l *gdnLayer) ref(state []float64, in input, r int) []float64 {
	g := in.(gdnRows)
	Hk, Hv, dk, dv := l.shape.KeyHeads, l.shape.ValueHeads, l.shape.KeyDim, l.shape.ValueDim
	o := make([]float64, Hv*dv)
	ssm.GDNStep64(l.shape, l.ref64, state,
		to64(g.Q[r*Hk*dk:(r+1)*Hk*dk]), to64(g.K[r*Hk*dk:(r+1)*Hk*dk]),
		to64(g.V[r*Hv*dv:(r+1)*Hv*dv]), to64(g.A[r*Hv:(r+1)*Hv]), to64(g.B[r*Hv:(r+1)*Hv]), o)
	return o
}

type gdnRows struct {
	GDNInput
	shape ssm.GDNShape
}

func (g gdnRows) rows() int { return len(g.A) / g.shape.ValueHeads }
func (g gdnRows) pick(rows []int) input {
	Hk, Hv, dk, dv := g.shape.KeyHeads, g.shape.ValueHeads, g.shape.KeyDim, g.shape.ValueDim
	var out GDNInput
	for _, r := range rows {
		out.Q = append(out.Q, g.Q[r*Hk*dk:(r+1)*Hk*dk]...)
		out.K = append(out.K, g.K[r*Hk*dk:(r+1)*Hk*dk]...)
		out.V = append(out.V, g.V[r*Hv*dv:(r+1)*Hv*dv]...)
		out.A = append(out.A, g.A[r*Hv:(r+1)*Hv]...)
		out.B = append(out.B, g.B[r*Hv:(r+1)*Hv]...)
	}
	return gdnRows{out, g.shape}
}

type gdnCache struct{ *GDNCache }

func (c gdnCache) step(s []Slot, in input, y []float32) error {
	return c.Step(s, in.(gdnRows).GDNInput, y)
}
func (c gdnCache) verify(s []Slot, T int, counts []int, in input, y []float32) error {
	return c.Verify(s, T, counts, in.(gdnRows).GDNInput, y)
}
func (c gdnCache) export(s Slot) ([]byte, error)  { return c.Export(s) }
func (c gdnCache) import_(s Slot, b []byte) error { return c.Import(s, b) }

func testLayers() []layer {
	return []layer{
		mamba2Layer{newMamba2Fixture(11, ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 16, Groups: 2})},
		newGDNLayer(12, ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8}),
	}
}

// gdnBound scales a Mamba-2 precision bound for GDN. The delta rule feeds the
// state error back through u = β(v − Sᵀk) (a contraction, |1−β·k·k| < 1), so
// the same per-element rounding gives errors of the same order; the outputs
// are smaller (‖q‖ = 1/√dk) so relative errors are ~2x larger.
func boundFor(l layer, b float64) float64 {
	if l.name() == "gdn" && b > 1e-5 {
		return 2 * b
	}
	return b
}

// TestStepMatchesReference drives every mode and precision for 6·L steps
// with random batch composition and slots admitted and evicted mid-stream
// (so slots sit at different flush phases), comparing every output with the
// float64 reference, for both layer kinds.
func TestStepMatchesReference(t *testing.T) {
	const L = 5
	for _, l := range testLayers() {
		for _, tc := range precisionCases(L) {
			t.Run(l.name()+"/"+tc.name, func(t *testing.T) {
				c, err := l.build(tc.opt, 6)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				rng := rand.New(rand.NewPCG(uint64(len(tc.name)), 9))
				refs := map[Slot][]float64{}
				var order []Slot
				worst := 0.0
				bound := boundFor(l, tc.bound)
				for step := 0; step < 6*L+3; step++ {
					if len(refs) < 6 && (len(refs) < 2 || rng.IntN(3) == 0) {
						s, err := c.Admit()
						if err != nil {
							t.Fatal(err)
						}
						refs[s] = l.refState()
						order = append(order, s)
					}
					if len(order) > 2 && rng.IntN(6) == 0 {
						i := rng.IntN(len(order))
						if err := c.Evict(order[i]); err != nil {
							t.Fatal(err)
						}
						delete(refs, order[i])
						order = append(order[:i], order[i+1:]...)
					}
					var slots []Slot
					for _, s := range order {
						if rng.IntN(4) != 0 {
							slots = append(slots, s)
						}
					}
					rng.Shuffle(len(slots), func(i, j int) { slots[i], slots[j] = slots[j], slots[i] })
					if len(slots) == 0 {
						continue
					}
					in := l.draw(len(slots))
					w := l.width()
					y := make([]float32, len(slots)*w)
					poison(y)
					if err := c.step(slots, in, y); err != nil {
						t.Fatal(err)
					}
					for i, s := range slots {
						e := relErr(y[i*w:(i+1)*w], l.ref(refs[s], in, i))
						worst = max(worst, e)
						if e > bound {
							t.Fatalf("step %d slot %d: relative error %.3g > %.3g", step, s, e, bound)
						}
					}
				}
				t.Logf("worst relative error %.3g (bound %.3g)", worst, bound)
			})
		}
	}
}

// TestSpeculativeMatchesSequential is the metamorphic test of speculative
// decoding: for 240 rounds, each slot verifies a random number of drafts and
// accepts a random prefix. The committed outputs must equal plain
// step-by-step decoding of the accepted inputs (the float64 reference), and
// rejected drafts must leave no trace. It runs in replay and baseline modes
// and across windows, so early flushes and commits that overrun the window
// are exercised.
func TestSpeculativeMatchesSequential(t *testing.T) {
	for _, l := range testLayers() {
		for _, tc := range []struct {
			name string
			opt  Options
		}{
			{"replay-L16", Options{Mode: Replay, Window: 16, MaxDraft: 5, Threads: 2}},
			{"replay-L4", Options{Mode: Replay, Window: 4, MaxDraft: 5, Threads: 2}},
			{"replay-L4-exact-fold", Options{Mode: Replay, Window: 4, MaxDraft: 5, ExactFold: true, Threads: 2}},
			{"replay-L1", Options{Mode: Replay, Window: 1, MaxDraft: 3, Threads: 2}},
			{"baseline", Options{Mode: Baseline, MaxDraft: 5, Threads: 2}},
			{"replay-nvfp4", Options{Mode: Replay, Window: 8, MaxDraft: 4, ReadCopy: numeric.NVFP4, Threads: 2}},
		} {
			t.Run(l.name()+"/"+tc.name, func(t *testing.T) {
				bound := boundFor(l, 1e-5)
				if tc.opt.ReadCopy == numeric.NVFP4 {
					bound = boundFor(l, 0.35)
				}
				c, err := l.build(tc.opt, 4)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				rng := rand.New(rand.NewPCG(5, uint64(len(tc.name))))
				var slots []Slot
				refs := map[Slot][]float64{}
				for range 4 {
					s, _ := c.Admit()
					slots = append(slots, s)
					refs[s] = l.refState()
				}
				w := l.width()
				maxT := tc.opt.MaxDraft
				for round := 0; round < 240; round++ {
					// Mix in plain steps now and then.
					if rng.IntN(5) == 0 {
						in := l.draw(len(slots))
						y := make([]float32, len(slots)*w)
						poison(y)
						if err := c.step(slots, in, y); err != nil {
							t.Fatal(err)
						}
						for i, s := range slots {
							if e := relErr(y[i*w:(i+1)*w], l.ref(refs[s], in, i)); e > bound {
								t.Fatalf("round %d step slot %d: error %.3g", round, s, e)
							}
						}
						continue
					}
					T := 1 + rng.IntN(maxT)
					counts := make([]int, len(slots))
					for i := range counts {
						counts[i] = 1 + rng.IntN(T)
					}
					in := l.draw(len(slots) * T)
					y := make([]float32, len(slots)*T*w)
					poison(y)
					if err := c.verify(slots, T, counts, in, y); err != nil {
						t.Fatal(err)
					}
					acc := make([]int, len(slots))
					for i, s := range slots {
						acc[i] = rng.IntN(counts[i] + 1)
						// Reference: step the accepted drafts one by one;
						// drafts past them must still match a scratch copy
						// of the reference (they saw the same history).
						scratch := append([]float64(nil), refs[s]...)
						for k := 0; k < counts[i]; k++ {
							r := i*T + k
							state := scratch
							if k < acc[i] {
								state = refs[s]
							}
							want := l.ref(state, in, r)
							if k < acc[i] {
								copy(scratch, refs[s])
							}
							if e := relErr(y[r*w:(r+1)*w], want); e > bound {
								t.Fatalf("round %d slot %d draft %d/%d: error %.3g", round, s, k, counts[i], e)
							}
						}
						// Rows past the slot's count are not written.
						for k := counts[i]; k < T; k++ {
							if v := y[(i*T+k)*w]; !math.IsNaN(float64(v)) {
								t.Fatalf("round %d slot %d: row %d past the draft count was written", round, s, k)
							}
						}
					}
					if err := c.Commit(slots, acc); err != nil {
						t.Fatal(err)
					}
				}
				st := c.Stats()
				t.Logf("verifies %d drafts %d accepted %d flushes %d", st.Verifies, st.Drafts, st.Accepted, st.Flushes)
			})
		}
	}
}

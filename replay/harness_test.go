package replay

import (
	"math"
	"math/rand/v2"

	"github.com/replayssm/replayssm/ssm"
)

// The CPU-only tests of this package (fuzz_test.go, alloc_test.go,
// precision_test.go, foldcached_test.go, kda_test.go) drive any layer kind
// through the helpers here: build a cache, draw inputs, run the float64
// reference. The contract itself, every mode and precision against the
// reference, is checked by package replaytest (conformance_test.go).

// layer is what those tests need of a layer kind.
type layer interface {
	name() string
	build(opt Options, capacity int) (*testCache, error)
	refState() []float64
	draw(rows int) input
	ref(state []float64, in input, r int) []float64
	width() int // output values per row
}

// input is one batch of rows of a layer's inputs: mamba2Rows, gdnRows or
// kdaRows.
type input any

// testCache is a cache of any layer kind, taking inputs as the input
// interface.
type testCache struct {
	*core
	impl   any // the *Mamba2Cache, *GDNCache or *KDACache
	step   func([]Slot, input, []float32) error
	verify func([]Slot, int, []int, input, []float32) error
}

// --- Mamba-2 ---

type mamba2Layer struct{ *mamba2Fixture }

func (l mamba2Layer) name() string { return "mamba2" }
func (l mamba2Layer) build(opt Options, capacity int) (*testCache, error) {
	c, err := NewMamba2(l.shape, l.prm, ConvWeights{}, capacity, opt)
	if err != nil {
		return nil, err
	}
	return &testCache{core: &c.core, impl: c,
		step: func(s []Slot, in input, y []float32) error { return c.Step(s, in.(mamba2Rows).Mamba2Input, y) },
		verify: func(s []Slot, T int, counts []int, in input, y []float32) error {
			return c.Verify(s, T, counts, in.(mamba2Rows).Mamba2Input, y)
		}}, nil
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
func (l *gdnLayer) build(opt Options, capacity int) (*testCache, error) {
	c, err := NewGDN(l.shape, l.prm, ConvWeights{}, capacity, opt)
	if err != nil {
		return nil, err
	}
	return &testCache{core: &c.core, impl: c,
		step: func(s []Slot, in input, y []float32) error { return c.Step(s, in.(gdnRows).GDNInput, y) },
		verify: func(s []Slot, T int, counts []int, in input, y []float32) error {
			return c.Verify(s, T, counts, in.(gdnRows).GDNInput, y)
		}}, nil
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

// --- Kimi Delta Attention ---

// kdaLayer draws KDA inputs: q, k, v and b standard normal, and the
// log-decay g = gate·(−U[0,1)) + gShift per channel (the default, gate 3 and
// no shift, puts every decay α = e^g between e⁻³ and 1, different in every
// channel of every head and step).
type kdaLayer struct {
	shape  ssm.GDNShape
	rng    *rand.Rand
	gate   float64
	gShift float64
	// betaMul and bShift scale and shift b, as gdnLayer's.
	betaMul, bShift float32
}

func newKDALayer(seed uint64, shape ssm.GDNShape) *kdaLayer {
	return &kdaLayer{shape: shape, rng: rand.New(rand.NewPCG(seed, 3)), gate: 3, betaMul: 1}
}

func (l *kdaLayer) name() string { return "kda" }
func (l *kdaLayer) build(opt Options, capacity int) (*testCache, error) {
	c, err := NewKDA(l.shape, ConvWeights{}, capacity, opt)
	if err != nil {
		return nil, err
	}
	return &testCache{core: &c.core, impl: c,
		step: func(s []Slot, in input, y []float32) error { return c.Step(s, in.(kdaRows).KDAInput, y) },
		verify: func(s []Slot, T int, counts []int, in input, y []float32) error {
			return c.Verify(s, T, counts, in.(kdaRows).KDAInput, y)
		}}, nil
}
func (l *kdaLayer) refState() []float64 { return make([]float64, l.shape.StateElems()) }
func (l *kdaLayer) width() int          { return l.shape.ValueHeads * l.shape.ValueDim }
func (l *kdaLayer) draw(rows int) input {
	Hk, Hv, dk, dv := l.shape.KeyHeads, l.shape.ValueHeads, l.shape.KeyDim, l.shape.ValueDim
	in := KDAInput{Q: normals(l.rng, rows*Hk*dk), K: normals(l.rng, rows*Hk*dk), V: normals(l.rng, rows*Hv*dv),
		G: make([]float32, rows*Hv*dk), B: make([]float32, rows*Hv)}
	for i := range in.G {
		in.G[i] = float32(-l.gate*l.rng.Float64() + l.gShift)
	}
	for i := range in.B {
		in.B[i] = float32(l.rng.NormFloat64())*l.betaMul + l.bShift
	}
	return kdaRows{in, l.shape}
}
func (l *kdaLayer) ref(state []float64, in input, r int) []float64 {
	g := in.(kdaRows)
	Hk, Hv, dk, dv := l.shape.KeyHeads, l.shape.ValueHeads, l.shape.KeyDim, l.shape.ValueDim
	o := make([]float64, Hv*dv)
	beta := make([]float64, Hv)
	for j, b := range g.B[r*Hv : (r+1)*Hv] {
		beta[j] = ssm.Sigmoid(float64(b))
	}
	ssm.KDAStep64(l.shape, state,
		to64(g.Q[r*Hk*dk:(r+1)*Hk*dk]), to64(g.K[r*Hk*dk:(r+1)*Hk*dk]),
		to64(g.V[r*Hv*dv:(r+1)*Hv*dv]), to64(g.G[r*Hv*dk:(r+1)*Hv*dk]), beta, o)
	return o
}

type kdaRows struct {
	KDAInput
	shape ssm.GDNShape
}

func testLayers() []layer {
	return []layer{
		mamba2Layer{newMamba2Fixture(11, ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 16, Groups: 2})},
		newGDNLayer(12, ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8}),
		newKDALayer(13, ssm.GDNShape{KeyHeads: 1, ValueHeads: 3, KeyDim: 12, ValueDim: 8}),
	}
}

// boundFor scales a Mamba-2 precision bound for GDN and KDA. The delta rule
// feeds the state error back through u = β(v − Sᵀk) (a contraction,
// |1−β·k·k| < 1), so the same per-element rounding gives errors of the same
// order; the outputs are smaller (‖q‖ = 1/√dk) so relative errors are ~2x
// larger.
func boundFor(l layer, b float64) float64 {
	if (l.name() == "gdn" || l.name() == "kda") && b > 1e-5 {
		return 2 * b
	}
	return b
}

// mamba2Fixture is a small Mamba-2 layer with random constants, and a float64
// reference state per slot.
type mamba2Fixture struct {
	shape ssm.Mamba2Shape
	prm   Mamba2Params
	ref   ssm.Mamba2Params
	rng   *rand.Rand
}

func newMamba2Fixture(seed uint64, shape ssm.Mamba2Shape) *mamba2Fixture {
	f := &mamba2Fixture{shape: shape, rng: rand.New(rand.NewPCG(seed, 1))}
	H := shape.Heads
	for h := 0; h < H; h++ {
		alog := float32(math.Log(1 + 7*f.rng.Float64()))
		f.prm.ALog = append(f.prm.ALog, alog)
		f.prm.DtBias = append(f.prm.DtBias, float32(f.rng.NormFloat64()*0.5-1))
		f.prm.D = append(f.prm.D, float32(f.rng.NormFloat64()))
	}
	f.ref = ssm.Mamba2Params{ALog: to64(f.prm.ALog), DtBias: to64(f.prm.DtBias), D: to64(f.prm.D)}
	return f
}

func to64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// input draws rows of fresh random inputs.
func (f *mamba2Fixture) input(rows int) Mamba2Input {
	H, P, N, G := f.shape.Heads, f.shape.HeadDim, f.shape.StateSize, f.shape.Groups
	in := Mamba2Input{
		X: make([]float32, rows*H*P), B: make([]float32, rows*G*N),
		C: make([]float32, rows*G*N), Dt: make([]float32, rows*H),
	}
	for i := range in.X {
		in.X[i] = float32(f.rng.NormFloat64())
	}
	sn := 1 / math.Sqrt(float64(N))
	for i := range in.B {
		in.B[i] = float32(f.rng.NormFloat64() * sn)
		in.C[i] = float32(f.rng.NormFloat64() * sn)
	}
	for i := range in.Dt {
		in.Dt[i] = float32(f.rng.NormFloat64())
	}
	return in
}

// refStep advances the float64 state of one slot by row r of in and returns
// the reference output.
func (f *mamba2Fixture) refStep(state []float64, in Mamba2Input, r int) []float64 {
	H, P, N, G := f.shape.Heads, f.shape.HeadDim, f.shape.StateSize, f.shape.Groups
	y := make([]float64, H*P)
	ssm.Mamba2Step64(f.shape, f.ref, state,
		to64(in.X[r*H*P:(r+1)*H*P]), to64(in.B[r*G*N:(r+1)*G*N]),
		to64(in.C[r*G*N:(r+1)*G*N]), to64(in.Dt[r*H:(r+1)*H]), y)
	return y
}

// relErr is ‖got − want‖₂ / ‖want‖₂; NaN in got gives +Inf.
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

func poison(y []float32) {
	for i := range y {
		y[i] = float32(math.NaN())
	}
}

package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/ssm"
)

// mamba2Fixture is a small Mamba-2 layer with random constants, and a float64
// reference state per slot.
type mamba2Fixture struct {
	shape ssm.Mamba2Shape
	prm   Mamba2Params
	ref   ssm.Mamba2Params
	rng   *rand.Rand
	// dtShift moves dt so Δ is small and decay slow (long memory), which
	// makes state errors visible for many steps.
	dtShift float32
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
		in.Dt[i] = float32(f.rng.NormFloat64()) + f.dtShift
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

// precisionCase is one state configuration with the output error it must stay
// under, relative to the float64 reference.
type precisionCase struct {
	name  string
	opt   Options
	bound float64
}

// precisionCases lists every mode and precision. Bounds (‖y−ref‖/‖ref‖ per
// slot-step):
//   - fp32 paths: 1e-5. float32 rounding (2^-24 ≈ 6e-8) over sums of ~N·t
//     terms of mixed sign and a few multiplications stays near 1e-6.
//   - fp16 state: each state write rounds elements by at most 2^-11 ≈ 4.9e-4
//     relative; the output is a sum over many such elements with random
//     signs, so its relative error is of that order, and roundings of older
//     writes decay away; 1e-3 allows two aligned roundings.
//   - bf16: 2^-8 ≈ 3.9e-3 per element, same argument: 8e-3.
//   - fp8 e4m3: 2^-4 = 6.25% per element at worst (3 mantissa bits) with a
//     per-matrix scale, so small elements lose more; sums average it: 0.1.
//   - nvfp4 read copy: E2M1 steps are up to 1/3 of the value in a block and
//     the block scale adds e4m3 rounding; 0.35 bounds it.
func precisionCases(window int) []precisionCase {
	r := func(state, read numeric.Format) Options {
		return Options{Mode: Replay, Window: window, MaxDraft: 4, State: state, ReadCopy: read, Threads: 2}
	}
	b := func(state numeric.Format) Options {
		return Options{Mode: Baseline, MaxDraft: 4, State: state, Threads: 2}
	}
	return []precisionCase{
		{"baseline/fp32", b(numeric.F32), 1e-5},
		{"replay/fp32", r(numeric.F32, numeric.F32), 1e-5},
		{"replay-L1/fp32", Options{Mode: Replay, Window: 1, MaxDraft: 4, Threads: 2}, 1e-5},
		{"replay/fp32-exact-fold", Options{Mode: Replay, Window: window, MaxDraft: 4, ExactFold: true, Threads: 2}, 1e-5},
		{"baseline/fp16", b(numeric.F16), 1e-3},
		{"replay/fp16", r(numeric.F16, numeric.F32), 1e-3},
		{"baseline/bf16", b(numeric.BF16), 8e-3},
		{"replay/bf16", r(numeric.BF16, numeric.F32), 8e-3},
		{"replay/bf16-exact-fold", Options{Mode: Replay, Window: window, MaxDraft: 4, State: numeric.BF16, ExactFold: true, Threads: 2}, 8e-3},
		{"replay/fp32+bf16", r(numeric.F32, numeric.BF16), 8e-3},
		{"baseline/e4m3", b(numeric.E4M3), 0.1},
		{"replay/e4m3", r(numeric.E4M3, numeric.F32), 0.1},
		{"replay/fp32+e4m3", r(numeric.F32, numeric.E4M3), 0.1},
		{"replay/fp32+nvfp4", r(numeric.F32, numeric.NVFP4), 0.35},
		{"replay/fp16+nvfp4", r(numeric.F16, numeric.NVFP4), 0.35},
		{"replay/bf16-stochastic", Options{Mode: Replay, Window: window, MaxDraft: 4, State: numeric.BF16, Stochastic: true, Seed: 7, Threads: 2}, 8e-3},
	}
}

// TestMamba2WindowOneEqualsBaseline checks that replay with L=1 (a flush
// every step) produces the baseline's outputs bit for bit in fp32: the flush
// computes a·S + Δ·x⊗B exactly as the in-place update does.
func TestMamba2WindowOneEqualsBaseline(t *testing.T) {
	shape := ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 16, Groups: 2}
	f := newMamba2Fixture(3, shape)
	base, err := NewMamba2(shape, f.prm, ConvWeights{}, 2, Options{Mode: Baseline, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	rep, err := NewMamba2(shape, f.prm, ConvWeights{}, 2, Options{Mode: Replay, Window: 1, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer rep.Close()
	sb, _ := base.Admit()
	sr, _ := rep.Admit()
	HP := shape.Heads * shape.HeadDim
	for step := 0; step < 40; step++ {
		in := f.input(1)
		yb, yr := make([]float32, HP), make([]float32, HP)
		if err := base.Step([]Slot{sb}, in, yb); err != nil {
			t.Fatal(err)
		}
		if err := rep.Step([]Slot{sr}, in, yr); err != nil {
			t.Fatal(err)
		}
		for i := range yb {
			if d := math.Abs(float64(yb[i] - yr[i])); d > 1e-6*math.Max(1, math.Abs(float64(yb[i]))) {
				t.Fatalf("step %d: y[%d] baseline %v replay-L1 %v", step, i, yb[i], yr[i])
			}
		}
	}
}

func TestMamba2BadInput(t *testing.T) {
	shape := ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 16, Groups: 2}
	f := newMamba2Fixture(3, shape)
	c, err := NewMamba2(shape, f.prm, ConvWeights{}, 2, Options{MaxDraft: 2, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, _ := c.Admit()
	HP := shape.Heads * shape.HeadDim
	tests := []struct {
		name string
		err  error
	}{
		{"short x", c.Step([]Slot{s}, Mamba2Input{X: make([]float32, 3), B: make([]float32, 32), C: make([]float32, 32), Dt: make([]float32, 4)}, make([]float32, HP))},
		{"dead slot", c.Step([]Slot{1}, f.input(1), make([]float32, HP))},
		{"duplicate", c.Step([]Slot{s, s}, f.input(2), make([]float32, 2*HP))},
		{"out of range", c.Step([]Slot{9}, f.input(1), make([]float32, HP))},
		{"too many drafts", c.Verify([]Slot{s}, 3, nil, f.input(3), make([]float32, 3*HP))},
		{"commit without verify", c.Commit([]Slot{s}, []int{1})},
	}
	for _, tt := range tests {
		if tt.err == nil {
			t.Errorf("%s: no error", tt.name)
		} else {
			t.Logf("%s: %v", tt.name, tt.err)
		}
	}
	if _, err := NewMamba2(shape, f.prm, ConvWeights{}, 2, Options{Mode: Replay, State: numeric.NVFP4}); err == nil {
		t.Error("nvfp4 replay checkpoint accepted")
	}
	if _, err := NewMamba2(ssm.Mamba2Shape{Heads: 3, HeadDim: 8, StateSize: 16, Groups: 2}, f.prm, ConvWeights{}, 2, Options{}); err == nil {
		t.Error("3 heads in 2 groups accepted")
	}
	_ = fmt.Sprint()
}

// TestMamba2DtMin checks the Δ clamp (transformers' multi-token path) in
// every mode against the float64 reference with the same clamp, with inputs
// drawn so that most Δ fall under it.
func TestMamba2DtMin(t *testing.T) {
	shape := ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 16, Groups: 2}
	for _, opt := range []Options{
		{Mode: Replay, Window: 3, MaxDraft: 2, Threads: 2},
		{Mode: Baseline, MaxDraft: 2, Threads: 2},
		{Mode: Baseline, State: numeric.BF16, Threads: 2},
	} {
		f := newMamba2Fixture(31, shape)
		f.dtShift = -2
		ref := f.ref
		ref.DtMin = 0.2
		c, err := NewMamba2(shape, f.prm, ConvWeights{}, 1, opt)
		if err != nil {
			t.Fatal(err)
		}
		s, _ := c.Admit()
		state := make([]float64, shape.StateElems())
		HP := shape.Heads * shape.HeadDim
		clamped := 0
		for step := 0; step < 12; step++ {
			in := f.input(1)
			in.DtMin = 0.2
			for h, dt := range in.Dt {
				if ssm.Softplus(float64(dt)+float64(f.prm.DtBias[h])) < 0.2 {
					clamped++
				}
			}
			y := make([]float32, HP)
			poison(y)
			if err := c.Step([]Slot{s}, in, y); err != nil {
				t.Fatal(err)
			}
			want := make([]float64, HP)
			G, N, H, P := shape.Groups, shape.StateSize, shape.Heads, shape.HeadDim
			ssm.Mamba2Step64(shape, ref, state, to64(in.X[:H*P]), to64(in.B[:G*N]), to64(in.C[:G*N]), to64(in.Dt[:H]), want)
			bound := 1e-5
			if opt.State == numeric.BF16 {
				bound = 8e-3
			}
			if e := relErr(y, want); e > bound {
				t.Fatalf("%v %v step %d: error %.3g", opt.Mode, opt.State, step, e)
			}
		}
		if clamped < 12 {
			t.Fatalf("only %d clamped Δ: the test does not exercise the clamp", clamped)
		}
		c.Close()
	}
}

// TestExportImportAcrossCaches moves a slot's state between two caches with
// the same configuration (outputs continue identically) and refuses a cache
// with another window or shape.
func TestExportImportAcrossCaches(t *testing.T) {
	shape := ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 16, Groups: 2}
	f := newMamba2Fixture(41, shape)
	opt := Options{Window: 5, MaxDraft: 2, ReadCopy: numeric.BF16, Threads: 1}
	a, _ := NewMamba2(shape, f.prm, ConvWeights{}, 2, opt)
	b, _ := NewMamba2(shape, f.prm, ConvWeights{}, 2, opt)
	defer a.Close()
	defer b.Close()
	sa, _ := a.Admit()
	sb, _ := b.Admit()
	HP := shape.Heads * shape.HeadDim
	for step := 0; step < 7; step++ { // mid-window: history and checkpoint both matter
		if err := a.Step([]Slot{sa}, f.input(1), make([]float32, HP)); err != nil {
			t.Fatal(err)
		}
	}
	blob, err := a.Export(sa)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Import(sb, blob); err != nil {
		t.Fatal(err)
	}
	for step := 0; step < 9; step++ {
		in := f.input(1)
		ya, yb := make([]float32, HP), make([]float32, HP)
		if err := a.Step([]Slot{sa}, in, ya); err != nil {
			t.Fatal(err)
		}
		if err := b.Step([]Slot{sb}, in, yb); err != nil {
			t.Fatal(err)
		}
		for i := range ya {
			if ya[i] != yb[i] {
				t.Fatalf("step %d: imported slot gives %v, source %v", step, yb[i], ya[i])
			}
		}
	}
	other, _ := NewMamba2(shape, f.prm, ConvWeights{}, 1, Options{Window: 6, MaxDraft: 2, ReadCopy: numeric.BF16, Threads: 1})
	defer other.Close()
	so, _ := other.Admit()
	if err := other.Import(so, blob); err == nil {
		t.Error("a blob from a window-5 cache was imported into a window-6 cache")
	} else {
		t.Log(err)
	}
	if err := other.Import(so, []byte("not a state")); err == nil {
		t.Error("garbage imported")
	}
}

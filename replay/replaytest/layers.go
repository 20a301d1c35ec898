package replaytest

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// layer is one layer shape with random constants, as the suite sees it on
// the host: its input fields, how to draw them, and its float64 reference.
type layer struct {
	kind string // "mamba2", "gdn" or "kda"
	name string // kind and shape, e.g. "mamba2-H4P8N16G2"
	// width is the output floats per row, perRow the input floats per row
	// of each field (Mamba-2: x, B, C, dt; GDN: q, k, v, a, b; KDA: q, k,
	// v, g, b).
	width  int
	perRow []int
	// ringFields are the fields a bf16 ring rounds as the cache takes
	// them (replay.Options.Ring): Mamba-2's x and B, GDN's and KDA's k and
	// v.
	ringFields []int
	// heads and matElems are the state matrices per slot and state buffer,
	// and the elements of one, for the byte counts of replay.Stats.
	heads, matElems int
	conv            replay.ConvWeights

	m2     ssm.Mamba2Shape
	m2prm  replay.Mamba2Params
	m2ref  ssm.Mamba2Params
	gdn    ssm.GDNShape // GDN's or KDA's
	gdnPrm replay.GDNParams
	gdnRef ssm.GDNParams

	draw func(rng *rand.Rand, rows int) [][]float32
	// step advances a float64 state by input row r and returns the output;
	// dtMin is Mamba2Batch.DtMin (GDN has none).
	step func(state []float64, in [][]float32, r int, dtMin float32) []float64
}

// stateElems is the elements of one slot's state (all its heads).
func (l *layer) stateElems() int { return l.heads * l.matElems }

// convKernel is the conv width of the target models.
const convKernel = 4

// newConv draws a depthwise convolution of the given channels, with a bias.
func newConv(rng *rand.Rand, channels int) replay.ConvWeights {
	w := replay.ConvWeights{Channels: channels, Kernel: convKernel,
		Weight: make([]float32, channels*convKernel), Bias: make([]float32, channels)}
	for i := range w.Weight {
		w.Weight[i] = float32(rng.NormFloat64() * 0.5)
	}
	for i := range w.Bias {
		w.Bias[i] = float32(rng.NormFloat64() * 0.1)
	}
	return w
}

// mamba2Layers are the Mamba-2 shapes: a small one, and one with
// Nemotron-3-Nano's head dimensions (P = 80, N = 128), which takes the GPU
// kernels' multi-pass paths.
func mamba2Layers() [2]*layer {
	return [2]*layer{
		newMamba2Layer(11, ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 16, Groups: 2}),
		newMamba2Layer(13, ssm.Mamba2Shape{Heads: 4, HeadDim: 80, StateSize: 128, Groups: 2}),
	}
}

// gdnLayers are the Gated DeltaNet shapes: a small one, and one with the
// Qwen3.5 models' head dimensions (dk = dv = 128).
func gdnLayers() [2]*layer {
	return [2]*layer{
		newGDNLayer(12, ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8}),
		newGDNLayer(14, ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128}),
	}
}

// kdaLayers are the Kimi Delta Attention shapes: a small odd one (three
// value heads on one key head, dk = 9, so that every row kernel runs its
// scalar tails, and dk ≠ dv; a state of 144 elements, a multiple of
// nvfp4's block of 16), and one with Kimi-Linear's head dimensions (dk = dv
// = 128, a value head per key head).
func kdaLayers() [2]*layer {
	return [2]*layer{
		newKDALayer(15, ssm.GDNShape{KeyHeads: 1, ValueHeads: 3, KeyDim: 9, ValueDim: 16}),
		newKDALayer(16, ssm.GDNShape{KeyHeads: 2, ValueHeads: 2, KeyDim: 128, ValueDim: 128}),
	}
}

func to64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// newMamba2Layer draws a Mamba-2 layer's constants as a checkpoint holds
// them: A = −exp(A_log) in [−8, −1], dt_bias around −1, D standard normal.
func newMamba2Layer(seed uint64, sh ssm.Mamba2Shape) *layer {
	rng := rand.New(rand.NewPCG(seed, 1))
	H, P, N, G := sh.Heads, sh.HeadDim, sh.StateSize, sh.Groups
	l := &layer{kind: "mamba2", name: fmt.Sprintf("mamba2-H%dP%dN%dG%d", H, P, N, G), m2: sh,
		width: H * P, perRow: []int{H * P, G * N, G * N, H}, ringFields: []int{0, 1}, heads: H, matElems: P * N}
	for range H {
		l.m2prm.ALog = append(l.m2prm.ALog, float32(math.Log(1+7*rng.Float64())))
		l.m2prm.DtBias = append(l.m2prm.DtBias, float32(rng.NormFloat64()*0.5-1))
		l.m2prm.D = append(l.m2prm.D, float32(rng.NormFloat64()))
	}
	l.m2ref = ssm.Mamba2Params{ALog: to64(l.m2prm.ALog), DtBias: to64(l.m2prm.DtBias), D: to64(l.m2prm.D)}
	l.conv = newConv(rng, H*P+2*G*N)
	l.draw = func(rng *rand.Rand, rows int) [][]float32 {
		x, b, c, dt := make([]float32, rows*H*P), make([]float32, rows*G*N), make([]float32, rows*G*N), make([]float32, rows*H)
		sn := 1 / math.Sqrt(float64(N))
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		for i := range b {
			b[i] = float32(rng.NormFloat64() * sn)
			c[i] = float32(rng.NormFloat64() * sn)
		}
		for i := range dt {
			dt[i] = float32(rng.NormFloat64())
		}
		return [][]float32{x, b, c, dt}
	}
	l.step = func(state []float64, in [][]float32, r int, dtMin float32) []float64 {
		y := make([]float64, H*P)
		prm := l.m2ref
		prm.DtMin = float64(dtMin)
		ssm.Mamba2Step64(sh, prm, state, to64(in[0][r*H*P:(r+1)*H*P]), to64(in[1][r*G*N:(r+1)*G*N]),
			to64(in[2][r*G*N:(r+1)*G*N]), to64(in[3][r*H:(r+1)*H]), y)
		return y
	}
	return l
}

// newGDNLayer draws a Gated DeltaNet layer's constants: −exp(A_log) in
// [−4.5, −0.5], dt_bias around −1.
func newGDNLayer(seed uint64, sh ssm.GDNShape) *layer {
	rng := rand.New(rand.NewPCG(seed, 2))
	Hk, Hv, dk, dv := sh.KeyHeads, sh.ValueHeads, sh.KeyDim, sh.ValueDim
	l := &layer{kind: "gdn", name: fmt.Sprintf("gdn-Hk%dHv%ddk%ddv%d", Hk, Hv, dk, dv), gdn: sh,
		width: Hv * dv, perRow: []int{Hk * dk, Hk * dk, Hv * dv, Hv, Hv}, ringFields: []int{1, 2}, heads: Hv, matElems: dk * dv}
	for range Hv {
		l.gdnPrm.ALog = append(l.gdnPrm.ALog, float32(math.Log(0.5+4*rng.Float64())))
		l.gdnPrm.DtBias = append(l.gdnPrm.DtBias, float32(rng.NormFloat64()*0.5-1))
	}
	l.gdnRef = ssm.GDNParams{ALog: to64(l.gdnPrm.ALog), DtBias: to64(l.gdnPrm.DtBias)}
	l.conv = newConv(rng, 2*Hk*dk+Hv*dv)
	l.draw = func(rng *rand.Rand, rows int) [][]float32 { return drawNormal(rng, l.perRow, rows) }
	l.step = func(state []float64, in [][]float32, r int, _ float32) []float64 {
		o := make([]float64, Hv*dv)
		ssm.GDNStep64(sh, l.gdnRef, state, to64(in[0][r*Hk*dk:(r+1)*Hk*dk]), to64(in[1][r*Hk*dk:(r+1)*Hk*dk]),
			to64(in[2][r*Hv*dv:(r+1)*Hv*dv]), to64(in[3][r*Hv:(r+1)*Hv]), to64(in[4][r*Hv:(r+1)*Hv]), o)
		return o
	}
	return l
}

// drawNormal draws rows of standard normal values of each field, perRow[f]
// values a row for field f.
func drawNormal(rng *rand.Rand, perRow []int, rows int) [][]float32 {
	in := make([][]float32, len(perRow))
	for f, n := range perRow {
		in[f] = make([]float32, rows*n)
		for i := range in[f] {
			in[f][i] = float32(rng.NormFloat64())
		}
	}
	return in
}

// newKDALayer draws a Kimi Delta Attention layer, which has no constants
// (the layer computes the log-decay g itself): its inputs draw g
// uniformly in (−3, 0], a decay α = e^g from e⁻³ to 1, different in every
// channel of every head and step, so that no formula collapsing the
// decay to one per head can pass.
func newKDALayer(seed uint64, sh ssm.GDNShape) *layer {
	rng := rand.New(rand.NewPCG(seed, 3))
	Hk, Hv, dk, dv := sh.KeyHeads, sh.ValueHeads, sh.KeyDim, sh.ValueDim
	l := &layer{kind: "kda", name: fmt.Sprintf("kda-Hk%dHv%ddk%ddv%d", Hk, Hv, dk, dv), gdn: sh,
		width: Hv * dv, perRow: []int{Hk * dk, Hk * dk, Hv * dv, Hv * dk, Hv}, ringFields: []int{1, 2}, heads: Hv, matElems: dk * dv}
	l.conv = newConv(rng, 2*Hk*dk+Hv*dv)
	l.draw = func(rng *rand.Rand, rows int) [][]float32 {
		in := drawNormal(rng, l.perRow, rows)
		for i := range in[3] {
			in[3][i] = float32(-3 * rng.Float64())
		}
		return in
	}
	l.step = func(state []float64, in [][]float32, r int, _ float32) []float64 {
		o := make([]float64, Hv*dv)
		beta := make([]float64, Hv)
		for j, b := range in[4][r*Hv : (r+1)*Hv] {
			beta[j] = ssm.Sigmoid(float64(b))
		}
		ssm.KDAStep64(sh, state, to64(in[0][r*Hk*dk:(r+1)*Hk*dk]), to64(in[1][r*Hk*dk:(r+1)*Hk*dk]),
			to64(in[2][r*Hv*dv:(r+1)*Hv*dv]), to64(in[3][r*Hv*dk:(r+1)*Hv*dk]), beta, o)
		return o
	}
	return l
}

// roundRing returns in with the fields a bf16 ring keeps rounded to bf16
// by package numeric (to nearest even), the others shared: the inputs on
// which a bf16 ring's cache equals an fp32 ring's (replay.Options.Ring).
func (l *layer) roundRing(in [][]float32) [][]float32 {
	out := append([][]float32(nil), in...)
	for _, f := range l.ringFields {
		r := make([]float32, len(in[f]))
		for i, v := range in[f] {
			r[i] = numeric.F32FromBF16(numeric.BF16FromF32(v))
		}
		out[f] = r
	}
	return out
}

// testCase is one entry of a layer kind's table: options on one of its two
// shapes.
type testCase struct {
	name  string
	shape int // 0: the small shape, 1: the large one
	opt   replay.Options
	// twin names a case of the same shape that the pairs check runs in
	// lockstep with this one (a bf16 ring against the fp32 ring fed
	// rounded inputs; a window of 1 against the baseline).
	twin string
}

// The tables below cover, per layer kind, every replay checkpoint format
// with every read copy (4 × 4, half on each shape) and every baseline state
// format, with windows of 1, small, the default and up to the GPU's ring of
// 32 entries (window + max draft), max drafts of 0 (no verify) up to
// MaxDraftLimit, and the bf16 ring and (GDN) the exact fold on some. nvfp4
// baseline states, stochastic rounding and windows past 32 are CPU-only
// matters, tested in package replay.

// mamba2Cases is the Mamba-2 table (22 entries).
func mamba2Cases() []testCase {
	return []testCase{
		{name: "baseline/fp32", opt: base(numeric.F32, 4)},
		{name: "baseline/fp16", opt: base(numeric.F16, 0)},
		{name: "baseline/e4m3", opt: base(numeric.E4M3, 3)},
		{name: "replay/fp32/L1", opt: rep(numeric.F32, numeric.F32, 1, 4), twin: "baseline/fp32"},
		{name: "replay/fp16+bf16/L16/T16", opt: rep(numeric.F16, numeric.BF16, 16, 16)},
		{name: "replay/bf16+e4m3/L3", opt: rep(numeric.BF16, numeric.E4M3, 3, 2)},
		{name: "replay/e4m3+nvfp4/L8", opt: rep(numeric.E4M3, numeric.NVFP4, 8, 4)},
		{name: "replay/fp16/L4/T0", opt: rep(numeric.F16, numeric.F32, 4, 0)},
		{name: "replay/bf16+nvfp4/L5", opt: rep(numeric.BF16, numeric.NVFP4, 5, 3)},
		{name: "replay/bf16+nvfp4/L5/bf16-ring", opt: ring(rep(numeric.BF16, numeric.NVFP4, 5, 3)), twin: "replay/bf16+nvfp4/L5"},
		{name: "replay/e4m3/L28", opt: rep(numeric.E4M3, numeric.F32, 28, 4)},
		{name: "replay/fp32+e4m3/L6", opt: rep(numeric.F32, numeric.E4M3, 6, 4)},

		{shape: 1, name: "baseline/bf16", opt: base(numeric.BF16, 4)},
		{shape: 1, name: "replay/fp32/L16", opt: rep(numeric.F32, numeric.F32, 16, 4)},
		{shape: 1, name: "replay/fp32+nvfp4/L16", opt: rep(numeric.F32, numeric.NVFP4, 16, 4)},
		{shape: 1, name: "replay/fp32+bf16/L5/bf16-ring", opt: ring(rep(numeric.F32, numeric.BF16, 5, 3))},
		{shape: 1, name: "replay/fp16+e4m3/L4", opt: rep(numeric.F16, numeric.E4M3, 4, 5)},
		{shape: 1, name: "replay/fp16+nvfp4/L1", opt: rep(numeric.F16, numeric.NVFP4, 1, 4)},
		{shape: 1, name: "replay/bf16/L6", opt: rep(numeric.BF16, numeric.F32, 6, 4)},
		{shape: 1, name: "replay/bf16+bf16/L3/T16", opt: rep(numeric.BF16, numeric.BF16, 3, 16)},
		{shape: 1, name: "replay/e4m3+bf16/L12", opt: rep(numeric.E4M3, numeric.BF16, 12, 3)},
		{shape: 1, name: "replay/e4m3+e4m3/L5", opt: rep(numeric.E4M3, numeric.E4M3, 5, 2)},
	}
}

// gdnCases is the Gated DeltaNet table (21 entries on the GPU, whose GDN
// caches keep an fp32 ring; 22 on the CPU). Without a read copy a flush
// folds the ring's cached u unless ExactFold: both are here.
func gdnCases() []testCase {
	return []testCase{
		{name: "baseline/fp32", opt: base(numeric.F32, 4)},
		{name: "baseline/fp16", opt: base(numeric.F16, 0)},
		{name: "baseline/e4m3", opt: base(numeric.E4M3, 3)},
		{name: "replay/fp32/L1", opt: rep(numeric.F32, numeric.F32, 1, 4), twin: "baseline/fp32"},
		{name: "replay/fp16+bf16/L16/T16", opt: rep(numeric.F16, numeric.BF16, 16, 16)},
		{name: "replay/bf16+e4m3/L3", opt: rep(numeric.BF16, numeric.E4M3, 3, 2)},
		{name: "replay/e4m3+nvfp4/L8", opt: rep(numeric.E4M3, numeric.NVFP4, 8, 4)},
		{name: "replay/fp16/L4/T0/exact-fold", opt: exact(rep(numeric.F16, numeric.F32, 4, 0))},
		{name: "replay/bf16+nvfp4/L5", opt: rep(numeric.BF16, numeric.NVFP4, 5, 3)},
		{name: "replay/bf16+nvfp4/L5/bf16-ring", opt: ring(rep(numeric.BF16, numeric.NVFP4, 5, 3)), twin: "replay/bf16+nvfp4/L5"},
		{name: "replay/e4m3/L28", opt: rep(numeric.E4M3, numeric.F32, 28, 4)},
		{name: "replay/fp32+e4m3/L6", opt: rep(numeric.F32, numeric.E4M3, 6, 4)},

		{shape: 1, name: "baseline/bf16", opt: base(numeric.BF16, 4)},
		{shape: 1, name: "replay/fp32/L16", opt: rep(numeric.F32, numeric.F32, 16, 4)},
		{shape: 1, name: "replay/fp32+nvfp4/L16", opt: rep(numeric.F32, numeric.NVFP4, 16, 4)},
		{shape: 1, name: "replay/fp32+bf16/L5", opt: rep(numeric.F32, numeric.BF16, 5, 3)},
		{shape: 1, name: "replay/fp16+e4m3/L4", opt: rep(numeric.F16, numeric.E4M3, 4, 5)},
		{shape: 1, name: "replay/fp16+nvfp4/L1", opt: rep(numeric.F16, numeric.NVFP4, 1, 4)},
		{shape: 1, name: "replay/bf16/L6/exact-fold", opt: exact(rep(numeric.BF16, numeric.F32, 6, 4))},
		{shape: 1, name: "replay/bf16+bf16/L3/T16", opt: rep(numeric.BF16, numeric.BF16, 3, 16)},
		{shape: 1, name: "replay/e4m3+bf16/L12", opt: rep(numeric.E4M3, numeric.BF16, 12, 3)},
		{shape: 1, name: "replay/e4m3+e4m3/L5", opt: rep(numeric.E4M3, numeric.E4M3, 5, 2)},
	}
}

// kdaCases is the Kimi Delta Attention table: the Gated DeltaNet one, whose
// folds (of cached u, or exact) KDA shares.
func kdaCases() []testCase { return gdnCases() }

func base(state numeric.Format, maxDraft int) replay.Options {
	return replay.Options{Mode: replay.Baseline, State: state, MaxDraft: maxDraft}
}

func rep(state, read numeric.Format, window, maxDraft int) replay.Options {
	return replay.Options{Mode: replay.Replay, State: state, ReadCopy: read, Window: window, MaxDraft: maxDraft}
}

func ring(o replay.Options) replay.Options { o.Ring = numeric.BF16; return o }

func exact(o replay.Options) replay.Options { o.ExactFold = true; return o }

// bound is the largest relative output error ‖y − ref‖₂/‖ref‖₂ per row that
// options allow against the float64 reference (on the inputs as the ring
// keeps them). The state format's and the read copy's add, at worst:
//   - fp32 state: 1e-5. float32 rounding (2^-24 ≈ 6e-8) over sums of ~N·t
//     terms of mixed sign and a few multiplications stays near 1e-6.
//   - fp16: each state write rounds elements by at most 2^-11 ≈ 4.9e-4
//     relative; an output sums many such elements with random signs, so its
//     relative error is of that order, and roundings of older writes decay
//     away; 1e-3 allows two aligned roundings.
//   - bf16: 2^-8 ≈ 3.9e-3 per element, the same argument: 8e-3.
//   - fp8 e4m3: 2^-4 = 6.25% per element at worst (3 mantissa bits) with a
//     per-matrix scale, so small elements lose more; sums average it: 0.1.
//   - nvfp4 (read copy): e2m1 steps are up to 1/3 of the value in a block
//     and the block scale adds e4m3 rounding: 0.35.
//
// GDN's and KDA's bounds above fp32 are doubled: the delta rule feeds the
// state error back through u = β(v − Sᵀk), a contraction (|1 − β·k·k| < 1),
// so the same rounding gives errors of the same order, but its outputs are
// smaller (‖q‖ = 1/√dk), so relative errors are about twice as large. KDA's
// per-channel decay does not change the argument: Diag(α) with α ≤ 1 only
// shrinks the state and its errors.
func bound(kind string, o replay.Options) float64 {
	f := map[numeric.Format]float64{numeric.F32: 1e-5, numeric.F16: 1e-3, numeric.BF16: 8e-3, numeric.E4M3: 0.1, numeric.NVFP4: 0.35}
	b := f[o.State]
	if o.ReadCopy != numeric.F32 {
		b += f[o.ReadCopy]
	}
	if (kind == "gdn" || kind == "kda") && b > 1e-5 {
		b *= 2
	}
	return b
}

// matrixBytes is what reading or writing one state matrix of e elements in
// format f moves, as replay.Stats counts it (docs/DESIGN.md 3): 4e bytes in
// fp32, 2e in fp16 and bf16, e + 4 in fp8 (its scale) and e/2 + e/16 + 4 in
// nvfp4.
func matrixBytes(f numeric.Format, e int) int64 {
	switch f {
	case numeric.F32:
		return int64(4 * e)
	case numeric.F16, numeric.BF16:
		return int64(2 * e)
	case numeric.E4M3:
		return int64(e + 4)
	case numeric.NVFP4:
		return int64(e/2 + e/16 + 4)
	}
	panic(fmt.Sprintf("replaytest: no byte count for %v", f))
}

package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// The GPU state caches are checked the way package replay checks the CPU
// cache (harness_test.go): every output of every mode and precision against
// the float64 references of package ssm, on fresh random inputs, with outputs
// poisoned (NaN) before each run, over many steps with slots admitted,
// evicted and stepped in random subsets so that they sit at different flush
// phases; speculative verify/commit against sequential decoding; and a step
// captured in a CUDA graph against the same step launched directly.

// gpuLayer is what the tests need of a layer kind.
type gpuLayer struct {
	name     string
	width    int   // output floats per row
	perRow   []int // input floats per row, one per input field
	refState func() []float64
	// ringFields are the input fields a bf16 ring keeps rounded
	// (replay.Options.Ring): Mamba-2's x and B, GDN's k and v.
	ringFields []int
	draw       func(rng *rand.Rand, rows int) [][]float32
	ref        func(state []float64, in [][]float32, r int) []float64
	// buildWith makes a cache with the kernel knobs given; build with the
	// environment's (REPLAYSSM_CUDA_*, so device runs can try -D switches).
	buildWith func(d *Device, opt replay.Options, capacity int, tn tuning) (*gpuCache, error)
}

func (l gpuLayer) build(d *Device, opt replay.Options, capacity int) (*gpuCache, error) {
	return l.buildWith(d, opt, capacity, envTuning(os.Getenv))
}

// gpuCache wraps either cache with inputs as device buffers in field order.
type gpuCache struct {
	admit  func(*Stream) (replay.Slot, error)
	evict  func(replay.Slot) error
	step   func(s *Stream, batch int, slots Buffer, in []Buffer, y Buffer) error
	verify func(s *Stream, batch, T int, slots, counts Buffer, in []Buffer, y Buffer) error
	commit func(s *Stream, batch int, slots, acc Buffer) error
	errs   func(s *Stream) error
	close  func() error
	// pipelined reports whether the non-flush step and the verify run the
	// pipelined v5 kernels.
	pipelined func() (step, verify bool)
	// stepKernel and verifyKernel name the kernels of the non-flush slots
	// of a step and of the verified slots with no early fold.
	stepKernel   func(batch int) string
	verifyKernel func(batch int) string
	// plan is the pipelined kernels' launch plan.
	plan func() pipeline
	// setSmallBatch sets the largest batch whose step runs as one kernel.
	setSmallBatch func(int)
	// ringU is the GDN ring's cached u rows (nil for Mamba-2).
	ringU func() Buffer
	// foldKernel names the kernels that fold checkpoints ("v7" or
	// "items") and why not v7.
	foldKernel func() (string, string)
	// streamFold reports whether a verify's early folds are
	// gdn_fold_stream (planFoldStream).
	streamFold func() bool
	// streamFlush reports whether a step's flush is gdn_flush_stream.
	streamFlush func() bool
	// common is the cache's shared part (its module, plans and trace).
	common func() *replayCommon
	// inexact reports whether the non-flush step or the verify sums in
	// another order than the v4 kernels (a group stream on the tensor
	// cores), so that its outputs, and what later reads its cached u,
	// match v4's within sameBound and not bit for bit.
	inexact func() bool
}

func mamba2TestLayer(seed uint64, shape ssm.Mamba2Shape) gpuLayer {
	return mamba2TestLayerWith(seed, shape, nil)
}

// mamba2TestLayerWith is mamba2TestLayer with its parameters changed by
// tweak (when not nil) before use.
func mamba2TestLayerWith(seed uint64, shape ssm.Mamba2Shape, tweak func(*replay.Mamba2Params)) gpuLayer {
	rng := rand.New(rand.NewPCG(seed, 1))
	H, P, N, G := shape.Heads, shape.HeadDim, shape.StateSize, shape.Groups
	var prm replay.Mamba2Params
	for range H {
		prm.ALog = append(prm.ALog, float32(math.Log(1+7*rng.Float64())))
		prm.DtBias = append(prm.DtBias, float32(rng.NormFloat64()*0.5-1))
		prm.D = append(prm.D, float32(rng.NormFloat64()))
	}
	if tweak != nil {
		tweak(&prm)
	}
	ref := ssm.Mamba2Params{ALog: to64(prm.ALog), DtBias: to64(prm.DtBias), D: to64(prm.D)}
	return gpuLayer{
		name:       fmt.Sprintf("mamba2-H%dP%dN%dG%d", H, P, N, G),
		width:      H * P,
		perRow:     []int{H * P, G * N, G * N, H},
		ringFields: []int{0, 1},
		refState:   func() []float64 { return make([]float64, shape.StateElems()) },
		draw: func(rng *rand.Rand, rows int) [][]float32 {
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
		},
		ref: func(state []float64, in [][]float32, r int) []float64 {
			y := make([]float64, H*P)
			ssm.Mamba2Step64(shape, ref, state, to64(in[0][r*H*P:(r+1)*H*P]), to64(in[1][r*G*N:(r+1)*G*N]),
				to64(in[2][r*G*N:(r+1)*G*N]), to64(in[3][r*H:(r+1)*H]), y)
			return y
		},
		buildWith: func(d *Device, opt replay.Options, capacity int, tn tuning) (*gpuCache, error) {
			c, err := newMamba2Cache(context.Background(), d, shape, prm, capacity, opt, tn)
			if err != nil {
				return nil, err
			}
			in := func(slots, counts Buffer, b []Buffer) Mamba2Input {
				return Mamba2Input{Slots: slots, X: b[0], B: b[1], C: b[2], Dt: b[3], Counts: counts}
			}
			return &gpuCache{
				admit: c.Admit, evict: c.Evict, commit: c.Commit, errs: c.CommitErrors, close: c.Close,
				pipelined:     func() (bool, bool) { step, verify, _ := c.Pipelined(); return step, verify },
				stepKernel:    c.StepKernel,
				verifyKernel:  c.VerifyKernel,
				plan:          func() pipeline { return c.pipe },
				setSmallBatch: func(n int) { c.smallBatch = n },
				foldKernel:    c.FoldKernel,
				streamFold:    func() bool { return false },
				streamFlush:   func() bool { return false },
				inexact:       func() bool { return c.group.tc || c.group.verifyTC || c.folds.tc || c.folds.verifyDots },
				common:        func() *replayCommon { return &c.replayCommon },
				step: func(s *Stream, batch int, slots Buffer, b []Buffer, y Buffer) error {
					return c.Step(s, batch, in(slots, Buffer{}, b), y)
				},
				verify: func(s *Stream, batch, T int, slots, counts Buffer, b []Buffer, y Buffer) error {
					return c.Verify(s, batch, T, in(slots, counts, b), y)
				},
			}, nil
		},
	}
}

func gdnTestLayer(seed uint64, shape ssm.GDNShape) gpuLayer {
	return gdnTestLayerWith(seed, shape, nil, nil)
}

// gdnTestLayerWith is gdnTestLayer with its parameters changed by tweak and
// its drawn inputs (q, k, v, a, b) by shift, where not nil.
func gdnTestLayerWith(seed uint64, shape ssm.GDNShape, tweak func(*replay.GDNParams), shift func([][]float32)) gpuLayer {
	rng := rand.New(rand.NewPCG(seed, 2))
	Hk, Hv, dk, dv := shape.KeyHeads, shape.ValueHeads, shape.KeyDim, shape.ValueDim
	var prm replay.GDNParams
	for range Hv {
		prm.ALog = append(prm.ALog, float32(math.Log(0.5+4*rng.Float64())))
		prm.DtBias = append(prm.DtBias, float32(rng.NormFloat64()*0.5-1))
	}
	if tweak != nil {
		tweak(&prm)
	}
	ref := ssm.GDNParams{ALog: to64(prm.ALog), DtBias: to64(prm.DtBias)}
	return gpuLayer{
		name:       fmt.Sprintf("gdn-Hk%dHv%ddk%ddv%d", Hk, Hv, dk, dv),
		width:      Hv * dv,
		perRow:     []int{Hk * dk, Hk * dk, Hv * dv, Hv, Hv},
		ringFields: []int{1, 2},
		refState:   func() []float64 { return make([]float64, shape.StateElems()) },
		draw: func(rng *rand.Rand, rows int) [][]float32 {
			f := [][]float32{make([]float32, rows*Hk*dk), make([]float32, rows*Hk*dk), make([]float32, rows*Hv*dv),
				make([]float32, rows*Hv), make([]float32, rows*Hv)}
			for _, v := range f {
				for i := range v {
					v[i] = float32(rng.NormFloat64())
				}
			}
			if shift != nil {
				shift(f)
			}
			return f
		},
		ref: func(state []float64, in [][]float32, r int) []float64 {
			// ssm.GDNStep64 keeps the state as [j][i][m] (key index i
			// major); the cache's transposed layout is its own business.
			o := make([]float64, Hv*dv)
			ssm.GDNStep64(shape, ref, state, to64(in[0][r*Hk*dk:(r+1)*Hk*dk]), to64(in[1][r*Hk*dk:(r+1)*Hk*dk]),
				to64(in[2][r*Hv*dv:(r+1)*Hv*dv]), to64(in[3][r*Hv:(r+1)*Hv]), to64(in[4][r*Hv:(r+1)*Hv]), o)
			return o
		},
		buildWith: func(d *Device, opt replay.Options, capacity int, tn tuning) (*gpuCache, error) {
			c, err := newGDNCache(context.Background(), d, shape, prm, capacity, opt, tn)
			if err != nil {
				return nil, err
			}
			in := func(slots, counts Buffer, b []Buffer) GDNInput {
				return GDNInput{Slots: slots, Q: b[0], K: b[1], V: b[2], A: b[3], B: b[4], Counts: counts}
			}
			return &gpuCache{
				admit: c.Admit, evict: c.Evict, commit: c.Commit, errs: c.CommitErrors, close: c.Close,
				pipelined:     func() (bool, bool) { step, verify, _ := c.Pipelined(); return step, verify },
				stepKernel:    c.StepKernel,
				verifyKernel:  c.VerifyKernel,
				plan:          func() pipeline { return c.pipe },
				setSmallBatch: func(n int) { c.smallBatch = n },
				foldKernel:    c.FoldKernel,
				ringU:         func() Buffer { return c.ringU },
				streamFold:    func() bool { return c.group.stream != nil },
				streamFlush:   func() bool { return c.group.flushFn != nil },
				inexact:       func() bool { return c.group.tc || c.group.verifyTC || c.group.foldDots },
				common:        func() *replayCommon { return &c.replayCommon },
				step: func(s *Stream, batch int, slots Buffer, b []Buffer, y Buffer) error {
					return c.Step(s, batch, in(slots, Buffer{}, b), y)
				},
				verify: func(s *Stream, batch, T int, slots, counts Buffer, b []Buffer, y Buffer) error {
					return c.Verify(s, batch, T, in(slots, counts, b), y)
				},
			}, nil
		},
	}
}

func to64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}

// smallLayers are the CPU harness's shapes; largeLayers have the target
// models' head dimensions (rows of 128, 80 rows per Mamba-2 head), which
// take the kernels' multi-pass paths.
func smallLayers() []gpuLayer {
	return []gpuLayer{
		mamba2TestLayer(11, ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 16, Groups: 2}),
		gdnTestLayer(12, ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8}),
	}
}

func largeLayers() []gpuLayer {
	return []gpuLayer{
		mamba2TestLayer(13, ssm.Mamba2Shape{Heads: 4, HeadDim: 80, StateSize: 128, Groups: 2}),
		gdnTestLayer(14, ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128}),
	}
}

// staging holds a test's device-side inputs and outputs.
type staging struct {
	slots, counts, acc, y Buffer
	in                    []Buffer
}

func newStaging(t *testing.T, d *Device, l gpuLayer, rows, batch int) *staging {
	st := &staging{
		slots:  alloc(t, d, 4*batch),
		counts: alloc(t, d, 4*batch),
		acc:    alloc(t, d, 4*batch),
		y:      alloc(t, d, 4*rows*l.width),
	}
	for _, n := range l.perRow {
		st.in = append(st.in, alloc(t, d, 4*rows*n))
	}
	return st
}

func i32Bytes(v []int) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(int32(x)))
	}
	return b
}

func slotInts(slots []replay.Slot) []int {
	out := make([]int, len(slots))
	for i, s := range slots {
		out[i] = int(s)
	}
	return out
}

// upload copies the slots and the input fields, and poisons the output.
func (st *staging) upload(t *testing.T, d *Device, s *Stream, slots []replay.Slot, in [][]float32) {
	t.Helper()
	must(t, s.CopyToDevice(st.slots, i32Bytes(slotInts(slots))))
	for i, f := range in {
		must(t, s.CopyToDevice(st.in[i], f32Bytes(f)))
	}
	must(t, d.FillF32(context.Background(), s, st.y, float32(math.NaN())))
}

func (st *staging) download(t *testing.T, s *Stream, n int) []float32 {
	t.Helper()
	y := make([]float32, n)
	must(t, s.CopyFromDevice(f32Bytes(y), st.y))
	return y
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

type gpuCase struct {
	name  string
	opt   replay.Options
	bound float64
}

// gpuCases are the modes and precisions the GPU caches support, with the
// bounds of replay/mamba2_test.go precisionCases (‖y−ref‖/‖ref‖ per
// slot-step; doubled for GDN above fp32, whose outputs are smaller).
func gpuCases(window int) []gpuCase {
	r := func(state, read numeric.Format) replay.Options {
		return replay.Options{Mode: replay.Replay, Window: window, MaxDraft: 4, State: state, ReadCopy: read}
	}
	b := func(state numeric.Format) replay.Options {
		return replay.Options{Mode: replay.Baseline, MaxDraft: 4, State: state}
	}
	return []gpuCase{
		{"baseline/fp32", b(numeric.F32), 1e-5},
		{"replay/fp32", r(numeric.F32, numeric.F32), 1e-5},
		{"replay-L1/fp32", replay.Options{Mode: replay.Replay, Window: 1, MaxDraft: 4}, 1e-5},
		{"baseline/fp16", b(numeric.F16), 1e-3},
		{"replay/fp16", r(numeric.F16, numeric.F32), 1e-3},
		{"baseline/bf16", b(numeric.BF16), 8e-3},
		{"replay/bf16", r(numeric.BF16, numeric.F32), 8e-3},
		{"replay/fp32+bf16", r(numeric.F32, numeric.BF16), 8e-3},
		{"baseline/e4m3", b(numeric.E4M3), 0.1},
		{"replay/e4m3", r(numeric.E4M3, numeric.F32), 0.1},
		{"replay/fp32+e4m3", r(numeric.F32, numeric.E4M3), 0.1},
		{"replay/fp32+nvfp4", r(numeric.F32, numeric.NVFP4), 0.35},
		{"replay/bf16+nvfp4", r(numeric.BF16, numeric.NVFP4), 0.35},
		{"replay/fp16+nvfp4", r(numeric.F16, numeric.NVFP4), 0.35},
	}
}

func boundFor(l gpuLayer, b float64) float64 {
	if l.name[:3] == "gdn" && b > 1e-5 {
		return 2 * b
	}
	return b
}

// TestReplayCacheMatchesReference drives every GPU mode and precision for
// 6·L+3 steps with random batch composition and slots admitted and evicted
// mid-stream (so slots flush at different phases within one launch),
// comparing every output with the float64 reference.
func TestReplayCacheMatchesReference(t *testing.T) {
	d := gpu(t)
	const L = 5
	layers := append(smallLayers(), largeLayers()...)
	// The GDN fold on tensor cores (TC_FOLD) where gdnModule leaves it off
	// by default (read copies, fp8 checkpoints), and the FMA fold where it
	// is on: the large GDN layer's replay cases again with the other
	// ("/tc", "/fma"; its blocks are 16 rows a warp).
	tcLayer := largeLayers()[1].name
	// The Mamba-2 pipelined folds on the tensor cores (M2_TC_FOLD, off by
	// default): the large Mamba-2 layer's replay cases again with it
	// ("/m2tc"; 80 rows on 5 warps).
	m2TCLayer := largeLayers()[0].name
	type variant struct {
		li, ci int
		l      gpuLayer
		tc     gpuCase
		tn     tuning
		name   string
	}
	var runs []variant
	for li, l := range layers {
		for ci, tc := range gpuCases(L) {
			if li >= 2 && (tc.name == "replay-L1/fp32" || tc.name == "baseline/fp32") {
				continue // the small shapes cover these; keep compile time down
			}
			runs = append(runs, variant{li, ci, l, tc, envTuning(os.Getenv), l.name + "/" + tc.name})
			// The GDN flush folds the ring's cached u where there is no
			// read copy (replay.Options.FoldsCachedU); the exact fold
			// there too with ExactFold: "/exact-fold".
			if l.name[:3] == "gdn" && tc.opt.FoldsCachedU() {
				tc := tc
				tc.opt.ExactFold = true
				runs = append(runs, variant{li, ci, l, tc, envTuning(os.Getenv), l.name + "/" + tc.name + "/exact-fold"})
			}
			if l.name == tcLayer && tc.opt.Mode == replay.Replay {
				// The other fold: "/tc" where the default is the FMA fold,
				// "/fma" where it is the tensor cores'.
				tn, name, on := envTuning(os.Getenv), "/tc", "1"
				if tcFold(tc.opt) {
					name, on = "/fma", "0"
				}
				tn.defines = append(slices.Clip(tn.defines), "-DTC_FOLD="+on)
				runs = append(runs, variant{li, ci, l, tc, tn, l.name + "/" + tc.name + name})
			}
			if strings.HasPrefix(l.name, "mamba2") && (tc.name == "replay/fp32" || tc.name == "replay/bf16+nvfp4") {
				// A bf16 ring (Mamba-2's): the reference is fed the
				// inputs rounded as the ring keeps them.
				tc := tc
				tc.opt.Ring = numeric.BF16
				tn := envTuning(os.Getenv)
				runs = append(runs, variant{li, ci, l, tc, tn, l.name + "/" + tc.name + "/bf16-ring"})
			}
			if l.name == m2TCLayer && tc.opt.Mode == replay.Replay {
				// The Mamba-2 pipelined folds both ways: on the tensor
				// cores and by FMA (one is the default).
				for _, v := range []struct{ on, name string }{{"1", "/m2tc"}, {"0", "/m2fma"}, {"1", "/m2tc-packed"}} {
					tn := envTuning(os.Getenv)
					tn.m2TCFold = v.on
					if v.name == "/m2tc-packed" { // its checkpoint read in order (M2_TC_SROT=0)
						tn.defines = append(slices.Clip(tn.defines), "-DM2_TC_SROT=0")
					}
					runs = append(runs, variant{li, ci, l, tc, tn, l.name + "/" + tc.name + v.name})
				}
			}
		}
	}
	for _, r := range runs {
		li, ci, l, tc := r.li, r.ci, r.l, r.tc
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			const capacity = 6
			c, err := l.buildWith(d, tc.opt, capacity, r.tn)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { must(t, c.close()) }()
			s := stream(t, d)
			st := newStaging(t, d, l, capacity, capacity)
			rng := rand.New(rand.NewPCG(uint64(100*li+ci), 9))
			refs := map[replay.Slot][]float64{}
			var order []replay.Slot
			worst := 0.0
			bound := boundFor(l, tc.bound)
			for step := 0; step < 6*L+3; step++ {
				if len(refs) < capacity && (len(refs) < 2 || rng.IntN(3) == 0) {
					slot, err := c.admit(s)
					if err != nil {
						t.Fatal(err)
					}
					refs[slot] = l.refState()
					order = append(order, slot)
				}
				if len(order) > 2 && rng.IntN(6) == 0 {
					i := rng.IntN(len(order))
					must(t, c.evict(order[i]))
					delete(refs, order[i])
					order = append(order[:i], order[i+1:]...)
				}
				var slots []replay.Slot
				for _, slot := range order {
					if rng.IntN(4) != 0 {
						slots = append(slots, slot)
					}
				}
				rng.Shuffle(len(slots), func(i, j int) { slots[i], slots[j] = slots[j], slots[i] })
				if len(slots) == 0 {
					continue
				}
				in := l.draw(rng, len(slots))
				st.upload(t, d, s, slots, in)
				must(t, c.step(s, len(slots), st.slots, st.in, st.y))
				y := st.download(t, s, len(slots)*l.width)
				refIn := in
				if tc.opt.Ring == numeric.BF16 {
					refIn = roundRingFields(l, in)
				}
				for i, slot := range slots {
					e := relErr(y[i*l.width:(i+1)*l.width], l.ref(refs[slot], refIn, i))
					worst = max(worst, e)
					if e > bound {
						t.Fatalf("step %d slot %d: relative error %.3g > %.3g", step, slot, e, bound)
					}
				}
			}
			t.Logf("worst relative error %.3g (bound %.3g)", worst, bound)
		})
	}
}

// TestReplayCacheSpeculative is the metamorphic test of speculative decoding
// on the GPU: each round every slot verifies a random number of drafts (per
// slot counts in device memory) and accepts a random prefix (accepted counts
// in device memory). Committed outputs must equal plain sequential decoding
// of the accepted inputs, drafts past the accepted ones must match a scratch
// reference, rows past a slot's count must stay unwritten, and rejected
// drafts must leave no trace. Plain steps are mixed in.
func TestReplayCacheSpeculative(t *testing.T) {
	d := gpu(t)
	type spec struct {
		name    string
		opt     replay.Options
		layers  []gpuLayer
		defines []string // NVRTC options past REPLAYSSM_CUDA_DEFINES'
	}
	// The GDN fold on tensor cores where gdnModule leaves it off by
	// default (nvfp4 read copies) and the FMA fold where it is on (fp32
	// checkpoints without a read copy): the verify's early folds and the
	// flushes (largeLayers()[1]: blocks of 16 rows a warp).
	tcGDN := largeLayers()[1:]
	tc, fma := []string{"-DTC_FOLD=1"}, []string{"-DTC_FOLD=0"}
	gdnLayers := []gpuLayer{smallLayers()[1], largeLayers()[1]}
	specs := []spec{
		{"replay-L16", replay.Options{Mode: replay.Replay, Window: 16, MaxDraft: 5}, smallLayers(), nil},
		{"replay-L4", replay.Options{Mode: replay.Replay, Window: 4, MaxDraft: 5}, append(smallLayers(), largeLayers()...), nil},
		{"replay-L1", replay.Options{Mode: replay.Replay, Window: 1, MaxDraft: 3}, smallLayers(), nil},
		{"baseline", replay.Options{Mode: replay.Baseline, MaxDraft: 5}, append(smallLayers(), largeLayers()...), nil},
		{"baseline-bf16", replay.Options{Mode: replay.Baseline, MaxDraft: 4, State: numeric.BF16}, smallLayers(), nil},
		{"replay-nvfp4", replay.Options{Mode: replay.Replay, Window: 8, MaxDraft: 4, ReadCopy: numeric.NVFP4}, append(smallLayers(), largeLayers()...), nil},
		{"replay-e4m3", replay.Options{Mode: replay.Replay, Window: 6, MaxDraft: 4, State: numeric.E4M3}, append(smallLayers(), largeLayers()...), nil},
		{"replay-fp16+e4m3", replay.Options{Mode: replay.Replay, Window: 6, MaxDraft: 4, State: numeric.F16, ReadCopy: numeric.E4M3}, smallLayers(), nil},
		{"baseline-e4m3", replay.Options{Mode: replay.Baseline, MaxDraft: 4, State: numeric.E4M3}, append(smallLayers(), largeLayers()...), nil},
		// A 2-byte checkpoint folds on the tensor cores by default (tcFold).
		{"replay-bf16", replay.Options{Mode: replay.Replay, Window: 6, MaxDraft: 4, State: numeric.BF16}, largeLayers(), nil},
		{"replay-L4-fma", replay.Options{Mode: replay.Replay, Window: 4, MaxDraft: 5}, tcGDN, fma},
		{"replay-nvfp4-tc", replay.Options{Mode: replay.Replay, Window: 8, MaxDraft: 4, ReadCopy: numeric.NVFP4}, tcGDN, tc},
		// The GDN exact fold where the default folds the ring's cached u
		// (replay.Options.ExactFold): the verify's early folds and the
		// flushes, fp32, bf16 (tensor-core update) and fp8 checkpoints.
		{"replay-L4-exact-fold", replay.Options{Mode: replay.Replay, Window: 4, MaxDraft: 5, ExactFold: true}, gdnLayers, nil},
		{"replay-bf16-exact-fold", replay.Options{Mode: replay.Replay, Window: 6, MaxDraft: 4, State: numeric.BF16, ExactFold: true}, gdnLayers, nil},
		{"replay-e4m3-exact-fold", replay.Options{Mode: replay.Replay, Window: 6, MaxDraft: 4, State: numeric.E4M3, ExactFold: true}, gdnLayers, nil},
		// Mamba-2's bf16 ring against the reference fed rounded inputs.
		{"replay-L4-bf16-ring", replay.Options{Mode: replay.Replay, Window: 4, MaxDraft: 5, Ring: numeric.BF16},
			[]gpuLayer{smallLayers()[0], largeLayers()[0]}, nil},
	}
	for si, sp := range specs {
		for li, l := range sp.layers {
			t.Run(l.name+"/"+sp.name, func(t *testing.T) {
				t.Parallel()
				// The bounds of gpuCases, for the coarsest format in play.
				bound := boundFor(l, 1e-5)
				switch {
				case sp.opt.ReadCopy == numeric.NVFP4:
					bound = boundFor(l, 0.35)
				case sp.opt.State == numeric.E4M3 || sp.opt.ReadCopy == numeric.E4M3:
					bound = boundFor(l, 0.1)
				case sp.opt.State == numeric.BF16:
					bound = boundFor(l, 8e-3)
				}
				const nslots = 4
				tn := envTuning(os.Getenv)
				tn.defines = append(slices.Clip(tn.defines), sp.defines...)
				// ref is the layer's reference on the inputs as the
				// cache's ring keeps them.
				ref := func(state []float64, in [][]float32, r int) []float64 {
					if sp.opt.Ring == numeric.BF16 {
						in = roundRingFields(l, in)
					}
					return l.ref(state, in, r)
				}
				c, err := l.buildWith(d, sp.opt, nslots, tn)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { must(t, c.close()) }()
				s := stream(t, d)
				maxT := sp.opt.MaxDraft
				st := newStaging(t, d, l, nslots*maxT, nslots)
				rng := rand.New(rand.NewPCG(uint64(10*si+li), 5))
				var slots []replay.Slot
				refs := map[replay.Slot][]float64{}
				for range nslots {
					slot, err := c.admit(s)
					if err != nil {
						t.Fatal(err)
					}
					slots = append(slots, slot)
					refs[slot] = l.refState()
				}
				w := l.width
				worst := 0.0
				for round := 0; round < 100; round++ {
					if rng.IntN(5) == 0 {
						in := l.draw(rng, len(slots))
						st.upload(t, d, s, slots, in)
						must(t, c.step(s, len(slots), st.slots, st.in, st.y))
						y := st.download(t, s, len(slots)*w)
						for i, slot := range slots {
							if e := relErr(y[i*w:(i+1)*w], ref(refs[slot], in, i)); e > bound {
								t.Fatalf("round %d step slot %d: error %.3g", round, slot, e)
							}
						}
						continue
					}
					T := 1 + rng.IntN(maxT)
					counts := make([]int, len(slots))
					for i := range counts {
						counts[i] = 1 + rng.IntN(T)
					}
					in := l.draw(rng, len(slots)*T)
					st.upload(t, d, s, slots, in)
					must(t, s.CopyToDevice(st.counts, i32Bytes(counts)))
					must(t, c.verify(s, len(slots), T, st.slots, st.counts, st.in, st.y))
					y := st.download(t, s, len(slots)*T*w)
					acc := make([]int, len(slots))
					for i, slot := range slots {
						acc[i] = rng.IntN(counts[i] + 1)
						scratch := append([]float64(nil), refs[slot]...)
						for k := 0; k < counts[i]; k++ {
							r := i*T + k
							state := scratch
							if k < acc[i] {
								state = refs[slot]
							}
							want := ref(state, in, r)
							if k < acc[i] {
								copy(scratch, refs[slot])
							}
							e := relErr(y[r*w:(r+1)*w], want)
							worst = max(worst, e)
							if e > bound {
								t.Fatalf("round %d slot %d draft %d/%d (T %d): error %.3g", round, slot, k, counts[i], T, e)
							}
						}
						for k := counts[i]; k < T; k++ {
							if v := y[(i*T+k)*w]; !math.IsNaN(float64(v)) {
								t.Fatalf("round %d slot %d: row %d past the draft count was written", round, slot, k)
							}
						}
					}
					must(t, s.CopyToDevice(st.acc, i32Bytes(acc)))
					must(t, c.commit(s, len(slots), st.slots, st.acc))
				}
				must(t, c.errs(s))
				t.Logf("worst relative error %.3g (bound %.3g)", worst, bound)
			})
		}
	}
}

// TestReplayCacheGraph captures a decode step (the one-kernel step, and
// the split kernels: GDN's on two streams) and a verify + commit in CUDA
// graphs and replays them on one cache while
// another cache runs the same inputs with direct launches: outputs must be
// bit-identical at every step, across flushes and early folds, which shows
// that no per-slot decision needs the host.
func TestReplayCacheGraph(t *testing.T) {
	d := gpu(t)
	for _, l := range smallLayers() {
		// "small": the one-kernel step; "split": the flush and non-flush
		// kernels (for GDN on two streams, OVERLAP: the fork and join are
		// the graph's edges).
		for _, mode := range []string{"small", "split"} {
			// A bf16 ring (Mamba-2's) adds round_bf16's launches to the
			// captured step and verify.
			for _, ring := range []numeric.Format{numeric.F32, numeric.BF16} {
				if ring == numeric.BF16 && l.name[:3] == "gdn" {
					continue
				}
				name := l.name + "/" + mode
				if ring != numeric.F32 {
					name += "/" + ring.String() + "-ring"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					graphRounds(t, d, l, mode == "split", ring)
				})
			}
		}
	}
}

// graphRounds is TestReplayCacheGraph for one layer and ring format: every
// step through the split kernels where split.
func graphRounds(t *testing.T, d *Device, l gpuLayer, split bool, ring numeric.Format) {
	opt := replay.Options{Mode: replay.Replay, Window: 4, MaxDraft: 2, ReadCopy: numeric.NVFP4, Ring: ring}
	const nslots, T = 3, 2
	tn := envTuning(os.Getenv)
	direct, err := l.buildWith(d, opt, nslots, tn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { must(t, direct.close()) }()
	graphed, err := l.buildWith(d, opt, nslots, tn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { must(t, graphed.close()) }()
	if split {
		direct.setSmallBatch(0)
		graphed.setSmallBatch(0)
	}
	s := stream(t, d)
	sd := newStaging(t, d, l, nslots*T, nslots)
	sg := newStaging(t, d, l, nslots*T, nslots)
	slots := admitBoth(t, s, direct, graphed, nslots)
	must(t, s.Synchronize())
	must(t, s.CopyToDevice(sg.slots, i32Bytes(slotInts(slots))))
	capture := func(enqueue func() error) *GraphExec {
		must(t, s.BeginCapture())
		err := enqueue()
		g, cerr := s.EndCapture()
		must(t, err)
		must(t, cerr)
		x, err := g.Instantiate()
		must(t, err)
		must(t, g.Close())
		t.Cleanup(func() { x.Close() })
		return x
	}
	stepGraph := capture(func() error { return graphed.step(s, nslots, sg.slots, sg.in, sg.y) })
	verifyGraph := capture(func() error {
		if err := graphed.verify(s, nslots, T, sg.slots, Buffer{}, sg.in, sg.y); err != nil {
			return err
		}
		return graphed.commit(s, nslots, sg.slots, sg.acc)
	})
	rng := rand.New(rand.NewPCG(3, 3))
	for round := 0; round < 40; round++ {
		verify := round%3 == 2
		rows := nslots
		if verify {
			rows = nslots * T
		}
		in := l.draw(rng, rows)
		sd.upload(t, d, s, slots, in)
		sg.upload(t, d, s, slots, in)
		if verify {
			acc := []int{rng.IntN(T + 1), rng.IntN(T + 1), rng.IntN(T + 1)}
			must(t, s.CopyToDevice(sd.acc, i32Bytes(acc)))
			must(t, s.CopyToDevice(sg.acc, i32Bytes(acc)))
			must(t, direct.verify(s, nslots, T, sd.slots, Buffer{}, sd.in, sd.y))
			must(t, direct.commit(s, nslots, sd.slots, sd.acc))
			must(t, verifyGraph.Launch(s))
		} else {
			must(t, direct.step(s, nslots, sd.slots, sd.in, sd.y))
			must(t, stepGraph.Launch(s))
		}
		a := sd.download(t, s, rows*l.width)
		b := sg.download(t, s, rows*l.width)
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) || math.IsNaN(float64(a[i])) {
				t.Fatalf("round %d (verify %v): output %d direct %v graph %v", round, verify, i, a[i], b[i])
			}
		}
	}
}

// TestReplayPipelineMatchesV4 runs the same random sequence of steps,
// verifies (random draft counts) and commits (random acceptance) through the
// pipelined v5 kernels (REPLAYSSM_CUDA_KERNELS=v5: the v5 step too) and
// through the v4 kernels (REPLAYSSM_CUDA_KERNELS=v4) and requires
// bit-identical outputs: v5 keeps v4's order of operations, so any
// difference is a bug in the pipeline (a stage read before its copy landed,
// a wrong ring entry, a skipped item). Both layers also run the group step
// (v6, the default) and the group verify (v6) against v4. The
// float64 comparisons of TestReplayCacheMatchesReference cover every kernel
// against the reference.
func TestReplayPipelineMatchesV4(t *testing.T) {
	d := gpu(t)
	if major, _ := d.ComputeCapability(); major < 9 {
		t.Skip("pipelined kernels need sm_90 (bulk copies); this GPU runs v4 only")
	}
	layers := append(smallLayers(), largeLayers()...)
	opts := []struct {
		name string
		opt  replay.Options
	}{
		{"fp32", replay.Options{Mode: replay.Replay, Window: 6, MaxDraft: 3}},
		{"bf16", replay.Options{Mode: replay.Replay, Window: 6, MaxDraft: 3, State: numeric.BF16}},
		{"fp32+nvfp4", replay.Options{Mode: replay.Replay, Window: 6, MaxDraft: 3, ReadCopy: numeric.NVFP4}},
		{"e4m3", replay.Options{Mode: replay.Replay, Window: 6, MaxDraft: 3, State: numeric.E4M3}},
		{"fp16+e4m3", replay.Options{Mode: replay.Replay, Window: 6, MaxDraft: 3, State: numeric.F16, ReadCopy: numeric.E4M3}},
		{"fp32+bf16", replay.Options{Mode: replay.Replay, Window: 6, MaxDraft: 3, ReadCopy: numeric.BF16}},
	}
	for li, l := range layers {
		for _, o := range opts {
			// v5 (and its grid bounded to three blocks), v6, v6 with one
			// ring entry staged in shared memory, the others read from
			// global memory, and v6 in blocks of 64 and 128 threads
			// (REPLAYSSM_CUDA_GROUP_THREADS; 128 takes the GDN group
			// verify's paired passes for 2-byte states, GV_PAIR).
			runs := []struct {
				kernels string
				blocks  int
				threads int
			}{{"v5", 0, 0}, {"v5", 3, 0}, {"v6", 0, 0}, {"v6", 1, 0}, {"v6", 0, 64}, {"v6", 0, 128}}
			for _, r := range runs {
				name := l.name + "/" + o.name + "/" + r.kernels
				switch {
				case r.threads == 64:
					// The early folds one block per (head, slot)
					// (REPLAYSSM_CUDA_FOLD_ITEMS=0), not the resident grid.
					name += fmt.Sprintf("/threads=%d/fold_early", r.threads)
				case r.threads != 0:
					name += fmt.Sprintf("/threads=%d", r.threads)
				case r.kernels == "v6" && r.blocks != 0:
					// One ring entry in shared memory, the others read from
					// global memory; two blocks take every item in turn, and
					// the verify's early folds run on two blocks too
					// (REPLAYSSM_CUDA_FOLD_ITEMS).
					name += fmt.Sprintf("/xstaged=%d/blocks=2/fold_items", r.blocks)
				case r.blocks != 0:
					// Three blocks stream every item: each passes many items
					// through its stages, using every mbarrier phase.
					name += fmt.Sprintf("/blocks=%d", r.blocks)
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					pipelineMatchesV4(t, d, li, l, o.opt, r.kernels, r.blocks, r.threads)
				})
			}
		}
	}
}

// TestReplayStepSmallMatchesSplit checks the one-kernel step of small
// batches (flush and non-flush slots together, cursors moved by the
// kernel's last block) against the split kernels bit for bit: both keep the
// same order of operations. Twice: with whole heads on both sides (the
// same module, the GDN fold on tensor cores forced, -DTC_FOLD=1, where it
// applies), and with the small step's heads split as planned
// (planHeadSplit) against whole heads, both on the FMA fold (-DTC_FOLD=0):
// the split module's blocks of 32 rows fold by FMA, whose sums' order the
// tensor-core fold does not keep.
func TestReplayStepSmallMatchesSplit(t *testing.T) {
	d := gpu(t)
	t.Run("whole", func(t *testing.T) {
		tn := envTuning(os.Getenv)
		tn.headSplit = 1
		tn.m2TCFold = "0" // the small step's Mamba-2 flush folds by FMA
		tn.defines = append(slices.Clip(tn.defines), "-DTC_FOLD=1")
		comparePairs(t, d, pairVariant{"small", tn, pairSlots, ""}, pairVariant{"split", tn, 0, ""})
	})
	t.Run("heads", func(t *testing.T) {
		tn := envTuning(os.Getenv)
		tn.m2TCFold = "0"
		tn.defines = append(slices.Clip(tn.defines), "-DTC_FOLD=0")
		comparePairs(t, d, pairVariant{"small", tn, pairSlots, ""}, pairVariant{"split", tn, 0, ""})
	})
}

// TestReplayFoldCachedReadsRing checks that the GDN flush folds the
// ring's cached u where there is no read copy (replay.Options.FoldsCachedU,
// FOLD_CACHED) and that the exact fold does not: after L-1 steps of one
// slot its ring's u rows are poisoned (NaN), the next step flushes, and
// the step after reads the new checkpoint alone (its ring holds only its
// own entry). The exact fold (ExactFold, or an nvfp4 read copy, where the
// fold is always exact) must still match the float64 reference there;
// the cached fold, having folded the poison, must not (a NaN output).
func TestReplayFoldCachedReadsRing(t *testing.T) {
	d := gpu(t)
	const L = 5
	l := largeLayers()[1]
	for _, tc := range []struct {
		name    string
		read    numeric.Format
		exact   bool
		poisons bool
		folds   string // REPLAYSSM_CUDA_FOLDS: "pipe" for the pipelined folds (v7)
	}{
		{"exact", numeric.F32, true, false, ""},
		{"cached", numeric.F32, false, true, ""},
		{"cached/nvfp4", numeric.NVFP4, false, false, ""},
		{"exact/pipe", numeric.F32, true, false, "pipe"},
		{"cached/pipe", numeric.F32, false, true, "pipe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tn := envTuning(os.Getenv)
			if tc.folds != "" {
				if major, _ := d.ComputeCapability(); major < 9 {
					t.Skip("the pipelined folds need sm_90 (bulk copies)")
				}
				tn.folds = tc.folds
			}
			opt := replay.Options{Mode: replay.Replay, Window: L, MaxDraft: 4, ReadCopy: tc.read, ExactFold: tc.exact}
			c, err := l.buildWith(d, opt, 2, tn)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { must(t, c.close()) }()
			if got, why := c.foldKernel(); tc.folds == "pipe" && got != "v7" {
				t.Fatalf("fold kernels %s (%s), want the pipelined folds", got, why)
			}
			s := stream(t, d)
			st := newStaging(t, d, l, 1, 1)
			slot, err := c.admit(s)
			if err != nil {
				t.Fatal(err)
			}
			ref := l.refState()
			rng := rand.New(rand.NewPCG(21, 9))
			bound := boundFor(l, 1e-5)
			if tc.read == numeric.NVFP4 {
				bound = boundFor(l, 0.35)
			}
			for step := 0; step < L+1; step++ {
				if step == L-1 { // the next step flushes
					must(t, s.Memset32(c.ringU(), 0x7fc00000))
				}
				in := l.draw(rng, 1)
				st.upload(t, d, s, []replay.Slot{slot}, in)
				must(t, c.step(s, 1, st.slots, st.in, st.y))
				y := st.download(t, s, l.width)
				want := l.ref(ref, in, 0)
				if step < L {
					continue // the flush step's own output folds the poison too, in the cached fold
				}
				e := relErr(y, want)
				nan := slices.ContainsFunc(y, func(v float32) bool { return math.IsNaN(float64(v)) })
				switch {
				case tc.poisons && !nan:
					t.Fatalf("after the flush: no NaN output (relative error %.3g): the fold did not read the ring's u", e)
				case !tc.poisons && (nan || e > bound):
					t.Fatalf("after the flush: relative error %.3g > %.3g (NaN %v): the exact fold read the ring's u", e, bound, nan)
				}
			}
		})
	}
}

// TestReplayOverlapMatchesSerial checks a decode step whose flush runs on
// a second stream beside the non-flush kernel (OVERLAP: both layers forced
// on, the group steps taking their items from a counter), and a verify
// whose early folds and folding slots run beside the other slots (VPART),
// against the serial kernels on one stream, bit for bit: the kernels'
// arithmetic is the same and the two sides take disjoint slots, so any
// difference is a race (a cursor moved before a kernel read it, an item
// taken twice or never, the join missing). Every batch takes the split
// kernels and the group verify.
func TestReplayOverlapMatchesSerial(t *testing.T) {
	d := gpu(t)
	on, off := envTuning(os.Getenv), envTuning(os.Getenv)
	on.overlap, off.overlap = "1", "0"
	on.overlapVer, off.overlapVer = true, false
	// The group verify at every batch (else a few slots take v4/v5), and
	// grids of three blocks, so each block takes many items from the
	// queue and both sides of a split are in flight at once.
	on.groupAll, off.groupAll = true, true
	on.pipeBlocks, off.pipeBlocks = 3, 3
	comparePairs(t, d, pairVariant{"overlap", on, 0, ""}, pairVariant{"serial", off, 0, ""})
	// The non-flush kernel queued before the flush (REPLAYSSM_CUDA_OVERLAP_ORDER=main).
	main := on
	main.overlapMain = true
	comparePairs(t, d, pairVariant{"overlap-main-first", main, 0, ""}, pairVariant{"serial", off, 0, ""})
	// A step's few flush items on the first block of the three, the others
	// ending at once (FL_FEW: GDN's flush by strips; Mamba-2's flush
	// ignores it).
	few := on
	few.flFew, few.flKeep, few.flFewBatch = "64", 1, 1
	comparePairs(t, d, pairVariant{"overlap-few", few, 0, ""}, pairVariant{"serial", off, 0, ""})
}

// TestReplayVerifyEarlyMatchesLate checks the small batches' verify with
// its inputs asked for before the slot's cursor (REPLAYSSM_CUDA_VERIFY_EARLY=1:
// Mamba-2's one-kernel verify, GDN's v4 verify, whole or split heads, at
// every small batch) against the same kernels without (=0), bit for bit:
// the early loads land where the verify's own loads put them. Both caches
// take every batch on the small path; fp32 and bf16 states (the early
// fold's registers differ).
func TestReplayVerifyEarlyMatchesLate(t *testing.T) {
	d := gpu(t)
	early, late := envTuning(os.Getenv), envTuning(os.Getenv)
	early.verifyEarly, late.verifyEarly = "1", "0"
	for li, l := range append(smallLayers(), largeLayers()...) {
		for _, o := range []replay.Options{
			{Mode: replay.Replay, Window: 5, MaxDraft: 3},
			{Mode: replay.Replay, Window: 5, MaxDraft: 3, State: numeric.BF16},
		} {
			t.Run(fmt.Sprintf("%s/%v", l.name, o.State), func(t *testing.T) {
				t.Parallel()
				build := func(tn tuning) *gpuCache {
					c, err := l.buildWith(d, o, pairSlots, tn)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { must(t, c.close()) })
					c.setSmallBatch(pairSlots)
					return c
				}
				sameOutputs(t, d, li, l, build(early), build(late), "early", "late")
			})
		}
	}
}

// TestReplayGroupEarlyMatches checks GROUP_EARLY (the default since
// session 36: the Mamba-2 group step asks for a token's B row, dt,
// dt_bias, A and D by cp.async before its stream and uses them after it)
// against it off, bit for bit: the same values and operations in the same
// order. Both take the group step at every batch; the Mamba-2 layers only
// (GDN's kernels do not read the define).
func TestReplayGroupEarlyMatches(t *testing.T) {
	d := gpu(t)
	with := func(v string) tuning {
		tn := envTuning(os.Getenv)
		tn.groupAll = true
		tn.defines = append(slices.DeleteFunc(slices.Clone(tn.defines), func(d string) bool {
			return strings.HasPrefix(d, "-DGROUP_EARLY")
		}), "-DGROUP_EARLY="+v)
		return tn
	}
	early, plain := with("1"), with("0")
	comparePairsIn(t, d, pairVariant{"early", early, 0, ""}, pairVariant{"default", plain, 0, ""},
		[]gpuLayer{smallLayers()[0], largeLayers()[0]}, nil)
}

// TestReplayFoldPipeMatchesItems checks the pipelined folds (v7: the
// step's flushes and the verify's early folds, each item's checkpoint and
// ring rows staged by a producer warp) against the work_items kernels
// (REPLAYSSM_CUDA_FOLDS=items) bit for bit: both keep mamba2_step<1>'s /
// gdn_fold's order of operations. The pipelined grid is bounded to two
// blocks, so each block takes many items through its stages (every stage
// and mbarrier phase in use), and the group verify runs at every batch, so
// its early folds are the pipelined ones.
func TestReplayFoldPipeMatchesItems(t *testing.T) {
	d := gpu(t)
	if major, _ := d.ComputeCapability(); major < 9 {
		t.Skip("the pipelined folds need sm_90 (bulk copies); this GPU folds with the work_items kernels only")
	}
	pipe := envTuning(os.Getenv)
	pipe.folds, pipe.pipeBlocks, pipe.groupAll = "pipe", 2, true
	items := envTuning(os.Getenv)
	items.folds, items.groupAll = "items", true
	// Bit for bit with the FMA rank update (mamba2TCDefault puts Nano-like
	// layers' on the tensor cores) and the group verify's own dots.
	fma := pipe
	fma.m2TCFold, fma.vfoldDots = "0", "0"
	comparePairs(t, d, pairVariant{"v7", fma, 0, "v7"}, pairVariant{"items", items, 0, "items"})
	// The verify's early folds forming the group verify's dots of the
	// slots they fold (VFOLD_DOTS: fp32 by default, bf16 and fp16 asked
	// for): the same checkpoints, the dots summed in the fold's order,
	// within sameBound (the cache reports itself inexact).
	t.Run("fold dots", func(t *testing.T) {
		dots := pipe
		dots.m2TCFold, dots.vfoldDots = "0", "1"
		comparePairs(t, d, pairVariant{"v7-dots", dots, 0, "v7"}, pairVariant{"items", items, 0, "items"})
	})
	// The rank update on the tensor cores (M2_TC_FOLD: 80 rows on 160
	// threads, one column part; 64 rows on 256, two) sums in another
	// order: within sameBound of the items kernels (the cache reports
	// itself inexact), with an fp32 checkpoint only: a 2-byte or fp8 one
	// may round an element the other way, a whole ulp of its format (the
	// reference tests' "/m2tc" cases take those).
	t.Run("tc", func(t *testing.T) {
		tc := pipe
		tc.m2TCFold = "1"
		layers := []gpuLayer{
			largeLayers()[0],
			mamba2TestLayer(15, ssm.Mamba2Shape{Heads: 4, HeadDim: 64, StateSize: 128, Groups: 2}),
		}
		comparePairsIn(t, d, pairVariant{"v7-tc", tc, 0, "v7"}, pairVariant{"items", items, 0, "items"}, layers, []string{"fp32"})
		// The checkpoint read with its rows' chunks in order (M2_TC_SROT=0,
		// rotated by default): the same values in the same registers.
		tc.defines = append(slices.Clip(tc.defines), "-DM2_TC_SROT=0")
		comparePairsIn(t, d, pairVariant{"v7-tc-packed", tc, 0, "v7"}, pairVariant{"items", items, 0, "items"}, layers, []string{"fp32"})
	})
}

// TestReplayFoldStreamMatchesItems checks the GDN verify's streamed early
// folds (gdn_fold_stream, the default where planFoldStream applies) against
// gdn_replay_fold_items bit for bit, in the formats it applies to, with one
// buffer a block and with two (FS_DB): the stream keeps the tensor-core
// fold's operands and order. Its blocks list the cursors three slots at a
// time (-DFS_CHUNK=3: seven slots in three chunks, the items' global order
// across them) on a grid of two blocks, each taking many items in turn
// (its buffers' mbarrier phases).
func TestReplayFoldStreamMatchesItems(t *testing.T) {
	d := streamGPU(t, "folds")
	items := envTuning(os.Getenv)
	items.groupAll, items.foldStream = true, false
	for _, db := range []string{"0", "1"} {
		stream := streamTuning()
		stream.fsDB = db
		compareStreams(t, d, "db="+db, stream, items, func(c *gpuCache) bool { return c.streamFold() })
	}
	// The streamed folds forming the group verify's dots of the slots they
	// fold (VFOLD_DOTS, asked for): the same checkpoints, the dots summed
	// in the fold's order, within sameBound (the cache reports itself
	// inexact).
	dots := streamTuning()
	dots.vfoldDots = "1"
	compareStreams(t, d, "fold dots", dots, items, func(c *gpuCache) bool { return c.streamFold() && c.common().group.foldDots })
}

// TestReplayFlushStreamMatchesItems checks the GDN flush by strips
// (gdn_flush_stream, the default where it applies) against
// gdn_replay_flush (REPLAYSSM_CUDA_FLUSH_STREAM=0) bit for bit for fp32
// and bf16 checkpoints without a read copy, its shared rows padded
// (FL_PAD, the default for bf16) and packed: it keeps the fold's
// projections, recurrence, outputs and tensor-core update, row by row. Its blocks list the cursors three
// slots at a time on a grid of two blocks, as
// TestReplayFoldStreamMatchesItems's.
func TestReplayFlushStreamMatchesItems(t *testing.T) {
	d := streamGPU(t, "flush")
	items := envTuning(os.Getenv)
	items.groupAll, items.flushStream = true, false
	stream := streamTuning()
	stream.flushStream = true
	for _, pad := range []string{"1", "0"} {
		stream.flPad = pad
		compareStreams(t, d, "pad="+pad, stream, items, func(c *gpuCache) bool { return c.streamFlush() })
	}
	// The items from a counter (FL_QUEUE) instead of by block index.
	stream.flPad, stream.flQueue = "", "1"
	compareStreams(t, d, "queue", stream, items, func(c *gpuCache) bool { return c.streamFlush() })
	// Few items on the first block of the two (FL_FEW: every step's
	// items are fewer than 64 a block here).
	stream.flQueue, stream.flFew, stream.flKeep, stream.flFewBatch = "", "64", 1, 1
	compareStreams(t, d, "few", stream, items, func(c *gpuCache) bool { return c.streamFlush() })
}

// streamGPU returns the GPU for the stream kernels' tests (what: "folds"
// or "flush"), skipping below sm_90 (their bulk copies).
func streamGPU(t *testing.T, what string) *Device {
	d := gpu(t)
	if major, _ := d.ComputeCapability(); major < 9 {
		t.Skipf("the streamed %s: sm_90 needed (bulk copies); this GPU takes the work_items kernels only", what)
	}
	return d
}

// streamTuning is the stream kernels' tests' knobs: the group kernels at
// every batch, a grid of two blocks (each taking many items in turn) that
// list the cursors three slots at a time (-DFS_CHUNK=3: a small batch
// spans several chunks).
func streamTuning() tuning {
	tn := envTuning(os.Getenv)
	tn.groupAll, tn.pipeBlocks = true, 2
	tn.defines = append(slices.Clip(tn.defines), "-DFS_CHUNK=3")
	return tn
}

// compareStreams builds a cache with the stream knobs and one without for
// the large GDN layer in fp32 and bf16 (the formats the streams take),
// checks that streamed says which one streams, and drives both through
// sameOutputs (bit for bit) with the split kernels at every batch.
func compareStreams(t *testing.T, d *Device, name string, stream, items tuning, streamed func(*gpuCache) bool) {
	small := len(smallLayers())
	for k, l := range largeLayers() {
		if !strings.HasPrefix(l.name, "gdn") {
			continue
		}
		for _, o := range []struct {
			name string
			opt  replay.Options
		}{
			{"fp32", replay.Options{Mode: replay.Replay, Window: 6, MaxDraft: 3}},
			{"bf16", replay.Options{Mode: replay.Replay, Window: 6, MaxDraft: 3, State: numeric.BF16}},
		} {
			sub := l.name + "/" + o.name
			if name != "" {
				sub += "/" + name
			}
			t.Run(sub, func(t *testing.T) {
				t.Parallel()
				build := func(tn tuning, want bool) *gpuCache {
					c, err := l.buildWith(d, o.opt, pairSlots, tn)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { must(t, c.close()) })
					c.setSmallBatch(0)
					if got := streamed(c); got != want {
						t.Fatalf("streamed %v, want %v", got, want)
					}
					return c
				}
				sameOutputs(t, d, small+k, l, build(stream, true), build(items, false), "stream", "items")
			})
		}
	}
}

// pairVariant is one side of a bit-for-bit comparison of two caches: its
// kernel knobs and the batches up to which one kernel takes a step.
type pairVariant struct {
	name       string
	tn         tuning
	smallBatch int
	fold       string // the fold kernels the variant must run ("v7", "items"; "": any)
}

// comparePairs builds a cache of each variant for every layer in four
// formats and drives both through sameOutputs.
func comparePairs(t *testing.T, d *Device, a, b pairVariant) {
	comparePairsIn(t, d, a, b, append(smallLayers(), largeLayers()...), nil)
}

// comparePairsIn is comparePairs for the layers given, in the formats
// named (nil: all four).
func comparePairsIn(t *testing.T, d *Device, a, b pairVariant, layers []gpuLayer, formats []string) {
	opts := []struct {
		name string
		opt  replay.Options
	}{
		{"fp32", replay.Options{Mode: replay.Replay, Window: 5, MaxDraft: 3}},
		{"bf16", replay.Options{Mode: replay.Replay, Window: 5, MaxDraft: 3, State: numeric.BF16}},
		{"bf16+nvfp4", replay.Options{Mode: replay.Replay, Window: 5, MaxDraft: 3, State: numeric.BF16, ReadCopy: numeric.NVFP4}},
		{"e4m3", replay.Options{Mode: replay.Replay, Window: 5, MaxDraft: 3, State: numeric.E4M3}},
	}
	for li, l := range layers {
		for _, o := range opts {
			if formats != nil && !slices.Contains(formats, o.name) {
				continue
			}
			t.Run(l.name+"/"+o.name, func(t *testing.T) {
				t.Parallel()
				build := func(v pairVariant) *gpuCache {
					c, err := l.buildWith(d, o.opt, pairSlots, v.tn)
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { must(t, c.close()) })
					c.setSmallBatch(v.smallBatch)
					if got, why := c.foldKernel(); v.fold != "" && got != v.fold {
						t.Fatalf("%s: fold kernels %s (%s), want %s", v.name, got, why, v.fold)
					}
					return c
				}
				sameOutputs(t, d, li, l, build(a), build(b), a.name, b.name)
			})
		}
	}
}

// pipelineMatchesV4 drives a cache of one layer and options on the
// kernels named ("v5": REPLAYSSM_CUDA_KERNELS=v5, blocks bounds the
// pipelined grid; "v6": the default, blocks bounds the ring entries the
// group step stages, and then its grid and the resident early-fold grid
// are two blocks; at 64 threads the early folds take one block per (head,
// slot)) and a v4 cache through the same 40 random rounds and compares
// their outputs bit for bit.
func pipelineMatchesV4(t *testing.T, d *Device, li int, l gpuLayer, opt replay.Options, kernels string, blocks, threads int) {
	tn := envTuning(os.Getenv)
	tn.v4, tn.v5 = false, kernels == "v5"
	tn.m2TCFold = "0" // v4 folds by FMA: the same sums, bit for bit
	tn.groupNT, tn.groupAll = threads, kernels == "v6"
	if kernels == "v5" {
		tn.pipeBlocks = blocks
	} else if blocks != 0 {
		tn.groupX, tn.pipeBlocks, tn.foldItems = blocks, 2, true
	}
	if kernels == "v6" && threads == 64 {
		tn.foldItems = false // the one-block-per-item fold kernel stays covered
	}
	v5, err := l.buildWith(d, opt, pairSlots, tn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { must(t, v5.close()) }()
	v5.setSmallBatch(0) // the split kernels at every batch
	step, verify := v5.pipelined()
	wantStep, wantVerify := wantPipelined(l, opt, tn)
	if got := v5.stepKernel(pairSlots); kernels == "v6" && got != "v6" {
		t.Fatalf("step kernel %s, want v6", got)
	} else if got := v5.verifyKernel(pairSlots); kernels == "v6" && got != "v6" {
		t.Fatalf("verify kernel %s, want v6", got)
	} else if kernels == "v5" && (step != wantStep || verify != wantVerify) {
		if li < 2 && opt.ReadCopy == numeric.NVFP4 {
			t.Skip("nvfp4 scale rows of this small shape are not 16-byte multiples: v4 only")
		}
		t.Fatalf("pipelined step %v verify %v, want %v %v (%s)", step, verify, wantStep, wantVerify, v5.plan().reasonDisabled)
	}
	tn.v4 = true
	v4, err := l.buildWith(d, opt, pairSlots, tn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { must(t, v4.close()) }()
	v4.setSmallBatch(0)
	if step, verify := v4.pipelined(); step || verify {
		t.Fatal("the v4 knob did not select the v4 kernels")
	}
	sameOutputs(t, d, li, l, v5, v4, kernels, "v4")
}

// sameBound bounds the difference sameOutputs allows between a cache whose
// non-flush step sums in another order than v4's (an nvfp4 group stream on
// the tensor cores: float32 accumulation of exact products, against
// group_dots' fused multiply-adds) and the v4 cache, relative to the
// largest output of the row: both sums are float32's, so they differ by a
// few float32 roundings of a 128-term dot, compounded over a window's
// cached u (H200, session 21: at most 3.6e-7); a wrong decode or scale
// differs by O(1).
const sameBound = 1e-5

// pairSlots is the capacity of the caches sameOutputs compares.
const pairSlots = 7

// admitBoth admits n slots into each of two caches, which must hand out
// the same slots in the same order.
func admitBoth(t *testing.T, s *Stream, ca, cb *gpuCache, n int) []replay.Slot {
	t.Helper()
	var slots []replay.Slot
	for range n {
		a, err := ca.admit(s)
		must(t, err)
		b, err := cb.admit(s)
		must(t, err)
		if a != b {
			t.Fatalf("slots differ: %d, %d", a, b)
		}
		slots = append(slots, a)
	}
	return slots
}

// sameOutputs drives two caches of one layer (capacity pairSlots) through
// the same 40 random rounds of steps, verifies (random draft counts) and
// commits (random acceptance) and requires bit-identical outputs.
func sameOutputs(t *testing.T, d *Device, li int, l gpuLayer, ca, cb *gpuCache, nameA, nameB string) {
	sameOutputsOf(t, d, li, l, ca, cb, nameA, nameB, nil)
}

// sameOutputsOf is sameOutputs with cache b fed inB(in) where a is fed in
// (inB nil: the same inputs).
func sameOutputsOf(t *testing.T, d *Device, li int, l gpuLayer, ca, cb *gpuCache, nameA, nameB string, inB func([][]float32) [][]float32) {
	const nslots, T = pairSlots, 3
	s := stream(t, d)
	sa := newStaging(t, d, l, nslots*T, nslots)
	sb := newStaging(t, d, l, nslots*T, nslots)
	slots := admitBoth(t, s, ca, cb, nslots)
	rng := rand.New(rand.NewPCG(uint64(li), 9))
	// same compares output i of a and b: bit for bit, or, where either
	// cache sums its stream's dots in another order (inexact), within
	// sameBound of the largest magnitude of i's output row.
	inexact, worst := ca.inexact() || cb.inexact(), 0.0
	// The largest magnitude of b's row that holds output i, once a row:
	// outputs are compared in order, and each download sets scaleRow to -1.
	scaleRow, scale := -1, 0.0
	same := func(a, b []float32, i int) bool {
		if math.IsNaN(float64(a[i])) || math.IsNaN(float64(b[i])) {
			return false
		}
		if !inexact {
			return math.Float32bits(a[i]) == math.Float32bits(b[i])
		}
		if row := i / l.width; row != scaleRow {
			scaleRow, scale = row, 0
			for _, x := range b[row*l.width : (row+1)*l.width] {
				scale = max(scale, math.Abs(float64(x)))
			}
		}
		e := math.Abs(float64(a[i])-float64(b[i])) / max(scale, 1e-30)
		worst = max(worst, e)
		return e <= sameBound
	}
	defer func() {
		if inexact {
			t.Logf("inexact step: worst difference %.3g of the row's largest output (bound %.3g)", worst, sameBound)
		}
	}()
	for round := 0; round < 40; round++ {
		// A random subset of the slots, in random order, so that
		// they sit at different phases.
		perm := rng.Perm(nslots)[:1+rng.IntN(nslots)]
		batch := len(perm)
		sub := make([]replay.Slot, batch)
		for i, p := range perm {
			sub[i] = slots[p]
		}
		verify := rng.IntN(3) == 0
		rows := batch
		if verify {
			rows = batch * T
		}
		in := l.draw(rng, rows)
		sa.upload(t, d, s, sub, in)
		if inB != nil {
			sb.upload(t, d, s, sub, inB(in))
		} else {
			sb.upload(t, d, s, sub, in)
		}
		if verify {
			counts, acc := make([]int, batch), make([]int, batch)
			for i := range counts {
				counts[i] = 1 + rng.IntN(T)
				acc[i] = rng.IntN(counts[i] + 1)
			}
			for _, st := range []*staging{sa, sb} {
				must(t, s.CopyToDevice(st.counts, i32Bytes(counts)))
				must(t, s.CopyToDevice(st.acc, i32Bytes(acc)))
			}
			must(t, ca.verify(s, batch, T, sa.slots, sa.counts, sa.in, sa.y))
			must(t, cb.verify(s, batch, T, sb.slots, sb.counts, sb.in, sb.y))
			a := sa.download(t, s, rows*l.width)
			b := sb.download(t, s, rows*l.width)
			scaleRow = -1
			for i := range a {
				if k := (i / l.width) % T; k >= counts[i/l.width/T] {
					continue // rows past a slot's count are not written
				}
				if !same(a, b, i) {
					t.Fatalf("round %d verify: output %d %s %v %s %v", round, i, nameA, a[i], nameB, b[i])
				}
			}
			must(t, ca.commit(s, batch, sa.slots, sa.acc))
			must(t, cb.commit(s, batch, sb.slots, sb.acc))
			continue
		}
		must(t, ca.step(s, batch, sa.slots, sa.in, sa.y))
		must(t, cb.step(s, batch, sb.slots, sb.in, sb.y))
		a := sa.download(t, s, rows*l.width)
		b := sb.download(t, s, rows*l.width)
		scaleRow = -1
		for i := range a {
			if !same(a, b, i) {
				t.Fatalf("round %d step: output %d %s %v %s %v", round, i, nameA, a[i], nameB, b[i])
			}
		}
	}
}

// TestReplayGroupTCScales runs the nvfp4 group step and group verify on
// the tensor cores (GROUP_TC, VERIFY_TC) with a Mamba-2 C far from unit
// size, which their B operands scale by a power of two per vector: |C| up
// to ~100 (f16 terms of a fixed scale would overflow) and ~1e-6 (their
// remainders would fall into f16's subnormals), against v4 (sameOutputs'
// bound; its rounds verify too).
func TestReplayGroupTCScales(t *testing.T) {
	d := gpu(t)
	if major, minor := d.ComputeCapability(); 10*major+minor < 89 {
		t.Skip("the tensor-core nvfp4 stream needs sm_89 (e4m3 conversions); this GPU runs the FMA stream")
	}
	opt := replay.Options{Mode: replay.Replay, Window: 6, MaxDraft: 3, ReadCopy: numeric.NVFP4}
	for _, f := range []float32{300, 1e-5} {
		t.Run(fmt.Sprint(f), func(t *testing.T) {
			t.Parallel()
			l := largeLayers()[0]
			draw := l.draw
			l.draw = func(rng *rand.Rand, rows int) [][]float32 {
				in := draw(rng, rows)
				for i := range in[2] {
					in[2][i] *= f // C
				}
				return in
			}
			build := func(tn tuning) *gpuCache {
				c, err := l.buildWith(d, opt, pairSlots, tn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { must(t, c.close()) })
				c.setSmallBatch(0)
				return c
			}
			tn := envTuning(os.Getenv)
			tn.groupAll = true
			v6 := build(tn)
			if !v6.inexact() {
				t.Fatal("the group step's stream is not on the tensor cores")
			}
			tn.v4 = true
			sameOutputs(t, d, 0, l, v6, build(tn), "v6", "v4")
		})
	}
}

// TestReplayCacheOptions checks the option and shape validation, which needs
// no GPU.
func TestReplayCacheOptions(t *testing.T) {
	tests := []struct {
		name string
		opt  replay.Options
		ok   bool
	}{
		{"defaults", replay.Options{}, true},
		{"bf16 nvfp4", replay.Options{State: numeric.BF16, ReadCopy: numeric.NVFP4, MaxDraft: 8}, true},
		{"fp16 state", replay.Options{State: numeric.F16}, true},
		{"fp8 state, fp8 read copy", replay.Options{State: numeric.E4M3, ReadCopy: numeric.E4M3}, true},
		{"bf16 read copy", replay.Options{ReadCopy: numeric.BF16}, true},
		{"nvfp4 state", replay.Options{State: numeric.NVFP4}, false},
		{"nvfp4 naive baseline", replay.Options{Mode: replay.Baseline, State: numeric.NVFP4}, false},
		{"fp16 read copy", replay.Options{ReadCopy: numeric.F16}, false},
		{"baseline read copy", replay.Options{Mode: replay.Baseline, ReadCopy: numeric.NVFP4}, false},
		{"ring too long", replay.Options{Window: 64}, false},
		{"stochastic", replay.Options{Stochastic: true}, false},
		{"bf16 ring", replay.Options{Ring: numeric.BF16}, true},
		{"bf16 ring, bf16 state, nvfp4 read copy", replay.Options{Ring: numeric.BF16, State: numeric.BF16, ReadCopy: numeric.NVFP4}, true},
		{"fp16 ring", replay.Options{Ring: numeric.F16}, false},
		{"baseline bf16 ring", replay.Options{Mode: replay.Baseline, Ring: numeric.BF16}, false},
	}
	for _, tt := range tests {
		_, err := replayDefaults(tt.opt)
		if (err == nil) != tt.ok {
			t.Errorf("%s: error %v, want ok %v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrReplayOptions) {
			t.Errorf("%s: %v does not wrap ErrReplayOptions", tt.name, err)
		}
	}
	for _, m := range []struct{ rows, cols, heads int }{{8, 16, 4}, {80, 128, 96}, {128, 128, 32}, {64, 256, 2}} {
		if err := checkMatrix(m.rows, m.cols, m.heads); err != nil {
			t.Errorf("%v: %v", m, err)
		}
	}
	for _, m := range []struct{ rows, cols, heads int }{{8, 24, 4}, {8, 48, 4}, {8, 8, 4}} {
		if err := checkMatrix(m.rows, m.cols, m.heads); err == nil {
			t.Errorf("%v accepted", m)
		}
	}
	if got := replayThreads(80, 128, numeric.F32); got != 160 {
		t.Errorf("threads for 80x128 fp32: %d, want 160", got)
	}
	// fp8 rows of 128 are 8 lanes of 16 elements, 4 rows per warp: 80 rows
	// take 5 warps per pass.
	if got := replayThreads(80, 128, numeric.E4M3); got != 160 {
		t.Errorf("threads for 80x128 fp8: %d, want 160", got)
	}
}

// longMemoryLayers are package replay's long-memory layers (precision_test.go):
// slow decays and small updates, so that rounding the state after every
// update compounds.
func longMemoryLayers() []gpuLayer {
	m := mamba2TestLayerWith(21, ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 16, Groups: 2}, func(p *replay.Mamba2Params) {
		for h := range p.ALog {
			p.ALog[h] = float32(math.Log(0.02 + 0.03*float64(h)))
			p.DtBias[h] = -2
		}
	})
	g := gdnTestLayerWith(22, ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8}, func(p *replay.GDNParams) {
		for j := range p.ALog {
			p.ALog[j] = float32(math.Log(0.01))
		}
	}, func(f [][]float32) {
		for i := range f[3] {
			f[3][i] -= 2 // a: slow decay
		}
		for i := range f[4] {
			f[4][i] = 0.3*f[4][i] - 2.2 // b: beta about 0.1, ~160 steps of memory
		}
	})
	return []gpuLayer{m, g}
}

// gpuErrorCurve runs one slot of a GPU cache for steps steps and returns the
// mean relative output error over each window of steps.
func gpuErrorCurve(t *testing.T, d *Device, l gpuLayer, opt replay.Options, steps int, windows [][2]int) []float64 {
	t.Helper()
	c, err := l.build(d, opt, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { must(t, c.close()) }()
	s := stream(t, d)
	st := newStaging(t, d, l, 1, 1)
	slot, err := c.admit(s)
	must(t, err)
	ref := l.refState()
	rng := rand.New(rand.NewPCG(77, 1))
	errs := make([]float64, steps)
	for step := range steps {
		in := l.draw(rng, 1)
		st.upload(t, d, s, []replay.Slot{slot}, in)
		must(t, c.step(s, 1, st.slots, st.in, st.y))
		errs[step] = relErr(st.download(t, s, l.width), l.ref(ref, in, 0))
	}
	var out []float64
	for _, w := range windows {
		sum := 0.0
		for _, e := range errs[w[0]:w[1]] {
			sum += e
		}
		out = append(out, sum/float64(w[1]-w[0]))
	}
	return out
}

// TestReplayReadCopyErrorDoesNotCompound is package replay's
// TestReadCopyErrorDoesNotCompound on the GPU: over 4096 long-memory steps,
// the error of outputs read from an nvfp4 or fp8 copy of an fp32 checkpoint
// stays at the copy's quantisation level (the mean of the last 512 steps
// within 1.5x of steps 256..768), while a naive fp8 state, rounded after
// every update, drifts (its late error at least 2x its error over steps
// 8..40 and at least 3x the read copy's late error). The GPU has no naive
// nvfp4 state.
func TestReplayReadCopyErrorDoesNotCompound(t *testing.T) {
	d := gpu(t)
	const steps = 4096
	windows := [][2]int{{8, 40}, {256, 768}, {steps - 512, steps}}
	for _, l := range longMemoryLayers() {
		for _, f := range []numeric.Format{numeric.NVFP4, numeric.E4M3} {
			t.Run(l.name+"/"+f.String(), func(t *testing.T) {
				t.Parallel()
				rc := gpuErrorCurve(t, d, l, replay.Options{Mode: replay.Replay, ReadCopy: f}, steps, windows)
				t.Logf("read copy: %.4f %.4f %.4f", rc[0], rc[1], rc[2])
				if rc[2] > 1.5*rc[1] {
					t.Errorf("read-copy error grew from %.4f (steps 256-768) to %.4f (last 512)", rc[1], rc[2])
				}
				if f == numeric.NVFP4 {
					return
				}
				naive := gpuErrorCurve(t, d, l, replay.Options{Mode: replay.Baseline, State: f}, steps, windows)
				t.Logf("naive state: %.4f %.4f %.4f", naive[0], naive[1], naive[2])
				if naive[2] < 2*naive[0] {
					t.Errorf("naive %v state error did not grow: %.4f (steps 8-40) -> %.4f (last 512)", f, naive[0], naive[2])
				}
				if naive[2] < 3*rc[2] {
					t.Errorf("naive %v late error %.4f not above 3x the read copy's %.4f", f, naive[2], rc[2])
				}
			})
		}
	}
}

// TestReplayPipelinePlanOnDevice logs the pipelined kernels' launch plan for
// the target shapes and formats on this GPU (what bench kernels runs) and
// checks which kernels each cache takes.
func TestReplayPipelinePlanOnDevice(t *testing.T) {
	d := gpu(t)
	if major, _ := d.ComputeCapability(); major < 9 {
		t.Skip("pipelined kernels need sm_90")
	}
	layers := []gpuLayer{
		mamba2TestLayer(31, ssm.Mamba2Shape{Heads: 8, HeadDim: 80, StateSize: 128, Groups: 1}),
		gdnTestLayer(32, ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128}),
	}
	// The small step's split module plays no part in the plan.
	tn := envTuning(os.Getenv)
	tn.headSplit = 1
	for _, l := range layers {
		for _, opt := range []replay.Options{
			{Mode: replay.Replay},
			{Mode: replay.Replay, State: numeric.BF16},
			{Mode: replay.Replay, ReadCopy: numeric.NVFP4},
			{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4},
			{Mode: replay.Replay, ReadCopy: numeric.E4M3},
			{Mode: replay.Replay, MaxDraft: 4},
		} {
			t.Run(fmt.Sprintf("%s/%v+%v/T%d", l.name, opt.State, opt.ReadCopy, opt.MaxDraft), func(t *testing.T) {
				t.Parallel() // each cache compiles its module
				c, err := l.buildWith(d, opt, 256, tn)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { must(t, c.close()) }()
				step, verify := c.pipelined()
				p := c.plan()
				t.Logf("step %v verify %v: %d stages, %d warps, %d B smem, %d blocks/SM (%s)",
					step, verify, p.stages, p.warps, p.smem, p.blocksPerSM, p.reasonDisabled)
				if want, _ := wantPipelined(l, opt, tn); step != want {
					t.Errorf("pipelined step %v, want %v", step, want)
				}
			})
		}
	}
}

// wantPipelined is which kernels a cache of layer l with knobs tn should
// take on sm_90: the GDN verify has no pipelined kernel yet; the GDN step
// takes the group step (v6) unless tn asks for v5; the Mamba-2 step takes
// the group step (v6) unless tn asks for v5, and then with a 2-byte matrix
// to read keeps v4 by policy.
func wantPipelined(l gpuLayer, opt replay.Options, tn tuning) (step, verify bool) {
	if l.name[:3] == "gdn" {
		return tn.v5, false
	}
	return tn.v5 && readElemBytes(opt) != 2, true
}

// TestReplayKernelResources logs the registers, spills and shared memory of
// the replay step kernels for the target shapes in the main formats (what
// NOTES.md tracks; REPLAYSSM_CUDA_DEFINES applies). The group step (v6)
// must not spill more than a few registers (ptxas keeps 12 bytes outside
// its stream at the 128-register bound): its prefetched passes must stay
// in registers for it to stream.
func TestReplayKernelResources(t *testing.T) {
	d := gpu(t)
	type fn struct {
		name string
		f    *Function
	}
	opts := []replay.Options{
		{Mode: replay.Replay},
		{Mode: replay.Replay, State: numeric.BF16},
		{Mode: replay.Replay, ReadCopy: numeric.NVFP4},
		{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4},
		{Mode: replay.Replay, ReadCopy: numeric.E4M3},
	}
	// The target shapes (package bench's, which imports this package).
	shapes := []struct {
		Name, Layer string
		Mamba2      ssm.Mamba2Shape
		GDN         ssm.GDNShape
	}{
		{Name: "nano", Layer: "mamba2", Mamba2: nanoShape},
		{Name: "super", Layer: "mamba2", Mamba2: superShape},
		{Name: "qwen3.5-4b", Layer: "gdn", GDN: qwen4bShape},
	}
	for _, sh := range shapes {
		for _, opt := range opts {
			t.Run(fmt.Sprintf("%s/%v+%v", sh.Name, opt.State, opt.ReadCopy), func(t *testing.T) {
				t.Parallel()
				opt.MaxDraft = 4 // the group verify too
				var c *replayCommon
				if sh.Layer == "mamba2" {
					H := sh.Mamba2.Heads
					prm := replay.Mamba2Params{ALog: make([]float32, H), DtBias: make([]float32, H), D: make([]float32, H)}
					m, err := newMamba2Cache(context.Background(), d, sh.Mamba2, prm, 4, opt, envTuning(os.Getenv))
					if err != nil {
						t.Fatal(err)
					}
					defer func() { must(t, m.Close()) }()
					c = &m.replayCommon
				} else {
					H := sh.GDN.ValueHeads
					prm := replay.GDNParams{ALog: make([]float32, H), DtBias: make([]float32, H)}
					g, err := newGDNCache(context.Background(), d, sh.GDN, prm, 4, opt, envTuning(os.Getenv))
					if err != nil {
						t.Fatal(err)
					}
					defer func() { must(t, g.Close()) }()
					c = &g.replayCommon
				}
				if c.group.fn == nil {
					t.Errorf("no group step: %s", c.group.why)
				}
				fns := []fn{{"flush", c.flush}, {"nonflush", c.nonflush}, {"step_small", c.stepSmall}, {"pipe_step", c.pipe.step},
					{"group_step", c.group.fn}, {"group_verify", c.group.verify}, {"fold_early", c.group.verifyFold},
					{"flush_pipe", c.folds.flush}, {"fold_pipe", c.folds.fold}}
				for _, f := range fns {
					if f.f == nil {
						continue
					}
					r, err := f.f.Resources()
					if err != nil {
						t.Fatal(err)
					}
					t.Logf("%s %-10s %3d registers, %4d B local, %6d B static shared", t.Name(), f.name, r.Registers, r.LocalBytes, r.StaticSharedBytes)
					if f.name == "group_step" && r.LocalBytes > 32 {
						t.Errorf("group step: %d bytes of local memory per thread (spills)", r.LocalBytes)
					}
					// The pipelined folds hold a whole matrix share in
					// registers with one or two blocks per SM: none spills
					// (ptxas 11.8 on approximated PTX: 85-220 registers).
					if (f.name == "flush_pipe" || f.name == "fold_pipe") && r.LocalBytes > 16 {
						t.Errorf("%s: %d bytes of local memory per thread (spills)", f.name, r.LocalBytes)
					}
				}
				t.Logf("%s flush grid %d blocks; pipelined folds %d stages of %d bytes, %d blocks", t.Name(), c.flushBlocks,
					c.folds.stages, c.folds.stageBytes, c.folds.blocks)
			})
		}
	}
}

// TestReplayInputAlignment checks, without a device, that the caches refuse
// input and output buffers whose addresses the kernels cannot read (a
// Buffer.Slice at an odd offset): float rows must be 16-byte aligned (they
// move 16 bytes at a time), scalars and slot lists 4-byte aligned. On the
// device such an address faults and the context, with every cache on it,
// is lost; here the error names the buffer.
func TestReplayInputAlignment(t *testing.T) {
	const base = 0x7f0000000000 // a made-up device address, 256-byte aligned
	buf := func(off uint64) Buffer { return Buffer{ptr: base + off, bytes: 1 << 20} }
	m := &Mamba2Cache{shape: ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 16, Groups: 2}}
	m.capacity = 4
	g := &GDNCache{shape: ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8}}
	g.capacity = 4
	m2 := func(f func(*Mamba2Input, *Buffer)) error {
		in, y := Mamba2Input{Slots: buf(0), X: buf(0), B: buf(0), C: buf(0), Dt: buf(0)}, buf(0)
		f(&in, &y)
		return m.checkInput(2, 3, in, y)
	}
	gdn := func(f func(*GDNInput, *Buffer)) error {
		in, o := GDNInput{Slots: buf(0), Q: buf(0), K: buf(0), V: buf(0), A: buf(0), B: buf(0)}, buf(0)
		f(&in, &o)
		return g.checkInput(2, 3, in, o)
	}
	tests := []struct {
		name string
		err  error
		want string // "" for no error
	}{
		{"mamba2 aligned", m2(func(*Mamba2Input, *Buffer) {}), ""},
		{"mamba2 x at +4", m2(func(in *Mamba2Input, _ *Buffer) { in.X = buf(4) }), "x: device address 0x7f0000000004 is not 16-byte aligned"},
		{"mamba2 C at +8", m2(func(in *Mamba2Input, _ *Buffer) { in.C = buf(8) }), "C: device address"},
		{"mamba2 y at +12", m2(func(_ *Mamba2Input, y *Buffer) { *y = buf(12) }), "y: device address"},
		{"mamba2 dt at +4", m2(func(in *Mamba2Input, _ *Buffer) { in.Dt = buf(4) }), ""},
		{"mamba2 dt at +2", m2(func(in *Mamba2Input, _ *Buffer) { in.Dt = buf(2) }), "dt: device address 0x7f0000000002 is not 4-byte aligned"},
		{"mamba2 slots at +2", m2(func(in *Mamba2Input, _ *Buffer) { in.Slots = buf(2) }), "slots: device address"},
		{"mamba2 slots at +4", m2(func(in *Mamba2Input, _ *Buffer) { in.Slots = buf(4) }), ""},
		{"gdn aligned", gdn(func(*GDNInput, *Buffer) {}), ""},
		{"gdn k at +4", gdn(func(in *GDNInput, _ *Buffer) { in.K = buf(4) }), "k: device address"},
		{"gdn o at +8", gdn(func(_ *GDNInput, o *Buffer) { *o = buf(8) }), "o: device address"},
		{"gdn a at +4", gdn(func(in *GDNInput, _ *Buffer) { in.A = buf(4) }), ""},
		{"gdn b at +1", gdn(func(in *GDNInput, _ *Buffer) { in.B = buf(1) }), "b: device address"},
	}
	for _, tc := range tests {
		switch {
		case tc.want == "" && tc.err != nil:
			t.Errorf("%s: %v", tc.name, tc.err)
		case tc.want != "" && (tc.err == nil || !strings.Contains(tc.err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one containing %q", tc.name, tc.err, tc.want)
		}
	}
}

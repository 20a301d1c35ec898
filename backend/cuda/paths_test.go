package cuda

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// The kernel paths a plan chooses by batch size (the small step and
// verify, whole or split heads, early or late; the group step and verify;
// the pipelined step and verify; the pipelined, streamed or items folds;
// the flush beside the step) are checked here against one reference: the
// per-head kernels and the items flush, which every replay module holds
// (cachePlan.perHead), on the same inputs. Each path is forced at a small
// size by adjusting its plan (persistent grids bounded to a few blocks, so
// that every block takes many items). The per-head kernels themselves are
// checked against the float64 references by the conformance suite
// (conformance_test.go).

// sameBound bounds the difference between two paths' outputs, relative to
// the largest output of the row: where both sum in the same order they are
// equal bit for bit; where one sums on the tensor cores (float32
// accumulation of exact products against fused multiply-adds) or folds
// its rank update there, they differ by a few float32 roundings of a
// 128-term dot, compounded over a window (at most 3.6e-7 measured on the
// H200); a wrong decode, scale or index differs by O(1).
const sameBound = 1e-5

// sameBound2 is sameBound for 2-byte (bf16, fp16) checkpoints: two fold
// paths' float32 sums that differ in their last bits round an element of
// the checkpoint to neighbouring bf16 values now and then (2^-8 apart,
// relative), and the outputs that read it differ by a share of that (H100:
// 1.9e-5 and 1e-4 of the row's largest output over 30 rounds).
const sameBound2 = 1e-3

// pathLayer is a layer shape with random constants, building GPU caches
// and drawing host inputs in the order of its input fields.
type pathLayer struct {
	name   string
	width  int   // output floats per row
	perRow []int // input floats per row, one per field
	draw   func(rng *rand.Rand, rows int) [][]float32
	build  func(s *Stream, opt replay.Options, capacity int, adjust func(*cachePlan)) (*testCache, error)
}

// testCache is either GPU cache with inputs as device buffers in field
// order.
type testCache struct {
	common      *replayCommon
	step        func(slots []replay.Slot, in []Buffer, y Buffer) error
	verify      func(slots []replay.Slot, T int, counts []int, in []Buffer, y Buffer) error
	queueStep   func(slots Buffer, batch int, in []Buffer, y Buffer) error
	queueVerify func(slots, counts Buffer, batch, T int, in []Buffer, y Buffer) error
}

func mamba2PathLayer(seed uint64, shape ssm.Mamba2Shape) pathLayer {
	rng := rand.New(rand.NewPCG(seed, 1))
	H, P, N, G := shape.Heads, shape.HeadDim, shape.StateSize, shape.Groups
	var prm replay.Mamba2Params
	for range H {
		prm.ALog = append(prm.ALog, float32(math.Log(1+7*rng.Float64())))
		prm.DtBias = append(prm.DtBias, float32(rng.NormFloat64()*0.5-1))
		prm.D = append(prm.D, float32(rng.NormFloat64()))
	}
	return pathLayer{
		name:   fmt.Sprintf("mamba2-H%dP%dN%dG%d", H, P, N, G),
		width:  H * P,
		perRow: []int{H * P, G * N, G * N, H},
		draw: func(rng *rand.Rand, rows int) [][]float32 {
			sn := 1 / math.Sqrt(float64(N))
			return [][]float32{normals(rng, rows*H*P, 1), normals(rng, rows*G*N, sn), normals(rng, rows*G*N, sn), normals(rng, rows*H, 1)}
		},
		build: func(s *Stream, opt replay.Options, capacity int, adjust func(*cachePlan)) (*testCache, error) {
			c, err := newMamba2Cache(context.Background(), s, shape, prm, replay.ConvWeights{}, capacity, opt, adjust)
			if err != nil {
				return nil, err
			}
			in := func(b []Buffer) Mamba2Input { return Mamba2Input{X: b[0], B: b[1], C: b[2], Dt: b[3]} }
			return &testCache{
				common: &c.replayCommon,
				step:   func(sl []replay.Slot, b []Buffer, y Buffer) error { return c.Step(sl, in(b), y) },
				verify: func(sl []replay.Slot, T int, n []int, b []Buffer, y Buffer) error {
					return c.Verify(sl, T, n, in(b), y)
				},
				queueStep: func(sl Buffer, batch int, b []Buffer, y Buffer) error { return c.QueueStep(sl, batch, in(b), y) },
				queueVerify: func(sl, n Buffer, batch, T int, b []Buffer, y Buffer) error {
					return c.QueueVerify(sl, n, batch, T, in(b), y)
				},
			}, nil
		},
	}
}

func gdnPathLayer(seed uint64, shape ssm.GDNShape) pathLayer {
	rng := rand.New(rand.NewPCG(seed, 2))
	Hk, Hv, dk, dv := shape.KeyHeads, shape.ValueHeads, shape.KeyDim, shape.ValueDim
	var prm replay.GDNParams
	for range Hv {
		prm.ALog = append(prm.ALog, float32(math.Log(0.5+4*rng.Float64())))
		prm.DtBias = append(prm.DtBias, float32(rng.NormFloat64()*0.5-1))
	}
	return pathLayer{
		name:   fmt.Sprintf("gdn-Hk%dHv%dK%dV%d", Hk, Hv, dk, dv),
		width:  Hv * dv,
		perRow: []int{Hk * dk, Hk * dk, Hv * dv, Hv, Hv},
		draw: func(rng *rand.Rand, rows int) [][]float32 {
			return [][]float32{normals(rng, rows*Hk*dk, 1), normals(rng, rows*Hk*dk, 1), normals(rng, rows*Hv*dv, 1),
				normals(rng, rows*Hv, 1), normals(rng, rows*Hv, 1)}
		},
		build: func(s *Stream, opt replay.Options, capacity int, adjust func(*cachePlan)) (*testCache, error) {
			c, err := newGDNCache(context.Background(), s, shape, prm, replay.ConvWeights{}, capacity, opt, adjust)
			if err != nil {
				return nil, err
			}
			in := func(b []Buffer) GDNInput { return GDNInput{Q: b[0], K: b[1], V: b[2], A: b[3], B: b[4]} }
			return &testCache{
				common: &c.replayCommon,
				step:   func(sl []replay.Slot, b []Buffer, y Buffer) error { return c.Step(sl, in(b), y) },
				verify: func(sl []replay.Slot, T int, n []int, b []Buffer, y Buffer) error {
					return c.Verify(sl, T, n, in(b), y)
				},
				queueStep: func(sl Buffer, batch int, b []Buffer, y Buffer) error { return c.QueueStep(sl, batch, in(b), y) },
				queueVerify: func(sl, n Buffer, batch, T int, b []Buffer, y Buffer) error {
					return c.QueueVerify(sl, n, batch, T, in(b), y)
				},
			}, nil
		},
	}
}

func normals(rng *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	return v
}

// pathCase is a path forced by a plan adjustment.
type pathCase struct {
	name   string
	adjust func(*cachePlan)
	// applies says whether the path exists for a layer kind and options.
	applies func(kind string, opt replay.Options) bool
	// kernels names what the path must run at batch 8 (StepKernel,
	// VerifyKernel, FoldKernel), checked before the run; "" any.
	step, verify, fold string
}

func always(string, replay.Options) bool { return true }

// pathCases are the paths checked against the per-head reference.
var pathCases = []pathCase{
	{name: "default", applies: always},
	{name: "whole heads, late verify", applies: always, adjust: func(p *cachePlan) { p.split, p.lateVerify = nil, true }},
	{name: "group", applies: func(kind string, opt replay.Options) bool { return opt.Ring == numeric.F32 },
		adjust: func(p *cachePlan) { p.smallBatch, p.minItems, p.maxBlocks = 0, 0, 3 }, step: "group", verify: "group"},
	{name: "pipelined", applies: func(kind string, opt replay.Options) bool {
		return kind == "mamba2" && opt.Ring == numeric.F32 && opt.State == numeric.F32 && opt.ReadCopy == numeric.F32
	}, adjust: func(p *cachePlan) {
		p.group, p.pipe.stepOn, p.folds.verifyDots = groupStep{why: "test"}, true, false
		p.smallBatch, p.maxBlocks = 0, 3
	}, step: "pipelined", verify: "pipelined"},
	{name: "items folds", applies: func(kind string, opt replay.Options) bool {
		return opt.Ring == numeric.F32 && opt.ReadCopy == numeric.F32 && opt.State != numeric.E4M3
	}, adjust: func(p *cachePlan) {
		p.folds, p.stream = foldPipe{why: "test"}, streamPlan{}
		p.smallBatch, p.minItems, p.maxBlocks = 0, 0, 3
	}, fold: "items"},
}

// pathFormats are the state formats the paths are checked in.
var pathFormats = []replay.Options{
	{State: numeric.F32},
	{State: numeric.BF16},
	{State: numeric.F32, ReadCopy: numeric.NVFP4},
	{State: numeric.BF16, ReadCopy: numeric.E4M3},
	{State: numeric.E4M3},
	{State: numeric.F32, Ring: numeric.BF16},
}

// TestReplayPaths runs every path of every format against the per-head
// reference over random rounds of steps and verifies of random subsets of
// the slots (so that they sit at different flush phases and early folds),
// with random draft counts and accepted prefixes.
func TestReplayPaths(t *testing.T) {
	d := gpu(t)
	layers := []pathLayer{
		mamba2PathLayer(13, ssm.Mamba2Shape{Heads: 4, HeadDim: 80, StateSize: 128, Groups: 2}),
		gdnPathLayer(14, ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128}),
	}
	for li, l := range layers {
		kind := "mamba2"
		if li == 1 {
			kind = "gdn"
		}
		for _, f := range pathFormats {
			opt := f
			opt.Mode, opt.Window, opt.MaxDraft = replay.Replay, 6, 3
			if kind == "gdn" && opt.Ring != numeric.F32 {
				continue
			}
			for _, pc := range pathCases {
				if !pc.applies(kind, opt) {
					continue
				}
				name := fmt.Sprintf("%s/%v+%v/ring-%v/%s", l.name, opt.State, opt.ReadCopy, opt.Ring, pc.name)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					comparePaths(t, d, l, opt, pc, 8, 30)
				})
			}
		}
	}
}

// TestReplayPathsLargeBatch runs the default plan at batch 272 (the flush's
// few-items rule from batch 256, the group verify from 2 items an SM)
// against the per-head reference, fp32 and bf16.
func TestReplayPathsLargeBatch(t *testing.T) {
	d := gpu(t)
	for _, l := range []pathLayer{
		mamba2PathLayer(15, ssm.Mamba2Shape{Heads: 8, HeadDim: 64, StateSize: 128, Groups: 2}),
		gdnPathLayer(16, ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128}),
	} {
		for _, st := range []numeric.Format{numeric.F32, numeric.BF16} {
			opt := replay.Options{Mode: replay.Replay, Window: 8, MaxDraft: 4, State: st}
			t.Run(fmt.Sprintf("%s/%v", l.name, st), func(t *testing.T) {
				t.Parallel()
				comparePaths(t, d, l, opt, pathCase{name: "default"}, 272, 12)
			})
		}
	}
}

// comparePaths drives a cache planned with pc and the per-head reference
// with the same operations for rounds rounds and compares every output.
func comparePaths(t *testing.T, d *Device, l pathLayer, opt replay.Options, pc pathCase, capacity, rounds int) {
	s := stream(t, d)
	c, err := l.build(s, opt, capacity, pc.adjust)
	if err != nil {
		t.Fatal(err)
	}
	closeAfter(t, c.common)
	ref, err := l.build(s, opt, capacity, func(p *cachePlan) { p.perHead = true })
	if err != nil {
		t.Fatal(err)
	}
	closeAfter(t, ref.common)
	if pc.step != "" || pc.verify != "" || pc.fold != "" {
		fold, _ := c.common.FoldKernel()
		if got := c.common.StepKernel(capacity); pc.step != "" && got != pc.step {
			t.Fatalf("step kernel %q, want %q", got, pc.step)
		}
		if got := c.common.VerifyKernel(capacity); pc.verify != "" && got != pc.verify {
			t.Fatalf("verify kernel %q, want %q", got, pc.verify)
		}
		if pc.fold != "" && fold != pc.fold {
			t.Fatalf("fold kernel %q, want %q", fold, pc.fold)
		}
	}
	var slots []replay.Slot
	for range capacity {
		a, err := c.common.Admit()
		if err != nil {
			t.Fatal(err)
		}
		b, err := ref.common.Admit()
		if err != nil || a != b {
			t.Fatalf("admit: %d and %d, %v", a, b, err)
		}
		slots = append(slots, a)
	}
	T := opt.MaxDraft
	maxRows := capacity * T
	in := make([]Buffer, len(l.perRow))
	for i, n := range l.perRow {
		in[i] = alloc(t, d, 4*maxRows*n)
	}
	ya, yb := alloc(t, d, 4*maxRows*l.width), alloc(t, d, 4*maxRows*l.width)
	rng := rand.New(rand.NewPCG(uint64(len(l.name)), uint64(capacity)))
	worst, bound := 0.0, sameBound
	if elemBytes(opt.State) == 2 {
		bound = sameBound2
	}
	for round := range rounds {
		perm := rng.Perm(capacity)[:1+rng.IntN(capacity)]
		if round%4 == 3 {
			perm = rng.Perm(capacity) // the whole batch now and then
		}
		sub := make([]replay.Slot, len(perm))
		for i, p := range perm {
			sub[i] = slots[p]
		}
		verify := rng.IntN(3) == 0
		rows := len(sub)
		var counts []int
		if verify {
			rows *= T
			counts = make([]int, len(sub))
			for i := range counts {
				counts[i] = 1 + rng.IntN(T)
			}
		}
		for i, v := range l.draw(rng, rows) {
			must(t, s.CopyToDevice(in[i], f32Bytes(v)))
		}
		for _, y := range []Buffer{ya, yb} {
			must(t, s.Memset32(y, poisonF32))
		}
		if verify {
			must(t, c.verify(sub, T, counts, in, ya))
			must(t, ref.verify(sub, T, counts, in, yb))
		} else {
			must(t, c.step(sub, in, ya))
			must(t, ref.step(sub, in, yb))
		}
		a, b := make([]float32, rows*l.width), make([]float32, rows*l.width)
		must(t, s.CopyFromDevice(f32Bytes(a), ya))
		must(t, s.CopyFromDevice(f32Bytes(b), yb))
		for r := range rows {
			written := !verify || r%T < counts[r/T]
			ra, rb := a[r*l.width:(r+1)*l.width], b[r*l.width:(r+1)*l.width]
			if !written {
				if !math.IsNaN(float64(ra[0])) || !math.IsNaN(float64(rb[0])) {
					t.Fatalf("round %d row %d: written past its slot's %d drafts", round, r, counts[r/T])
				}
				continue
			}
			scale := 0.0
			for _, x := range rb {
				scale = max(scale, math.Abs(float64(x)))
			}
			for i := range ra {
				e := math.Abs(float64(ra[i])-float64(rb[i])) / max(scale, 1e-30)
				if math.IsNaN(e) || e > bound {
					t.Fatalf("round %d (verify %v, batch %d) row %d element %d: %v, per-head %v (%.3g of the row's largest)",
						round, verify, len(sub), r, i, ra[i], rb[i], e)
				}
				worst = max(worst, e)
			}
		}
		if verify {
			acc := make([]int, len(sub))
			for i := range acc {
				acc[i] = rng.IntN(counts[i] + 1)
			}
			must(t, c.common.Commit(sub, acc))
			must(t, ref.common.Commit(sub, acc))
		}
	}
	if sa, sb := c.common.Stats(), ref.common.Stats(); sa != sb {
		t.Errorf("stats %+v, per-head %+v", sa, sb)
	}
	t.Logf("worst difference %.3g of the row's largest output", worst)
}

// TestReplayGraph checks that a cache's operations captured in a CUDA
// graph (QueueStep, QueueVerify, QueueCommit on device slot lists) give
// the outputs of the same operations called directly, bit for bit, over
// two windows of steps and verify rounds.
func TestReplayGraph(t *testing.T) {
	d := gpu(t)
	for li, l := range []pathLayer{
		mamba2PathLayer(17, ssm.Mamba2Shape{Heads: 4, HeadDim: 80, StateSize: 128, Groups: 2}),
		gdnPathLayer(18, ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128}),
	} {
		// Not in parallel: while a stream captures, another goroutine's
		// synchronising calls would fail (the capture is global).
		t.Run(l.name, func(t *testing.T) {
			const batch, T = 6, 2
			opt := replay.Options{Mode: replay.Replay, Window: 5, MaxDraft: T}
			s := stream(t, d)
			direct, err := l.build(s, opt, batch, nil)
			must(t, err)
			closeAfter(t, direct.common)
			graphed, err := l.build(s, opt, batch, nil)
			must(t, err)
			closeAfter(t, graphed.common)
			var slots []replay.Slot
			ids, all := make([]int32, batch), make([]int32, batch)
			for i := range batch {
				a, err := direct.common.Admit()
				must(t, err)
				_, err = graphed.common.Admit()
				must(t, err)
				slots = append(slots, a)
				ids[i], all[i] = int32(a), T
			}
			slotsDev, accDev := alloc(t, d, 4*batch), alloc(t, d, 4*batch)
			must(t, s.CopyToDevice(slotsDev, f32Bytes(i32AsF32(ids))))
			must(t, s.CopyToDevice(accDev, f32Bytes(i32AsF32(all))))
			rows := batch * T
			in := make([]Buffer, len(l.perRow))
			for i, n := range l.perRow {
				in[i] = alloc(t, d, 4*rows*n)
			}
			ya, yb := alloc(t, d, 4*rows*l.width), alloc(t, d, 4*rows*l.width)
			gc := graphed.common
			queueStep := func() error { return graphed.queueStep(slotsDev, batch, in, yb) }
			queueVerify := func() error {
				if err := graphed.queueVerify(slotsDev, Buffer{}, batch, T, in, yb); err != nil {
					return err
				}
				return gc.QueueCommit(slotsDev, accDev, batch)
			}
			capture := func(f func() error) *GraphExec {
				must(t, s.BeginCapture())
				ferr := f()
				g, err := s.EndCapture()
				must(t, ferr)
				must(t, err)
				defer g.Close()
				x, err := g.Instantiate()
				must(t, err)
				return x
			}
			stepGraph, verifyGraph := capture(queueStep), capture(queueVerify)
			defer stepGraph.Close()
			defer verifyGraph.Close()
			rng := rand.New(rand.NewPCG(uint64(li), 3))
			accepted := make([]int, batch)
			for i := range accepted {
				accepted[i] = T
			}
			for round := range 14 {
				verify := round%3 == 2
				n := batch
				if verify {
					n = rows
				}
				for i, v := range l.draw(rng, n) {
					must(t, s.CopyToDevice(in[i], f32Bytes(v)))
				}
				must(t, s.Memset32(ya, poisonF32))
				must(t, s.Memset32(yb, poisonF32))
				if verify {
					must(t, direct.verify(slots, T, nil, in, ya))
					must(t, direct.common.Commit(slots, accepted))
					must(t, verifyGraph.Launch(s))
				} else {
					must(t, direct.step(slots, in, ya))
					must(t, stepGraph.Launch(s))
				}
				a, b := make([]float32, n*l.width), make([]float32, n*l.width)
				must(t, s.CopyFromDevice(f32Bytes(a), ya))
				must(t, s.CopyFromDevice(f32Bytes(b), yb))
				for i := range a {
					if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
						t.Fatalf("round %d (verify %v) output %d: direct %v, graph %v", round, verify, i, a[i], b[i])
					}
				}
			}
			must(t, gc.CommitErrors())
		})
	}
}

func i32AsF32(v []int32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = math.Float32frombits(uint32(x))
	}
	return out
}

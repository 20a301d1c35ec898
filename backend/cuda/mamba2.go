package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// Mamba2Input is one batch of Mamba-2 SSM-core inputs in device memory,
// laid out as replay.Mamba2Input: row r holds x [H·P], B and C [G·N] and
// the raw dt [H] (float32).
type Mamba2Input = replay.Mamba2Batch[Buffer]

// Mamba2Cache is the GPU twin of replay.Mamba2Cache: the same contract
// (replay.Mamba2State), modes (replay, baseline), state formats (fp32,
// fp16, bf16 or fp8-e4m3 states; bf16, fp8-e4m3 or nvfp4 read copies),
// data layout and semantics, on device buffers. Every operation is queued
// on the cache's stream; results are read after it.
//
// Device layouts (all little-endian, as the CPU cache's):
//   - state [slot][buffer][head][P][N] in the state format (1+MaxDraft
//     buffers in baseline mode, 1 in replay mode); fp8 states then hold one
//     float32 scale per matrix, [slot][buffer][head], after all the codes;
//   - read copy [slot][head][P·N] elements in bf16 or fp8 (one float32
//     scale per matrix [slot][head]), or nvfp4 codes [slot][head][P·N/2]
//     (element 2i in the low nibble of byte i), block scales
//     [slot][head][P·N/16] (e4m3), global scales [slot][head] (float32);
//   - ring [slot][L+MaxDraft entries]: x [H·P], B [G·N] in float32, or
//     bf16 with Options.Ring bf16; ring scalars [slot][head][L+MaxDraft
//     rounded up to 4]: Δ, exp(Δ·A) in float32.
//
// A cache is driven by one goroutine at a time.
type Mamba2Cache struct {
	replayCommon
	shape ssm.Mamba2Shape

	a, dtb, dd Buffer // A = −exp(A_log) and dt_bias (float64), D (float32)

	ringX, ringB  Buffer
	ringDt, ringA Buffer

	// With a bf16 ring: the op's x and B rounded to bf16 (round_bf16),
	// which the kernels read in place of the caller's.
	roundFn        *Function
	roundX, roundB Buffer
}

var _ replay.Mamba2State[Buffer] = (*Mamba2Cache)(nil)

// NewMamba2Cache compiles the kernels for the shape and options and
// allocates a cache of capacity slots whose operations queue on s. conv
// may have zero Channels when the caller runs the convolution itself.
// Options are package replay's; the GPU takes every state and read-copy
// format of package replay but the naive nvfp4 baseline, no stochastic
// rounding, and window + max drafts ≤ 32.
func NewMamba2Cache(ctx context.Context, s *Stream, shape ssm.Mamba2Shape, prm replay.Mamba2Params, conv replay.ConvWeights, capacity int, opt replay.Options) (*Mamba2Cache, error) {
	return newMamba2Cache(ctx, s, shape, prm, conv, capacity, opt, nil)
}

// newMamba2Cache is NewMamba2Cache with the plan adjusted by adjust (tests:
// a path forced at a small size) where it is not nil.
func newMamba2Cache(ctx context.Context, s *Stream, shape ssm.Mamba2Shape, prm replay.Mamba2Params, conv replay.ConvWeights,
	capacity int, opt replay.Options, adjust func(*cachePlan)) (*Mamba2Cache, error) {
	build := func(dots bool) (*Mamba2Cache, error) {
		plan, err := planMamba2Dots(shape, opt, s.d.props(), dots)
		if err != nil {
			return nil, fmt.Errorf("cuda: mamba2 cache: %w", err)
		}
		if adjust != nil {
			adjust(&plan)
		}
		return buildMamba2(ctx, s, shape, prm, conv, capacity, plan)
	}
	c, err := build(true)
	if errors.Is(err, errFoldDotsFit) {
		// The verify's dots need the pipelined folds, which this GPU
		// cannot hold: the module again without them, its group verify
		// streaming every slot.
		c, err = build(false)
	}
	return c, err
}

func buildMamba2(ctx context.Context, s *Stream, shape ssm.Mamba2Shape, prm replay.Mamba2Params, conv replay.ConvWeights,
	capacity int, plan cachePlan) (*Mamba2Cache, error) {
	H, P, N, G := shape.Heads, shape.HeadDim, shape.StateSize, shape.Groups
	if len(prm.ALog) != H || len(prm.DtBias) != H || len(prm.D) != H {
		return nil, fmt.Errorf("cuda: mamba2 cache: A_log, dt_bias and D need %d values each", H)
	}
	c := &Mamba2Cache{shape: shape}
	c.kind = "mamba2"
	fail := func(err error) (*Mamba2Cache, error) {
		c.Close()
		return nil, fmt.Errorf("cuda: mamba2 cache: %w", err)
	}
	if err := c.init(ctx, s, plan, capacity); err != nil {
		return fail(err)
	}
	if err := c.bind(ctx); err != nil {
		if errors.Is(err, errFoldDotsFit) {
			c.Close()
			return nil, err
		}
		return fail(err)
	}
	a, dtb := make([]float64, H), make([]float64, H)
	for h := range H {
		a[h] = -math.Exp(float64(prm.ALog[h]))
		dtb[h] = float64(prm.DtBias[h])
	}
	var err error
	if c.a, err = c.uploadF64(a); err != nil {
		return fail(err)
	}
	if c.dtb, err = c.uploadF64(dtb); err != nil {
		return fail(err)
	}
	if c.dd, err = c.uploadF32(prm.D); err != nil {
		return fail(err)
	}
	if c.opt.Mode == replay.Replay {
		R, e := ringEntries(c.opt), ringElemBytes(c.opt)
		for _, r := range []struct {
			dst     *Buffer
			perSlot int
		}{{&c.ringX, e * R * H * P}, {&c.ringB, e * R * G * N}, {&c.ringDt, 4 * H * ringScalars(R)}, {&c.ringA, 4 * H * ringScalars(R)}} {
			if *r.dst, err = c.allocRing(r.perSlot); err != nil {
				return fail(err)
			}
		}
	}
	if c.opt.Ring == numeric.BF16 {
		if c.roundFn, err = c.mod.Function("round_bf16"); err != nil {
			return fail(err)
		}
		rows := capacity * max(1, c.opt.MaxDraft)
		if c.roundX, err = c.alloc(4 * rows * H * P); err != nil {
			return fail(err)
		}
		if c.roundB, err = c.alloc(4 * rows * G * N); err != nil {
			return fail(err)
		}
	}
	if err := c.newConvWindows(ctx, conv); err != nil {
		return fail(err)
	}
	if err := c.newClearTable(ctx, capacity); err != nil {
		return fail(err)
	}
	return c, nil
}

// Shape returns the layer shape.
func (c *Mamba2Cache) Shape() ssm.Mamba2Shape { return c.shape }

// StateBytes is what one full state transfer of one slot moves (H·P·N
// elements in the state format, with fp8 scales), and read what a
// non-flush step reads of one slot: the read copy if there is one, else the
// checkpoint.
func (c *Mamba2Cache) StateBytes() (state, read int) { return c.stateBytes() }

// Step runs one decode step of each slot (the contract's Step): inputs are
// appended to each slot's ring, y [len(slots)][H·P] receives the SSM output
// (before the gated norm), and a slot whose ring reaches the window
// flushes its checkpoint (and read copy), each slot at its own phase.
func (c *Mamba2Cache) Step(slots []replay.Slot, in Mamba2Input, y Buffer) error {
	if err := c.checkStep(slots); err != nil {
		return c.errorf("step", err)
	}
	sl, err := c.useSlots(slots)
	if err != nil {
		return c.errorf("step", err)
	}
	if err := c.QueueStep(sl, len(slots), in, y); err != nil {
		return err
	}
	c.ledger.Step(slots, nil)
	return nil
}

// QueueStep queues Step for the batch slots of a device slot list (int32),
// for CUDA graphs: the slots must be live and distinct (not checked), and
// the ledger does not see the step.
func (c *Mamba2Cache) QueueStep(slots Buffer, batch int, in Mamba2Input, y Buffer) error {
	if err := c.checkInput(slots, batch, 1, in, y); err != nil {
		return c.errorf("step", err)
	}
	if c.opt.Mode == replay.Baseline {
		return c.launchBaseline(slots, Buffer{}, batch, 1, false, in, y)
	}
	x, bIn, err := c.ringInputs(batch, in)
	if err != nil {
		return c.errorf("step", err)
	}
	a := &c.args
	a.Reset()
	c.replayArgs(a)
	a.Ptr(c.hist)
	a.Ptr(slots)
	c.inputArgs(a, x, bIn, in, y)
	a.I32(int32(c.opt.Window))
	return c.launchReplayStep(a, batch)
}

// Verify computes the outputs of T draft inputs per slot (rows
// [slot][T] of in and y; rows past a slot's count are not written) without
// writing any checkpoint (docs/DESIGN.md 2.3). Replay mode appends the
// drafts to the ring, folding the committed history first where history
// + 2·count would overflow it; baseline mode writes one state per draft.
// Commit accepts a prefix.
func (c *Mamba2Cache) Verify(slots []replay.Slot, T int, counts []int, in Mamba2Input, y Buffer) error {
	sl, cn, err := c.prepareVerify(slots, T, counts)
	if err != nil {
		return c.errorf("verify", err)
	}
	if err := c.QueueVerify(sl, cn, len(slots), T, in, y); err != nil {
		return err
	}
	c.ledger.Verify(slots, T, counts, nil)
	return nil
}

// QueueVerify queues Verify for the batch slots of a device slot list and
// optional per-slot counts (int32 in 1..T), for CUDA graphs (see
// QueueStep).
func (c *Mamba2Cache) QueueVerify(slots, counts Buffer, batch, T int, in Mamba2Input, y Buffer) error {
	if err := c.checkDrafts(batch, T, counts); err != nil {
		return c.errorf("verify", err)
	}
	if err := c.checkInput(slots, batch, T, in, y); err != nil {
		return c.errorf("verify", err)
	}
	if c.opt.Mode == replay.Baseline {
		return c.launchBaseline(slots, counts, batch, T, true, in, y)
	}
	x, bIn, err := c.ringInputs(batch*T, in)
	if err != nil {
		return c.errorf("verify", err)
	}
	a := &c.args
	a.Reset()
	c.replayArgs(a)
	a.Ptr(c.hist)
	a.Ptr(slots)
	a.Ptr(counts)
	a.I32(int32(T))
	c.inputArgs(a, x, bIn, in, y)
	a.I32(int32(ringEntries(c.opt)))
	return c.launchReplayVerify(a, slots, counts, batch, T)
}

func (c *Mamba2Cache) checkInput(slots Buffer, batch, T int, in Mamba2Input, y Buffer) error {
	if err := c.checkQueued(batch, slots); err != nil {
		return err
	}
	H, P, N, G := c.shape.Heads, c.shape.HeadDim, c.shape.StateSize, c.shape.Groups
	rows := batch * T
	for _, e := range []error{
		needRows("x", in.X, 4*rows*H*P), needRows("B", in.B, 4*rows*G*N), needRows("C", in.C, 4*rows*G*N),
		need("dt", in.Dt, 4*rows*H), needRows("y", y, 4*rows*H*P),
	} {
		if e != nil {
			return e
		}
	}
	return nil
}

func (c *Mamba2Cache) replayArgs(a *Args) {
	a.Ptr(c.state)
	a.Ptr(c.codes)
	a.Ptr(c.scales)
	a.Ptr(c.scale)
	a.Ptr(c.ringX)
	a.Ptr(c.ringB)
	a.Ptr(c.ringDt)
	a.Ptr(c.ringA)
}

// inputArgs appends the arguments every Mamba-2 kernel ends its list
// with: the op's x and B (the caller's, or rounded for a bf16 ring), C,
// dt and the output, then the layer's constants and the Δ clamp.
func (c *Mamba2Cache) inputArgs(a *Args, x, bIn Buffer, in Mamba2Input, y Buffer) {
	a.Ptr(x)
	a.Ptr(bIn)
	a.Ptr(in.C)
	a.Ptr(in.Dt)
	a.Ptr(y)
	a.Ptr(c.a)
	a.Ptr(c.dtb)
	a.Ptr(c.dd)
	a.F32(in.DtMin)
}

func (c *Mamba2Cache) launchBaseline(slots, counts Buffer, batch, T int, verify bool, in Mamba2Input, y Buffer) error {
	a := &c.args
	a.Reset()
	a.Ptr(c.state)
	a.Ptr(c.cur)
	a.Ptr(slots)
	a.Ptr(counts)
	a.I32(int32(T))
	a.I32(int32(stateBuffers(c.opt)))
	c.inputArgs(a, in.X, in.B, in, y)
	a.Ptr(c.pending) // the kernel sets the pending drafts: no cursor kernel
	return c.launchBaselineKernel(batch, verify, a)
}

// ringInputs returns the op's x and B (rows input rows: the batch, times T
// for a verify) as the kernels are to read them: the caller's, or with a
// bf16 ring the cache's copies rounded to bf16 (round_bf16), queued before
// the op. Every value the kernels then take from the op or the ring is
// what the ring holds, so the cache computes what an fp32 ring fed rounded
// inputs computes, as the CPU cache's contract says (replay.Options.Ring).
func (c *Mamba2Cache) ringInputs(rows int, in Mamba2Input) (x, b Buffer, err error) {
	if c.roundFn == nil {
		return in.X, in.B, nil
	}
	H, P, N, G := c.shape.Heads, c.shape.HeadDim, c.shape.StateSize, c.shape.Groups
	nx, nb := rows*H*P, rows*G*N
	a := &c.args
	a.Reset()
	a.Ptr(c.roundX)
	a.Ptr(in.X)
	a.I32(int32(nx))
	a.Ptr(c.roundB)
	a.Ptr(in.B)
	a.I32(int32(nb))
	// Blocks for the larger array, four elements a thread; blockIdx.y
	// picks the array (the smaller one's extra blocks find no work).
	const threads = 256
	blocks := min((max(nx, nb)+4*threads-1)/(4*threads), 8*c.d.Multiprocessors())
	if err := c.d.Launch(c.roundFn, [3]uint32{uint32(max(1, blocks)), 2, 1}, [3]uint32{threads, 1, 1}, 0, c.s, a); err != nil {
		return Buffer{}, Buffer{}, err
	}
	return c.roundX, c.roundB, nil
}

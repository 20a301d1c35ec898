package cuda

import (
	"context"
	"fmt"
	"math"

	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// GDNInput is one batch of Gated DeltaNet recurrence inputs in device
// memory, laid out as replay.GDNInput: row r holds q and k [Hk·dk] (before
// the l2 normalisation), v [Hv·dv] and the raw a and b [Hv] (float32).
type GDNInput = replay.GDNBatch[Buffer]

// GDNCache is the GPU twin of replay.GDNCache (see Mamba2Cache for what is
// shared). The state of value head j is stored transposed, dv rows of dk,
// as on the CPU. The ring keeps the normalised k [Hk·dk], v [Hv·dv], the
// decay exp(g) and β [Hv] of each step and caches the corrected update u
// [Hv·dv] for the output path. A flush folds the cached u where there is
// no read copy (replay.Options.FoldsCachedU), and is otherwise the exact
// fold from the raw k, v, g, β on the checkpoint (docs/DESIGN.md 2.2), as
// on the CPU.
type GDNCache struct {
	replayCommon
	shape ssm.GDNShape

	negA, dtb Buffer // −exp(A_log), dt_bias (float64)
	qscale    float32

	ringK, ringV, ringU Buffer
	ringA, ringBeta     Buffer
}

var _ replay.GDNState[Buffer] = (*GDNCache)(nil)

// NewGDNCache compiles the kernels for the shape and options and allocates
// a cache of capacity slots whose operations queue on s (see
// NewMamba2Cache for the options; the GDN ring is fp32).
func NewGDNCache(ctx context.Context, s *Stream, shape ssm.GDNShape, prm replay.GDNParams, conv replay.ConvWeights, capacity int, opt replay.Options) (*GDNCache, error) {
	return newGDNCache(ctx, s, shape, prm, conv, capacity, opt, nil)
}

// newGDNCache is NewGDNCache with the plan adjusted by adjust where it is
// not nil.
func newGDNCache(ctx context.Context, s *Stream, shape ssm.GDNShape, prm replay.GDNParams, conv replay.ConvWeights,
	capacity int, opt replay.Options, adjust func(*cachePlan)) (*GDNCache, error) {
	plan, err := planGDN(shape, opt, s.d.props())
	if err != nil {
		return nil, fmt.Errorf("cuda: gdn cache: %w", err)
	}
	if adjust != nil {
		adjust(&plan)
	}
	Hk, Hv, dk, dv := shape.KeyHeads, shape.ValueHeads, shape.KeyDim, shape.ValueDim
	if len(prm.ALog) != Hv || len(prm.DtBias) != Hv {
		return nil, fmt.Errorf("cuda: gdn cache: A_log and dt_bias need %d values each", Hv)
	}
	c := &GDNCache{shape: shape, qscale: float32(1 / math.Sqrt(float64(dk)))}
	c.kind = "gdn"
	fail := func(err error) (*GDNCache, error) {
		c.Close()
		return nil, fmt.Errorf("cuda: gdn cache: %w", err)
	}
	if err := c.init(ctx, s, plan, capacity); err != nil {
		return fail(err)
	}
	if err := c.bind(ctx); err != nil {
		return fail(err)
	}
	negA, dtb := make([]float64, Hv), make([]float64, Hv)
	for j := range Hv {
		negA[j] = -math.Exp(float64(prm.ALog[j]))
		dtb[j] = float64(prm.DtBias[j])
	}
	if c.negA, err = c.uploadF64(negA); err != nil {
		return fail(err)
	}
	if c.dtb, err = c.uploadF64(dtb); err != nil {
		return fail(err)
	}
	if c.opt.Mode == replay.Replay {
		R := ringEntries(c.opt)
		for _, r := range []struct {
			dst     *Buffer
			perSlot int
		}{
			{&c.ringK, 4 * R * Hk * dk}, {&c.ringV, 4 * R * Hv * dv}, {&c.ringU, 4 * R * Hv * dv},
			{&c.ringA, 4 * Hv * ringScalars(R)}, {&c.ringBeta, 4 * Hv * ringScalars(R)},
		} {
			if *r.dst, err = c.allocRing(r.perSlot); err != nil {
				return fail(err)
			}
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
func (c *GDNCache) Shape() ssm.GDNShape { return c.shape }

// StateBytes is what one full state transfer of one slot moves, and
// read what a non-flush step reads of one slot's state.
func (c *GDNCache) StateBytes() (state, read int) { return c.stateBytes() }

// Step runs one decode step of each slot and writes o [len(slots)][Hv·dv]
// (before the gated norm). See Mamba2Cache.Step.
func (c *GDNCache) Step(slots []replay.Slot, in GDNInput, o Buffer) error {
	if err := c.checkStep(slots); err != nil {
		return c.errorf("step", err)
	}
	sl, err := c.useSlots(slots)
	if err != nil {
		return c.errorf("step", err)
	}
	if err := c.QueueStep(sl, len(slots), in, o); err != nil {
		return err
	}
	c.ledger.Step(slots, nil)
	return nil
}

// QueueStep queues Step for the batch slots of a device slot list, for
// CUDA graphs (see Mamba2Cache.QueueStep).
func (c *GDNCache) QueueStep(slots Buffer, batch int, in GDNInput, o Buffer) error {
	if err := c.checkInput(slots, batch, 1, in, o); err != nil {
		return c.errorf("step", err)
	}
	if c.opt.Mode == replay.Baseline {
		return c.launchBaseline(slots, Buffer{}, batch, 1, false, in, o)
	}
	a := &c.args
	a.Reset()
	c.replayArgs(a)
	a.Ptr(c.hist)
	a.Ptr(slots)
	c.inputArgs(a, in, o)
	a.I32(int32(c.opt.Window))
	return c.launchReplayStep(a, batch)
}

// Verify computes the outputs of T draft inputs per slot without writing
// any checkpoint. See Mamba2Cache.Verify.
func (c *GDNCache) Verify(slots []replay.Slot, T int, counts []int, in GDNInput, o Buffer) error {
	sl, cn, err := c.prepareVerify(slots, T, counts)
	if err != nil {
		return c.errorf("verify", err)
	}
	if err := c.QueueVerify(sl, cn, len(slots), T, in, o); err != nil {
		return err
	}
	c.ledger.Verify(slots, T, counts, nil)
	return nil
}

// QueueVerify queues Verify for the batch slots of a device slot list and
// optional per-slot counts, for CUDA graphs (see Mamba2Cache.QueueStep).
func (c *GDNCache) QueueVerify(slots, counts Buffer, batch, T int, in GDNInput, o Buffer) error {
	if err := c.checkDrafts(batch, T, counts); err != nil {
		return c.errorf("verify", err)
	}
	if err := c.checkInput(slots, batch, T, in, o); err != nil {
		return c.errorf("verify", err)
	}
	if c.opt.Mode == replay.Baseline {
		return c.launchBaseline(slots, counts, batch, T, true, in, o)
	}
	a := &c.args
	a.Reset()
	c.replayArgs(a)
	a.Ptr(c.hist)
	a.Ptr(slots)
	a.Ptr(counts)
	a.I32(int32(T))
	c.inputArgs(a, in, o)
	a.I32(int32(ringEntries(c.opt)))
	return c.launchReplayVerify(a, slots, counts, batch, T)
}

func (c *GDNCache) checkInput(slots Buffer, batch, T int, in GDNInput, o Buffer) error {
	if err := c.checkQueued(batch, slots); err != nil {
		return err
	}
	Hk, Hv, dk, dv := c.shape.KeyHeads, c.shape.ValueHeads, c.shape.KeyDim, c.shape.ValueDim
	rows := batch * T
	for _, e := range []error{
		needRows("q", in.Q, 4*rows*Hk*dk), needRows("k", in.K, 4*rows*Hk*dk), needRows("v", in.V, 4*rows*Hv*dv),
		need("a", in.A, 4*rows*Hv), need("b", in.B, 4*rows*Hv), needRows("o", o, 4*rows*Hv*dv),
	} {
		if e != nil {
			return e
		}
	}
	return nil
}

func (c *GDNCache) replayArgs(a *Args) {
	a.Ptr(c.state)
	a.Ptr(c.codes)
	a.Ptr(c.scales)
	a.Ptr(c.scale)
	a.Ptr(c.ringK)
	a.Ptr(c.ringV)
	a.Ptr(c.ringA)
	a.Ptr(c.ringBeta)
	a.Ptr(c.ringU)
}

func (c *GDNCache) inputArgs(a *Args, in GDNInput, o Buffer) {
	a.Ptr(in.Q)
	a.Ptr(in.K)
	a.Ptr(in.V)
	a.Ptr(in.A)
	a.Ptr(in.B)
	a.Ptr(o)
	a.Ptr(c.negA)
	a.Ptr(c.dtb)
	a.F32(c.qscale)
}

func (c *GDNCache) launchBaseline(slots, counts Buffer, batch, T int, verify bool, in GDNInput, o Buffer) error {
	a := &c.args
	a.Reset()
	a.Ptr(c.state)
	a.Ptr(c.cur)
	a.Ptr(slots)
	a.Ptr(counts)
	a.I32(int32(T))
	a.I32(int32(stateBuffers(c.opt)))
	c.inputArgs(a, in, o)
	a.Ptr(c.pending) // the kernel sets the pending drafts: no cursor kernel
	return c.launchBaselineKernel(batch, verify, a)
}

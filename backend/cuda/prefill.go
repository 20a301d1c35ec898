package cuda

import (
	"context"
	"fmt"

	"github.com/replayssm/replayssm/replay"
)

// bindPrefill builds the cache's prefill module (the plan's module with
// PREFILL_MODULE, kernels/replay_common.cu) from src and looks up its
// kernels.
func (c *replayCommon) bindPrefill(ctx context.Context, src string, capacity int) error {
	m, err := c.d.Compile(ctx, c.plan.file, src, append(c.plan.options(capacity), "-DPREFILL_MODULE=1")...)
	if err != nil {
		return fmt.Errorf("prefill module: %w", err)
	}
	for _, f := range []struct {
		dst  **Function
		name string
	}{{&c.prefill, c.kind + "_prefill"}, {&c.prefillDone, "prefill_done"}, {&c.convPrefill, "conv_prefill"}} {
		if *f.dst, err = m.Function(f.name); err != nil {
			return fmt.Errorf("prefill module: %w", err)
		}
	}
	return nil
}

// ConvPrefill runs the convolution over T consecutive inputs per slot
// ([slot][T][Channels]; counts, when not nil, each slot's own number) and
// moves each window on by its count (the contract's ConvPrefill).
func (c *replayCommon) ConvPrefill(slots []replay.Slot, T int, counts []int, in, out Buffer) error {
	if c.conv == nil {
		return c.errorf("conv", fmt.Errorf("cache built without conv weights"))
	}
	sl, cn, err := c.preparePrefill(slots, T, counts)
	if err == nil {
		n := 4 * len(slots) * T * c.conv.w.Channels
		if err = need("conv input", in, n); err == nil {
			err = need("conv output", out, n)
		}
	}
	if err != nil {
		return c.errorf("conv", err)
	}
	if err := c.conv.prefill(c.s, c.convPrefill, sl, cn, in, out, len(slots), T); err != nil {
		return c.errorf("conv", err)
	}
	return nil
}

// preparePrefill validates a prefill and puts its slots and counts on the
// device.
func (c *replayCommon) preparePrefill(slots []replay.Slot, T int, counts []int) (slotsDev, countsDev Buffer, err error) {
	if c.prefillErr != nil {
		return Buffer{}, Buffer{}, c.prefillErr
	}
	if err := c.ledger.CheckPrefill(slots, T, counts); err != nil {
		return Buffer{}, Buffer{}, err
	}
	if err := c.checkStep(slots); err != nil {
		return Buffer{}, Buffer{}, err
	}
	return c.useSlotsCounts(slots, counts)
}

// prefillHead appends the arguments every prefill kernel starts with: the
// state and read copy, then the layer's ring arrays.
func (c *replayCommon) prefillHead(a *Args, rings ...Buffer) {
	a.Reset()
	a.Ptr(c.state)
	a.Ptr(c.codes)
	a.Ptr(c.scales)
	a.Ptr(c.scale)
	for _, r := range rings {
		a.Ptr(r)
	}
	a.Ptr(c.hist)
	a.Ptr(c.cur)
	a.I32(int32(stateBuffers(c.opt)))
	a.I32(int32(b2i(c.opt.Mode == replay.Replay)))
}

// launchPrefill queues the prefill kernel built in c.args (one block per
// head and slot), then the cursor kernel, and records the prefill.
func (c *replayCommon) launchPrefill(slots []replay.Slot, T int, counts []int, sl Buffer) error {
	if err := c.d.Launch(c.prefill, c.grid(len(slots)), c.block(), 0, c.s, &c.args); err != nil {
		return c.errorf("prefill", err)
	}
	a := &c.args
	a.Reset()
	a.Ptr(c.hist)
	a.Ptr(c.pending)
	a.Ptr(sl)
	a.I32(int32(len(slots)))
	a.I32(int32(b2i(c.opt.Mode == replay.Replay)))
	if err := c.d.Launch(c.prefillDone, [3]uint32{uint32((len(slots) + 127) / 128), 1, 1}, [3]uint32{128, 1, 1}, 0, c.s, a); err != nil {
		return c.errorf("prefill", err)
	}
	c.ledger.Prefill(slots, T, counts)
	return nil
}

// Prefill runs T consecutive inputs per slot through the recurrence as one
// multi-token forward (the contract's Prefill; rows [slot][T] of in and y,
// counts, when not nil, each slot's own number): y receives every input's
// output from the float32 state; replay mode folds the ring and the inputs
// into the checkpoint and read copy, baseline mode rounds the state after
// every input.
func (c *Mamba2Cache) Prefill(slots []replay.Slot, T int, counts []int, in Mamba2Input, y Buffer) error {
	sl, cn, err := c.preparePrefill(slots, T, counts)
	if err == nil {
		err = c.checkInput(sl, len(slots), T, in, y)
	}
	if err != nil {
		return c.errorf("prefill", err)
	}
	a := &c.args
	c.prefillHead(a, c.ringX, c.ringB, c.ringDt, c.ringA)
	a.Ptr(sl)
	a.Ptr(cn)
	a.I32(int32(T))
	c.inputArgs(a, in.X, in.B, in, y)
	return c.launchPrefill(slots, T, counts, sl)
}

// Prefill runs T consecutive inputs per slot through the recurrence (see
// Mamba2Cache.Prefill); o receives [slot][T][Hv·dv].
func (c *GDNCache) Prefill(slots []replay.Slot, T int, counts []int, in GDNInput, o Buffer) error {
	sl, cn, err := c.preparePrefill(slots, T, counts)
	if err == nil {
		err = c.checkInput(sl, len(slots), T, in, o)
	}
	if err != nil {
		return c.errorf("prefill", err)
	}
	a := &c.args
	c.prefillHead(a, c.ringK, c.ringV, c.ringA, c.ringBeta)
	a.Ptr(sl)
	a.Ptr(cn)
	a.I32(int32(T))
	c.inputArgs(a, in, o)
	return c.launchPrefill(slots, T, counts, sl)
}

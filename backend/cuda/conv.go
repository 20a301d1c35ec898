package cuda

import (
	"context"
	"fmt"

	"github.com/replayssm/replayssm/replay"
)

// convWindows is a cache's causal depthwise convolution (kernels/conv.cu)
// and its per-slot windows of raw inputs: [slot][K-1+max(1, MaxDraft)][C]
// float32, as the CPU cache keeps them.
type convWindows struct {
	w            replay.ConvWeights
	rows         int
	win          slotArray
	weight, bias Buffer
	apply, shf   *Function
	args         Args
}

// maxConvKernel bounds the convolution's taps: conv_prefill keeps a
// channel's taps and inputs in registers (the models use 4).
const maxConvKernel = 8

// newConvWindows uploads the weights and allocates the windows of a cache.
func (c *replayCommon) newConvWindows(ctx context.Context, w replay.ConvWeights) error {
	if w.Channels == 0 {
		return nil
	}
	if w.Channels < 0 || w.Kernel <= 0 || len(w.Weight) != w.Channels*w.Kernel || (w.Bias != nil && len(w.Bias) != w.Channels) {
		return fmt.Errorf("conv: %d channels, kernel %d, %d weights, %d biases", w.Channels, w.Kernel, len(w.Weight), len(w.Bias))
	}
	if w.Kernel > maxConvKernel {
		return fmt.Errorf("conv: kernel %d, the GPU's convolution takes at most %d taps", w.Kernel, maxConvKernel)
	}
	cw := &convWindows{w: w, rows: w.Kernel - 1 + max(1, c.opt.MaxDraft)}
	var err error
	if cw.apply, err = c.d.Kernel(ctx, "conv.cu", "conv_apply"); err != nil {
		return err
	}
	if cw.shf, err = c.d.Kernel(ctx, "conv.cu", "conv_shift"); err != nil {
		return err
	}
	if cw.weight, err = c.uploadF32(w.Weight); err != nil {
		return err
	}
	if w.Bias != nil {
		if cw.bias, err = c.uploadF32(w.Bias); err != nil {
			return err
		}
	}
	per := 4 * cw.rows * w.Channels
	b, err := c.alloc(per * c.capacity)
	if err != nil {
		return err
	}
	cw.win = slotArray{b, per}
	c.conv = cw
	return nil
}

// window is slot s's window.
func (cw *convWindows) window(s replay.Slot) Buffer { return cw.win.at(s) }

func (cw *convWindows) grid(batch int) [3]uint32 {
	return [3]uint32{uint32((batch*cw.w.Channels + 255) / 256), 1, 1}
}

// rowArgs starts a launch's arguments with the windows, weights and slots,
// then counts (when withCounts: conv_prefill's) and the rows in and out,
// then the shape.
func (cw *convWindows) rowArgs(slots, counts, in, out Buffer, withCounts bool, batch, T int) *Args {
	a := &cw.args
	a.Reset()
	a.Ptr(cw.win.buf)
	a.Ptr(cw.weight)
	a.Ptr(cw.bias)
	a.Ptr(slots)
	if withCounts {
		a.Ptr(counts)
	}
	a.Ptr(in)
	a.Ptr(out)
	a.I32(int32(batch))
	a.I32(int32(T))
	a.I32(int32(cw.w.Channels))
	a.I32(int32(cw.w.Kernel))
	a.I32(int32(cw.rows))
	return a
}

// run queues conv_apply over batch slots of T inputs each.
func (cw *convWindows) run(s *Stream, slots, in, out Buffer, batch, T int, shift bool) error {
	a := cw.rowArgs(slots, Buffer{}, in, out, false, batch, T)
	a.I32(int32(b2i(shift)))
	return s.d.Launch(cw.apply, cw.grid(batch), [3]uint32{256, 1, 1}, 0, s, a)
}

// convPrefillChunk is how many consecutive outputs of one channel a thread
// of conv_prefill computes (CONV_PREFILL_CHUNK there).
const convPrefillChunk = 64

// prefill queues conv_prefill (fn, from the cache's prefill module) over
// batch slots of T inputs each, counts (may be null) each slot's own.
func (cw *convWindows) prefill(s *Stream, fn *Function, slots, counts, in, out Buffer, batch, T int) error {
	a := cw.rowArgs(slots, counts, in, out, true, batch, T)
	grid := [3]uint32{uint32((cw.w.Channels + 127) / 128), uint32((T + convPrefillChunk - 1) / convPrefillChunk), uint32(batch)}
	return s.d.Launch(fn, grid, [3]uint32{128, 1, 1}, 0, s, a)
}

// shift queues conv_shift: each slot's window takes its accepted drafts.
func (cw *convWindows) shift(s *Stream, slots, accepted Buffer, batch int) error {
	a := &cw.args
	a.Reset()
	a.Ptr(cw.win.buf)
	a.Ptr(slots)
	a.Ptr(accepted)
	a.I32(int32(batch))
	a.I32(int32(cw.w.Channels))
	a.I32(int32(cw.w.Kernel))
	a.I32(int32(cw.rows))
	return s.d.Launch(cw.shf, cw.grid(batch), [3]uint32{256, 1, 1}, 0, s, a)
}

// Conv runs the convolution for one step of each slot (in and out:
// [len(slots)][Channels] float32); the raw inputs enter the windows.
func (c *replayCommon) Conv(slots []replay.Slot, in, out Buffer) error {
	if err := c.convCheck(slots, 1, in, out); err != nil {
		return c.errorf("conv", err)
	}
	sl, err := c.useSlots(slots)
	if err == nil {
		err = c.conv.run(c.s, sl, in, out, len(slots), 1, true)
	}
	if err != nil {
		return c.errorf("conv", err)
	}
	return nil
}

// ConvVerify runs the convolution over T draft inputs per slot
// ([slot][T][Channels]) without moving the windows; Commit shifts them by
// the accepted counts.
func (c *replayCommon) ConvVerify(slots []replay.Slot, T int, in, out Buffer) error {
	if c.opt.MaxDraft == 0 {
		return c.errorf("conv", fmt.Errorf("verify: cache built with MaxDraft 0"))
	}
	if T < 1 || T > c.opt.MaxDraft {
		return c.errorf("conv", fmt.Errorf("verify: %d drafts per slot, cache allows 1..%d", T, c.opt.MaxDraft))
	}
	if err := c.convCheck(slots, T, in, out); err != nil {
		return c.errorf("conv", err)
	}
	sl, err := c.useSlots(slots)
	if err == nil {
		err = c.conv.run(c.s, sl, in, out, len(slots), T, false)
	}
	if err != nil {
		return c.errorf("conv", err)
	}
	return nil
}

func (c *replayCommon) convCheck(slots []replay.Slot, T int, in, out Buffer) error {
	if c.conv == nil {
		return fmt.Errorf("cache built without conv weights")
	}
	if err := c.checkStep(slots); err != nil {
		return err
	}
	n := 4 * len(slots) * T * c.conv.w.Channels
	if err := need("conv input", in, n); err != nil {
		return err
	}
	return need("conv output", out, n)
}

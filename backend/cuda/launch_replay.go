package cuda

import "github.com/replayssm/replayssm/replay"

// The launch sequences of a replay cache's operations, as the plan says.
// A decode step runs, by batch size:
//   - up to the small batch: one kernel for every slot (the split-heads
//     module's where it takes the batch), whose last block moves the
//     cursors;
//   - above it: the flush kernel for the slots whose ring is full (the
//     pipelined folds, GDN's streamed flush, or the items kernel), then
//     the non-flush kernel for the others (the group step, the pipelined
//     step or the per-head kernel), whose last block moves the cursors;
//     GDN queues the flush on a second stream beside the non-flush kernel.
// A verify runs the small batch's one verify kernel, or the early folds
// and the group verify (from minItems items), or the pipelined verify
// after the per-head early folds, or the per-head verify; then the cursor
// kernel.

// launchReplayStep queues a replay decode step whose arguments a holds up
// to the window; each kernel takes its own slots and shares one Args (a
// launch copies it).
func (c *replayCommon) launchReplayStep(a *Args, batch int) error {
	a.Ptr(c.pending)
	a.Ptr(c.done)
	a.I32(int32(batch))
	if batch <= c.plan.smallBatch {
		if h := &c.small; h.takes(batch) {
			return c.d.Launch(h.step, [3]uint32{uint32(c.heads * h.parts), uint32(batch), 1}, [3]uint32{uint32(h.threads), 1, 1}, 0, c.s, a)
		}
		return c.d.Launch(c.stepSmall, c.grid(batch), c.block(), 0, c.s, a)
	}
	if c.plan.overlap {
		return c.launchOverlapped(a, batch)
	}
	if err := c.launchFlush(c.s, a, batch); err != nil {
		return err
	}
	return c.launchNonflush(a, batch)
}

// launchOverlapped queues a decode step above the small batch with the
// flush beside the non-flush kernel: the side stream waits for the work
// queued so far and takes the flush, and the cache's stream waits for it
// after its own kernel. Both kernels count their blocks on c.done, and
// the last to finish moves the cursors (step_done). Captured in a graph,
// the fork and join are the graph's edges. Measured on the H200 (staggered
// windows, against the flush before the non-flush kernel in the same
// run): GDN B=64 Qwen3.5-4B 79.2 -> 71.2 us (fp32), 64.1 -> 48.1 (bf16),
// 122B 116 -> 110, 87.6 -> 84.2; B=256 209 -> 206, 151 -> 147, 374 -> 363,
// 267 -> 255. Mamba-2 lost (Nano B=256 fp32 315 -> 323, B=64 94 -> 109:
// the pipelined folds' resident grid holds every SM until it ends), so it
// keeps the flush before the step.
func (c *replayCommon) launchOverlapped(a *Args, batch int) error {
	if err := c.fork.Record(c.s); err != nil {
		return err
	}
	if err := c.side.Wait(c.fork); err != nil {
		return err
	}
	if err := c.launchFlush(c.side, a, batch); err != nil {
		return err
	}
	if err := c.launchNonflush(a, batch); err != nil {
		return err
	}
	if err := c.join.Record(c.side); err != nil {
		return err
	}
	return c.s.Wait(c.join)
}

// launchFlush queues a replay decode step's flush kernel on s: the
// pipelined folds where planned, GDN's streamed flush, else the items
// kernel on its resident grid.
func (c *replayCommon) launchFlush(s *Stream, a *Args, batch int) error {
	if c.plan.folds.on {
		return c.launchFolds(s, c.plan.folds.flush, a, batch)
	}
	if st := &c.plan.stream; st.flushFn != nil {
		return c.d.Launch(st.flushFn, [3]uint32{uint32(st.flushBlocks), 1, 1}, [3]uint32{uint32(st.flushThreads), 1, 1}, uint32(st.flushSmem), s, a)
	}
	blocks := min(batch*c.heads, c.flushBlocks)
	return c.d.Launch(c.flush, [3]uint32{uint32(blocks), 1, 1}, c.block(), 0, s, a)
}

// launchFolds queues a pipelined fold kernel fn (flush or early fold) of
// batch slots whose arguments a holds.
func (c *replayCommon) launchFolds(s *Stream, fn *Function, a *Args, batch int) error {
	f := &c.plan.folds
	blocks := min(f.blocks, batch*c.heads)
	return c.d.Launch(fn, [3]uint32{uint32(max(1, blocks)), 1, 1}, [3]uint32{uint32(c.threads + 32), 1, 1}, uint32(f.smem), s, a)
}

// launchNonflush queues a replay decode step's non-flush kernel (group,
// pipelined or per-head), whose last block moves the cursors.
func (c *replayCommon) launchNonflush(a *Args, batch int) error {
	if g := &c.plan.group; g.fn != nil {
		blocks := min(g.groups*batch, g.blocks)
		return c.d.Launch(g.fn, [3]uint32{uint32(blocks), 1, 1}, [3]uint32{uint32(g.threads), 1, 1}, uint32(g.smem), c.s, a)
	}
	if p := &c.plan.pipe; p.on && p.stepOn {
		return c.d.Launch(p.step, c.pipeGrid(batch), c.pipeBlock(), uint32(p.smem), c.s, a)
	}
	return c.d.Launch(c.nonflush, c.grid(batch), c.block(), 0, c.s, a)
}

// grid is the one-block-per-matrix kernels' grid: a block per head and
// batch row.
func (c *replayCommon) grid(batch int) [3]uint32 {
	return [3]uint32{uint32(c.heads), uint32(batch), 1}
}

func (c *replayCommon) block() [3]uint32 { return [3]uint32{uint32(c.threads), 1, 1} }

// pipeGrid is the pipelined kernels' grid for a batch's (row, head) items.
func (c *replayCommon) pipeGrid(batch int) [3]uint32 {
	p := &c.plan.pipe
	blocks := bounded(min(batch*c.heads, c.d.Multiprocessors()*p.blocksPerSM), c.plan.maxBlocks)
	return [3]uint32{uint32(max(1, blocks)), 1, 1}
}

func (c *replayCommon) pipeBlock() [3]uint32 {
	return [3]uint32{uint32(32 * (c.plan.pipe.warps + 1)), 1, 1}
}

// launchBaselineKernel queues the baseline step (or, with verify, the
// per-draft verify) whose arguments a holds, one block per head and batch
// row, the step with its stage's shared memory where planned.
func (c *replayCommon) launchBaselineKernel(batch int, verify bool, a *Args) error {
	fn, smem := c.baselineStep, 0
	if verify {
		fn = c.baselineVerify
	} else if c.plan.base.on {
		smem = c.plan.base.smem
	}
	return c.d.Launch(fn, c.grid(batch), c.block(), uint32(smem), c.s, a)
}

// groupVerify reports whether a verify of batch slots takes the group
// verify (from minItems items), after the early folds.
func (c *replayCommon) groupVerify(batch int) bool {
	g := &c.plan.group
	return g.verify != nil && g.groups*batch >= c.plan.minItems
}

// launchReplayVerify queues a replay verify whose arguments a holds, then
// the cursor move.
func (c *replayCommon) launchReplayVerify(a *Args, slots, counts Buffer, batch, T int) error {
	if v := c.smallVerify(batch); v.fn != nil {
		return c.launchSmallVerify(a, v, slots, counts, batch, T)
	}
	if g := &c.plan.group; c.groupVerify(batch) {
		// The early folds take the arguments and the batch (the items
		// kernel on its resident grid), then the group verify takes every
		// slot.
		a.I32(int32(batch))
		st := &c.plan.stream
		switch {
		case c.plan.folds.on:
			if err := c.launchFolds(c.s, c.plan.folds.fold, a, batch); err != nil {
				return err
			}
		case st.foldFn != nil:
			if err := c.d.Launch(st.foldFn, [3]uint32{uint32(st.foldBlocks), 1, 1}, [3]uint32{uint32(st.foldThreads), 1, 1}, uint32(st.foldSmem), c.s, a); err != nil {
				return err
			}
		default:
			blocks := min(c.heads*batch, g.foldBlocks)
			if err := c.d.Launch(g.verifyFold, [3]uint32{uint32(blocks), 1, 1}, c.block(), 0, c.s, a); err != nil {
				return err
			}
		}
		blocks := min(g.groups*batch, g.verifyBlocks)
		if err := c.d.Launch(g.verify, [3]uint32{uint32(blocks), 1, 1}, [3]uint32{uint32(g.threads), 1, 1}, uint32(g.verifySmem), c.s, a); err != nil {
			return err
		}
		return c.launchCursorVerify(slots, counts, batch, T)
	}
	if p := &c.plan.pipe; p.on && p.verify != nil {
		if err := c.d.Launch(p.verifyFold, c.grid(batch), c.block(), 0, c.s, a); err != nil {
			return err
		}
		a.I32(int32(batch))
		if err := c.d.Launch(p.verify, c.pipeGrid(batch), c.pipeBlock(), uint32(p.smem), c.s, a); err != nil {
			return err
		}
		return c.launchCursorVerify(slots, counts, batch, T)
	}
	if err := c.d.Launch(c.perHeadVerify(batch), c.grid(batch), c.block(), 0, c.s, a); err != nil {
		return err
	}
	return c.launchCursorVerify(slots, counts, batch, T)
}

// smallLaunch is a small batch's verify in one kernel (and, for GDN, the
// cursor kernel): fn nil where the batch takes the other kernels.
type smallLaunch struct {
	fn          *Function
	grid, block [3]uint32
	name        string // VerifyKernel's
}

// smallVerify plans a verify of batch slots up to the small batch: on split
// heads where the split module takes the batch, else Mamba-2's one-kernel
// verify on whole heads; each its early start where the grid fits.
func (c *replayCommon) smallVerify(batch int) smallLaunch {
	if batch > c.plan.smallBatch {
		return smallLaunch{}
	}
	if h := &c.small; h.verify != nil && h.takes(batch) {
		blocks := c.heads * h.parts
		fn := h.early.pick(h.verify, blocks*batch)
		return smallLaunch{fn, [3]uint32{uint32(blocks), uint32(batch), 1}, [3]uint32{uint32(h.threads), 1, 1},
			earlyName("small (heads split)", fn, h.verify)}
	}
	if c.verifySmall != nil {
		fn := c.early.pick(c.verifySmall, c.heads*batch)
		return smallLaunch{fn, c.grid(batch), c.block(), earlyName("small", fn, c.verifySmall)}
	}
	return smallLaunch{}
}

// perHeadVerify is the per-head verify kernel for batch slots: its early
// start up to the small batch where the grid fits (GDN's small batches on
// whole heads).
func (c *replayCommon) perHeadVerify(batch int) *Function {
	if batch <= c.plan.smallBatch {
		return c.early.pick(c.verify, c.heads*batch)
	}
	return c.verify
}

// earlyName is name, marked where fn is the early verify in place of late.
func earlyName(name string, fn, late *Function) string {
	if fn != late {
		return name + ", early"
	}
	return name
}

// launchSmallVerify queues the verify of a small batch: the layer's
// one-kernel verify, which then takes the pending drafts, the block count
// and the batch and moves the cursors itself (Mamba-2), else the per-head
// verify and the cursor kernel (GDN).
func (c *replayCommon) launchSmallVerify(a *Args, v smallLaunch, slots, counts Buffer, batch, T int) error {
	if c.verifySmall != nil {
		a.Ptr(c.pending)
		a.Ptr(c.done)
		a.I32(int32(batch))
		return c.d.Launch(v.fn, v.grid, v.block, 0, c.s, a)
	}
	if err := c.d.Launch(v.fn, v.grid, v.block, 0, c.s, a); err != nil {
		return err
	}
	return c.launchCursorVerify(slots, counts, batch, T)
}

// launchCursorVerify queues the cursor move after a verify.
func (c *replayCommon) launchCursorVerify(slots, counts Buffer, batch, T int) error {
	a := &c.args
	a.Reset()
	a.Ptr(c.hist)
	a.Ptr(c.pending)
	a.Ptr(slots)
	a.Ptr(counts)
	a.I32(int32(T))
	a.I32(int32(batch))
	a.I32(int32(ringEntries(c.opt)))
	a.I32(int32(cacheMode(c.opt.Mode)))
	return c.d.Launch(c.cursorVerify, [3]uint32{uint32((batch + 127) / 128), 1, 1}, [3]uint32{128, 1, 1}, 0, c.s, a)
}

// StepKernel names the kernel that takes the non-flush slots of a decode
// step of batch slots: "small" (up to the small batch, one kernel takes
// every slot), "group" (a block per group of heads and batch row, on a
// resident grid), "pipelined" or "per-head" (a block per head and batch
// row). In baseline mode it names the baseline step's kernel, "per-head"
// or "staged" (its matrix staged whole in shared memory).
func (c *replayCommon) StepKernel(batch int) string {
	switch {
	case c.opt.Mode == replay.Baseline && c.plan.base.on:
		return "staged"
	case c.opt.Mode == replay.Baseline:
		return "per-head"
	case batch <= c.plan.smallBatch && c.small.takes(batch):
		return "small (heads split)"
	case batch <= c.plan.smallBatch:
		return "small"
	case c.plan.group.fn != nil:
		return "group"
	case c.plan.pipe.on && c.plan.pipe.stepOn:
		return "pipelined"
	}
	return "per-head"
}

// VerifyKernel names the kernel that takes a verify of batch slots:
// "small" (up to the small batch: one kernel verifies every slot), "group"
// (every slot, after the early folds), "pipelined" (the slots with no
// early fold) or "per-head"; "early" where the small batch's verify starts
// early (earlyVerify).
func (c *replayCommon) VerifyKernel(batch int) string {
	if v := c.smallVerify(batch); v.fn != nil {
		return v.name
	}
	switch {
	case c.groupVerify(batch):
		return "group"
	case c.plan.pipe.on && c.plan.pipe.verify != nil:
		return "pipelined"
	}
	return earlyName("per-head", c.perHeadVerify(batch), c.verify)
}

// FoldKernel names the kernels that fold a checkpoint (a step's flushes, a
// verify's early folds): "pipelined", "streamed" (GDN) or "items", and why
// not pipelined.
func (c *replayCommon) FoldKernel() (kernel, why string) {
	switch {
	case c.plan.folds.on:
		return "pipelined", ""
	case c.plan.stream.flushFn != nil:
		return "streamed", c.plan.folds.why
	}
	return "items", c.plan.folds.why
}

package cuda

import (
	"context"
	"errors"
	"fmt"

	"github.com/replayssm/replayssm/replay"
)

// Binding looks up a compiled module's kernels for a plan, allows their
// dynamic shared memory and sizes the persistent grids from the kernels'
// registers and shared memory (what the GPU holds at once).

// bindResident looks up a persistent kernel of threads threads a block,
// allows it smem bytes of dynamic shared memory and returns it with its
// resources and the blocks the GPU holds at once (bounded by the plan's
// maxBlocks). Where its registers or shared memory leave no block
// resident, blocks is 0 and nothing is allowed.
func (c *replayCommon) bindResident(m *Module, name string, threads, smem int) (*Function, Resources, int, error) {
	f, err := m.Function(name)
	if err != nil {
		return nil, Resources{}, 0, err
	}
	r, err := f.Resources()
	if err != nil {
		return nil, Resources{}, 0, err
	}
	if r.StaticSharedBytes+smem > c.d.MaxSharedMemoryPerBlock() || r.MaxThreadsPerBlock < threads {
		return f, r, 0, nil
	}
	if err := f.SetMaxDynamicSharedMemory(smem); err != nil {
		return nil, r, 0, err
	}
	blocks := bounded(c.d.Multiprocessors()*blocksPerSM(c.d.props(), r, threads, smem), c.plan.maxBlocks)
	return f, r, blocks, nil
}

// bindRequired is bindResident for a kernel that must fit.
func (c *replayCommon) bindRequired(name string, threads, smem int) (*Function, int, error) {
	f, r, blocks, err := c.bindResident(c.mod, name, threads, smem)
	if err == nil && blocks == 0 {
		err = fmt.Errorf("%s: no block of %d threads fits an SM (%d registers, %d + %d bytes of shared memory)",
			name, threads, r.Registers, r.StaticSharedBytes, smem)
	}
	return f, blocks, err
}

// bind looks up every kernel the plan launches.
func (c *replayCommon) bind(ctx context.Context) error {
	k := c.kind
	if c.opt.Mode == replay.Baseline {
		var err error
		if c.baselineStep, err = c.mod.Function(k + "_baseline_step"); err != nil {
			return err
		}
		if c.baselineVerify, err = c.mod.Function(k + "_baseline_verify"); err != nil {
			return err
		}
		if c.plan.base.on {
			return c.baselineStep.SetMaxDynamicSharedMemory(c.plan.base.smem)
		}
		return nil
	}
	for _, f := range []struct {
		dst  **Function
		name string
	}{
		{&c.nonflush, k + "_replay_nonflush"}, {&c.flush, k + "_replay_flush"}, {&c.verify, k + "_replay_verify"},
		{&c.stepSmall, k + "_replay_step_small"},
	} {
		var err error
		if *f.dst, err = c.mod.Function(f.name); err != nil {
			return err
		}
	}
	var err error
	if c.flushBlocks, err = c.residentBlocks(c.flush, c.threads); err != nil {
		return err
	}
	if c.plan.perHead {
		c.plan.pipe.on, c.plan.folds.on, c.plan.overlap, c.plan.smallBatch = false, false, false, 0
		return nil
	}
	if err := c.bindPipeline(); err != nil {
		return err
	}
	// The one-kernel verify of small batches (Mamba-2): at batches 1-4 it
	// took 1.1-1.6x less time than the early folds, the pipelined verify
	// and the cursor kernel. GDN has none: its per-head verify and cursor
	// kernel were 0.2-1 us faster than the same verify ending in
	// verify_done.
	if k == "mamba2" {
		if c.verifySmall, err = c.mod.Function("mamba2_replay_verify_small"); err != nil {
			return err
		}
		if c.early, err = c.bindEarlyVerify(c.mod, "mamba2_replay_verify_small_early", c.threads); err != nil {
			return err
		}
	} else if c.early, err = c.bindEarlyVerify(c.mod, "gdn_replay_verify_early", c.threads); err != nil {
		return err
	}
	if err := c.bindGroup(); err != nil {
		return err
	}
	if err := c.bindStream(); err != nil {
		return err
	}
	if err := c.bindFoldPipe(); err != nil {
		return err
	}
	return c.buildHeadSplit(ctx)
}

// residentBlocks is how many blocks of f, threads threads each and no
// dynamic shared memory, the GPU holds at once, at most the plan's
// maxBlocks.
func (c *replayCommon) residentBlocks(f *Function, threads int) (int, error) {
	r, err := f.Resources()
	if err != nil {
		return 0, err
	}
	return bounded(c.d.Multiprocessors()*blocksPerSM(c.d.props(), r, threads, 0), c.plan.maxBlocks), nil
}

// bindPipeline looks up the pipelined kernels (the Mamba-2 verify's too)
// and allows their shared memory.
func (c *replayCommon) bindPipeline() error {
	p := &c.plan.pipe
	if !p.on {
		return nil
	}
	var err error
	if p.step, err = c.mod.Function(c.kind + "_pipe_step"); err != nil {
		return err
	}
	if err := p.step.SetMaxDynamicSharedMemory(p.smem); err != nil {
		return err
	}
	if c.kind != "mamba2" { // the layer's verify is not pipelined
		return nil
	}
	if p.verify, err = c.mod.Function("mamba2_pipe_verify"); err != nil {
		return err
	}
	if p.verifyFold, err = c.mod.Function("mamba2_replay_verify_fold"); err != nil {
		return err
	}
	return p.verify.SetMaxDynamicSharedMemory(p.smem)
}

// bindGroup looks up the group step and, where planned, the group verify
// and the items kernel of its early folds on a resident grid, and sizes
// their grids from their occupancy.
func (c *replayCommon) bindGroup() error {
	g := &c.plan.group
	if !g.on {
		return nil
	}
	var err error
	if g.fn, g.blocks, err = c.bindRequired(c.kind+"_group_step", g.threads, g.smem); err != nil {
		return err
	}
	if !g.verifyOn {
		return nil
	}
	if g.verify, g.verifyBlocks, err = c.bindRequired(c.kind+"_group_verify", g.threads, g.verifySmem); err != nil {
		return err
	}
	if g.verifyFold, err = c.mod.Function(c.kind + "_replay_fold_items"); err != nil {
		return err
	}
	g.foldBlocks, err = c.residentBlocks(g.verifyFold, c.threads)
	return err
}

// bindStream looks up GDN's streamed folds where planned.
func (c *replayCommon) bindStream() error {
	st := &c.plan.stream
	var err error
	if st.flush {
		if st.flushFn, st.flushBlocks, err = c.bindRequired("gdn_flush_stream", st.flushThreads, st.flushSmem); err != nil {
			return err
		}
	}
	if st.fold {
		st.foldFn, st.foldBlocks, err = c.bindRequired("gdn_fold_stream", st.foldThreads, st.foldSmem)
	}
	return err
}

// errFoldDotsFit is bindFoldPipe's error where a module's group verify
// takes the folding slots' dots from pipelined folds (VFOLD_DOTS) that
// leave no block resident: no other fold kernel writes them, so the cache
// is planned again without them (newMamba2Cache).
var errFoldDotsFit = errors.New("cuda: the verify's fold dots need the pipelined folds, which do not fit")

// bindFoldPipe looks up the pipelined fold kernels (kind + "_flush_pipe",
// kind + "_fold_pipe"), allows their shared memory and sizes their grid. A
// kernel whose registers or static shared memory leave no block resident
// turns the plan off (the items kernels fold) rather than fail.
func (c *replayCommon) bindFoldPipe() error {
	f := &c.plan.folds
	if !f.on {
		return nil
	}
	for _, k := range []struct {
		dst  **Function
		name string
	}{{&f.flush, c.kind + "_flush_pipe"}, {&f.fold, c.kind + "_fold_pipe"}} {
		fn, r, blocks, err := c.bindResident(c.mod, k.name, c.threads+32, f.smem)
		if err != nil {
			return err
		}
		if blocks == 0 {
			why := fmt.Sprintf("%s: %d bytes of static and %d of dynamic shared memory, %d registers", k.name, r.StaticSharedBytes, f.smem, r.Registers)
			if f.verifyDots {
				return fmt.Errorf("%w (%s)", errFoldDotsFit, why)
			}
			*f = foldPipe{why: why}
			return nil
		}
		if f.blocks == 0 || blocks < f.blocks {
			f.blocks = blocks
		}
		*k.dst = fn
	}
	return nil
}

// earlyVerify is a small batch's verify with its inputs asked for before
// the slot's cursor (VEARLY in replay_common.cu: the kernel named as the
// late one + "_early") and the most blocks of it the GPU holds at once. It
// holds more registers than the late one, and where its grid does not fit
// at once the second wave costs more than the early start saves (H200:
// Qwen3.5-122B at batch 4, 256 blocks of whole heads, 28.2 -> 35.3 us a
// verify), so pick takes it only where the grid fits.
type earlyVerify struct {
	fn     *Function
	blocks int
}

// bindEarlyVerify looks up the early verify name in m, whose blocks have
// threads threads.
func (c *replayCommon) bindEarlyVerify(m *Module, name string, threads int) (earlyVerify, error) {
	if c.plan.lateVerify {
		return earlyVerify{}, nil
	}
	fn, err := m.Function(name)
	if err != nil {
		return earlyVerify{}, err
	}
	r, err := fn.Resources()
	if err != nil {
		return earlyVerify{}, err
	}
	return earlyVerify{fn, c.d.Multiprocessors() * blocksPerSM(c.d.props(), r, threads, 0)}, nil
}

// pick returns the early verify where a grid of blocks blocks fits the GPU
// at once, else late.
func (e earlyVerify) pick(late *Function, blocks int) *Function {
	if e.fn != nil && blocks <= e.blocks {
		return e.fn
	}
	return late
}

// headSplit is the bound small-batch module of a cache whose heads' rows
// are split into parts (plan.split): its one-kernel step and its verify, on
// parts times the blocks, take the batches up to both maxBatch and the
// small batch in place of the main module's.
type headSplit struct {
	parts    int
	threads  int
	maxBatch int
	mod      *Module
	step     *Function
	// verify is the small batch's verify on split heads: Mamba-2's
	// one-kernel verify, GDN's per-head verify (then the cursor kernel);
	// early its early start.
	verify *Function
	early  earlyVerify
}

// takes reports whether the split module takes a small step of batch slots.
func (h *headSplit) takes(batch int) bool { return h.step != nil && batch <= h.maxBatch }

// buildHeadSplit compiles and binds the plan's split module, if any.
func (c *replayCommon) buildHeadSplit(ctx context.Context) error {
	sp := c.plan.split
	if sp == nil {
		return nil
	}
	src, err := replaySource(sp.file)
	if err != nil {
		return err
	}
	mod, err := c.d.Compile(ctx, sp.file, src, sp.options(0)...)
	if err != nil {
		return err
	}
	h := headSplit{parts: sp.parts, threads: sp.threads, maxBatch: c.plan.splitMaxBatch(c.d.props()), mod: mod}
	name := c.kind + "_replay_verify"
	if c.kind == "mamba2" {
		name += "_small"
	}
	if h.step, err = mod.Function(c.kind + "_replay_step_small"); err == nil {
		if h.verify, err = mod.Function(name); err == nil {
			h.early, err = c.bindEarlyVerify(mod, name+"_early", sp.threads)
		}
	}
	if err != nil {
		return errors.Join(err, mod.Close())
	}
	c.small = h
	return nil
}

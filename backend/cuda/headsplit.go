package cuda

// The small-batch step on heads split into parts (HSPLIT in replay_gdn.cu
// and replay_mamba2.cu): a second module, more blocks for a batch of one.

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// headSplit is the small-batch module of a cache whose heads' rows are
// split into split heads of rows/split rows each (HSPLIT, replay_gdn.cu):
// its one-kernel step and its verify (unless REPLAYSSM_CUDA_SPLIT_VERIFY=0),
// on split times the blocks, takes the batches up to both maxBatch and
// smallBatch in place of the main module's.
type headSplit struct {
	split    int
	threads  int
	maxBatch int // the largest batch it takes (splitBatches)
	mod      *Module
	step     *Function
	// verify is the small batch's verify on split heads (unless
	// REPLAYSSM_CUDA_SPLIT_VERIFY=0): Mamba-2's one-kernel verify (kind +
	// "_replay_verify_small"), GDN's v4 verify (kind + "_replay_verify",
	// then the cursor kernel); early its early start.
	verify *Function
	early  earlyVerify
}

// earlyVerify is a small batch's verify with its inputs asked for before
// the slot's cursor (VEARLY in replay_common.cu: the kernel named as the
// late one + "_early") and the most blocks of it the GPU holds at once. It
// holds more registers than the late one, and where its grid does not fit
// at once the second wave costs more than the early start saves (H200,
// session 15: Qwen3.5-122B at batch 4, 256 blocks of whole heads, 28.2 ->
// 35.3 us a verify), so pick takes it only where the grid fits.
type earlyVerify struct {
	fn     *Function
	blocks int
}

// bindEarlyVerify looks up the early verify name in m, whose blocks have
// threads threads: none with REPLAYSSM_CUDA_VERIFY_EARLY=0, for a grid of
// any size with =1.
func bindEarlyVerify(d *Device, m *Module, name string, threads int, tn tuning) (earlyVerify, error) {
	if tn.verifyEarly == "0" {
		return earlyVerify{}, nil
	}
	fn, err := m.Function(name)
	if err != nil {
		return earlyVerify{}, err
	}
	if tn.verifyEarly == "1" {
		return earlyVerify{fn, math.MaxInt}, nil
	}
	blocks, err := residentBlocks(d, fn, threads, 0)
	if err != nil {
		return earlyVerify{}, err
	}
	return earlyVerify{fn, blocks}, nil
}

// pick returns the early verify where a grid of blocks blocks fits the GPU
// at once, else late.
func (e earlyVerify) pick(late *Function, blocks int) *Function {
	if e.fn != nil && blocks <= e.blocks {
		return e.fn
	}
	return late
}

// splitModule is a layer's small-batch module of split heads, ready to
// compile: its file and source, NVRTC options (HSPLIT) and block size.
type splitModule struct {
	file, src string
	opts      []string
	threads   int
}

// buildHeadSplit splits the small step's heads of a layer of rows-row
// matrices where planHeadSplit says so: it compiles the module source
// forms for the split (the layer's *SplitSource) and binds its step, kind
// + "_replay_step_small". Nothing where the heads stay whole.
func (c *replayCommon) buildHeadSplit(ctx context.Context, rows int, tn tuning, source func(split int) (splitModule, error)) error {
	split, _ := planHeadSplit(c.opt, c.heads, rows, c.d.Multiprocessors(), tn)
	if split < 2 {
		return nil
	}
	m, err := source(split)
	if err != nil {
		return err
	}
	mod, err := c.d.Compile(ctx, m.file, m.src, m.opts...)
	if err != nil {
		return err
	}
	step, err := mod.Function(c.kind + "_replay_step_small")
	if err != nil {
		return errors.Join(err, mod.Close())
	}
	c.small = headSplit{split: split, threads: m.threads, maxBatch: splitBatches(c.heads, split, c.d.Multiprocessors()),
		mod: mod, step: step}
	if !tn.wholeVerify {
		name := c.kind + "_replay_verify"
		if c.verifySmall != nil {
			name += "_small"
		}
		if c.small.verify, err = mod.Function(name); err == nil {
			c.small.early, err = bindEarlyVerify(c.d, mod, name+"_early", m.threads, tn)
		}
		if err != nil {
			c.small = headSplit{}
			return errors.Join(err, mod.Close())
		}
	}
	return nil
}

// splitBatches is the largest batch the split module of heads heads in
// split parts takes on sms SMs: while its blocks number at most three per
// SM. Beyond that the whole heads' step was as fast or faster (H200,
// session 14: Nemotron-3-Nano-4B, 96 heads split in 2, batch 2: 5.0 us
// against 5.7 on 384 blocks; batch 4: 9.0 against 7.0 on 768).
func splitBatches(heads, split, sms int) int { return 3 * sms / (heads * split) }

// takes reports whether the split module takes a small step of batch slots.
func (h *headSplit) takes(batch int) bool { return h.step != nil && batch <= h.maxBatch }

// splitModuleSource is a layer's small-batch module of split heads (file,
// rows × cols matrices after the split, the layer's defines for the split
// shape).
func splitModuleSource(file string, opt replay.Options, rows, cols, split int, defines []string, tn tuning) (splitModule, error) {
	src, err := replaySource(file)
	if err != nil {
		return splitModule{}, err
	}
	defines = append(defines, fmt.Sprintf("-DHSPLIT=%d", split))
	if !tn.wholeVerify {
		defines = append(defines, "-DSPLIT_VERIFY=1")
	}
	return splitModule{file, src, replayModuleOptions(opt, rows, cols, 0, defines, tn), moduleThreads(opt, rows, cols, tn)}, nil
}

// planHeadSplit returns how many parts the small step splits each of a
// replay layer's heads heads (rows × cols matrices) into on a GPU of sms
// SMs, and why not where it returns 1. By default the most parts (2, 4 or
// 8) of 32 rows or more whose blocks at batch 1 number at most 1.5 per SM:
// the step at batch 1 is latency-bound, and a block of fewer rows finishes
// sooner, while a second block on an SM takes its turn behind the first
// (H200, session 14, batch 1, us per step, fp32: Qwen3.5-4B's 32 heads in
// 4 parts 5.7 -> 4.6, in 2 4.8; Qwen3.5-122B's 64 in 2 5.7 -> 4.9, in 4
// 5.0; Nano's 96 in 2 4.8 -> 4.4; Super's 128 in 2 4.3 -> 4.2, in 4 4.5).
// tn.headSplit (REPLAYSSM_CUDA_HEAD_SPLIT) sets the parts instead, 1 for
// none, where they are parts of 8 rows or more. Never in baseline mode,
// with a read copy or for fp8 states (a read copy's nvfp4 global scale,
// like an fp8 state's scale, covers a whole matrix).
func planHeadSplit(opt replay.Options, heads, rows, sms int, tn tuning) (int, string) {
	n := tn.headSplit
	switch {
	case n == 1:
		return 1, "REPLAYSSM_CUDA_HEAD_SPLIT=1"
	case opt.Mode != replay.Replay:
		return 1, "baseline mode"
	case opt.ReadCopy != numeric.F32:
		return 1, "a read copy (its scales cover a whole matrix)"
	case opt.State == numeric.E4M3:
		return 1, "an fp8 state (its scale covers a whole matrix)"
	case n >= 2 && (rows%n != 0 || rows/n < 8):
		return 1, fmt.Sprintf("%d rows do not split into %d parts of 8 rows or more", rows, n)
	case n >= 2:
		return n, ""
	}
	n = 1
	for p := 2; p <= 8 && rows%p == 0 && rows/p >= 32 && 2*heads*p <= 3*sms; p *= 2 {
		n = p
	}
	if n == 1 {
		return 1, fmt.Sprintf("%d heads of %d rows fill the %d SMs", heads, rows, sms)
	}
	return n, ""
}

package cuda

// The GDN flush kernel on heads split into parts (REPLAYSSM_CUDA_FLUSH_SPLIT):
// a module of its own, blocks of half (or less) a matrix.

import (
	"context"
	"errors"
	"fmt"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// flushSplit is the flush kernel (kind + "_replay_flush") of a module whose
// value heads' rows are split into split parts (HSPLIT and FLUSH_SPLIT in
// replay_gdn.cu), at two threads a row: a warp a 16 rows, the tensor-core
// fold's layout. The same registers a thread as the whole heads' flush and
// half the threads a block, so twice the blocks an SM: an experiment on
// whether the flush, a chain of phases with barriers between (NOTES.md,
// session 16), gains from more blocks hiding each other's phases.
// Everything else (the non-flush step, the verify and its early folds, the
// small step) stays where it was.
type flushSplit struct {
	split   int
	threads int
	blocks  int // the blocks the GPU holds at once
	mod     *Module
	fn      *Function
}

// planFlushSplit returns the parts a replay layer's flush kernel splits its
// rows-row matrices into (tn.flushSplit, REPLAYSSM_CUDA_FLUSH_SPLIT) and
// its block size, or 1 and why not: never by default, nor in baseline mode,
// with a read copy or an fp8 state (their scales cover a whole matrix, as
// for the small step's split), or where a part is not a whole number of
// 16-row warps.
func planFlushSplit(opt replay.Options, rows int, tn tuning) (split, threads int, why string) {
	n := tn.flushSplit
	switch {
	case n < 2:
		return 1, 0, "REPLAYSSM_CUDA_FLUSH_SPLIT is not set"
	case opt.Mode != replay.Replay:
		return 1, 0, "baseline mode"
	case opt.ReadCopy != numeric.F32:
		return 1, 0, "a read copy (its scales cover a whole matrix)"
	case opt.State == numeric.E4M3:
		return 1, 0, "an fp8 state (its scale covers a whole matrix)"
	case rows%n != 0 || (rows/n)%16 != 0:
		return 1, 0, fmt.Sprintf("%d rows do not split into %d parts of whole 16-row warps", rows, n)
	}
	return n, 2 * rows / n, ""
}

// buildFlushSplit compiles the split flush module where planFlushSplit
// says so (source: the layer's module source for a split and block size)
// and binds its flush kernel; nothing otherwise.
func (c *replayCommon) buildFlushSplit(ctx context.Context, rows int, tn tuning, source func(split, threads int) (splitModule, error)) error {
	split, threads, _ := planFlushSplit(c.opt, rows, tn)
	if split < 2 || c.folds.on {
		return nil
	}
	m, err := source(split, threads)
	if err != nil {
		return err
	}
	mod, fn, err := m.build(ctx, c.d, c.kind+"_replay_flush")
	if err != nil {
		return err
	}
	blocks, err := residentBlocks(c.d, fn, threads, tn.pipeBlocks)
	if err != nil {
		return errors.Join(err, mod.Close())
	}
	c.flushSplit = flushSplit{split: split, threads: threads, blocks: blocks, mod: mod, fn: fn}
	return nil
}

// launch queues the split flush of items (head, slot) items of whole heads
// on its resident grid, at most bound blocks where bound is positive.
func (f *flushSplit) launch(d *Device, s *Stream, a *Args, items, bound int) error {
	blocks := min(items*f.split, f.blocks)
	if bound > 0 {
		blocks = min(blocks, bound)
	}
	return d.Launch(f.fn, [3]uint32{uint32(blocks), 1, 1}, [3]uint32{uint32(f.threads), 1, 1}, 0, s, a)
}

// flushSplitSource is a layer's split flush module: its module source for
// the split shape (rows/split rows a matrix, the layer's defines for that
// shape and OVERLAP as the main module has it: the split flush counts
// itself beside the non-flush kernel), HSPLIT and FLUSH_SPLIT, threads a
// block.
func flushSplitSource(file string, opt replay.Options, rows, cols, split, threads int, defines []string, overlapOn bool, tn tuning) (splitModule, error) {
	src, err := replaySource(file)
	if err != nil {
		return splitModule{}, err
	}
	defines = append(defines, fmt.Sprintf("-DHSPLIT=%d", split), "-DFLUSH_SPLIT=1")
	if overlapOn {
		defines = append(defines, "-DOVERLAP=1")
	}
	return splitModule{file, src, replayModuleOptions(opt, rows, cols, threads, 0, defines, tn), threads}, nil
}

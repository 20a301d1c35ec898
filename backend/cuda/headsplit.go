package cuda

// The small-batch step on heads split into parts (HSPLIT in replay_gdn.cu
// and replay_mamba2.cu): a second module, more blocks for a batch of one.

import (
	"context"
	"errors"
	"fmt"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// headSplit is the small-batch module of a cache whose heads' rows are
// split into split heads of rows/split rows each (HSPLIT, replay_gdn.cu):
// its one-kernel step, on split times the blocks, takes the batches up to
// smallBatch in place of the main module's.
type headSplit struct {
	split   int
	threads int
	mod     *Module
	step    *Function
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
	split, _ := planHeadSplit(c.opt, rows, tn)
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
	c.small = headSplit{split: split, threads: m.threads, mod: mod, step: step}
	return nil
}

// splitModuleSource is a layer's small-batch module of split heads (file,
// rows × cols matrices after the split, the layer's defines for the split
// shape).
func splitModuleSource(file string, opt replay.Options, rows, cols, split int, defines []string, tn tuning) (splitModule, error) {
	src, err := replaySource(file)
	if err != nil {
		return splitModule{}, err
	}
	defines = append(defines, fmt.Sprintf("-DHSPLIT=%d", split))
	return splitModule{file, src, replayModuleOptions(opt, rows, cols, 0, defines, tn), moduleThreads(opt, rows, cols, tn)}, nil
}

// planHeadSplit returns how many heads the small step splits each of a
// replay layer's heads into (rows × cols matrices), and why not where it
// returns 1: tn.headSplit (REPLAYSSM_CUDA_HEAD_SPLIT; off by default,
// written in session 13 after the device time and not yet measured) where
// it divides rows into parts of at least 8 rows, in replay mode, without
// a read copy and for element states (a read copy's nvfp4 global scale,
// like an fp8 state's scale, covers a whole matrix).
func planHeadSplit(opt replay.Options, rows int, tn tuning) (int, string) {
	n := tn.headSplit
	switch {
	case n < 2:
		return 1, "REPLAYSSM_CUDA_HEAD_SPLIT not set"
	case opt.Mode != replay.Replay:
		return 1, "baseline mode"
	case opt.ReadCopy != numeric.F32:
		return 1, "a read copy (its scales cover a whole matrix)"
	case opt.State == numeric.E4M3:
		return 1, "an fp8 state (its scale covers a whole matrix)"
	case rows%n != 0 || rows/n < 8:
		return 1, fmt.Sprintf("%d rows do not split into %d parts of 8 rows or more", rows, n)
	}
	return n, ""
}

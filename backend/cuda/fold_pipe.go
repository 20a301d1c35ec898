package cuda

import (
	"errors"
	"fmt"

	"github.com/replayssm/replayssm/replay"
)

// foldPipe is the launch plan of the pipelined folds (v7, replay_common.cu
// fold_produce): the decode step's flush and the verify's early folds on
// persistent blocks of the cache's threads plus one producer warp, which
// stages each folding item's checkpoint and ring rows in shared memory
// while earlier items fold. It is the default for Mamba-2 (faster than the
// work_items kernels in every target shape on the H200) and off for GDN
// (slower: gdn_fold's own chain of phases per item, one block per SM;
// NOTES.md, session 11); REPLAYSSM_CUDA_FOLDS=pipe or =items chooses for
// both. Off on older GPUs and for shapes whose rows are not 16-byte
// multiples; the work_items kernels (*_replay_flush, *_replay_fold_items)
// fold then.
type foldPipe struct {
	on          bool
	stages      int // stages per block
	stageBytes  int
	smem        int // dynamic shared memory per block
	blocksPerSM int // planned (the register bound FMINB)
	blocks      int // the grid
	flush, fold *Function
	why         string
	tc          bool // the rank update on the tensor cores (Mamba-2's M2_TC_FOLD): sums in another order than the other fold kernels'
	verifyDots  bool // a verify's early folds form the drafts' dots for the group verify (Mamba-2's VFOLD_DOTS): summed in the fold's order
}

// foldStagesMax bounds the stages of one block: beyond a few items ahead
// the producer only waits.
const foldStagesMax = 4

// planFoldPipe plans the pipelined folds of a replay cache whose stage
// (checkpoint, ring rows, scalars) takes stageBytes and whose static
// shared memory takes about staticBytes (per stage: staticPerStage more),
// for state matrices of rows × cols folded by threads consumer threads
// that need about regs registers each, and returns their defines; it is on
// where byDefault or REPLAYSSM_CUDA_FOLDS=pipe, off with
// REPLAYSSM_CUDA_FOLDS=items. Two
// blocks per SM where two stages each and the registers fit, else one
// block with as many stages as fit (at most foldStagesMax; tn.foldStages
// overrides the count).
func planFoldPipe(d *Device, opt replay.Options, stageBytes, staticBytes, staticPerStage, rows, cols, threads, regs int, byDefault bool, tn tuning) (foldPipe, []string) {
	f := foldPipe{stageBytes: (stageBytes + 127) / 128 * 128}
	major, _ := d.ComputeCapability()
	switch {
	case opt.Mode != replay.Replay:
		f.why = "baseline mode"
	case tn.v4:
		f.why = "REPLAYSSM_CUDA_KERNELS=v4"
	case tn.folds == "items":
		f.why = "REPLAYSSM_CUDA_FOLDS=items"
	case tn.folds == "" && !byDefault:
		f.why = "off by default for this layer (REPLAYSSM_CUDA_FOLDS=pipe turns it on)"
	case major < 9:
		f.why = fmt.Sprintf("compute capability %d < 9 (no bulk copies)", major)
	case rows%4 != 0 || cols%4 != 0 || rows*cols*elemBytes(opt.State)%16 != 0:
		f.why = "state rows, ring entries or the checkpoint are not 16-byte multiples"
	}
	if f.why != "" {
		return f, nil
	}
	perSM := d.SharedMemoryPerMultiprocessor()
	if perSM <= 0 {
		perSM = d.MaxSharedMemoryPerBlock()
	}
	fits := func(blocks, stages int) bool {
		block := stages*(f.stageBytes+staticPerStage) + staticBytes
		return block <= d.MaxSharedMemoryPerBlock() && blocks*(block+1024) <= perSM &&
			blocks*(threads+32)*regs <= 65536
	}
	switch {
	case tn.foldStages >= 2:
		f.stages, f.blocksPerSM = tn.foldStages, 1
		if fits(2, tn.foldStages) {
			f.blocksPerSM = 2
		}
	case !fits(2, 2):
		for st := foldStagesMax; st >= 2; st-- {
			if fits(1, st) {
				f.stages, f.blocksPerSM = st, 1
				break
			}
		}
	default:
		f.stages, f.blocksPerSM = 2, 2
		for f.stages < foldStagesMax && fits(2, f.stages+1) {
			f.stages++
		}
	}
	if f.stages == 0 || !fits(1, f.stages) {
		f.why = fmt.Sprintf("two stages of %d bytes exceed the %d bytes of shared memory per block", f.stageBytes, d.MaxSharedMemoryPerBlock())
		return foldPipe{why: f.why}, nil
	}
	f.on = true
	f.smem = f.stages * f.stageBytes
	return f, []string{
		fmt.Sprintf("-DFNSTAGE=%d", f.stages), fmt.Sprintf("-DFSTAGE_BYTES=%d", f.stageBytes),
		fmt.Sprintf("-DFMINB=%d", f.blocksPerSM),
	}
}

// errFoldDotsFit is bindFoldPipe's error where a module's group verify
// takes the folding slots' dots from pipelined folds (VFOLD_DOTS) that
// leave no block resident: no other fold kernel writes them, so the module
// is built again without them (newMamba2Cache) unless they were required.
var errFoldDotsFit = errors.New("cuda: the verify's fold dots (REPLAYSSM_CUDA_VFOLD_DOTS) need the pipelined folds, which do not fit")

// bindFoldPipe looks up the pipelined fold kernels (kind + "_flush_pipe",
// kind + "_fold_pipe"), allows their shared memory and sizes their grid
// (bindResident; bounded by boundBlocks when positive, for tests). A kernel whose
// registers or static shared memory leave no block resident turns the plan
// off (the work_items kernels fold) rather than fail.
func (c *replayCommon) bindFoldPipe(boundBlocks int) error {
	f := &c.folds
	if !f.on {
		return nil
	}
	for _, k := range []struct {
		dst  **Function
		name string
	}{{&f.flush, c.kind + "_flush_pipe"}, {&f.fold, c.kind + "_fold_pipe"}} {
		fn, r, blocks, err := c.bindResident(k.name, c.threads+32, f.smem, boundBlocks)
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

// launchFolds queues a pipelined fold kernel fn (flush or early fold) of
// batch slots whose arguments a holds, on at most bound blocks where bound
// is positive.
func (c *replayCommon) launchFolds(s *Stream, fn *Function, a *Args, batch, bound int) error {
	blocks := bounded(min(c.folds.blocks, batch*c.heads), bound)
	grid := [3]uint32{uint32(max(1, blocks)), 1, 1}
	return c.d.Launch(fn, grid, [3]uint32{uint32(c.threads + 32), 1, 1}, uint32(c.folds.smem), s, a)
}

// FoldKernel names the kernels that fold a checkpoint (a step's flushes, a
// verify's early folds): "v7" (pipelined) or "items" (one item at a time
// per block), and why not v7.
func (c *replayCommon) FoldKernel() (kernel, why string) {
	if c.folds.on {
		return "v7", ""
	}
	return "items", c.folds.why
}

package cuda

import (
	"fmt"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// planMamba2 plans a Mamba-2 cache's kernels (replay_mamba2.cu) for the
// shape and options on a GPU of properties p.
func planMamba2(shape ssm.Mamba2Shape, opt replay.Options, p gpuProps) (cachePlan, error) {
	return planMamba2Dots(shape, opt, p, true)
}

// planMamba2Dots is planMamba2, with the verify's dots from the early folds
// only where dots allows them (a GPU whose folds cannot hold them plans
// again without).
func planMamba2Dots(shape ssm.Mamba2Shape, opt replay.Options, p gpuProps, dots bool) (cachePlan, error) {
	if err := shape.Validate(); err != nil {
		return cachePlan{}, err
	}
	P, N := shape.HeadDim, shape.StateSize
	cp, err := newPlan("mamba2", "replay_mamba2.cu", opt, P, N, shape.Heads, p)
	if err != nil {
		return cp, err
	}
	opt = cp.opt
	cp.layer = []string{fmt.Sprintf("-DNHEADS=%d", shape.Heads), fmt.Sprintf("-DNGROUPS=%d", shape.Groups)}
	stage, scratch := mamba2PipeBytes(P, N, opt)
	cp.pipe = planPipeline(p, stage, scratch, opt, P, N)
	g := mamba2GroupPlan(shape, opt)
	// A verify's early folds form the folding slots' S'_p · C_k for the
	// group verify (VFOLD_DOTS), which then reads no state for those
	// slots: with fp32 checkpoints read as stored (no read copy) and a
	// group verify. H100, against it off in the same run, fp32 verify:
	// B=256 Nano 610 -> 552 us, Super 649 -> 580; B=512 1200 -> 1078,
	// 1283 -> 1141 (a quarter of the group verify's items no longer
	// stream the checkpoints the folds just wrote).
	dots = dots && opt.State == numeric.F32 && opt.ReadCopy == numeric.F32 && g.verifyOn
	cp.folds = mamba2FoldPlan(p, shape, opt, dots)
	cp.folds.verifyDots = dots && cp.folds.on
	// A 2-byte matrix read whole by the step (bf16 or fp16 checkpoint, or a
	// bf16 read copy): the per-head kernel measured as fast (Nano) or 14%
	// faster (Super) than the pipelined one with bf16, whose per-item
	// latency a 20 KB matrix does not hide; the verify stays pipelined.
	if readElemBytes(opt) == 2 {
		cp.pipe.stepOn = false
	}
	cp.useGroup(p, g, opt.MaxDraft)
	cp.scalarsEarly = true
	// A 2-byte checkpoint folded by the pipelined folds stores each chunk
	// with one st.global.v4: NVVM split two of the bf16 flush's four
	// 16-byte stores into 4-byte ones (56% of its sectors excess). H200,
	// B=256: bf16 aligned flush 573 -> 571 us (Nano), 578 -> 572 (Super),
	// verify 345 -> 342, 351 -> 347; fp32 within 1% either way.
	cp.storeV4 = cp.folds.on && elemBytes(opt.State) == 2
	err = cp.finish(p, false, func(parts int) (cachePlan, error) {
		sub := shape
		sub.Heads, sub.HeadDim = shape.Heads*parts, shape.HeadDim/parts
		return planMamba2(sub, opt, p)
	})
	return cp, err
}

// mamba2PipeBytes is the size of one stage of the pipelined kernels
// (replay_mamba2.cu: the matrix, R ring entries of x and B, TMAX rows of C,
// the Δ and decay rows) and of its consumer scratch (struct M2Scratch).
func mamba2PipeBytes(P, N int, opt replay.Options) (stage, scratch int) {
	R, tmax := ringEntries(opt), max(1, opt.MaxDraft)
	mat := readMatrixBytes(opt, P*N)
	stage = (mat+15)/16*16 + 4*(R*P+R*N+tmax*N+2*ringScalars(R))
	scratch = 4 * (2*tmax*R + 3*tmax + tmax*P + 2 + 6)
	return stage, scratch
}

// mamba2GroupPlan plans mamba2_group_step: a group's HPG heads of P rows,
// and static tables (the group's state-row dots, the ring's B rows and the
// heads' ring scalars) that bound the group's size. The step's per-token
// inputs come by cp.async (GROUP_EARLY) where its arrays leave the tables
// within bounds: H200, batch 256, against it off in the same run,
// non-flush 2.6-5.2% faster (Nano fp32 270 -> 263 us, bf16 163 -> 156;
// Super 287 -> 279, 172 -> 163), nvfp4 read copies 5-7% (112 -> 106, 118
// -> 110).
func mamba2GroupPlan(shape ssm.Mamba2Shape, opt replay.Options) groupStep {
	P, N, G := shape.HeadDim, shape.StateSize, shape.Groups
	hpg, R := shape.Heads/G, ringEntries(opt)
	tables := 4 * (N + R*N + hpg*P + 3*hpg*R + R + 2*hpg + 16)
	// GROUP_EARLY's arrays: the token's B row; dt, D and the float64
	// dt_bias, A a head.
	g := planGroup(opt, hpg, P, N, ringElemBytes(opt), tables+4*N+24*hpg) // the ring's x rows
	g.early = true
	if !g.on {
		g = planGroup(opt, hpg, P, N, ringElemBytes(opt), tables)
	}
	g.groups = G
	// The group verify's tables: C and S0 · C of every draft, the ring's
	// B rows (then the tensor cores' operands, gtw_vectors) and decay
	// weights per head and draft (mamba2_group_verify_item).
	T := opt.MaxDraft
	verifyTables := 4 * (T*N + max(R*N, 16*N+8) + T*hpg*P + hpg*T*R + T*R + hpg*T + 2*hpg*R + hpg + 16)
	g.verifyOn = g.on && T > 1 && verifyTables <= 46<<10
	g.verifySmem = g.smem // the ring's x rows, as the step stages them
	return g
}

// mamba2FoldPlan plans the pipelined folds (mamba2_flush_pipe,
// mamba2_fold_pipe): a stage holds the checkpoint, R entries of x and B
// and C (FS_* in replay_mamba2.cu); the static tables the row dots and per
// stage an item (with its R weights) and two barriers. verifyDots: the
// early folds also keep every draft's C for the group verify's dots.
func mamba2FoldPlan(p gpuProps, shape ssm.Mamba2Shape, opt replay.Options, verifyDots bool) foldPipe {
	P, N, R := shape.HeadDim, shape.StateSize, ringEntries(opt)
	threads := replayThreads(P, N, opt.State)
	tc := mamba2TCFolds(P, N, threads) && mamba2TCDefault(P, threads, opt.State)
	// The tensor-core fold pads its stage's B rows by 8 floats
	// (M2_BROW in replay_mamba2.cu), and its row dots are one a column
	// part (sDot).
	brow, parts := N, 1
	if tc {
		brow, parts = N+8, threads/32/(P/16)
	}
	mat := P * N * max(1, elemBytes(opt.State))
	crows := 1 // C: the token's (a flush), or with verifyDots every draft's
	if verifyDots {
		crows = max(1, opt.MaxDraft)
	}
	stage := (mat+15)/16*16 + 4*(R*P+R*brow+crows*N)
	static := 4*(P*parts+threads/32) + 256
	// ptxas (sm_90): 128-144 registers at 160 threads (Nano), 85-96 at 256
	// (Super).
	regs := 96
	if threads <= 160 {
		regs = 144
	}
	f := planFoldPipe(p, opt, stage, static, 64+4*R, P, N, threads, regs)
	f.tc = f.on && tc
	return f
}

// mamba2TCDefault reports whether the pipelined folds of a Mamba-2 module
// fold on the tensor cores (where mamba2TCFolds allows): with a checkpoint
// of at most two bytes, and with an fp32 one where a block's warps take
// whole rows (one column part). H200, B=256, us, FMA -> tensor cores, same
// run: aligned flush Nano bf16 568 -> 391, Super bf16 547 -> 471, Nano
// fp32 618 -> 609, but Super fp32 (two column parts) 654 -> 675; verify
// Nano bf16 327 -> 304, fp32 473 -> 461, Super bf16 336 -> 325, Super fp32
// 488 -> 500.
func mamba2TCDefault(P, threads int, state numeric.Format) bool {
	return elemBytes(state) <= 2 || threads/32 == P/16
}

// mamba2TCFolds reports whether the pipelined folds of a Mamba-2 module
// with P x N matrices on threads consumer threads can fold on the tensor
// cores (M2_TC_FOLD_ON in replay_mamba2.cu): the rows in blocks of 16 that
// the warps divide into, each block's row split into warps/blocks column
// parts of a multiple of 16 columns (M2TCMap).
func mamba2TCFolds(P, N, threads int) bool {
	warps, blocks := threads/32, P/16
	if threads%32 != 0 || P%16 != 0 || blocks == 0 || warps < blocks || warps%blocks != 0 {
		return false
	}
	return N%(warps/blocks*16) == 0
}

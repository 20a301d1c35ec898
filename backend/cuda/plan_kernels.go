package cuda

import (
	"fmt"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// The kernel families a replay cache may plan, each with the rule that
// turns it on and its launch sizes. Bound kernels and grid sizes are
// filled in by bind.go after the module is compiled.

// pipeGroupWarps is the number of consumer warps in one group of a
// pipelined kernel's block; the block has one group per stage plus a
// producer warp.
const pipeGroupWarps = 4

// pipeline is the plan of the pipelined replay kernels: the non-flush step
// and the verify as persistent blocks that stream each (batch row, head)
// item's state into shared-memory stages with bulk copies (sm_90+). Where
// it is off (older GPUs, shapes whose rows are not 16-byte multiples, a
// bf16 ring) the per-head kernels (one block per head and batch row) run.
// The group step (groupStep) takes the decode step's non-flush slots from
// it wherever it is on; the pipelined verify (Mamba-2) then still takes
// the batches below the group verify's.
type pipeline struct {
	on           bool
	stepOn       bool // the decode step runs the pipelined kernel (else only the verify does)
	warps        int  // consumer warps per block
	stages       int  // shared-memory stages per block
	smem         int  // dynamic shared memory per block, bytes
	blocksPerSM  int
	stageBytes   int
	scratchBytes int
	why          string // why it is off

	step, verify *Function
	verifyFold   *Function // the per-head kernel of the early folds before the pipelined verify
}

// defines are the pipeline's NVRTC defines.
func (p pipeline) defines() []string {
	if !p.on {
		return nil
	}
	return []string{
		fmt.Sprintf("-DNCW=%d", p.warps), fmt.Sprintf("-DGW=%d", pipeGroupWarps), fmt.Sprintf("-DNSTAGE=%d", p.stages),
		fmt.Sprintf("-DSTAGE_BYTES=%d", p.stageBytes), fmt.Sprintf("-DSCR_BYTES=%d", p.scratchBytes),
		fmt.Sprintf("-DPIPE_MINB=%d", p.blocksPerSM),
	}
}

// planPipeline sizes the pipelined kernels of a replay layer whose state
// matrices are rows × cols, for a stage of stageBytes (bulk copy
// destinations) and scratchBytes (the consumers' per-stage scalars). Bulk
// copies move 16-byte multiples: rows and cols must be multiples of 4, and
// an nvfp4 read copy's scale rows (rows·cols/16 bytes) multiples of 16.
// As many stages as fit, up to pipeStages, one consumer group per stage:
// a group's per-item latency (reductions, float64 decay products,
// barriers) is what limits these kernels, so more groups in flight beat
// deeper per-group prefetch.
func planPipeline(p gpuProps, stageBytes, scratchBytes int, opt replay.Options, rows, cols int) pipeline {
	round := func(v, m int) int { return (v + m - 1) / m * m }
	pl := pipeline{stageBytes: round(stageBytes, 128), scratchBytes: round(scratchBytes, 128)}
	switch {
	case opt.Mode != replay.Replay:
		pl.why = "baseline mode"
	case p.major < 9:
		pl.why = fmt.Sprintf("compute capability %d < 9 (no bulk copies)", p.major)
	case rows%4 != 0 || cols%4 != 0 || (opt.ReadCopy == numeric.NVFP4 && rows*cols%256 != 0):
		pl.why = "state rows, ring entries or nvfp4 scale rows are not 16-byte multiples"
	case opt.Ring != numeric.F32:
		// Widening a bf16 ring's rows in the producer spilled at these
		// kernels' register bound.
		pl.why = "a bf16 ring (the pipelined step and verify copy fp32 ring rows)"
	}
	if pl.why != "" {
		return pl
	}
	smem := func(stages int) int { return stages*(pl.stageBytes+pl.scratchBytes) + 16*stages + 64 }
	for st := pipeStages(opt); st >= 2; st-- {
		if smem(st) <= p.smemBlock {
			pl.stages = st
			break
		}
	}
	if pl.stages == 0 {
		pl.why = fmt.Sprintf("two stages of %d bytes exceed the %d bytes of shared memory per block", pl.stageBytes+pl.scratchBytes, p.smemBlock)
		return pl
	}
	pl.on, pl.stepOn = true, true
	pl.warps = pipeGroupWarps * pl.stages
	pl.smem = smem(pl.stages)
	// About 1 KiB per resident block is reserved by the system (sm_8x/9x).
	pl.blocksPerSM = min(8, 2048/(32*(pl.warps+1)), max(1, p.perSM()/(pl.smem+1024)))
	return pl
}

// pipeStages bounds the stages (and consumer groups) of one block: six for
// state reads; four for an nvfp4 read copy, whose small stages then fit
// two blocks per SM (eight groups), which measured faster than six groups
// in one block.
func pipeStages(opt replay.Options) int {
	if readElemBytes(opt) < 2 {
		return 4
	}
	return 6
}

// groupStep is the plan of the group kernels: persistent blocks that take
// the (group, batch row) items of a decode step's non-flush slots, and of
// a verify, in turn. A group is the heads that share the step's vectors: a
// Mamba-2 group's heads (C, the ring's B), a GDN key head's value heads (k,
// q, the ring's keys).
type groupStep struct {
	on       bool
	early    bool // Mamba-2: the step's per-token inputs by cp.async (GROUP_EARLY), planned with its tables
	threads  int
	groups   int    // groups per batch row
	smem     int    // dynamic shared memory per block: the ring's per-head rows (x, u) it stages
	why      string // why it is off
	tc       bool   // the step's stream on the tensor cores (an nvfp4 or fp8 matrix: groupTC)
	verifyOn bool   // the group verify too (it needs T > 1 and its tables within bounds)
	verifyTC bool   // the group verify's stream on the tensor cores (verifyTC)
	// verifySmem is the group verify's dynamic shared memory (the
	// Mamba-2 one stages the ring's x rows like the step, the GDN one
	// nothing).
	verifySmem int

	fn, verify           *Function
	blocks, verifyBlocks int // the grids: as many blocks as the GPU holds at once
	// verifyFold folds the history of the slots that fold early, before
	// the group verify takes every slot: the items kernel on foldBlocks
	// blocks (where neither the pipelined nor the streamed folds do).
	verifyFold *Function
	foldBlocks int
}

// defines are the group kernels' NVRTC defines.
func (g groupStep) defines() []string {
	if !g.on {
		return nil
	}
	d := []string{fmt.Sprintf("-DGNT=%d", g.threads)}
	if g.early {
		d = append(d, "-DGROUP_EARLY=1")
	}
	if g.tc {
		d = append(d, "-DGROUP_TC=1")
	}
	if g.verifyTC {
		d = append(d, "-DVERIFY_TC=1")
	}
	return d
}

// groupThreads is the group kernels' largest block size: eight warps
// stream 32 rows a pass. The kernels' register bound (GMINB) is 512/GNT
// blocks per SM, so every block size runs 512 threads per SM.
const groupThreads = 256

// groupBlockSize is the group kernels' block size for a group of rows
// state rows whose columns split over lanes lanes: about 32 passes per
// item (a power of two, 64 to 256 threads). Measured on the H200:
// Qwen3.5-4B's 256 rows ran best at 64 threads (non-flush nvfp4 191 -> 117
// us against 256 threads), Qwen3.5-122B's 512 at 128, Nano's 960 at 256
// (128: 4% slower). Fewer threads per item make more independent items
// per SM, whose prologues (cursor, ring, dots: a few dependent round
// trips) overlap the other items' streams; too few leave each item's
// serial epilogue long.
func groupBlockSize(rows, lanes int) int {
	want := rows * lanes / 32 * 3 / 4
	threads := 64
	for threads < want && threads < groupThreads {
		threads *= 2
	}
	return threads
}

// planGroup plans a group step over heads matrices of rows × cols per
// group whose static tables take tables bytes: on unless the mode or the
// shape rule it out. Its dynamic shared memory holds the ring's per-head
// rows of the group (rows elements of elem bytes a head and entry, as the
// ring keeps them) for the L-2 entries a non-flush step reads, up to 64
// KiB (three blocks per SM); the kernels read the rest from global memory.
func planGroup(opt replay.Options, heads, rows, cols, elem, tables int) groupStep {
	vec := 16 / max(1, readElemBytes(opt)) // elements per 16-byte chunk (nvfp4: per 8 bytes of codes)
	chunks := cols / vec
	rowBytes := elem * heads * rows
	threads := groupBlockSize(heads*rows, min(chunks, 8))
	// Smaller blocks run more per SM: the staged rows shrink with them.
	entries := max(0, min(opt.Window-2, (64<<10)*threads/groupThreads/rowBytes))
	g := groupStep{threads: threads, smem: entries * rowBytes}
	switch {
	case opt.Mode != replay.Replay:
		g.why = "baseline mode"
	case cols%vec != 0 || (chunks > 8 && chunks%8 != 0):
		g.why = fmt.Sprintf("state size %d is not a multiple of %d elements or %d chunks do not split over 8 lanes", cols, vec, chunks)
	case heads > threads:
		g.why = fmt.Sprintf("%d heads per group (more than %d threads)", heads, threads)
	case tables > 46<<10:
		g.why = fmt.Sprintf("a group's tables take %d bytes of shared memory (%d heads of %d rows)", tables, heads, rows)
	default:
		g.on = true
	}
	return g
}

// tcMatrix names the tensor-core stream (GT_* in replay_common.cu) the
// matrices of a group kernel can take on compute capability cc, or ""
// where none does: rows a multiple of 16 and cols 64 or 128, and "nvfp4"
// for an nvfp4 read copy (cc >= 89: e4m3 conversions), "bf16" for a bf16
// matrix read as stored (a bf16 checkpoint or read copy, cc >= 80), "e4m3"
// for an fp8 one (cc >= 89). fp32 checkpoints have none: a 3xTF32 stream
// lost to the FMA one.
func tcMatrix(cc, rows, cols int, opt replay.Options) string {
	if cols != 64 && cols != 128 || rows%16 != 0 {
		return ""
	}
	asStored := opt.ReadCopy == numeric.F32 // no read copy: the checkpoint is read
	switch {
	case opt.ReadCopy == numeric.NVFP4 && cc >= 89:
		return "nvfp4"
	case (opt.ReadCopy == numeric.BF16 || asStored && opt.State == numeric.BF16) && cc >= 80:
		return "bf16"
	case (opt.ReadCopy == numeric.E4M3 || asStored && opt.State == numeric.E4M3) && cc >= 89:
		return "e4m3"
	}
	return ""
}

// groupTC reports whether a group step's stream runs on the tensor cores
// (GROUP_TC in replay_common.cu): for nvfp4 and fp8 matrices. H200, batch
// 256, the non-flush step against the FMA stream in the same run: nvfp4
// read copy Qwen3.5-4B 93.9 -> 64.4 us, 122B 170 -> 98.5, Nano 142 -> 112,
// Super 147 -> 119; fp8 read copy 4B 81.7 -> 68.1, 122B 132 -> 115, Nano
// 124 -> 119, Super 131 -> 130. bf16 matrices keep the FMA stream (the
// tensor cores were slower there). Its sums are not the per-head kernels'
// order of operations.
func groupTC(cc, rows, cols int, opt replay.Options) bool {
	f := tcMatrix(cc, rows, cols, opt)
	return f == "nvfp4" || f == "e4m3"
}

// verifyTC reports whether a group verify's stream runs on the tensor
// cores (VERIFY_TC in replay_common.cu), for every format tcMatrix names
// where the verify's vectors (GDN's 2T, Mamba-2's T) fit B's eight
// columns. H200, B=256, T=4, against the FMA stream in the same run: bf16
// verify Qwen3.5-4B 426 -> 286 us, 122B 615 -> 470, Nemotron-3 Super 442
// -> 422, Nano 368 -> 365; fp8 read copy 4B 594 -> 360, 122B 910 -> 619,
// Nano 553 -> 504, Super 436 -> 381.
func verifyTC(cc, rows, cols, vectors int, opt replay.Options) bool {
	return vectors <= 8 && tcMatrix(cc, rows, cols, opt) != ""
}

// useGroup lets a planned group step take the decode step's non-flush
// slots from the pipelined kernel and decides its tensor-core streams.
func (cp *cachePlan) useGroup(p gpuProps, g groupStep, vectors int) {
	if !g.on {
		cp.group = g
		return
	}
	cp.pipe.stepOn = false
	g.tc = groupTC(p.cc(), cp.rows, cp.cols, cp.opt)
	if g.verifyOn {
		g.verifyTC = verifyTC(p.cc(), cp.rows, cp.cols, vectors, cp.opt)
	}
	cp.group = g
}

// foldStagesMax bounds the stages of one block of the pipelined folds:
// beyond a few items ahead the producer only waits.
const foldStagesMax = 4

// foldPipe is the plan of the pipelined folds (replay_common.cu
// fold_produce, Mamba-2 only): the decode step's flush and the verify's
// early folds on persistent blocks of the cache's threads plus one
// producer warp, which stages each folding item's checkpoint and ring rows
// in shared memory while earlier items fold. Where it is off (an nvfp4
// read copy, whose quantiser's block maxima in the block's one consumer
// group took Nano's aligned flush from 1521 to 2320 us; older GPUs; rows
// that are not 16-byte multiples) the items kernels (*_replay_flush,
// *_replay_fold_items) fold.
type foldPipe struct {
	on          bool
	stages      int // stages per block
	stageBytes  int
	smem        int // dynamic shared memory per block
	blocksPerSM int // planned (the register bound FMINB)
	why         string
	tc          bool // the rank update on the tensor cores (M2_TC_FOLD): sums in another order than the other fold kernels'
	verifyDots  bool // a verify's early folds form the drafts' dots for the group verify (VFOLD_DOTS): summed in the fold's order

	blocks      int // the grid
	flush, fold *Function
}

// defines are the pipelined folds' NVRTC defines.
func (f foldPipe) defines() []string {
	if !f.on {
		return nil
	}
	d := []string{
		fmt.Sprintf("-DFNSTAGE=%d", f.stages), fmt.Sprintf("-DFSTAGE_BYTES=%d", f.stageBytes),
		fmt.Sprintf("-DFMINB=%d", f.blocksPerSM),
	}
	if f.tc {
		d = append(d, "-DM2_TC_FOLD=1")
	}
	return d
}

// planFoldPipe plans the pipelined folds of a replay cache whose stage
// (checkpoint, ring rows, scalars) takes stageBytes and whose static
// shared memory takes about staticBytes (per stage: staticPerStage more),
// for state matrices of rows × cols folded by threads consumer threads
// that need about regs registers each: two blocks per SM where two stages
// each and the registers fit, else one block with as many stages as fit
// (at most foldStagesMax).
func planFoldPipe(p gpuProps, opt replay.Options, stageBytes, staticBytes, staticPerStage, rows, cols, threads, regs int) foldPipe {
	f := foldPipe{stageBytes: (stageBytes + 127) / 128 * 128}
	switch {
	case opt.Mode != replay.Replay:
		f.why = "baseline mode"
	case opt.ReadCopy == numeric.NVFP4:
		f.why = "an nvfp4 read copy (its quantiser's block maxima in one consumer group)"
	case p.major < 9:
		f.why = fmt.Sprintf("compute capability %d < 9 (no bulk copies)", p.major)
	case rows%4 != 0 || cols%4 != 0 || rows*cols*elemBytes(opt.State)%16 != 0:
		f.why = "state rows, ring entries or the checkpoint are not 16-byte multiples"
	}
	if f.why != "" {
		return f
	}
	fits := func(blocks, stages int) bool {
		block := stages*(f.stageBytes+staticPerStage) + staticBytes
		return block <= p.smemBlock && blocks*(block+1024) <= p.perSM() &&
			blocks*(threads+32)*regs <= 65536
	}
	if !fits(2, 2) {
		for st := foldStagesMax; st >= 2; st-- {
			if fits(1, st) {
				f.stages, f.blocksPerSM = st, 1
				break
			}
		}
	} else {
		f.stages, f.blocksPerSM = 2, 2
		for f.stages < foldStagesMax && fits(2, f.stages+1) {
			f.stages++
		}
	}
	if f.stages == 0 || !fits(1, f.stages) {
		return foldPipe{why: fmt.Sprintf("two stages of %d bytes exceed the %d bytes of shared memory per block", f.stageBytes, p.smemBlock)}
	}
	f.on = true
	f.smem = f.stages * f.stageBytes
	return f
}

// baseStage is the plan of a baseline-mode module's whole-matrix stage
// (BASE_BULK, replay_common.cu): the in-place step kernel copies its matrix
// into smem bytes of dynamic shared memory with one bulk copy before its
// prologue and streams its passes from there.
type baseStage struct {
	on   bool
	smem int
	minb int    // BASE_MINB: the blocks per SM the stage allows
	why  string // why the stage is off
}

// defines are the stage's NVRTC defines.
func (b baseStage) defines() []string {
	if !b.on {
		return nil
	}
	return []string{"-DBASE_BULK=1", fmt.Sprintf("-DBASE_MINB=%d", b.minb)}
}

// planBaseStage plans the stage of a baseline module of rows × cols
// matrices and threads-thread blocks: on where the layer asks for it
// (staged: Gated DeltaNet with an fp32 state), for element states other
// than fp8 (whose step holds the matrix in registers for its scale) on
// GPUs with bulk copies (sm_90+), where a matrix fits a block's shared
// memory beside the step's tables. BASE_MINB, the blocks per SM the stage
// allows (at least 40 registers a thread), bounds the kernel's registers.
//
// Measured on the H200 (B=256, against the unstaged step in the same run;
// the staged modules also store with STORE_V4): Gated DeltaNet fp32 faster
// (Qwen3.5-4B 283 -> 278 us, 122B 555 -> 547; their per-draft verifies
// 806 -> 752 and 1599 -> 1491), everything else slower (bf16 Nano 261 ->
// 280, Super 279 -> 296, Qwen3.5-4B 154 -> 157; fp32 Nano 499 -> 512,
// Super 539 -> 549): a block's compute waits for its whole matrix, and the
// shared memory that holds it bounds the blocks per SM.
func planBaseStage(p gpuProps, opt replay.Options, rows, cols, threads int, staged bool) baseStage {
	bytes := rows * cols * elemBytes(opt.State)
	tmax := max(1, opt.MaxDraft)
	// The step's static tables (replay_gdn.cu gdn_baseline, replay_mamba2.cu
	// mamba2_baseline): two padded vectors a draft, a row's sums a draft
	// and the staged row vector, within a few bytes.
	static := 4*(2*tmax*(cols+cols/8)+(tmax+1)*rows) + 256
	var b baseStage
	switch {
	case opt.Mode != replay.Baseline:
		b.why = "replay mode"
	case !staged:
		b.why = "not for this layer and format"
	case opt.State == numeric.E4M3:
		b.why = "an fp8 state (the step holds its matrix for the scale)"
	case p.major < 9:
		b.why = fmt.Sprintf("compute capability %d < 9 (no bulk copies)", p.major)
	case bytes%16 != 0:
		b.why = fmt.Sprintf("a %d-byte matrix is not a multiple of 16 bytes", bytes)
	case bytes+static > p.smemBlock:
		b.why = fmt.Sprintf("a %d-byte matrix and %d bytes of tables exceed the %d bytes of shared memory per block", bytes, static, p.smemBlock)
	default:
		b.on, b.smem = true, bytes
		b.minb = max(1, min(2048/threads, p.perSM()/(bytes+static+1024), 65536/(threads*40)))
	}
	return b
}

// planHeadSplit returns how many parts the small step splits each of a
// replay layer's heads heads (rows × cols matrices) into on a GPU of sms
// SMs, and why not where it returns 1: the most parts (2, 4 or 8) of 32
// rows or more whose blocks at batch 1 number at most 1.5 per SM. The step
// at batch 1 is latency-bound, and a block of fewer rows finishes sooner,
// while a second block on an SM takes its turn behind the first (H200,
// batch 1, us per step, fp32: Qwen3.5-4B's 32 heads in 4 parts 5.7 -> 4.6,
// in 2 4.8; Qwen3.5-122B's 64 in 2 5.7 -> 4.9, in 4 5.0; Nano's 96 in 2
// 4.8 -> 4.4; Super's 128 in 2 4.3 -> 4.2, in 4 4.5). Never in baseline
// mode, with a read copy or for fp8 states (a read copy's nvfp4 global
// scale, like an fp8 state's scale, covers a whole matrix).
func planHeadSplit(opt replay.Options, heads, rows, sms int) (int, string) {
	switch {
	case opt.Mode != replay.Replay:
		return 1, "baseline mode"
	case opt.ReadCopy != numeric.F32:
		return 1, "a read copy (its scales cover a whole matrix)"
	case opt.State == numeric.E4M3:
		return 1, "an fp8 state (its scale covers a whole matrix)"
	}
	n := 1
	for p := 2; p <= 8 && rows%p == 0 && rows/p >= 32 && 2*heads*p <= 3*sms; p *= 2 {
		n = p
	}
	if n == 1 {
		return 1, fmt.Sprintf("%d heads of %d rows fill the %d SMs", heads, rows, sms)
	}
	return n, ""
}

// splitBatches is the largest batch the split module of heads heads in
// split parts takes on sms SMs: while its blocks number at most three per
// SM. Beyond that the whole heads' step was as fast or faster (H200:
// Nemotron-3-Nano-4B, 96 heads split in 2, batch 2: 5.0 us against 5.7 on
// 384 blocks; batch 4: 9.0 against 7.0 on 768).
func splitBatches(heads, split, sms int) int { return 3 * sms / (heads * split) }

package cuda

import (
	"fmt"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// planGDN plans a Gated DeltaNet cache's kernels (replay_gdn.cu) for the
// shape and options on a GPU of properties p. The state of value head j is
// stored transposed (dv rows of dk), so the matrices are dv × dk.
func planGDN(shape ssm.GDNShape, opt replay.Options, p gpuProps) (cachePlan, error) {
	if err := shape.Validate(); err != nil {
		return cachePlan{}, err
	}
	dk, dv := shape.KeyDim, shape.ValueDim
	cp, err := newPlan("gdn", "replay_gdn.cu", opt, dv, dk, shape.ValueHeads, p)
	if err != nil {
		return cp, err
	}
	opt = cp.opt
	cp.layer = []string{
		fmt.Sprintf("-DNKH=%d", shape.KeyHeads), fmt.Sprintf("-DNVH=%d", shape.ValueHeads), fmt.Sprintf("-DL2EPS=%g", ssm.L2NormEps),
	}
	stage, scratch := gdnPipeBytes(dk, dv, opt)
	cp.pipe = planPipeline(p, stage, scratch, opt, dv, dk)
	// The work-item folds: the pipelined folds lost here (gdn_fold's own
	// chain of phases per item; H200, B=256, items -> pipe: Qwen3.5-4B
	// aligned flush 468 -> 533 us fp32, 412 -> 511 bf16; 122B 920 -> 1046,
	// 810 -> 1012).
	cp.folds = foldPipe{why: "the Gated DeltaNet folds run as work items"}
	cp.useGroup(p, gdnGroupPlan(shape, opt), 2*opt.MaxDraft)
	cp.tcFold = tcFold(opt)
	cp.foldCached = opt.FoldsCachedU()
	cp.stream = planStream(p, shape, opt, cp.group)
	err = cp.finish(p, opt.State == numeric.F32, func(parts int) (cachePlan, error) {
		sub := shape
		sub.ValueHeads, sub.ValueDim = shape.ValueHeads*parts, shape.ValueDim/parts
		return planGDN(sub, opt, p)
	})
	return cp, err
}

// gdnPipeBytes is the size of one stage of the pipelined step
// (replay_gdn.cu: the matrix, R ring keys and updates, q, v, the decay
// row) and of its consumer scratch (struct GDNScratch).
func gdnPipeBytes(dk, dv int, opt replay.Options) (stage, scratch int) {
	R := ringEntries(opt)
	mat := readMatrixBytes(opt, dk*dv)
	stage = (mat+15)/16*16 + 4*(R*dk+R*dv+dk+dv+ringScalars(R))
	scratch = 4 * (2*dk + 2*dv + 3*(R+1) + 4 + 5)
	return stage, scratch
}

// gdnStaged64 bounds the ring entries an fp32 GDN group step of 64-thread
// blocks stages in shared memory: H200, B=256, against the 14 the 64 KiB
// rule gives, in the same run, us: 4B fp32 window 184 -> 177 at 6 (180 at
// 2), non-flush 159 -> 155, the flush beside it 364 -> 356; 122B
// (128-thread blocks) lost at 6 (fp32 window 319 -> 325, bf16 197 -> 203).
const gdnStaged64 = 6

// gdnGroupPlan plans gdn_group_step: a key head's VPK value heads of dv
// rows, static tables (the key head's vectors and ring keys, their dots,
// the value heads' ring scalars and projections).
func gdnGroupPlan(shape ssm.GDNShape, opt replay.Options) groupStep {
	dk, dv := shape.KeyDim, shape.ValueDim
	vpk, R := shape.ValueHeads/shape.KeyHeads, ringEntries(opt)
	tables := 4 * ((R+2)*dk + 2*(R+1) + 3*vpk*(R+1) + 2*vpk + 2*vpk*dv + 32)
	g := planGroup(opt, vpk, dv, dk, 4, tables) // the cached u rows: fp32 whatever the ring
	g.groups = shape.KeyHeads
	if g.threads == 64 && readElemBytes(opt) == 4 {
		g.smem = min(g.smem, gdnStaged64*4*vpk*dv)
	}
	// The group verify's tables (gdn_group_verify_item): the drafts' k, q
	// and the ring's keys (later the drafts' vectors padded, 4 floats
	// after every 32, or the tensor cores' operands: gtw_vectors), their
	// gram dots, the value heads' ring scalars, decay products and the
	// outputs' ring weights per draft (two tables), and the projections on
	// 2T vectors.
	T := opt.MaxDraft
	vecs := 2*T*dk + max(R*dk, 2*T*(dk+dk/32*4), 16*dk+8)
	verifyTables := 4 * (vecs + 2*T*(R+1) + 2*vpk*(R+1) + 2*vpk*T*(R+1) + vpk*T + vpk + 2*T*vpk*dv + 16)
	g.verifyOn = g.on && T > 1 && verifyTables <= 46<<10
	return g
}

// tcFold reports whether a GDN module folds on the tensor cores (TC_FOLD
// in replay_gdn.cu): for 2-byte checkpoints without a read copy, and fp32
// ones that fold from cached u. H200, batch 256, against the FMA fold in
// the same run, us: Qwen3.5-4B bf16 aligned flush 663 -> 615, verify 498 ->
// 479; 122B 1316 -> 1208, 794 -> 756. fp32 with the exact fold lost (flush
// 641 -> 659, 1262 -> 1305: three products a term where bf16's checkpoint
// takes two, and the exact fold waited on its loads, not its arithmetic);
// with the fold from cached u, whose arithmetic is mostly the rank update,
// fp32 gains on the verify's early folds: verify 431 -> 409, 765 -> 723,
// flush 458 -> 464, 902 -> 916, windows 194 -> 193, 341 -> 339. Not with an
// nvfp4 read copy (953 -> 1209: its write from the tensor-core layout), nor
// for an fp8 checkpoint (not measured).
func tcFold(opt replay.Options) bool {
	return opt.ReadCopy == numeric.F32 && (elemBytes(opt.State) == 2 || opt.State == numeric.F32 && opt.FoldsCachedU())
}

// streamPlan is the plan of Gated DeltaNet's folds by strips of 16 rows
// brought into shared memory by bulk copies: a verify's early folds
// (gdn_fold_stream, FOLD_STREAM) and a step's flush (gdn_flush_stream,
// FLUSH_STREAM), where the fold is the tensor-core rank update from cached
// u (streamable), beside the group step.
type streamPlan struct {
	fold, flush   bool
	foldWarps     int // gdn_fold_stream's warps a block, a strip each (FS_WARPS)
	flushWarps    int // gdn_flush_stream's (FL_WARPS)
	buffers       int // gdn_fold_stream's buffers of strips (FS_DB: 2 for 2-byte checkpoints)
	pad           int // gdn_flush_stream's rows padded by 16 elements (FL_PAD)
	foldThreads   int
	foldSmem      int
	flushThreads  int
	flushSmem     int
	few, keep, at int // FL_FEW: fewer than few items a block from batch at go to keep blocks (few 0: off)

	foldFn, flushFn         *Function
	foldBlocks, flushBlocks int
}

// fsWarps is gdn_fold_stream's warps a block, each folding a strip of 16
// rows; flWarps2 is gdn_flush_stream's for 2-byte checkpoints whose
// matrices split into as many strips, fsWarps for the others. H200, batch
// 256, both kernels at 8 warps against 4 in the same run, us: the bf16
// aligned flush Qwen3.5-4B 364 -> 302, 122B 708 -> 573, staggered windows
// 123 -> 120, 212 -> 199; but the bf16 verify 250 -> 304, 399 -> 502 (the
// early folds at 64 registers spill) and fp32 slower (flush 362 -> 376, 699
// -> 732); 2 warps slower for both.
const (
	fsWarps  = 4
	flWarps2 = 8
)

// flushFewItems is FL_FEW's bound for 4- and 2-byte checkpoints: from batch
// 256 a step whose flush has fewer than 4 items a block of its resident
// grid (a staggered step: a sixteenth of the slots) gives them to one
// block an SM and lets the others end at once, so that the group step
// starts beside it. H200, B=256, against it off in the same run,
// staggered windows us: Qwen3.5-4B fp32 177 -> 174, 122B fp32 319 -> 314,
// bf16 114 -> 113, 199 -> 194; B=512 bf16 211 -> 211, 378 -> 372; aligned
// flushes within 1%. At B=64 the windows lost 2% and an aligned bf16
// flush, whose 2048 items counted as few, ran 77 -> 175 us: hence the
// batch bound. fp8 checkpoints keep it off (not measured).
const (
	flushFewItems = 4
	flushFewBatch = 256
)

// defines are the streamed folds' NVRTC defines.
func (s streamPlan) defines() []string {
	if !s.fold && !s.flush {
		return nil
	}
	d := []string{fmt.Sprintf("-DFS_WARPS=%d", s.foldWarps), fmt.Sprintf("-DFL_WARPS=%d", s.flushWarps),
		fmt.Sprintf("-DFS_DB=%d", s.buffers-1), fmt.Sprintf("-DFL_PAD=%d", s.pad)}
	if s.fold {
		d = append(d, "-DFOLD_STREAM=1")
	}
	if s.flush {
		d = append(d, "-DFLUSH_STREAM=1")
		if s.few > 0 {
			d = append(d, fmt.Sprintf("-DFL_FEW=%d", s.few), fmt.Sprintf("-DFL_KEEP=%d", s.keep), fmt.Sprintf("-DFL_FEW_BATCH=%d", s.at))
		}
	}
	return d
}

// planStream plans the streamed folds of a GDN replay cache whose group
// step is g. The flush streams wherever the folds can (H200, batch 256,
// the aligned flush against the items kernel in the same run, us:
// Qwen3.5-4B fp32 464 -> 366, bf16 411 -> 359; 122B 912 -> 708, 808 ->
// 701); the early folds too where the group verify takes the verify.
// 2-byte checkpoints get two buffers of strips a block (their strips are
// half an fp32 one's, so an SM holds fewer bytes in flight with one); the
// flush keeps one (two measured no faster for bf16, slower for fp32). The
// flush's strips take rows padded by 16 elements (their loads then spread
// over the banks) for 2-byte checkpoints beside a group step of 64-thread
// blocks: H200, B=256, against packed rows in the same run, the
// Qwen3.5-4B bf16 window 120 -> 113 us; 122B's (128-thread blocks, four
// an SM) lost 198 -> 202.
func planStream(p gpuProps, shape ssm.GDNShape, opt replay.Options, g groupStep) streamPlan {
	dk, dv := shape.KeyDim, shape.ValueDim
	s := streamPlan{foldWarps: fsWarps, flushWarps: fsWarps, buffers: 1}
	if elemBytes(opt.State) == 2 && dv%(16*flWarps2) == 0 {
		s.flushWarps = flWarps2
	}
	s.fold = g.verifyOn && streamable(p, shape, opt, s.foldWarps)
	s.flush = g.on && streamable(p, shape, opt, s.flushWarps)
	if !s.fold && !s.flush {
		return streamPlan{}
	}
	e := elemBytes(opt.State)
	if e == 2 {
		s.buffers = 2
		if g.threads == 64 {
			s.pad = 1
		}
	}
	strip := 16 * dk * e
	s.foldThreads, s.foldSmem = 32*s.foldWarps, s.buffers*s.foldWarps*strip
	s.flushThreads, s.flushSmem = 32*s.flushWarps, s.flushWarps*16*(dk+16*s.pad)*e
	if s.flush && e >= 2 {
		s.few, s.keep, s.at = flushFewItems, max(p.sms, 1), flushFewBatch
	}
	return s
}

// streamable reports whether the GDN folds can stream by strips of 16 rows
// in blocks of warps strips: where the fold is the tensor-core rank update
// from cached u (tcFold, FoldsCachedU, TC_FOLD_ON's layout of 16 rows a
// warp), whose results the strips keep bit for bit, on sm_90 (bulk
// copies).
func streamable(p gpuProps, shape ssm.GDNShape, opt replay.Options, warps int) bool {
	dk, dv := shape.KeyDim, shape.ValueDim
	return p.major >= 9 && tcFold(opt) && opt.FoldsCachedU() && moduleThreads(opt, dv, dk) == 2*dv && dk%16 == 0 &&
		dv%(16*warps) == 0
}

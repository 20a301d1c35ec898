package cuda

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// GDNInput is one batch of Gated DeltaNet recurrence inputs in device
// memory, laid out as replay.GDNInput: row r holds q and k [Hk·dk] (before the
// l2 normalisation), v [Hv·dv] and the raw a and b [Hv] (float32). Slots and
// Counts are as in Mamba2Input.
type GDNInput struct {
	Slots         Buffer
	Q, K, V, A, B Buffer
	Counts        Buffer
}

// GDNCache is the GPU twin of replay.GDNCache (see Mamba2Cache for what is
// shared). The state of value head j is stored transposed, dv rows of dk, as
// on the CPU. The ring keeps the normalised k [Hk·dk], v [Hv·dv], the decay
// exp(g) and β [Hv] of each step and caches the corrected update u [Hv·dv] for the
// output path. A flush folds the cached u where there is no read copy
// (replay.Options.FoldsCachedU), and is otherwise the exact fold from the
// raw k, v, g, β on the checkpoint (docs/DESIGN.md 2.2), as on the CPU.
type GDNCache struct {
	replayCommon
	shape ssm.GDNShape

	negA, dtb Buffer // −exp(A_log), dt_bias (float64)
	qscale    float32

	ringK, ringV, ringU Buffer
	ringA, ringBeta     Buffer
}

// NewGDNCache compiles the kernels for the shape and options and allocates a
// cache of capacity slots on d (see NewMamba2Cache for the options).
func NewGDNCache(ctx context.Context, d *Device, shape ssm.GDNShape, prm replay.GDNParams, capacity int, opt replay.Options) (*GDNCache, error) {
	return newGDNCache(ctx, d, shape, prm, capacity, opt, envTuning(os.Getenv))
}

// gdnModule plans the pipelined kernels and the group step of a GDN cache
// with options opt (defaults applied) and returns the plans and the layer's
// NVRTC defines.
func gdnModule(d *Device, shape ssm.GDNShape, opt replay.Options, tn tuning) (pipeline, groupStep, foldPipe, []string) {
	dk, dv := shape.KeyDim, shape.ValueDim
	defines := []string{
		fmt.Sprintf("-DNKH=%d", shape.KeyHeads), fmt.Sprintf("-DNVH=%d", shape.ValueHeads), fmt.Sprintf("-DL2EPS=%g", ssm.L2NormEps),
	}
	stage, scratch := gdnPipeBytes(dk, dv, opt, replayRing(opt))
	p, defines := replayPipeline(d, opt, stage, scratch, dv, dk, tn, defines)
	f, fd := gdnFoldPlan(d, shape, opt, tn)
	defines = append(defines, fd...)
	p, g, defines := useGroup(p, gdnGroupPlan(shape, opt, tn), defines)
	g, defines = useGroupTC(d, g, dv, dk, opt, tn, defines)
	g, defines = useVerifyTC(d, g, dv, dk, 2*opt.MaxDraft, opt, tn, defines)
	// The bf16 baseline step at 40 registers a thread, 6 blocks an SM (48,
	// the default, gives 5; ncu: 62.5% occupancy, long-scoreboard stalls on
	// the bf16 unpack). H200, session 15, batch 256, us a step: Qwen3.5-4B
	// 154 -> 150 (82% -> 84% of copy), 122B 298 -> 288 (84% -> 87%); 32
	// registers spill, 186 and 363. Mamba-2 keeps 48: at 40 Nano's went
	// 259 -> 304.
	if !definesName(tn.defines, "BASE_REGS") {
		defines = append(defines, "-DBASE_REGS=40")
	}
	if tcFold(opt) && !definesName(tn.defines, "TC_FOLD") {
		defines = append(defines, "-DTC_FOLD=1")
	}
	// The fold from the ring's cached u where there is no read copy
	// (FOLD_CACHED in replay_gdn.cu), unless the options ask for the exact
	// fold.
	if !definesName(tn.defines, "FOLD_CACHED") {
		fc := "-DFOLD_CACHED=0"
		if opt.FoldsCachedU() {
			fc = "-DFOLD_CACHED=1"
		}
		defines = append(defines, fc)
	}
	g.streamFold = planFoldStream(d, shape, opt, g, tn)
	if g.foldDots = gdnVerifyFoldDots(opt, g, f, tn); g.foldDots {
		defines = append(defines, "-DVFOLD_DOTS=1")
	}
	g.streamFlush = planFlushStream(d, shape, opt, tn)
	if g.streamFold || g.streamFlush {
		w, fw := tn.foldWarps(), tn.flushWarps(opt.State, dv)
		// Two buffers of strips and keys a block for 2-byte checkpoints
		// (FS_DB): their strips are half an fp32 one's, so an SM holds
		// fewer bytes in flight with one buffer. The flush has one: two
		// measured no faster for bf16, slower for fp32 (NOTES.md, session
		// 25).
		nb := 1
		if tn.fsDB == "1" || tn.fsDB == "" && elemBytes(opt.State) == 2 {
			nb = 2
		}
		strip := 16 * dk * elemBytes(opt.State)
		g.streamThreads, g.streamSmem = 32*w, nb*w*strip
		// The flush's strips in rows padded by 16 elements (FL_PAD: its
		// loads then spread over the banks) for 2-byte checkpoints beside
		// a group step of 64-thread blocks. H200, B=256, against packed
		// rows in the same run (NOTES.md, session 28): the Qwen3.5-4B bf16
		// window 120 -> 113 us, whose group step's eight blocks an SM hold
		// about 220 KB of shared memory whether or not the flush beside it
		// is padded; 122B's (128-thread blocks, four an SM, 177 KB) lost
		// 198 -> 202, its non-flush step 170 -> 176 beside the padded
		// flush's 50 KB blocks.
		pad := 0
		if tn.flPad == "1" || tn.flPad == "" && elemBytes(opt.State) == 2 && g.threads == 64 {
			pad = 1
		}
		g.flushThreads, g.flushSmem = 32*fw, fw*16*(dk+16*pad)*elemBytes(opt.State)
		defines = append(defines, fmt.Sprintf("-DFS_WARPS=%d", w), fmt.Sprintf("-DFL_WARPS=%d", fw), fmt.Sprintf("-DFS_DB=%d", nb-1),
			fmt.Sprintf("-DFL_PAD=%d", pad))
		if g.streamFold {
			defines = append(defines, "-DFOLD_STREAM=1")
		}
		if g.streamFlush {
			defines = append(defines, "-DFLUSH_STREAM=1")
			// The flush's items from a counter (FL_QUEUE) where its blocks
			// may start behind the group step's (OVERLAP_ORDER=main).
			queue := tn.flQueue == "1" || tn.flQueue == "" && tn.overlapMain
			if queue {
				defines = append(defines, "-DFL_QUEUE=1")
			}
			// A staggered step's few items on one block an SM (FL_FEW; not
			// with the queue, whose blocks share the items as they come).
			if few := tn.flushFew(opt.State); few > 0 && !queue {
				defines = append(defines, flushFewDefines(d, few, tn)...)
			}
		}
	}
	return p, g, f, defines
}

// defaultFlFew is FL_FEW's bound by default: from batch 256 a step whose
// flush has fewer than 4 items a block of its resident grid (a staggered
// step: a sixteenth of the slots) gives them to one block an SM and lets
// the others end at once, so that the group step starts beside it. H200,
// B=256, against FL_FEW off in the same run (NOTES.md, session 29),
// staggered windows us: Qwen3.5-4B fp32 177 -> 174, 122B fp32 319 -> 314;
// aligned flushes within 1%. 2-byte checkpoints took it from session 31,
// once the shared flush_few (session 30) left their flush, at 64
// registers, without the spills it had under FL_FEW (72 bytes): bf16
// windows 4B 114 -> 113, 122B 199 -> 194 (B=256), 211 -> 211 and 378 ->
// 372 (B=512), as in session 30 (114 -> 113, 199 -> 194); the 4B aligned
// non-flush step, whose graph holds the empty flush, 99.8 -> 102. fp8
// checkpoints were not measured with it and keep it off. At B=64
// (measured before the batch bound) the windows lost 2% and an aligned
// bf16 flush, whose 2048 items counted as few, ran 77 -> 175 us: hence
// the bound.
const defaultFlFew = 4

// flushFewDefines returns FL_FEW's defines (replay_common.cu) for the bound
// few: its blocks one an SM of d (tn.flKeep in tests), from batch 256
// (tn.flFewBatch).
func flushFewDefines(d *Device, few int, tn tuning) []string {
	keep := tn.flKeep
	if keep <= 0 {
		keep = d.Multiprocessors()
	}
	from := tn.flFewBatch
	if from <= 0 {
		from = 256
	}
	return []string{fmt.Sprintf("-DFL_FEW=%d", few), fmt.Sprintf("-DFL_KEEP=%d", max(keep, 1)), fmt.Sprintf("-DFL_FEW_BATCH=%d", from)}
}

// flushFew is FL_FEW's bound for a checkpoint format:
// REPLAYSSM_CUDA_FL_FEW's, else defaultFlFew for 4- and 2-byte checkpoints
// and off for fp8 ones.
func (tn tuning) flushFew(state numeric.Format) int {
	if tn.flFew == "" {
		if elemBytes(state) >= 2 {
			return defaultFlFew
		}
		return 0
	}
	v, _ := strconv.Atoi(tn.flFew)
	return v
}

// fsWarps is gdn_fold_stream's warps a block (FS_WARPS), each folding a
// strip of 16 rows (REPLAYSSM_CUDA_FS_WARPS: 2, 4 or 8 where dv allows);
// flWarps2 is gdn_flush_stream's (FL_WARPS) for 2-byte checkpoints whose
// matrices split into as many strips, fsWarps for the others
// (REPLAYSSM_CUDA_FL_WARPS decides instead). H200, batch 256, session 26,
// both kernels at 8 warps against 4 in the same run, us: the bf16 aligned
// flush Qwen3.5-4B 364 -> 302, 122B 708 -> 573, staggered windows 123 ->
// 120, 212 -> 199; but the bf16 verify 250 -> 304, 399 -> 502 (the early
// folds at 64 registers spill) and fp32 slower (flush 362 -> 376, 699 ->
// 732); 2 warps slower for both.
const (
	fsWarps  = 4
	flWarps2 = 8
)

// gdnStaged64 bounds the ring entries an fp32 GDN group step of 64-thread
// blocks stages in shared memory (gdnGroupPlan).
const gdnStaged64 = 6

// foldWarps is gdn_fold_stream's warps a block under tn's knobs.
func (tn tuning) foldWarps() int {
	if tn.fsWarps > 0 {
		return tn.fsWarps
	}
	return fsWarps
}

// flushWarps is gdn_flush_stream's warps a block for checkpoints of format
// state and matrices of dv rows, under tn's knobs.
func (tn tuning) flushWarps(state numeric.Format, dv int) int {
	if tn.flWarps > 0 {
		return tn.flWarps
	}
	if elemBytes(state) == 2 && dv%(16*flWarps2) == 0 {
		return flWarps2
	}
	return tn.foldWarps()
}

// planFoldStream reports whether a GDN verify's early folds run as
// gdn_fold_stream (FOLD_STREAM in replay_gdn.cu) in place of
// gdn_replay_fold_items: where the folds stream (streamable), with the
// group verify and its resident-grid folds, unless
// REPLAYSSM_CUDA_FOLD_STREAM=0.
func planFoldStream(d *Device, shape ssm.GDNShape, opt replay.Options, g groupStep, tn tuning) bool {
	return tn.foldStream && tn.foldItems && g.verifyOn && streamable(d, shape, opt, tn, tn.foldWarps())
}

// gdnVerifyFoldDots reports whether a GDN verify's streamed early folds
// (gdn_fold_stream) also form the folding slots' drafts' S'^T k_d and
// S'^T q_d for the group verify, which then reads no state for those slots
// (VFOLD_DOTS in replay_gdn.cu; Mamba-2's mamba2VerifyFoldDots took its
// fp32 verify 9-11% faster on an H100): with REPLAYSSM_CUDA_VFOLD_DOTS=1
// (session 38, written without a GPU), where the folds stream (and not
// the pipelined folds f, which would take them: REPLAYSSM_CUDA_FOLDS=pipe),
// without a read copy (the group verify streams the checkpoint as stored)
// and without VPART (whose parts split the verify by these slots).
func gdnVerifyFoldDots(opt replay.Options, g groupStep, f foldPipe, tn tuning) bool {
	return tn.vfoldDots == "1" && g.streamFold && !f.on && opt.ReadCopy == numeric.F32 && !tn.overlapVer
}

// planFlushStream reports whether a GDN replay step flushes with
// gdn_flush_stream (FLUSH_STREAM in replay_gdn.cu) in place of
// gdn_replay_flush: where the folds stream (streamable), unless
// REPLAYSSM_CUDA_FLUSH_STREAM=0. H200, batch 256 (NOTES.md, session 25),
// the aligned flush against gdn_replay_flush in the same run, us:
// Qwen3.5-4B fp32 464 -> 366, bf16 411 -> 359; 122B 912 -> 708, 808 -> 701.
func planFlushStream(d *Device, shape ssm.GDNShape, opt replay.Options, tn tuning) bool {
	return tn.flushStream && streamable(d, shape, opt, tn, tn.flushWarps(opt.State, shape.ValueDim))
}

// streamable reports whether the GDN folds can stream by strips of 16 rows
// (gdn_fold_stream, gdn_flush_stream) in blocks of warps strips: where the
// fold is the tensor-core rank update from cached u (tcFold, FoldsCachedU,
// TC_FOLD_ON's layout of 16 rows a warp), whose results the strips keep
// bit for bit, on sm_90 (bulk copies), unless TC_FOLD or FOLD_CACHED is
// given in REPLAYSSM_CUDA_DEFINES.
func streamable(d *Device, shape ssm.GDNShape, opt replay.Options, tn tuning, warps int) bool {
	dk, dv := shape.KeyDim, shape.ValueDim
	if definesName(tn.defines, "TC_FOLD") || definesName(tn.defines, "FOLD_CACHED") {
		return false
	}
	if major, _ := d.ComputeCapability(); major < 9 {
		return false
	}
	return tcFold(opt) && opt.FoldsCachedU() && moduleThreads(opt, dv, dk, tn) == 2*dv && dk%16 == 0 &&
		dv%(16*warps) == 0
}

// tcFold reports whether a GDN module folds on the tensor cores by default
// (TC_FOLD in replay_gdn.cu; REPLAYSSM_CUDA_DEFINES=-DTC_FOLD=0|1 decides
// instead): for 2-byte checkpoints without a read copy, and fp32 ones
// that fold from cached u. H200, session 16, batch 256, against the FMA
// fold in the same run, us: Qwen3.5-4B bf16 aligned flush 663 -> 615,
// verify 498 -> 479; 122B 1316 -> 1208, 794 -> 756. fp32 lost then (flush 641 -> 659, 1262 -> 1305: three
// products a term where bf16's checkpoint takes two, and the exact fold
// waited on its loads, not its arithmetic); with the fold from cached u
// (session 19), whose arithmetic is mostly the rank update, fp32 gains on
// the verify's early folds: verify 431 -> 409, 765 -> 723, flush 458 ->
// 464, 902 -> 916, windows 194 -> 193, 341 -> 339. Not with an nvfp4 read
// copy (953 -> 1209: its write from the tensor-core layout), nor for an
// fp8 checkpoint (not measured).
func tcFold(opt replay.Options) bool {
	return opt.ReadCopy == numeric.F32 && (elemBytes(opt.State) == 2 || opt.State == numeric.F32 && opt.FoldsCachedU())
}

// defineOn says whether defines (NVRTC options) set name to a value other
// than 0 (a bare -DNAME counts as on; the last one wins), and whether they
// name it at all.
func defineOn(defines []string, name string) (on, named bool) {
	for _, d := range defines {
		if d == "-D"+name {
			on, named = true, true
		} else if v, ok := strings.CutPrefix(d, "-D"+name+"="); ok {
			on, named = v != "0", true
		}
	}
	return on, named
}

// definesName reports whether defines (NVRTC options) define name.
func definesName(defines []string, name string) bool {
	_, named := defineOn(defines, name)
	return named
}

// gdnFoldPlan plans the pipelined folds (gdn_flush_pipe, gdn_fold_pipe): a
// stage holds the checkpoint, R+1 vector rows, the raw k and q, R rows of v
// and the ring's two scalar rows (GF_* in replay_gdn.cu); the static tables
// are gdn_fold's (GDNFoldShared) and per stage an item and two barriers.
func gdnFoldPlan(d *Device, shape ssm.GDNShape, opt replay.Options, tn tuning) (foldPipe, []string) {
	dk, dv, R := shape.KeyDim, shape.ValueDim, replayRing(opt)
	mat := dk * dv * max(1, elemBytes(opt.State))
	stage := (mat+15)/16*16 + 4*((R+1)*dk+2*dk+R*dv+2*ringScalars(R))
	vrows := max(R+1, 2*max(1, opt.MaxDraft))
	threads := replayThreads(dv, dk, opt.State)
	static := 4*(vrows*dv+vrows*vrows+R*R+4*R+1+threads/32) + 256
	// ptxas (sm_90): 143-166 registers at 256 threads; bound to 96 for two
	// blocks per SM the fold spills (fp8 checkpoint: 276 bytes a thread).
	// Off by default: with the fold from cached u too (session 19, its
	// stages hold the ring's u rows) the work_items kernels are faster
	// (H200, B=256, items -> pipe: Qwen3.5-4B aligned flush 468 -> 533 us
	// fp32, 412 -> 511 bf16, windows 192 -> 201, 130 -> 139; 122B 920 ->
	// 1046, 810 -> 1012).
	return planFoldPipe(d, opt, stage, static, 64, dv, dk, threads, 168, false, tn)
}

// gdnGroupPlan plans gdn_group_step (replay_gdn.cu): a key head's VPK value
// heads of dv rows, static tables (the key head's vectors and ring keys,
// their dots, the value heads' ring scalars and projections).
// REPLAYSSM_CUDA_KERNELS=v5 turns it off (the pipelined step, gdn_pipe_step)
// and with it the group verify (gdn_group_verify).
func gdnGroupPlan(shape ssm.GDNShape, opt replay.Options, tn tuning) groupStep {
	dk, dv := shape.KeyDim, shape.ValueDim
	vpk, R := shape.ValueHeads/shape.KeyHeads, replayRing(opt)
	tables := 4 * ((R+2)*dk + 2*(R+1) + 3*vpk*(R+1) + 2*vpk + 2*vpk*dv + 32)
	g := planGroup(opt, tn, vpk, dv, dk, 4, tables) // the cached u rows: fp32 whatever the ring
	g.groups = shape.KeyHeads
	// An fp32 step in 64-thread blocks (eight an SM; Qwen3.5-4B) stages
	// at most gdnStaged64 ring entries, reading the rest from global
	// memory: H200, B=256, REPLAYSSM_CUDA_GROUP_STAGED against the 14 the
	// 64 KiB rule gives, in the same run (NOTES.md, session 28), us: 4B
	// fp32 window 184 -> 177 at 6 (180 at 2), non-flush 159 -> 155, the
	// flush beside it 364 -> 356; 122B (128-thread blocks) lost at 6 (fp32
	// window 319 -> 325, bf16 197 -> 203), and bf16 4B was measured at 6
	// only beside a flush since changed (121 -> 118).
	if g.threads == 64 && readElemBytes(opt) == 4 && tn.groupX == 0 {
		g.smem = min(g.smem, gdnStaged64*4*vpk*dv)
	}
	if tn.v5 {
		g.on, g.why = false, "REPLAYSSM_CUDA_KERNELS=v5"
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

// newGDNCache is NewGDNCache with the kernel knobs given.
func newGDNCache(ctx context.Context, d *Device, shape ssm.GDNShape, prm replay.GDNParams, capacity int, opt replay.Options, tn tuning) (*GDNCache, error) {
	if err := shape.Validate(); err != nil {
		return nil, err
	}
	opt, err := replayDefaults(opt)
	if err != nil {
		return nil, err
	}
	if opt.Ring != numeric.F32 {
		// NOTES.md, session 35: GDN's ring keeps k normalised, which is
		// not a bf16 value; its kernels need the raw k and a factor.
		return nil, fmt.Errorf("%w: a %v ring (the GDN kernels keep an fp32 ring; Mamba-2 caches take a bf16 one)", ErrReplayOptions, opt.Ring)
	}
	Hk, Hv, dk, dv := shape.KeyHeads, shape.ValueHeads, shape.KeyDim, shape.ValueDim
	if err := checkMatrix(dv, dk, Hv); err != nil {
		return nil, err
	}
	if len(prm.ALog) != Hv || len(prm.DtBias) != Hv {
		return nil, fmt.Errorf("cuda: gdn cache: A_log and dt_bias need %d values each", Hv)
	}
	if capacity < 1 {
		return nil, fmt.Errorf("cuda: gdn cache: capacity %d must be positive", capacity)
	}
	c := &GDNCache{shape: shape, qscale: float32(1 / math.Sqrt(float64(dk)))}
	c.kind, c.heads, c.elems = "gdn", Hv, dk*dv
	fail := func(err error) (*GDNCache, error) {
		c.close()
		return nil, fmt.Errorf("cuda: gdn cache: %w", err)
	}
	var defines []string
	c.pipe, c.group, c.folds, defines = gdnModule(d, shape, opt, tn)
	if err := c.init(ctx, d, opt, capacity, dv, dk, "replay_gdn.cu", defines, tn); err != nil {
		return fail(err)
	}
	if err := c.bindKernels("gdn_pipe_step", "", "", tn.pipeBlocks); err != nil {
		return fail(err)
	}
	// (A baseline module has no replay kernel, and plans no group step,
	// folds or split heads: the binds below do nothing.)
	if opt.Mode == replay.Replay {
		if c.early, err = bindEarlyVerify(d, c.mod, "gdn_replay_verify_early", c.threads, tn); err != nil {
			return fail(err)
		}
	}
	step, verify := "gdn_group_step", ""
	if c.group.verifyOn {
		verify = "gdn_group_verify"
	}
	if err := c.bindGroup(step, verify, tn.foldItems, tn.pipeBlocks); err != nil {
		return fail(err)
	}
	if err := c.bindFoldPipe(tn.pipeBlocks); err != nil {
		return fail(err)
	}
	if err := c.buildHeadSplit(ctx, dv, tn, func(n int) (splitModule, error) { return gdnSplitSource(d, shape, opt, n, tn) }); err != nil {
		return fail(err)
	}
	if tn.groupAll {
		c.group.minItems = 0
	}
	negA, dtb := make([]float64, Hv), make([]float64, Hv)
	for j := range Hv {
		negA[j] = -math.Exp(float64(prm.ALog[j]))
		dtb[j] = float64(prm.DtBias[j])
	}
	if c.negA, err = c.uploadF64(negA); err != nil {
		return fail(err)
	}
	if c.dtb, err = c.uploadF64(dtb); err != nil {
		return fail(err)
	}
	if err := c.allocStates(); err != nil {
		return fail(err)
	}
	if opt.Mode == replay.Replay {
		R := c.ring()
		for _, b := range []struct {
			dst   *Buffer
			elems int
		}{
			{&c.ringK, Hk * dk}, {&c.ringV, Hv * dv}, {&c.ringU, Hv * dv},
		} {
			if *b.dst, err = c.alloc(4 * capacity * R * b.elems); err != nil {
				return fail(err)
			}
		}
		for _, b := range []*Buffer{&c.ringA, &c.ringBeta} {
			if *b, err = c.alloc(4 * capacity * Hv * ringScalars(R)); err != nil {
				return fail(err)
			}
		}
	}
	return c, nil
}

// Shape returns the layer shape.
func (c *GDNCache) Shape() ssm.GDNShape { return c.shape }

// gdnSplitSource is the small-batch module of a GDN cache whose value heads
// split into split heads of dv/split rows (HSPLIT).
func gdnSplitSource(d *Device, shape ssm.GDNShape, opt replay.Options, split int, tn tuning) (splitModule, error) {
	sub := shape
	sub.ValueHeads, sub.ValueDim = shape.ValueHeads*split, shape.ValueDim/split
	_, _, _, defines := gdnModule(d, sub, opt, tn)
	return splitModuleSource("replay_gdn.cu", opt, sub.ValueDim, sub.KeyDim, split, defines, tn)
}

func (c *GDNCache) checkInput(batch, T int, in GDNInput, o Buffer) error {
	if err := c.checkBatch(batch, in.Slots); err != nil {
		return err
	}
	Hk, Hv, dk, dv := c.shape.KeyHeads, c.shape.ValueHeads, c.shape.KeyDim, c.shape.ValueDim
	rows := batch * T
	for _, e := range []error{
		needRows("q", in.Q, 4*rows*Hk*dk), needRows("k", in.K, 4*rows*Hk*dk), needRows("v", in.V, 4*rows*Hv*dv),
		need("a", in.A, 4*rows*Hv), need("b", in.B, 4*rows*Hv), needRows("o", o, 4*rows*Hv*dv),
	} {
		if e != nil {
			return e
		}
	}
	return nil
}

// gdnPipeBytes is the size of one stage of the pipelined step
// (replay_gdn.cu: the matrix, R ring keys and updates, q, v, the decay
// row) and of its consumer scratch (struct GDNScratch).
func gdnPipeBytes(dk, dv int, opt replay.Options, R int) (stage, scratch int) {
	mat := readMatrixBytes(opt, dk*dv)
	stage = (mat+15)/16*16 + 4*(R*dk+R*dv+dk+dv+ringScalars(R))
	scratch = 4 * (2*dk + 2*dv + 3*(R+1) + 4 + 5)
	return stage, scratch
}

func (c *GDNCache) replayArgs(a *Args) {
	a.Ptr(c.state)
	a.Ptr(c.codes)
	a.Ptr(c.scales)
	a.Ptr(c.scale)
	a.Ptr(c.ringK)
	a.Ptr(c.ringV)
	a.Ptr(c.ringA)
	a.Ptr(c.ringBeta)
	a.Ptr(c.ringU)
}

func (c *GDNCache) inputArgs(a *Args, in GDNInput, o Buffer) {
	a.Ptr(in.Q)
	a.Ptr(in.K)
	a.Ptr(in.V)
	a.Ptr(in.A)
	a.Ptr(in.B)
	a.Ptr(o)
	a.Ptr(c.negA)
	a.Ptr(c.dtb)
	a.F32(c.qscale)
}

// Step queues one standard decode step for the batch's slots on s and writes
// o [batch][Hv·dv] (before the gated norm). See Mamba2Cache.Step.
func (c *GDNCache) Step(s *Stream, batch int, in GDNInput, o Buffer) error {
	if err := c.checkInput(batch, 1, in, o); err != nil {
		return fmt.Errorf("cuda: gdn cache: step: %w", err)
	}
	if c.opt.Mode == replay.Baseline {
		return c.launchBaseline(s, batch, 1, false, in, o)
	}
	a := &c.args
	a.Reset()
	c.replayArgs(a)
	a.Ptr(c.hist)
	a.Ptr(in.Slots)
	c.inputArgs(a, in, o)
	a.I32(int32(c.opt.Window))
	return c.launchReplayStep(s, a, batch, c.grid(batch))
}

func (c *GDNCache) launchBaseline(s *Stream, batch, T int, verify bool, in GDNInput, o Buffer) error {
	a := &c.args
	a.Reset()
	a.Ptr(c.state)
	a.Ptr(c.cur)
	a.Ptr(in.Slots)
	a.Ptr(in.Counts)
	a.I32(int32(T))
	a.I32(int32(c.stateBuffers()))
	c.inputArgs(a, in, o)
	a.Ptr(c.pending) // the kernel sets the pending drafts: no cursor kernel
	return c.launchBaselineKernel(s, batch, verify, a)
}

// Verify queues the outputs of T draft inputs per slot without writing any
// checkpoint. See Mamba2Cache.Verify.
func (c *GDNCache) Verify(s *Stream, batch, T int, in GDNInput, o Buffer) error {
	if err := c.checkDrafts(batch, T, in.Counts); err != nil {
		return fmt.Errorf("cuda: gdn cache: %w", err)
	}
	if err := c.checkInput(batch, T, in, o); err != nil {
		return fmt.Errorf("cuda: gdn cache: verify: %w", err)
	}
	if c.opt.Mode == replay.Baseline {
		return c.launchBaseline(s, batch, T, true, in, o)
	}
	a := &c.args
	a.Reset()
	c.replayArgs(a)
	a.Ptr(c.hist)
	a.Ptr(in.Slots)
	a.Ptr(in.Counts)
	a.I32(int32(T))
	c.inputArgs(a, in, o)
	a.I32(int32(c.ring()))
	return c.launchReplayVerify(s, a, in.Slots, in.Counts, batch, T, c.grid(batch))
}

// StateBytes is what one full state transfer of one slot moves, and
// ReadBytes what a non-flush step reads of one slot's state.
func (c *GDNCache) StateBytes() (state, read int) { return c.stateBytes() }

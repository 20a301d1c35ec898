package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// Mamba2Input is one batch of Mamba-2 SSM-core inputs in device memory, laid
// out as replay.Mamba2Input: row r holds x [H·P], B and C [G·N] and the raw dt
// [H] (float32). Slots holds one int32 slot per batch row; for Verify with T
// drafts, row i·T+s is draft s of Slots[i], and Counts (optional, int32 in
// 1..T) gives each slot's own number of drafts.
type Mamba2Input struct {
	Slots       Buffer
	X, B, C, Dt Buffer
	Counts      Buffer
	// DtMin, when positive, clamps Δ = softplus(dt + dt_bias) from below,
	// as replay.Mamba2Input.DtMin does (transformers' multi-token path).
	DtMin float32
}

// Mamba2Cache is the GPU twin of replay.Mamba2Cache: the same modes
// (replay, baseline), state formats (fp32, fp16, bf16 or fp8-e4m3 states;
// bf16, fp8-e4m3 or nvfp4 read copies), data layout and semantics, on device
// buffers. Step, Verify and
// Commit only queue work on a stream: the flush decisions and cursor moves
// happen on the device, so they can be captured in a CUDA graph.
//
// Device layouts (all little-endian, as the CPU cache's):
//   - state [slot][buffer][head][P][N] in the state format (1+MaxDraft
//     buffers in baseline mode, 1 in replay mode); fp8 states then hold one
//     float32 scale per matrix, [slot][buffer][head], after all the codes;
//   - read copy [slot][head][P·N] elements in bf16 or fp8 (one float32
//     scale per matrix [slot][head]), or nvfp4 codes [slot][head][P·N/2]
//     (element 2i in the low nibble of byte i), block scales
//     [slot][head][P·N/16] (e4m3), global scales [slot][head] (float32);
//   - ring [slot][L+MaxDraft entries]: x [H·P], B [G·N] in float32, or
//     bf16 with Options.Ring bf16; ring scalars [slot][head][L+MaxDraft
//     rounded up to 4]: Δ, exp(Δ·A) in float32.
//
// A cache is driven by one goroutine at a time.
type Mamba2Cache struct {
	replayCommon
	shape ssm.Mamba2Shape

	a, dtb, dd Buffer // A = −exp(A_log) and dt_bias (float64), D (float32)

	ringX, ringB  Buffer
	ringDt, ringA Buffer

	// With a bf16 ring: the op's x and B rounded to bf16 (round_bf16),
	// which the kernels read in place of the caller's.
	roundFn        *Function
	roundX, roundB Buffer
}

// NewMamba2Cache compiles the kernels for the shape and options and
// allocates a cache of capacity slots on d. Options are package replay's;
// the GPU supports every state and read-copy format of package replay but
// the naive nvfp4 baseline, no stochastic rounding, and window + max
// drafts ≤ 32. A bf16 ring (Options.Ring) keeps x and B in bf16 (Mamba-2
// only): correct on the H200, but not yet faster there (NOTES.md, session
// 36).
func NewMamba2Cache(ctx context.Context, d *Device, shape ssm.Mamba2Shape, prm replay.Mamba2Params, capacity int, opt replay.Options) (*Mamba2Cache, error) {
	return newMamba2Cache(ctx, d, shape, prm, capacity, opt, envTuning(os.Getenv))
}

// mamba2Module plans the pipelined kernels and the group step of a Mamba-2
// cache with options opt (defaults applied) and returns the plans and the
// layer's NVRTC defines.
func mamba2Module(d *Device, shape ssm.Mamba2Shape, opt replay.Options, tn tuning) (pipeline, groupStep, foldPipe, []string) {
	P, N := shape.HeadDim, shape.StateSize
	defines := []string{fmt.Sprintf("-DNHEADS=%d", shape.Heads), fmt.Sprintf("-DNGROUPS=%d", shape.Groups)}
	stage, scratch := mamba2PipeBytes(P, N, opt, replayRing(opt))
	p, defines := replayPipeline(d, opt, stage, scratch, P, N, tn, defines)
	gp := mamba2GroupPlan(shape, opt, tn)
	vdots := mamba2VerifyFoldDots(opt, gp, tn)
	f, fd := mamba2FoldPlan(d, shape, opt, tn, vdots)
	defines = append(defines, fd...)
	if f.verifyDots = vdots && f.on; f.verifyDots {
		defines = append(defines, "-DVFOLD_DOTS=1")
	}
	// A 2-byte matrix read whole by the step (bf16 or fp16 checkpoint, or a
	// bf16 read copy): the v4 kernel measured as fast (Nano) or 14% faster
	// (Super) than v5 with bf16, whose per-item latency a 20 KB matrix does
	// not hide; the verify stays on v5.
	if readElemBytes(opt) == 2 {
		p.stepOn = false
	}
	p, g, defines := useGroup(p, gp, defines)
	// The group step's per-token inputs by cp.async (GROUP_EARLY): H200,
	// session 36, batch 256, against it off in the same run: non-flush
	// 2.6-5.2% faster (Nano fp32 270 -> 263 us, bf16 163 -> 156; Super
	// 287 -> 279, 172 -> 163), nvfp4 read copies 5-7% (112 -> 106,
	// 118 -> 110).
	if g.on && g.early && !definesName(tn.defines, "GROUP_EARLY") {
		defines = append(defines, "-DGROUP_EARLY=1")
	}
	g, defines = useGroupTC(d, g, P, N, opt, tn, defines)
	g, defines = useVerifyTC(d, g, P, N, opt.MaxDraft, opt, tn, defines)
	// The early verify's drafts' scalars with its early loads
	// (SCALARS_EARLY, replay_common.cu): H200, session 16, batch 1, 0.2-0.4
	// us faster a verify in every Mamba-2 row; GDN's within noise.
	if !definesName(tn.defines, "SCALARS_EARLY") {
		defines = append(defines, "-DSCALARS_EARLY=1")
	}
	// A 2-byte checkpoint folded by the pipelined folds stores each chunk
	// with one st.global.v4 (STORE_V4): NVVM split two of the bf16 flush's
	// four 16-byte stores into 4-byte ones (ncu, session 30: 56% of its
	// sectors excess). H200, B=256, same run: bf16 aligned flush 573 -> 571
	// us (Nano), 578 -> 572 (Super), verify 345 -> 342, 351 -> 347; fp32
	// within 1% either way, so not there.
	if f.on && elemBytes(opt.State) == 2 && !definesName(tn.defines, "STORE_V4") {
		defines = append(defines, "-DSTORE_V4=1")
	}
	return p, g, f, defines
}

// mamba2FoldPlan plans the pipelined folds (mamba2_flush_pipe,
// mamba2_fold_pipe): a stage holds the checkpoint, R entries of x and B
// and C (FS_* in replay_mamba2.cu); the static tables the row dots and per
// stage an item (with its R weights) and two barriers.
func mamba2FoldPlan(d *Device, shape ssm.Mamba2Shape, opt replay.Options, tn tuning, verifyDots bool) (foldPipe, []string) {
	P, N, R := shape.HeadDim, shape.StateSize, replayRing(opt)
	threads := replayThreads(P, N, opt.State)
	tc := mamba2TCFolds(P, N, threads) && (tn.m2TCFold == "1" || tn.m2TCFold == "" && mamba2TCDefault(P, threads, opt.State))
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
	// (Super); an nvfp4 read copy's quantiser takes up to 168 (NVRTC 13,
	// session 34: Nano 168 fp32, 157 bf16; Super 131, 137; 220 in session
	// 11, before the tensor-core folds).
	regs := 96
	if threads <= 160 {
		regs = 144
	}
	if opt.ReadCopy == numeric.NVFP4 {
		regs = 168
	}
	// On by default but with an nvfp4 read copy: its quantiser's block
	// maxima in the one consumer group a block has took Nano's aligned
	// flush from 1521 to 2320 us (fp32; bf16 1440 -> 2168; Super about
	// even, 1777 -> 1744).
	f, defines := planFoldPipe(d, opt, stage, static, 64+4*R, P, N, threads, regs, opt.ReadCopy != numeric.NVFP4, tn)
	if f.on && tc {
		f.tc = true
		defines = append(defines, "-DM2_TC_FOLD=1")
	}
	return f, defines
}

// mamba2VerifyFoldDots reports whether a verify's early folds, on the
// pipelined folds, should also form the folding slots' S'_p . C_k for the
// group verify (VFOLD_DOTS in replay_mamba2.cu), which then reads no state
// for those slots: with a group verify (which takes replay mode and
// drafts), no read copy (the group verify streams the checkpoint as
// stored) and no VPART (whose parts split the verify by these slots); by
// default for fp32 checkpoints (REPLAYSSM_CUDA_VFOLD_DOTS=0 turns it off),
// and with =1 for bf16 or fp16 ones too (the dots from S' rounded as
// stored; session 38, not yet measured). H100, session 38, against it off
// in the same run, fp32 verify: B=256 Nano 610 -> 552 us, Super 649 -> 580;
// B=512 1200 -> 1078, 1283 -> 1141 (a quarter of the group verify's items
// no longer stream the checkpoints the folds just wrote).
func mamba2VerifyFoldDots(opt replay.Options, g groupStep, tn tuning) bool {
	format := opt.State == numeric.F32 && tn.vfoldDots != "0" ||
		(opt.State == numeric.BF16 || opt.State == numeric.F16) && tn.vfoldDots == "1"
	return format && opt.ReadCopy == numeric.F32 && g.verifyOn && !tn.overlapVer
}

// mamba2TCDefault reports whether the pipelined folds of a Mamba-2 module
// fold on the tensor cores by default (where mamba2TCFolds allows): with a
// checkpoint of at most two bytes, and with an fp32 one where a block's
// warps take whole rows (one column part). H200, B=256, us, FMA -> tensor
// cores, same run (session 32): aligned flush Nano bf16 568 -> 391, Super
// bf16 547 -> 471, Nano fp32 618 -> 609, but Super fp32 (two column
// parts) 654 -> 675; verify Nano bf16 327 -> 304, fp32 473 -> 461, Super
// bf16 336 -> 325, Super fp32 488 -> 500.
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

// mamba2GroupPlan plans mamba2_group_step (replay_mamba2.cu): a group's
// HPG heads of P rows, and static tables (the group's state-row dots, the
// ring's B rows and the heads' ring scalars) that bound the group's size.
func mamba2GroupPlan(shape ssm.Mamba2Shape, opt replay.Options, tn tuning) groupStep {
	P, N, G := shape.HeadDim, shape.StateSize, shape.Groups
	hpg, R := shape.Heads/G, replayRing(opt)
	tables := 4 * (N + R*N + hpg*P + 3*hpg*R + R + 2*hpg + 16)
	// GROUP_EARLY (replay_mamba2.cu): on unless the defines say otherwise,
	// and, unless asked for, only where its arrays leave the tables within
	// bounds (the token's B row; dt, D and the float64 dt_bias, A a head).
	early, named := defineOn(tn.defines, "GROUP_EARLY")
	if !named {
		early = true
	}
	earlyTables := tables
	if early {
		earlyTables += 4*N + 24*hpg
	}
	g := planGroup(opt, tn, hpg, P, N, ringElemBytes(opt), earlyTables) // the ring's x rows
	if early && !named && !g.on {
		early = false
		g = planGroup(opt, tn, hpg, P, N, ringElemBytes(opt), tables)
	}
	g.early = early
	g.groups = G
	if tn.v5 {
		g.on, g.why = false, "REPLAYSSM_CUDA_KERNELS=v5"
	}
	// The group verify's tables: C and S0 . C of every draft, the ring's
	// B rows (then the tensor cores' operands, gtw_vectors) and decay
	// weights per head and draft (mamba2_group_verify_item).
	T := opt.MaxDraft
	verifyTables := 4 * (T*N + max(R*N, 16*N+8) + T*hpg*P + hpg*T*R + T*R + hpg*T + 2*hpg*R + hpg + 16)
	g.verifyOn = g.on && T > 1 && verifyTables <= 46<<10
	g.verifySmem = g.smem // the ring's x rows, as the step stages them
	return g
}

// newMamba2Cache is NewMamba2Cache with the kernel knobs given.
func newMamba2Cache(ctx context.Context, d *Device, shape ssm.Mamba2Shape, prm replay.Mamba2Params, capacity int, opt replay.Options, tn tuning) (*Mamba2Cache, error) {
	if err := shape.Validate(); err != nil {
		return nil, err
	}
	opt, err := replayDefaults(opt)
	if err != nil {
		return nil, err
	}
	H, P, N, G := shape.Heads, shape.HeadDim, shape.StateSize, shape.Groups
	if err := checkMatrix(P, N, H); err != nil {
		return nil, err
	}
	if len(prm.ALog) != H || len(prm.DtBias) != H || len(prm.D) != H {
		return nil, fmt.Errorf("cuda: mamba2 cache: A_log, dt_bias and D need %d values each", H)
	}
	if capacity < 1 {
		return nil, fmt.Errorf("cuda: mamba2 cache: capacity %d must be positive", capacity)
	}
	c := &Mamba2Cache{shape: shape}
	c.kind, c.heads, c.elems = "mamba2", H, P*N
	fail := func(err error) (*Mamba2Cache, error) {
		c.close()
		return nil, fmt.Errorf("cuda: mamba2 cache: %w", err)
	}
	var defines []string
	c.pipe, c.group, c.folds, defines = mamba2Module(d, shape, opt, tn)
	if err := c.init(ctx, d, opt, capacity, P, N, "replay_mamba2.cu", defines, tn); err != nil {
		return fail(err)
	}
	if err := c.bindKernels("mamba2_pipe_step", "mamba2_pipe_verify", "mamba2_replay_verify_fold", tn.pipeBlocks); err != nil {
		return fail(err)
	}
	// The one-kernel verify of small batches: at batches 1-4 it took
	// 1.1-1.6x less time than the early folds, the pipelined verify and
	// the cursor kernel (H200, session 14). GDN has none: its v4 verify
	// and cursor kernel were 0.2-1 us faster than the same verify ending
	// in verify_done. (A baseline module has no replay kernel, and plans
	// no group step, folds or split heads: the binds below do nothing.)
	if opt.Mode == replay.Replay {
		if c.verifySmall, err = c.mod.Function("mamba2_replay_verify_small"); err != nil {
			return fail(err)
		}
		if c.early, err = bindEarlyVerify(d, c.mod, "mamba2_replay_verify_small_early", c.threads, tn); err != nil {
			return fail(err)
		}
	}
	step, verify := "mamba2_group_step", ""
	if c.group.verifyOn {
		verify = "mamba2_group_verify"
	}
	if err := c.bindGroup(step, verify, tn.foldItems, tn.pipeBlocks); err != nil {
		return fail(err)
	}
	if err := c.bindFoldPipe(tn.pipeBlocks); err != nil {
		if errors.Is(err, errFoldDotsFit) && tn.vfoldDots == "" {
			// The default's dots need the pipelined folds, which this GPU
			// cannot hold: the module again without them, its group
			// verify streaming every slot.
			c.close()
			tn.vfoldDots = "0"
			return newMamba2Cache(ctx, d, shape, prm, capacity, opt, tn)
		}
		return fail(err)
	}
	if err := c.buildHeadSplit(ctx, P, tn, func(n int) (splitModule, error) { return mamba2SplitSource(d, shape, opt, n, tn) }); err != nil {
		return fail(err)
	}
	if tn.groupAll {
		c.group.minItems = 0
	}
	a, dtb := make([]float64, H), make([]float64, H)
	for h := range H {
		a[h] = -math.Exp(float64(prm.ALog[h]))
		dtb[h] = float64(prm.DtBias[h])
	}
	if c.a, err = c.uploadF64(a); err != nil {
		return fail(err)
	}
	if c.dtb, err = c.uploadF64(dtb); err != nil {
		return fail(err)
	}
	if c.dd, err = c.uploadF32(prm.D); err != nil {
		return fail(err)
	}
	if err := c.allocStates(); err != nil {
		return fail(err)
	}
	if opt.Mode == replay.Replay {
		R, e := c.ring(), ringElemBytes(opt)
		if c.ringX, err = c.alloc(e * capacity * R * H * P); err != nil {
			return fail(err)
		}
		if c.ringB, err = c.alloc(e * capacity * R * G * N); err != nil {
			return fail(err)
		}
		if c.ringDt, err = c.alloc(4 * capacity * H * ringScalars(R)); err != nil {
			return fail(err)
		}
		if c.ringA, err = c.alloc(4 * capacity * H * ringScalars(R)); err != nil {
			return fail(err)
		}
	}
	if opt.Ring == numeric.BF16 {
		if c.roundFn, err = c.mod.Function("round_bf16"); err != nil {
			return fail(err)
		}
		rows := capacity * max(1, opt.MaxDraft)
		if c.roundX, err = c.alloc(4 * rows * H * P); err != nil {
			return fail(err)
		}
		if c.roundB, err = c.alloc(4 * rows * G * N); err != nil {
			return fail(err)
		}
	}
	return c, nil
}

// ringElemBytes is the size of one of a ring's x or B (GDN: k or v)
// elements: 4, or 2 with a bf16 ring.
func ringElemBytes(opt replay.Options) int {
	if opt.Ring == numeric.BF16 {
		return 2
	}
	return 4
}

// ringInputs returns the op's x and B (rows input rows: the batch, times T
// for a verify) as the kernels are to read them: the caller's, or with a
// bf16 ring the cache's copies rounded to bf16 (round_bf16), queued on s
// before the op. Every value the
// kernels then take from the op or the ring is what the ring holds, so the
// cache computes what an fp32 ring fed rounded inputs computes, as the CPU
// cache's contract says (replay.Options.Ring).
func (c *Mamba2Cache) ringInputs(s *Stream, rows int, in Mamba2Input) (x, b Buffer, err error) {
	if c.roundFn == nil {
		return in.X, in.B, nil
	}
	H, P, N, G := c.shape.Heads, c.shape.HeadDim, c.shape.StateSize, c.shape.Groups
	nx, nb := rows*H*P, rows*G*N
	a := &c.args
	a.Reset()
	a.Ptr(c.roundX)
	a.Ptr(in.X)
	a.I32(int32(nx))
	a.Ptr(c.roundB)
	a.Ptr(in.B)
	a.I32(int32(nb))
	// Blocks for the larger array, four elements a thread; blockIdx.y
	// picks the array (the smaller one's extra blocks find no work).
	const threads = 256
	blocks := min((max(nx, nb)+4*threads-1)/(4*threads), 8*c.d.Multiprocessors())
	if err := c.d.Launch(c.roundFn, [3]uint32{uint32(max(1, blocks)), 2, 1}, [3]uint32{threads, 1, 1}, 0, s, a); err != nil {
		return Buffer{}, Buffer{}, err
	}
	return c.roundX, c.roundB, nil
}

// mamba2PipeBytes is the size of one stage of the pipelined kernels
// (replay_mamba2.cu: the matrix, R ring entries of x and B, TMAX rows of C,
// the Δ and decay rows) and of its consumer scratch (struct M2Scratch).
func mamba2PipeBytes(P, N int, opt replay.Options, R int) (stage, scratch int) {
	tmax := max(1, opt.MaxDraft)
	mat := readMatrixBytes(opt, P*N)
	stage = (mat+15)/16*16 + 4*(R*P+R*N+tmax*N+2*ringScalars(R))
	scratch = 4 * (2*tmax*R + 3*tmax + tmax*P + 2 + 6)
	return stage, scratch
}

// Shape returns the layer shape.
func (c *Mamba2Cache) Shape() ssm.Mamba2Shape { return c.shape }

func (c *Mamba2Cache) checkInput(batch, T int, in Mamba2Input, y Buffer) error {
	if err := c.checkBatch(batch, in.Slots); err != nil {
		return err
	}
	H, P, N, G := c.shape.Heads, c.shape.HeadDim, c.shape.StateSize, c.shape.Groups
	rows := batch * T
	for _, e := range []error{
		needRows("x", in.X, 4*rows*H*P), needRows("B", in.B, 4*rows*G*N), needRows("C", in.C, 4*rows*G*N),
		need("dt", in.Dt, 4*rows*H), needRows("y", y, 4*rows*H*P),
	} {
		if e != nil {
			return e
		}
	}
	return nil
}

// mamba2SplitSource is the small-batch module of a Mamba-2 cache whose
// heads split into split heads of P/split rows (HSPLIT).
func mamba2SplitSource(d *Device, shape ssm.Mamba2Shape, opt replay.Options, split int, tn tuning) (splitModule, error) {
	sub := shape
	sub.Heads, sub.HeadDim = shape.Heads*split, shape.HeadDim/split
	_, _, _, defines := mamba2Module(d, sub, opt, tn)
	return splitModuleSource("replay_mamba2.cu", opt, sub.HeadDim, sub.StateSize, split, defines, tn)
}

// Step queues one standard decode step for the batch's slots on s: inputs
// are appended to each slot's ring, y [batch][H·P] receives the SSM output
// (before the gated norm), and a slot whose ring reaches the window flushes
// its checkpoint (and read copy), each slot at its own phase. Pending drafts
// of a previous Verify are dropped. The slots must be live and distinct (not
// checked: they are in device memory).
func (c *Mamba2Cache) Step(s *Stream, batch int, in Mamba2Input, y Buffer) error {
	if err := c.checkInput(batch, 1, in, y); err != nil {
		return fmt.Errorf("cuda: mamba2 cache: step: %w", err)
	}
	if c.opt.Mode == replay.Baseline {
		return c.launchBaseline(s, batch, 1, false, in, y)
	}
	x, bIn, err := c.ringInputs(s, batch, in)
	if err != nil {
		return fmt.Errorf("cuda: mamba2 cache: step: %w", err)
	}
	a := &c.args
	a.Reset()
	c.replayArgs(a)
	a.Ptr(c.hist)
	a.Ptr(in.Slots)
	a.Ptr(x)
	a.Ptr(bIn)
	a.Ptr(in.C)
	a.Ptr(in.Dt)
	a.Ptr(y)
	a.Ptr(c.a)
	a.Ptr(c.dtb)
	a.Ptr(c.dd)
	a.F32(in.DtMin)
	a.I32(int32(c.opt.Window))
	return c.launchReplayStep(s, a, batch, c.grid(batch))
}

func (c *Mamba2Cache) replayArgs(a *Args) {
	a.Ptr(c.state)
	a.Ptr(c.codes)
	a.Ptr(c.scales)
	a.Ptr(c.scale)
	a.Ptr(c.ringX)
	a.Ptr(c.ringB)
	a.Ptr(c.ringDt)
	a.Ptr(c.ringA)
}

func (c *Mamba2Cache) launchBaseline(s *Stream, batch, T int, verify bool, in Mamba2Input, y Buffer) error {
	a := &c.args
	a.Reset()
	a.Ptr(c.state)
	a.Ptr(c.cur)
	a.Ptr(in.Slots)
	a.Ptr(in.Counts)
	a.I32(int32(T))
	a.I32(int32(c.stateBuffers()))
	a.Ptr(in.X)
	a.Ptr(in.B)
	a.Ptr(in.C)
	a.Ptr(in.Dt)
	a.Ptr(y)
	a.Ptr(c.a)
	a.Ptr(c.dtb)
	a.Ptr(c.dd)
	a.F32(in.DtMin)
	a.Ptr(c.pending) // the kernel sets the pending drafts: no cursor kernel
	return c.launchBaselineKernel(s, batch, verify, a)
}

// Verify queues the outputs of T draft inputs per slot (rows [slot][T] of in
// and y; rows past a slot's count are not written) without writing any
// checkpoint (docs/DESIGN.md 2.3). Replay mode appends the drafts to the ring,
// folding the committed history first where history + 2·count would overflow
// it; baseline mode writes one state per draft. Commit accepts a prefix.
func (c *Mamba2Cache) Verify(s *Stream, batch, T int, in Mamba2Input, y Buffer) error {
	if err := c.checkDrafts(batch, T, in.Counts); err != nil {
		return fmt.Errorf("cuda: mamba2 cache: %w", err)
	}
	if err := c.checkInput(batch, T, in, y); err != nil {
		return fmt.Errorf("cuda: mamba2 cache: verify: %w", err)
	}
	if c.opt.Mode == replay.Baseline {
		return c.launchBaseline(s, batch, T, true, in, y)
	}
	x, bIn, err := c.ringInputs(s, batch*T, in)
	if err != nil {
		return fmt.Errorf("cuda: mamba2 cache: verify: %w", err)
	}
	a := &c.args
	a.Reset()
	c.replayArgs(a)
	a.Ptr(c.hist)
	a.Ptr(in.Slots)
	a.Ptr(in.Counts)
	a.I32(int32(T))
	a.Ptr(x)
	a.Ptr(bIn)
	a.Ptr(in.C)
	a.Ptr(in.Dt)
	a.Ptr(y)
	a.Ptr(c.a)
	a.Ptr(c.dtb)
	a.Ptr(c.dd)
	a.F32(in.DtMin)
	a.I32(int32(c.ring()))
	return c.launchReplayVerify(s, a, in.Slots, in.Counts, batch, T, c.grid(batch))
}

// StateBytes is what one full state transfer of one slot moves (H·P·N
// elements in the state format, with fp8 scales), and read what a non-flush
// step reads of one slot: the read copy if there is one, else the
// checkpoint.
func (c *Mamba2Cache) StateBytes() (state, read int) { return c.stateBytes() }

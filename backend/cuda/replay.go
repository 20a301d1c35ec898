package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// This file holds what the GPU state caches (Mamba2Cache, GDNCache) share:
// options, the compiled module, the host-side slot table and the device-side
// cursors. The caches mirror package replay's semantics and data layout on
// device buffers (docs/DESIGN.md 2, 2.3): every per-slot decision of a step (flush
// or not, early fold before a verify) is taken by the kernels from cursors in
// device memory, and small kernels move the cursors afterwards, so a decode
// step queues a fixed sequence of launches with no host round trip and can be
// captured in a CUDA graph. Commit reads the accepted counts from device
// memory for the same reason.

// ErrReplayOptions reports options or shapes the GPU caches do not support.
var ErrReplayOptions = errors.New("cuda: unsupported replay cache options")

// defaultSmallBatch is the largest batch whose replay step runs as one
// kernel (flush and non-flush slots together, cursors moved by its last
// block): at a few slots a step costs what its launches cost.
// REPLAYSSM_CUDA_SMALL_BATCH overrides it (0: never).
const defaultSmallBatch = 4

// tuning holds the kernel knobs that the REPLAYSSM_CUDA_* environment
// variables set for experiments (NOTES.md). The public constructors read
// them from the environment once; tests give each cache its own, so caches
// with different knobs can be built side by side in parallel tests.
type tuning struct {
	v4          bool     // REPLAYSSM_CUDA_KERNELS=v4: the v4 kernels, no pipeline
	v5          bool     // REPLAYSSM_CUDA_KERNELS=v5: the pipelined Mamba-2 step, not the group step (v6)
	groupNT     int      // REPLAYSSM_CUDA_GROUP_THREADS: the group kernels' block size (0: groupBlockSize)
	foldItems   bool     // the verify's early folds on a resident grid (default; REPLAYSSM_CUDA_FOLD_ITEMS=0: one block per (head, slot))
	foldStream  bool     // the GDN verify's early folds streamed where they apply (default; REPLAYSSM_CUDA_FOLD_STREAM=0: gdn_replay_fold_items)
	fsWarps     int      // REPLAYSSM_CUDA_FS_WARPS: gdn_fold_stream's warps a block (0: fsWarps)
	flWarps     int      // REPLAYSSM_CUDA_FL_WARPS: gdn_flush_stream's warps a block (0: tuning.flushWarps' choice)
	fsDB        string   // REPLAYSSM_CUDA_FS_DB: "1" or "0" forces gdn_fold_stream's two buffers on or off ("": on for 2-byte checkpoints)
	flPad       string   // REPLAYSSM_CUDA_FL_PAD: "1" or "0" forces gdn_flush_stream's padded shared rows on or off ("": 2-byte checkpoints beside 64-thread group steps)
	flushStream bool     // the GDN flush streamed where it can be (default; REPLAYSSM_CUDA_FLUSH_STREAM=0: gdn_replay_flush)
	pipeGroups  int      // REPLAYSSM_CUDA_PIPE_GROUPS: consumer groups per block (0: one per stage)
	pipeBlocks  int      // REPLAYSSM_CUDA_PIPE_BLOCKS: a bound on the persistent grids (pipelined, group and flush kernels; 0: none)
	defines     []string // REPLAYSSM_CUDA_DEFINES: extra NVRTC options (-D switches)
	smallBatch  int      // REPLAYSSM_CUDA_SMALL_BATCH: batches up to this take one kernel
	groupX      int      // REPLAYSSM_CUDA_GROUP_STAGED, and tests: at most this many ring entries (x, u) staged by the group step (0: no bound)
	groupAll    bool     // tests: the group verify at every batch (not only from 2 items per SM)
	folds       string   // REPLAYSSM_CUDA_FOLDS: "pipe" or "items" for every layer ("": the pipelined folds for Mamba-2, work_items for GDN)
	foldStages  int      // REPLAYSSM_CUDA_FOLD_STAGES: the pipelined folds' stages per block (0: planned)
	baseThreads int      // REPLAYSSM_CUDA_BASE_THREADS: a baseline-mode module's block size (0: replayThreads)
	baseStage   string   // REPLAYSSM_CUDA_BASE_STAGE: "1" or "0" forces the baseline step's whole-matrix stage on or off ("": planBaseStage's rule)
	overlap     string   // REPLAYSSM_CUDA_OVERLAP: "1" or "0" forces a step's flush beside its non-flush kernel on or off ("": planOverlap's rule)
	overlapGrid int      // REPLAYSSM_CUDA_OVERLAP_BLOCKS: a bound on the overlapped flush's grid (0: its resident grid)
	overlapLow  bool     // REPLAYSSM_CUDA_OVERLAP_PRIORITY=0: the side stream at the default priority, not the greatest
	overlapMain bool     // REPLAYSSM_CUDA_OVERLAP_ORDER=main: the main stream's kernel queued before the side stream's
	flQueue     string   // REPLAYSSM_CUDA_FL_QUEUE: "1" or "0" forces gdn_flush_stream's item counter on or off ("": on with overlapMain)
	flFew       string   // REPLAYSSM_CUDA_FL_FEW: gdn_flush_stream on flKeep blocks from batch 256 when its items are fewer than this many a block ("0": off; "": defaultFlFew for GDN)
	flKeep      int      // tests: FL_FEW's blocks (0: one an SM)
	flFewBatch  int      // tests: FL_FEW from this batch (0: 256)
	overlapVer  bool     // REPLAYSSM_CUDA_VERIFY_OVERLAP=1: a verify's early folds beside the group verify of the slots that do not fold
	wholeVerify bool     // REPLAYSSM_CUDA_SPLIT_VERIFY=0: small batches verify on whole heads (by default on the split ones where the step splits)
	verifyEarly string   // REPLAYSSM_CUDA_VERIFY_EARLY: "1" or "0" forces the small batches' early verify on or off ("": where its grid fits, earlyVerify.pick)
	headSplit   int      // REPLAYSSM_CUDA_HEAD_SPLIT: the small step's heads split in this many parts (1: whole; 0: planHeadSplit's choice)
	carveout    int      // REPLAYSSM_CUDA_CARVEOUT: the group and stream kernels' shared-memory carveout, percent (0: the driver's choice)
	m2TCFold    string   // REPLAYSSM_CUDA_M2_TC_FOLD: "1" or "0" forces the Mamba-2 pipelined folds' rank update on the tensor cores on or off where it applies ("": mamba2TCDefault)
	vfoldDots   string   // REPLAYSSM_CUDA_VFOLD_DOTS: "0" turns off a verify's early folds forming the folding slots' drafts' dots for the group verify (mamba2VerifyFoldDots: Mamba-2 fp32 by default); "1" asks for it where it applies (bf16 and fp16 Mamba-2 checkpoints, GDN's streamed folds: gdnVerifyFoldDots), an error where the Mamba-2 pipelined folds do not fit; "": the defaults
}

// envTuning reads the knobs through getenv (os.Getenv); unset or malformed
// values keep the defaults.
func envTuning(getenv func(string) string) tuning {
	tn := tuning{
		v4:          getenv("REPLAYSSM_CUDA_KERNELS") == "v4",
		v5:          getenv("REPLAYSSM_CUDA_KERNELS") == "v5",
		foldItems:   getenv("REPLAYSSM_CUDA_FOLD_ITEMS") != "0",
		foldStream:  getenv("REPLAYSSM_CUDA_FOLD_STREAM") != "0",
		flushStream: getenv("REPLAYSSM_CUDA_FLUSH_STREAM") != "0",
		smallBatch:  defaultSmallBatch,
	}
	if f := getenv("REPLAYSSM_CUDA_FOLDS"); f == "pipe" || f == "items" {
		tn.folds = f
	}
	if v, err := strconv.Atoi(getenv("REPLAYSSM_CUDA_FOLD_STAGES")); err == nil && v >= 2 && v <= 8 {
		tn.foldStages = v
	}
	if v, err := strconv.Atoi(getenv("REPLAYSSM_CUDA_BASE_THREADS")); err == nil && v >= 64 && v <= 512 && v%32 == 0 {
		tn.baseThreads = v
	}
	if v, err := strconv.Atoi(getenv("REPLAYSSM_CUDA_FS_WARPS")); err == nil && (v == 2 || v == 4 || v == 8) {
		tn.fsWarps = v
	}
	if v, err := strconv.Atoi(getenv("REPLAYSSM_CUDA_FL_WARPS")); err == nil && (v == 2 || v == 4 || v == 8) {
		tn.flWarps = v
	}
	if v := getenv("REPLAYSSM_CUDA_FS_DB"); v == "0" || v == "1" {
		tn.fsDB = v
	}
	if v := getenv("REPLAYSSM_CUDA_FL_PAD"); v == "0" || v == "1" {
		tn.flPad = v
	}
	if v := getenv("REPLAYSSM_CUDA_BASE_STAGE"); v == "0" || v == "1" {
		tn.baseStage = v
	}
	if v := getenv("REPLAYSSM_CUDA_OVERLAP"); v == "0" || v == "1" {
		tn.overlap = v
	}
	if n, err := strconv.Atoi(getenv("REPLAYSSM_CUDA_OVERLAP_BLOCKS")); err == nil && n >= 1 && n <= 1<<16 {
		tn.overlapGrid = n
	}
	tn.overlapVer = getenv("REPLAYSSM_CUDA_VERIFY_OVERLAP") == "1"
	tn.overlapLow = getenv("REPLAYSSM_CUDA_OVERLAP_PRIORITY") == "0"
	tn.overlapMain = getenv("REPLAYSSM_CUDA_OVERLAP_ORDER") == "main"
	if v := getenv("REPLAYSSM_CUDA_FL_QUEUE"); v == "0" || v == "1" {
		tn.flQueue = v
	}
	if v, err := strconv.Atoi(getenv("REPLAYSSM_CUDA_FL_FEW")); err == nil && v >= 0 && v <= 64 {
		tn.flFew = strconv.Itoa(v)
	}
	tn.wholeVerify = getenv("REPLAYSSM_CUDA_SPLIT_VERIFY") == "0"
	if v := getenv("REPLAYSSM_CUDA_M2_TC_FOLD"); v == "0" || v == "1" {
		tn.m2TCFold = v
	}
	if v := getenv("REPLAYSSM_CUDA_VFOLD_DOTS"); v == "0" || v == "1" {
		tn.vfoldDots = v
	}
	if v := getenv("REPLAYSSM_CUDA_VERIFY_EARLY"); v == "0" || v == "1" {
		tn.verifyEarly = v
	}
	if n, err := strconv.Atoi(getenv("REPLAYSSM_CUDA_HEAD_SPLIT")); err == nil && n >= 1 && n <= 64 {
		tn.headSplit = n
	}
	if n, err := strconv.Atoi(getenv("REPLAYSSM_CUDA_CARVEOUT")); err == nil && n >= 1 && n <= 100 {
		tn.carveout = n
	}
	if f := strings.Fields(getenv("REPLAYSSM_CUDA_DEFINES")); len(f) > 0 {
		tn.defines = f
	}
	if g, err := strconv.Atoi(getenv("REPLAYSSM_CUDA_PIPE_GROUPS")); err == nil && g >= 1 {
		tn.pipeGroups = g
	}
	if b, err := strconv.Atoi(getenv("REPLAYSSM_CUDA_PIPE_BLOCKS")); err == nil && b >= 1 {
		tn.pipeBlocks = b
	}
	if v, err := strconv.Atoi(getenv("REPLAYSSM_CUDA_GROUP_STAGED")); err == nil && v >= 1 {
		tn.groupX = v
	}
	if v, err := strconv.Atoi(getenv("REPLAYSSM_CUDA_GROUP_THREADS")); err == nil && v >= 64 && v <= 512 && v&(v-1) == 0 {
		tn.groupNT = v
	}
	if v, err := strconv.Atoi(getenv("REPLAYSSM_CUDA_SMALL_BATCH")); err == nil && v >= 0 {
		tn.smallBatch = v
	}
	return tn
}

// blocksPerSM is how many blocks of threads threads, with r's registers and
// static shared memory plus dyn bytes of dynamic shared memory, one SM of d
// holds at once (the occupancy calculator's arithmetic for sm_80-sm_90:
// 64K registers allocated per warp in units of 256, about 1 KiB of shared
// memory reserved per block, 2048 threads, or 1536 on sm_86 and sm_89).
func blocksPerSM(d *Device, r Resources, threads, dyn int) int {
	warps := (threads + 31) / 32
	regsPerWarp := (r.Registers*32 + 255) / 256 * 256
	byRegs := 65536 / max(1, regsPerWarp*warps)
	perSM := d.SharedMemoryPerMultiprocessor()
	if perSM <= 0 {
		perSM = d.MaxSharedMemoryPerBlock()
	}
	bySmem := perSM / (r.StaticSharedBytes + dyn + 1024)
	maxThreads := 2048
	if major, minor := d.ComputeCapability(); major == 8 && minor != 0 {
		maxThreads = 1536
	}
	return max(1, min(byRegs, bySmem, maxThreads/threads, 32))
}

// residentBlocks is how many blocks of f, threads threads each and no
// dynamic shared memory, d holds at once (blocksPerSM on every SM), at
// most bound where bound is positive (tests: each block takes many items
// in turn).
func residentBlocks(d *Device, f *Function, threads, bound int) (int, error) {
	r, err := f.Resources()
	if err != nil {
		return 0, err
	}
	blocks := bounded(d.Multiprocessors()*blocksPerSM(d, r, threads, 0), bound)
	return blocks, nil
}

// groupStep is the launch plan of a group step kernel (v6): persistent
// blocks that take the (group, batch row) items of a decode step's
// non-flush slots in turn, in place of the v4 or v5 kernels. A group is the
// heads that share the step's vectors: a Mamba-2 group's heads (C, the
// ring's B), a GDN key head's value heads (k, q, the ring's keys).
type groupStep struct {
	on       bool
	early    bool // Mamba-2: the step's per-token inputs by cp.async (GROUP_EARLY), planned with its tables
	threads  int
	groups   int    // groups per batch row
	blocks   int    // the grid: as many blocks as the GPU holds at once
	smem     int    // dynamic shared memory per block: the ring's per-head rows (x, u)
	carveout int    // the kernels' shared-memory carveout, percent (0: the driver's choice; tuning.carveout)
	why      string // why it is off
	fn       *Function

	// The group verify: its kernel, grid and dynamic shared memory (the
	// Mamba-2 one stages the ring's x rows like the step, the GDN one
	// nothing), and the kernel that folds the history of the slots that
	// fold early (before it, which then takes every slot).
	verifyOn     bool
	verify       *Function
	verifyBlocks int
	verifySmem   int
	verifyFold   *Function
	foldBlocks   int // > 0: verifyFold is *_replay_fold_items, on this grid
	// streamFold: the early folds are gdn_fold_stream (FOLD_STREAM,
	// planFoldStream), on streamBlocks blocks of streamThreads threads with
	// streamSmem bytes of dynamic shared memory each.
	streamFold    bool
	foldDots      bool // GDN: the streamed folds form the folding slots' drafts' dots for the group verify (VFOLD_DOTS, gdnVerifyFoldDots)
	stream        *Function
	streamThreads int
	streamBlocks  int
	streamSmem    int
	// streamFlush: the step's flush is gdn_flush_stream (FLUSH_STREAM), on
	// flushBlocks blocks of flushThreads threads with flushSmem bytes of
	// dynamic shared memory each (one buffer of strips); bound with the
	// group step (without it, gdn_replay_flush flushes).
	streamFlush  bool
	flushFn      *Function
	flushThreads int
	flushBlocks  int
	flushSmem    int
	// minItems is the fewest items (groups × batch rows) the group verify
	// takes: below it, at a few slots, the v5 or v4
	// kernels spread the heads over more blocks (batch 1, Nano: 8 items, the
	// group verify 31.5 us against v5's 16).
	minItems int
	// tc: the step's stream runs on the tensor cores (an nvfp4 read copy,
	// groupTC), whose sums are not the v4 kernels' bit for bit; verifyTC:
	// the group verify's (verifyTC).
	tc, verifyTC bool
}

// groupThreads is the group kernels' largest block size: eight warps
// stream 32 rows a pass. The kernels' register bound (GMINB) is 512/GNT
// blocks per SM, so every block size runs 512 threads per SM.
const groupThreads = 256

// groupBlockSize is the group kernels' block size for a group of rows
// state rows whose columns split over lanes lanes: about 32 passes per
// item (a power of two, 64 to 256 threads). Measured on the H200 (NOTES.md,
// session 6): Qwen3.5-4B's 256 rows ran best at 64 threads (non-flush nvfp4
// 191 -> 117 us against 256 threads), Qwen3.5-122B's 512 at 128, Nano's
// 960 at 256 (128: 4% slower). Fewer threads per item make more
// independent items per SM, whose prologues (cursor, ring, dots: a few
// dependent round trips) overlap the other items' streams; too few leave
// each item's serial epilogue long.
func groupBlockSize(rows, lanes int) int {
	want := rows * lanes / 32 * 3 / 4
	threads := 64
	for threads < want && threads < groupThreads {
		threads *= 2
	}
	return threads
}

// planGroup plans a group step over heads matrices of rows × cols per
// group whose static tables take tables bytes: on unless the mode, the
// knobs or the shape rule it out. Its dynamic shared memory holds the
// ring's per-head rows of the group (rows elements of elem bytes a head and
// entry, as the ring keeps them) for the L-2 entries a non-flush step
// reads, up to 64 KiB (three blocks per SM); the kernels read the rest from
// global memory.
func planGroup(opt replay.Options, tn tuning, heads, rows, cols, elem, tables int) groupStep {
	vec := 16 / max(1, readElemBytes(opt)) // elements per 16-byte chunk (nvfp4: per 8 bytes of codes)
	chunks := cols / vec
	rowBytes := elem * heads * rows
	threads := groupBlockSize(heads*rows, min(chunks, 8))
	if tn.groupNT > 0 {
		threads = tn.groupNT
	}
	// Smaller blocks run more per SM: the staged rows shrink with them.
	entries := max(0, min(opt.Window-2, (64<<10)*threads/groupThreads/rowBytes))
	if tn.groupX > 0 {
		entries = min(entries, tn.groupX)
	}
	g := groupStep{threads: threads, smem: entries * rowBytes, carveout: tn.carveout}
	switch {
	case opt.Mode != replay.Replay:
		g.why = "baseline mode"
	case tn.v4:
		g.why = "REPLAYSSM_CUDA_KERNELS=v4"
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

// useGroup lets a planned group step g take the decode step's non-flush
// slots from the pipelined kernel p and adds its define to the module's.
func useGroup(p pipeline, g groupStep, defines []string) (pipeline, groupStep, []string) {
	if g.on {
		p.stepOn = false
		defines = append(defines, fmt.Sprintf("-DGNT=%d", g.threads))
	}
	return p, g, defines
}

// tcMatrix names the tensor-core stream (GT_* in replay_common.cu) the
// matrices of a group kernel can take on compute capability cc, or ""
// where none does: rows a multiple of 16 and cols 64 or 128 (not while
// GROUP_NODOTS measures the stream alone), and "nvfp4" for an nvfp4 read
// copy (cc >= 89: e4m3 conversions), "bf16" for a bf16 matrix read as
// stored (a bf16 checkpoint or read copy, cc >= 80), "e4m3" for an fp8 one
// (cc >= 89). fp32 checkpoints have none: the verify's 3xTF32 stream lost
// to the FMA one (NOTES.md, sessions 22-23) and was removed.
func tcMatrix(cc, rows, cols int, opt replay.Options, tn tuning) string {
	if cols != 64 && cols != 128 || rows%16 != 0 ||
		slices.ContainsFunc(tn.defines, func(d string) bool {
			return strings.HasPrefix(d, "-DGROUP_NODOTS") && d != "-DGROUP_NODOTS=0"
		}) {
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

// tcDecide decides a tensor-core stream whose define is name for matrices
// of format (tcMatrix): where REPLAYSSM_CUDA_DEFINES sets name, on for
// -Dname=1 if the stream has the format (kinds), with no define to add;
// otherwise on, with -Dname=1, for the formats in byDefault.
func tcDecide(name, format string, kinds, byDefault []string, tn tuning) (bool, string) {
	if definesName(tn.defines, name) {
		return slices.Contains(kinds, format) && slices.Contains(tn.defines, "-D"+name+"=1"), ""
	}
	if !slices.Contains(byDefault, format) {
		return false, ""
	}
	return true, "-D" + name + "=1"
}

// groupTC reports whether a group step's stream runs on the tensor cores
// (GROUP_TC in replay_common.cu; tcMatrix's formats) and the
// define that asks for it: by default for nvfp4 and e4m3 matrices; for
// bf16 ones (slower, session 22) only where REPLAYSSM_CUDA_DEFINES asks
// (-DGROUP_TC=1), which also decides it for the others. Its sums are not
// the v4 kernels' order of operations. H200, batch 256, the non-flush
// step against the FMA stream in the same run: nvfp4 read copy (NOTES.md,
// session 21) Qwen3.5-4B 93.9 -> 64.4 us, 122B 170 -> 98.5, Nano 142 ->
// 112, Super 147 -> 119; fp8 read copy (session 23) 4B 81.7 -> 68.1, 122B
// 132 -> 115, Nano 124 -> 119, Super 131 -> 130.
func groupTC(cc, rows, cols int, opt replay.Options, tn tuning) (bool, string) {
	return tcDecide("GROUP_TC", tcMatrix(cc, rows, cols, opt, tn), []string{"nvfp4", "bf16", "e4m3"}, []string{"nvfp4", "e4m3"}, tn)
}

// useGroupTC sets g.tc and adds GROUP_TC's define where a planned group
// step takes the tensor cores (groupTC).
func useGroupTC(d *Device, g groupStep, rows, cols int, opt replay.Options, tn tuning, defines []string) (groupStep, []string) {
	if !g.on {
		return g, defines
	}
	major, minor := d.ComputeCapability()
	var def string
	if g.tc, def = groupTC(10*major+minor, rows, cols, opt, tn); def != "" {
		defines = append(defines, def)
	}
	return g, defines
}

// verifyTC reports whether a group verify's stream runs on the tensor
// cores (VERIFY_TC in replay_common.cu, gtw_*; tcMatrix's formats, where
// the verify's vectors, GDN's 2T or Mamba-2's T, fit B's eight columns)
// and the define that asks for it: by default for every format tcMatrix
// names (REPLAYSSM_CUDA_DEFINES' -DVERIFY_TC=0|1 decides instead). Its
// sums are not the v4 kernels' order of operations. H200, B=256, T=4,
// against the FMA stream in the same run: bf16 verify (session 22)
// Qwen3.5-4B 426 -> 286 us, 122B 615 -> 470, Nemotron-3 Super 442 -> 422,
// Nano 368 -> 365; fp8 read copy (session 23) 4B 594 -> 360, 122B 910 ->
// 619, Nano 553 -> 504, Super 436 -> 381.
func verifyTC(cc, rows, cols, vectors int, opt replay.Options, tn tuning) (bool, string) {
	format := ""
	if vectors <= 8 {
		format = tcMatrix(cc, rows, cols, opt, tn)
	}
	all := []string{"nvfp4", "bf16", "e4m3"}
	return tcDecide("VERIFY_TC", format, all, all, tn)
}

// useVerifyTC sets g.verifyTC and adds VERIFY_TC's define where a planned
// group verify takes the tensor cores (verifyTC) for vectors vectors.
func useVerifyTC(d *Device, g groupStep, rows, cols, vectors int, opt replay.Options, tn tuning, defines []string) (groupStep, []string) {
	if !g.verifyOn {
		return g, defines
	}
	major, minor := d.ComputeCapability()
	var def string
	if g.verifyTC, def = verifyTC(10*major+minor, rows, cols, vectors, opt, tn); def != "" {
		defines = append(defines, def)
	}
	return g, defines
}

// bindResident looks up a persistent kernel of threads threads a block,
// allows it smem bytes of dynamic shared memory and returns it with its
// resources and the blocks the GPU holds at once (bounded by bound when
// positive: tests take a few blocks, each taking many items). Where its
// registers or shared memory leave no block resident, blocks is 0 and
// nothing is allowed.
func (c *replayCommon) bindResident(name string, threads, smem, bound int) (*Function, Resources, int, error) {
	f, err := c.mod.Function(name)
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
	blocks := bounded(c.d.Multiprocessors()*blocksPerSM(c.d, r, threads, smem), bound)
	return f, r, blocks, nil
}

// bindGroup looks up the group step name (and, when verify is not empty,
// the group verify and the kernel of its early folds: kind +
// "_replay_fold_early", or "_replay_fold_items" on a resident grid with
// foldItems), allows their dynamic shared memory and sizes their grids from
// their occupancy.
func (c *replayCommon) bindGroup(name, verify string, foldItems bool, boundBlocks int) error {
	if !c.group.on {
		return nil
	}
	bind := func(name string, threads, smem int) (*Function, int, error) {
		f, r, blocks, err := c.bindResident(name, threads, smem, boundBlocks)
		if err == nil && c.group.carveout > 0 {
			err = f.SetSharedCarveout(c.group.carveout)
		}
		if err == nil && blocks == 0 {
			err = fmt.Errorf("%s: no block of %d threads fits an SM (%d registers, %d + %d bytes of shared memory)",
				name, threads, r.Registers, r.StaticSharedBytes, smem)
		}
		return f, blocks, err
	}
	var err error
	if c.group.fn, c.group.blocks, err = bind(name, c.group.threads, c.group.smem); err != nil {
		return err
	}
	if c.group.streamFlush {
		if c.group.flushFn, c.group.flushBlocks, err = bind(c.kind+"_flush_stream", c.group.flushThreads, c.group.flushSmem); err != nil {
			return err
		}
	}
	c.group.minItems = 2 * c.d.Multiprocessors()
	if verify == "" {
		return nil
	}
	if c.group.verify, c.group.verifyBlocks, err = bind(verify, c.group.threads, c.group.verifySmem); err != nil {
		return err
	}
	if !foldItems {
		c.group.verifyFold, err = c.mod.Function(c.kind + "_replay_fold_early")
		return err
	}
	if c.group.verifyFold, err = c.mod.Function(c.kind + "_replay_fold_items"); err != nil {
		return err
	}
	if c.group.foldBlocks, err = residentBlocks(c.d, c.group.verifyFold, c.threads, boundBlocks); err != nil {
		return err
	}
	if c.group.streamFold {
		c.group.stream, c.group.streamBlocks, err = bind(c.kind+"_fold_stream", c.group.streamThreads, c.group.streamSmem)
	}
	return err
}

// replayRingMax bounds window + max drafts: the ring's per-entry tables live
// in static shared memory (48 KiB per block).
const replayRingMax = 32

// replayCommon is the state both GPU caches share, and the operations that
// do not depend on the layer's math.
type replayCommon struct {
	kind     string // "mamba2" or "gdn", for errors
	d        *Device
	opt      replay.Options
	capacity int
	threads  int // per CTA
	heads    int // state matrices per slot and state buffer
	elems    int // elements per state matrix

	mod                          *Module
	cursorVerify, commitF        *Function
	nonflush, flush, verify      *Function
	stepSmall                    *Function   // flush and non-flush slots in one kernel
	verifySmall                  *Function   // a small batch's verify and cursor move in one kernel (Mamba-2)
	early                        earlyVerify // a small batch's verify (Mamba-2's one kernel, GDN's v4) with the early start
	flushBlocks                  int         // the flush kernel's grid: the blocks the GPU holds at once
	baselineStep, baselineVerify *Function
	pipe                         pipeline
	group                        groupStep
	folds                        foldPipe
	smallBatch                   int       // batches up to this run stepSmall
	base                         baseStage // the baseline step's stage
	overlap                      overlap   // the flush beside the non-flush kernel, the early folds beside the verify
	small                        headSplit // the small step of split heads, where built
	sideArgs                     Args      // the side stream's verify launch (overlap.verify)

	// state holds the checkpoint (replay) or the state buffers (baseline):
	// [slot][buffer][head] matrices in the state format, then for fp8 one
	// float32 scale per matrix in the same order.
	state Buffer
	// The read copy: codes holds [slot][head] matrices (nvfp4 codes, or bf16
	// / fp8 elements), scales the nvfp4 block scales, scale one float32 per
	// matrix (the nvfp4 global scale or the fp8 scale).
	codes, scales, scale Buffer

	// Device cursors, one int32 per slot: hist is the number of committed
	// ring entries since the checkpoint (replay), cur the current state
	// buffer (baseline), pending the drafts of the last verify; errFlag is
	// set by commit when a count was out of range; done counts the blocks
	// of a step's last kernel that have finished (step_done).
	hist, cur, pending, errFlag, done Buffer

	live []bool
	free []replay.Slot

	args Args // the launch being built; a cache is driven by one goroutine
	bufs []Buffer
}

// pipeGroupWarps is the number of consumer warps in one group of a
// pipelined kernel's block; the block has one group per stage plus a
// producer warp.
const pipeGroupWarps = 4

// pipeline is the launch plan of the pipelined (v5) replay kernels: the
// non-flush step and the verify as persistent blocks that stream each
// (batch row, head) item's state into shared-memory stages with bulk
// copies (sm_90+). Without it (older GPUs, shapes whose rows are not
// 16-byte multiples, or REPLAYSSM_CUDA_KERNELS=v4) the v4 kernels run.
type pipeline struct {
	on             bool
	stepOn         bool // the decode step runs the pipelined kernel (else only the verify does)
	warps          int  // consumer warps per block
	stages         int  // shared-memory stages per block
	smem           int  // dynamic shared memory per block, bytes
	blocksPerSM    int
	sms            int
	maxBlocks      int // REPLAYSSM_CUDA_PIPE_BLOCKS: a test bound on the grid (0: none)
	step, verify   *Function
	verifyFold     *Function // the legacy verify restricted to early-fold slots
	stageBytes     int
	scratchBytes   int
	reasonDisabled string
}

// planPipeline sizes the pipelined kernels of a layer whose state matrices
// are rows × cols, for a stage of stageBytes (bulk copy destinations) and
// scratchBytes (the consumers' per-stage scalars), and returns the -D
// defines that compile them (none when it is off). Bulk copies move 16-byte
// multiples: rows and cols must be multiples of 4, and an nvfp4 read copy's
// scale rows (rows·cols/16 bytes) multiples of 16.
func planPipeline(d *Device, stageBytes, scratchBytes int, opt replay.Options, rows, cols int, tn tuning) (pipeline, []string) {
	shapeOK := rows%4 == 0 && cols%4 == 0 && (opt.ReadCopy != numeric.NVFP4 || rows*cols%256 == 0)
	maxStages := pipeStages(opt)
	round := func(v, m int) int { return (v + m - 1) / m * m }
	p := pipeline{stageBytes: round(stageBytes, 128), scratchBytes: round(scratchBytes, 128), sms: d.Multiprocessors()}
	major, _ := d.ComputeCapability()
	switch {
	case tn.v4:
		p.reasonDisabled = "REPLAYSSM_CUDA_KERNELS=v4"
	case major < 9:
		p.reasonDisabled = fmt.Sprintf("compute capability %d < 9 (no bulk copies)", major)
	case !shapeOK:
		p.reasonDisabled = "state rows, ring entries or nvfp4 scale rows are not 16-byte multiples"
	case opt.Ring != numeric.F32:
		// Widening a bf16 ring's rows in the producer spilled at these
		// kernels' register bound (replay_mamba2.cu, NSTAGE).
		p.reasonDisabled = "a bf16 ring (the pipelined step and verify copy fp32 ring rows)"
	}
	if p.reasonDisabled != "" {
		return p, nil
	}
	smem := func(stages int) int { return stages*(p.stageBytes+p.scratchBytes) + 16*stages + 64 }
	// As many stages as fit, up to maxStages, one consumer group per stage: a
	// group's per-item latency (reductions, float64 decay products, barriers)
	// is what limits these kernels, so more groups in flight beat deeper
	// per-group prefetch (measured on the H200, NOTES.md v5).
	for st := maxStages; st >= 2; st-- {
		if smem(st) <= d.MaxSharedMemoryPerBlock() {
			p.stages = st
			break
		}
	}
	if p.stages == 0 {
		p.reasonDisabled = fmt.Sprintf("two stages of %d bytes exceed the %d bytes of shared memory per block", p.stageBytes+p.scratchBytes, d.MaxSharedMemoryPerBlock())
		return p, nil
	}
	// tn.pipeGroups overrides the group count if it divides the stages (a
	// group then owns several stages in turn).
	groups := p.stages
	if g := tn.pipeGroups; g >= 1 && p.stages%g == 0 {
		groups = g
	}
	p.on, p.stepOn = true, true
	p.warps = pipeGroupWarps * groups
	p.smem = smem(p.stages)
	perSM := d.SharedMemoryPerMultiprocessor()
	if perSM <= 0 {
		perSM = d.MaxSharedMemoryPerBlock()
	}
	// About 1 KiB per resident block is reserved by the system (sm_8x/9x).
	p.blocksPerSM = min(8, 2048/(32*(p.warps+1)), max(1, perSM/(p.smem+1024)))
	// Tests bound the grid so that each block streams many items through
	// its stages (every stage and phase of the mbarrier protocol in use).
	p.maxBlocks = tn.pipeBlocks
	return p, []string{
		fmt.Sprintf("-DNCW=%d", p.warps), fmt.Sprintf("-DGW=%d", pipeGroupWarps), fmt.Sprintf("-DNSTAGE=%d", p.stages),
		fmt.Sprintf("-DSTAGE_BYTES=%d", p.stageBytes), fmt.Sprintf("-DSCR_BYTES=%d", p.scratchBytes),
		fmt.Sprintf("-DPIPE_MINB=%d", p.blocksPerSM),
	}
}

// replayPipeline plans the pipelined kernels of a replay-mode cache (the
// baseline has none) and appends their defines to the layer's.
func replayPipeline(d *Device, opt replay.Options, stage, scratch, rows, cols int, tn tuning, defines []string) (pipeline, []string) {
	if opt.Mode != replay.Replay {
		return pipeline{}, defines
	}
	p, pd := planPipeline(d, stage, scratch, opt, rows, cols, tn)
	return p, append(defines, pd...)
}

// grid is the pipelined kernels' grid for items (batch row, head) pairs.
func (p *pipeline) grid(items int) [3]uint32 {
	blocks := min(items, p.sms*p.blocksPerSM)
	if p.maxBlocks > 0 {
		blocks = min(blocks, p.maxBlocks)
	}
	return [3]uint32{uint32(max(1, blocks)), 1, 1}
}

func (p *pipeline) block() [3]uint32 { return [3]uint32{uint32(32 * (p.warps + 1)), 1, 1} }

// bind looks up the pipelined kernels and allows their shared memory; an
// empty verify name leaves the verify on the v4 kernel.
func (p *pipeline) bind(m *Module, step, verify, verifyFold string) error {
	if !p.on {
		return nil
	}
	var err error
	if p.step, err = m.Function(step); err != nil {
		return err
	}
	if err := p.step.SetMaxDynamicSharedMemory(p.smem); err != nil {
		return err
	}
	if verify == "" { // the layer has no pipelined verify yet
		return nil
	}
	if p.verify, err = m.Function(verify); err != nil {
		return err
	}
	if p.verifyFold, err = m.Function(verifyFold); err != nil {
		return err
	}
	return p.verify.SetMaxDynamicSharedMemory(p.smem)
}

// launchReplayStep queues a replay decode step whose arguments a holds up
// to the window (grid: the v4 kernels' grid): the flush kernel, then the
// non-flush one (pipelined where planned, else v4), each taking its own
// slots and sharing one Args (a launch copies it); the non-flush kernel's
// last block moves the cursors. Up to smallBatch slots, where a step costs
// what its launches cost, one kernel does it all.
func (c *replayCommon) launchReplayStep(s *Stream, a *Args, batch int, grid [3]uint32) error {
	a.Ptr(c.pending)
	a.Ptr(c.done)
	a.I32(int32(batch))
	block := [3]uint32{uint32(c.threads), 1, 1}
	if batch <= c.smallBatch {
		if h := &c.small; h.takes(batch) {
			return c.d.Launch(h.step, [3]uint32{uint32(c.heads * h.split), uint32(batch), 1}, [3]uint32{uint32(h.threads), 1, 1}, 0, s, a)
		}
		return c.d.Launch(c.stepSmall, grid, block, 0, s, a)
	}
	if c.overlap.on {
		return c.launchOverlapped(s, a, batch, grid)
	}
	if err := c.launchFlush(s, a, batch, 0); err != nil {
		return err
	}
	return c.launchNonflush(s, a, batch, grid)
}

// launchFlush queues a replay decode step's flush kernel on at most bound
// blocks where bound is positive: the pipelined fold where the layer folds
// with it, else the items kernel on its resident grid.
func (c *replayCommon) launchFlush(s *Stream, a *Args, batch, bound int) error {
	if c.folds.on {
		return c.launchFolds(s, c.folds.flush, a, batch, bound)
	}
	if g := &c.group; g.flushFn != nil {
		return c.launchStream(s, g.flushFn, g.flushBlocks, g.flushThreads, g.flushSmem, bound, a)
	}
	blocks := bounded(min(batch*c.heads, c.flushBlocks), bound)
	return c.d.Launch(c.flush, [3]uint32{uint32(blocks), 1, 1}, [3]uint32{uint32(c.threads), 1, 1}, 0, s, a)
}

// launchStream queues a GDN stream kernel fn (gdn_fold_stream,
// gdn_flush_stream) on its resident grid of blocks, at most bound where
// bound is positive, in blocks of threads with smem bytes of dynamic
// shared memory.
func (c *replayCommon) launchStream(s *Stream, fn *Function, blocks, threads, smem, bound int, a *Args) error {
	grid := [3]uint32{uint32(bounded(blocks, bound)), 1, 1}
	return c.d.Launch(fn, grid, [3]uint32{uint32(threads), 1, 1}, uint32(smem), s, a)
}

// bounded is n blocks, at most bound where bound is positive (a grid
// bounded for tests or for a kernel beside another).
func bounded(n, bound int) int {
	if bound > 0 {
		return min(n, bound)
	}
	return n
}

// launchNonflush queues a replay decode step's non-flush kernel (group,
// pipelined or v4), whose last block moves the cursors.
func (c *replayCommon) launchNonflush(s *Stream, a *Args, batch int, grid [3]uint32) error {
	if c.group.fn != nil {
		blocks := min(c.group.groups*batch, c.group.blocks)
		return c.d.Launch(c.group.fn, [3]uint32{uint32(blocks), 1, 1}, [3]uint32{uint32(c.group.threads), 1, 1}, uint32(c.group.smem), s, a)
	}
	if !c.pipe.on || !c.pipe.stepOn {
		return c.d.Launch(c.nonflush, grid, [3]uint32{uint32(c.threads), 1, 1}, 0, s, a)
	}
	return c.d.Launch(c.pipe.step, c.pipe.grid(batch*c.heads), c.pipe.block(), uint32(c.pipe.smem), s, a)
}

// planModule plans what init adds to a layer's module (kind "mamba2" or
// "gdn", rows × cols matrices, threads-thread blocks): the baseline step's
// stage and the overlapped flush, with their defines.
func planModule(d *Device, kind string, opt replay.Options, rows, cols, threads int, tn tuning) (baseStage, overlap, []string) {
	b, bd := planBaseStage(d, opt, rows, cols, threads, baseStaged(kind, opt), tn)
	o, od := planOverlap(kind, opt, tn)
	return b, o, append(bd, od...)
}

// grid is the one-block-per-matrix kernels' grid: a block per head and
// batch row.
func (c *replayCommon) grid(batch int) [3]uint32 {
	return [3]uint32{uint32(c.heads), uint32(batch), 1}
}

// launchBaselineKernel queues the baseline step (or, with verify, the
// per-draft verify) whose arguments a holds, one block per head and batch
// row, the step with its stage's shared memory where planned.
func (c *replayCommon) launchBaselineKernel(s *Stream, batch int, verify bool, a *Args) error {
	fn, smem := c.baselineStep, 0
	if verify {
		fn = c.baselineVerify
	} else if c.base.on {
		smem = c.base.smem
	}
	return c.d.Launch(fn, c.grid(batch), [3]uint32{uint32(c.threads), 1, 1}, uint32(smem), s, a)
}

// groupVerify reports whether a verify of batch slots takes the group
// verify (from minItems items), after the early folds.
func (c *replayCommon) groupVerify(batch int) bool {
	return c.group.verify != nil && c.group.groups*batch >= c.group.minItems
}

// launchReplayVerify queues a replay verify whose arguments a holds: the
// early folds and the group verify of every slot (from minItems items), the
// v4 kernel, or, where a pipelined verify is planned, the v4 kernel for the
// slots that fold their history early and the pipelined one for the rest;
// then the cursor move.
func (c *replayCommon) launchReplayVerify(s *Stream, a *Args, slots, counts Buffer, batch, T int, grid [3]uint32) error {
	block := [3]uint32{uint32(c.threads), 1, 1}
	if v := c.smallVerify(batch); v.fn != nil {
		return c.launchSmallVerify(s, a, v.fn, v.grid, v.block, slots, counts, batch, T)
	}
	if g := &c.group; c.groupVerify(batch) {
		// The early folds go on fs: the verify's stream, or with
		// overlap.verify the side stream, forked from it, on at most
		// o.blocks blocks where that is set (REPLAYSSM_CUDA_OVERLAP_BLOCKS).
		fs, o, bound := s, &c.overlap, 0
		if o.verify {
			bound = o.blocks
			if err := o.branch(s); err != nil {
				return err
			}
			fs = o.side
		}
		// The group verify takes the arguments and the batch (and with
		// overlap.verify its part); so do the pipelined and the
		// resident-grid folds, the one-block-per-item fold the arguments.
		if !c.folds.on && g.foldBlocks == 0 {
			if err := c.d.Launch(g.verifyFold, grid, block, 0, fs, a); err != nil {
				return err
			}
		}
		a.I32(int32(batch))
		switch {
		case c.folds.on:
			if err := c.launchFolds(fs, c.folds.fold, a, batch, bound); err != nil {
				return err
			}
		case g.stream != nil:
			if err := c.launchStream(fs, g.stream, g.streamBlocks, g.streamThreads, g.streamSmem, bound, a); err != nil {
				return err
			}
		case g.foldBlocks > 0:
			blocks := bounded(min(c.heads*batch, g.foldBlocks), bound)
			fold := [3]uint32{uint32(blocks), 1, 1}
			if err := c.d.Launch(g.verifyFold, fold, block, 0, fs, a); err != nil {
				return err
			}
		}
		blocks := min(g.groups*batch, g.verifyBlocks)
		verify := func(st *Stream, args *Args) error {
			return c.d.Launch(g.verify, [3]uint32{uint32(blocks), 1, 1}, [3]uint32{uint32(g.threads), 1, 1}, uint32(g.verifySmem), st, args)
		}
		if o.verify {
			// Part 2 (the slots that fold) after their folds on the side
			// stream, part 1 (the others) here, beside them.
			c.sideArgs = *a
			c.sideArgs.I32(2)
			if err := verify(o.side, &c.sideArgs); err != nil {
				return err
			}
			a.I32(1)
			if err := verify(s, a); err != nil {
				return err
			}
			if err := o.merge(s); err != nil {
				return err
			}
		} else if err := verify(s, a); err != nil {
			return err
		}
		return c.launchCursorVerify(s, slots, counts, batch, T)
	}
	if !c.pipe.on || c.pipe.verify == nil {
		if err := c.d.Launch(c.v4Verify(batch), grid, block, 0, s, a); err != nil {
			return err
		}
		return c.launchCursorVerify(s, slots, counts, batch, T)
	}
	if err := c.d.Launch(c.pipe.verifyFold, grid, block, 0, s, a); err != nil {
		return err
	}
	a.I32(int32(batch))
	if err := c.d.Launch(c.pipe.verify, c.pipe.grid(batch*c.heads), c.pipe.block(), uint32(c.pipe.smem), s, a); err != nil {
		return err
	}
	return c.launchCursorVerify(s, slots, counts, batch, T)
}

// modeKernel is a kernel that every module of a cache's mode holds (beside
// commit and cursor_verify), and the field bindKernels keeps it in.
type modeKernel struct {
	dst  **Function
	name string
}

// modeKernels are the kernels of the cache's mode that bindKernels looks
// up: a baseline cache's step and verify, or a replay cache's v4 kernels,
// named kind + "_replay_nonflush" and so on. A module holds its mode's
// kernels alone (replayModuleOptions' CACHE_MODE).
func (c *replayCommon) modeKernels() []modeKernel {
	if c.opt.Mode == replay.Baseline {
		return []modeKernel{{&c.baselineStep, c.kind + "_baseline_step"}, {&c.baselineVerify, c.kind + "_baseline_verify"}}
	}
	return []modeKernel{
		{&c.nonflush, c.kind + "_replay_nonflush"}, {&c.flush, c.kind + "_replay_flush"}, {&c.verify, c.kind + "_replay_verify"},
		{&c.stepSmall, c.kind + "_replay_step_small"},
	}
}

// bindKernels looks up the kernels of the cache's mode (modeKernels); for
// a replay cache also its pipelined ones (verify "" when it has none), and
// sizes the flush kernel's grid (bounded by boundBlocks when positive, for
// tests).
func (c *replayCommon) bindKernels(pipeStep, pipeVerify, pipeVerifyFold string, boundBlocks int) error {
	for _, k := range c.modeKernels() {
		var err error
		if *k.dst, err = c.mod.Function(k.name); err != nil {
			return err
		}
	}
	if c.opt.Mode == replay.Baseline {
		if c.base.on {
			return c.baselineStep.SetMaxDynamicSharedMemory(c.base.smem)
		}
		return nil
	}
	var err error
	if c.flushBlocks, err = residentBlocks(c.d, c.flush, c.threads, boundBlocks); err != nil {
		return err
	}
	return c.pipe.bind(c.mod, pipeStep, pipeVerify, pipeVerifyFold)
}

// StepKernel names the kernel that takes the non-flush slots of a decode
// step of batch slots: "small" (up to the small batch, one kernel takes
// every slot), "v6" (one block per group of heads and batch row), "v5"
// (pipelined) or "v4" (one block per head and batch row). In baseline mode
// it names the baseline step's kernel, "v4" (one block per head and batch
// row) or "staged" (the same, its matrix staged whole: planBaseStage).
func (c *replayCommon) StepKernel(batch int) string {
	switch {
	case c.opt.Mode == replay.Baseline && c.base.on:
		return "staged"
	case c.opt.Mode == replay.Baseline:
		return "v4"
	case batch <= c.smallBatch && c.small.takes(batch):
		return "small (heads split)"
	case batch <= c.smallBatch:
		return "small"
	case c.group.fn != nil:
		return "v6"
	case c.pipe.on && c.pipe.stepOn:
		return "v5"
	}
	return "v4"
}

// smallLaunch is a small batch's verify in one kernel (and, for GDN, the
// cursor kernel): fn nil where the batch takes the other kernels.
type smallLaunch struct {
	fn          *Function
	grid, block [3]uint32
	name        string // VerifyKernel's
}

// smallVerify plans a verify of batch slots up to the small batch: on split
// heads where the split module takes the batch, else Mamba-2's one-kernel
// verify on whole heads; each its early start where the grid fits
// (earlyVerify.pick).
func (c *replayCommon) smallVerify(batch int) smallLaunch {
	if batch > c.smallBatch {
		return smallLaunch{}
	}
	if h := &c.small; h.verify != nil && h.takes(batch) {
		blocks := c.heads * h.split
		fn := h.early.pick(h.verify, blocks*batch)
		return smallLaunch{fn, [3]uint32{uint32(blocks), uint32(batch), 1}, [3]uint32{uint32(h.threads), 1, 1},
			earlyName("small (heads split)", fn, h.verify)}
	}
	if c.verifySmall != nil {
		// One kernel, as for the step (Mamba-2: its small batches took the
		// early folds, the pipelined verify and the cursor kernel).
		fn := c.early.pick(c.verifySmall, c.heads*batch)
		return smallLaunch{fn, c.grid(batch), [3]uint32{uint32(c.threads), 1, 1}, earlyName("small", fn, c.verifySmall)}
	}
	return smallLaunch{}
}

// v4Verify is the v4 verify kernel for batch slots: its early start up to
// the small batch where the grid fits (GDN's small batches on whole heads).
func (c *replayCommon) v4Verify(batch int) *Function {
	if batch <= c.smallBatch {
		return c.early.pick(c.verify, c.heads*batch)
	}
	return c.verify
}

// earlyName is name, marked where fn is the early verify in place of late.
func earlyName(name string, fn, late *Function) string {
	if fn != late {
		return name + ", early"
	}
	return name
}

// VerifyKernel names the kernel that takes a verify of batch slots:
// "small" (Mamba-2, up to the small batch: one kernel verifies every slot
// and moves the cursors), "v6" (the group verify, every slot, after the early
// folds), "v5" (pipelined, the slots with no early fold) or "v4"; "early"
// where the small batch's verify starts early (earlyVerify).
func (c *replayCommon) VerifyKernel(batch int) string {
	if v := c.smallVerify(batch); v.fn != nil {
		return v.name
	}
	switch {
	case c.groupVerify(batch):
		return "v6"
	case c.pipe.on && c.pipe.verify != nil:
		return "v5"
	}
	return earlyName("v4", c.v4Verify(batch), c.verify)
}

// Pipelined reports whether the non-flush step and the verify run the
// pipelined (v5) kernels, and if not, why.
func (c *replayCommon) Pipelined() (step, verify bool, why string) {
	return c.pipe.on && c.pipe.stepOn, c.pipe.on && c.pipe.verify != nil, c.pipe.reasonDisabled
}

// pipeStages bounds the stages (and consumer groups) of one block: six for
// state reads; four for an nvfp4 read copy, whose small stages then fit
// two blocks per SM (eight groups), which measured faster than six groups
// in one block (NOTES.md v5).
func pipeStages(opt replay.Options) int {
	if readElemBytes(opt) < 2 {
		return 4
	}
	return 6
}

// elemBytes is the size of one element of a state or read-copy format
// (nvfp4: 4.5 bits, rounded down to 0; its matrices are sized apart).
func elemBytes(f numeric.Format) int { return int(f.BitsPerElement()) / 8 }

// readFormat is the format a non-flush step reads: the read copy's, else
// the checkpoint's.
func readFormat(opt replay.Options) numeric.Format {
	if opt.ReadCopy != numeric.F32 {
		return opt.ReadCopy
	}
	return opt.State
}

// readElemBytes is what a non-flush step reads per state element, in bytes
// rounded down.
func readElemBytes(opt replay.Options) int { return elemBytes(readFormat(opt)) }

// codeBytes is the size of a matrix's elements in format f, without any
// scale (nvfp4: the packed codes only).
func codeBytes(f numeric.Format, elems int) int {
	if f == numeric.NVFP4 {
		return elems / 2
	}
	return elems * elemBytes(f)
}

// readMatrixBytes is the size of what the pipelined kernels move into a
// stage for one matrix: its elements in the read format with nvfp4's block
// scales (BitsPerElement counts them); the per-matrix scale travels apart.
func readMatrixBytes(opt replay.Options, elems int) int {
	return int(readFormat(opt).BitsPerElement()*float64(elems)) / 8
}

// matrixBytes is the size of one matrix in format f as the kernels store
// it: elements, nvfp4 block scales, and the per-matrix float32 scale of fp8
// and nvfp4.
func matrixBytes(f numeric.Format, elems int) int {
	n := int(f.BitsPerElement()*float64(elems)) / 8
	if f == numeric.E4M3 || f == numeric.NVFP4 {
		n += 4
	}
	return n
}

// replayDefaults fills in the defaults of package replay and checks what the
// GPU kernels support.
func replayDefaults(opt replay.Options) (replay.Options, error) {
	if opt.Window == 0 {
		opt.Window = replay.DefaultWindow
	}
	if opt.Window < 1 || opt.MaxDraft < 0 || opt.MaxDraft > replay.MaxDraftLimit {
		return opt, fmt.Errorf("%w: window %d, max draft %d", ErrReplayOptions, opt.Window, opt.MaxDraft)
	}
	if opt.Window+opt.MaxDraft > replayRingMax {
		return opt, fmt.Errorf("%w: window %d + max draft %d exceeds %d ring entries", ErrReplayOptions, opt.Window, opt.MaxDraft, replayRingMax)
	}
	switch opt.State {
	case numeric.F32, numeric.F16, numeric.BF16, numeric.E4M3:
	default:
		return opt, fmt.Errorf("%w: state format %v (want fp32, fp16, bf16 or fp8-e4m3)", ErrReplayOptions, opt.State)
	}
	switch opt.ReadCopy {
	case numeric.F32, numeric.BF16, numeric.E4M3, numeric.NVFP4:
	default:
		return opt, fmt.Errorf("%w: read copy %v (want none, bf16, fp8-e4m3 or nvfp4)", ErrReplayOptions, opt.ReadCopy)
	}
	if opt.ReadCopy != numeric.F32 && opt.Mode != replay.Replay {
		return opt, fmt.Errorf("%w: a read copy needs replay mode", ErrReplayOptions)
	}
	if opt.Stochastic {
		return opt, fmt.Errorf("%w: stochastic rounding", ErrReplayOptions)
	}
	switch {
	case opt.Ring != numeric.F32 && opt.Ring != numeric.BF16:
		return opt, fmt.Errorf("%w: a %v ring (want fp32 or bf16)", ErrReplayOptions, opt.Ring)
	case opt.Ring != numeric.F32 && opt.Mode != replay.Replay:
		return opt, fmt.Errorf("%w: a %v ring needs replay mode (a baseline keeps no ring)", ErrReplayOptions, opt.Ring)
	}
	return opt, nil
}

// checkMatrix checks that rows x cols matrices map onto the kernels' lanes:
// every row splits into 4-, 8- and 16-element chunks shared by 1, 2, 4 or a
// multiple of 8 lanes.
func checkMatrix(rows, cols, heads int) error {
	if cols%16 != 0 || rows < 1 {
		return fmt.Errorf("%w: state rows of %d elements (want a multiple of 16)", ErrReplayOptions, cols)
	}
	for _, vec := range []int{4, 8, 16} {
		ch := cols / vec
		if (ch < 8 && ch&(ch-1) != 0) || (ch >= 8 && ch%8 != 0) {
			return fmt.Errorf("%w: state rows of %d elements", ErrReplayOptions, cols)
		}
	}
	if heads*rows*cols%64 != 0 {
		return fmt.Errorf("%w: %d state elements per slot (want a multiple of 64)", ErrReplayOptions, heads*rows*cols)
	}
	return nil
}

// replayThreads picks the CTA size: 4 to 8 warps, preferring a count whose
// rows per pass divide the matrix rows, so no warp idles in the last pass.
func replayThreads(rows, cols int, state numeric.Format) int {
	vec := 16 / elemBytes(state)
	lanes := min(8, cols/vec)
	rpw := 32 / lanes
	for w := 8; w >= 4; w-- {
		if rows%(w*rpw) == 0 {
			return 32 * w
		}
	}
	if rows <= 4*rpw {
		return 128
	}
	return 256
}

// moduleThreads is the block size of a module's one-block-per-matrix
// kernels: replayThreads, but in baseline mode with a 2-byte state half of
// it (down to 128) while a block would stream fewer than four passes of its
// matrix (tn.baseThreads where set). The streaming baselines pay a
// prologue per block (the token's vectors, the decay in float64) before
// their passes. Measured on the H200 (B=256, session 11, against
// replayThreads in the same run): Super bf16 (two passes at 256 threads)
// 321 -> 283 us, 78% -> 89% of copy, its per-draft verify 1020 -> 1034;
// 128 threads everywhere took fp32 states 1-2% slower (Nano 499 -> 511)
// and the GDN bf16 per-draft verify 621 -> 934 us (Qwen3.5-4B), so the rule
// stops at the shapes with too few passes (of the targets, Super).
func moduleThreads(opt replay.Options, rows, cols int, tn tuning) int {
	threads := replayThreads(rows, cols, opt.State)
	if opt.Mode != replay.Baseline {
		return threads
	}
	if tn.baseThreads > 0 {
		return tn.baseThreads
	}
	if elemBytes(opt.State) != 2 {
		return threads
	}
	rpw := 32 / min(8, cols/8) // rows per warp: 8 bf16 or fp16 elements a lane
	for threads > 128 && rows < 4*(threads/32)*rpw {
		threads /= 2
	}
	return threads
}

// baseStage is the plan of a baseline-mode module's whole-matrix stage
// (BASE_BULK, replay_common.cu): the in-place step kernel copies its matrix
// into smem bytes of dynamic shared memory with one bulk copy before its
// prologue and streams its passes from there.
type baseStage struct {
	on   bool
	smem int
	why  string // why the stage is off
}

// planBaseStage plans the stage of a baseline module of rows × cols
// matrices and threads-thread blocks and returns its defines: on where the
// layer asks for it by default (byDefault) or tn forces it, for element
// states other than fp8 (whose step holds the matrix in registers for its
// scale) on GPUs with bulk copies (sm_90+), where a matrix fits a block's
// shared memory beside the step's tables. BASE_MINB, the blocks per SM the
// stage allows (at least 40 registers a thread), bounds the kernel's
// registers.
//
// Measured on the H200 (B=256, session 12, against the unstaged step in the
// same run; the staged modules also store with STORE_V4): Gated DeltaNet
// fp32 faster (Qwen3.5-4B 283 -> 278 us, 122B 555 -> 547; their per-draft
// verifies, which STORE_V4 alone changes, 806 -> 752 and 1599 -> 1491),
// everything else slower (bf16 Nano 261 -> 280, Super 279 -> 296,
// Qwen3.5-4B 154 -> 157; fp32 Nano 499 -> 512, Super 539 -> 549): a
// block's compute waits for its whole matrix, and the shared memory that
// holds it bounds the blocks per SM. The layers ask for it for GDN fp32.
func planBaseStage(d *Device, opt replay.Options, rows, cols, threads int, byDefault bool, tn tuning) (baseStage, []string) {
	bytes := rows * cols * elemBytes(opt.State)
	tmax := max(1, opt.MaxDraft)
	// The step's static tables (replay_gdn.cu gdn_baseline, replay_mamba2.cu
	// mamba2_baseline): two padded vectors a draft, a row's sums a draft
	// and the staged row vector, within a few bytes.
	static := 4*(2*tmax*(cols+cols/8)+(tmax+1)*rows) + 256
	major, _ := d.ComputeCapability()
	var b baseStage
	switch {
	case opt.Mode != replay.Baseline:
		b.why = "replay mode"
	case tn.baseStage == "0":
		b.why = "REPLAYSSM_CUDA_BASE_STAGE=0"
	case !byDefault && tn.baseStage != "1":
		b.why = "not by default for this layer and format (REPLAYSSM_CUDA_BASE_STAGE=1 forces it)"
	case opt.State == numeric.E4M3:
		b.why = "an fp8 state (the step holds its matrix for the scale)"
	case major < 9:
		b.why = fmt.Sprintf("compute capability %d < 9 (no bulk copies)", major)
	case bytes%16 != 0:
		b.why = fmt.Sprintf("a %d-byte matrix is not a multiple of 16 bytes", bytes)
	case bytes+static > d.MaxSharedMemoryPerBlock():
		b.why = fmt.Sprintf("a %d-byte matrix and %d bytes of tables exceed the %d bytes of shared memory per block", bytes, static, d.MaxSharedMemoryPerBlock())
	default:
		b.on, b.smem = true, bytes
	}
	if !b.on {
		return b, nil
	}
	perSM := d.SharedMemoryPerMultiprocessor()
	if perSM <= 0 {
		perSM = d.MaxSharedMemoryPerBlock()
	}
	minb := max(1, min(2048/threads, perSM/(bytes+static+1024), 65536/(threads*40)))
	return b, []string{"-DBASE_BULK=1", fmt.Sprintf("-DBASE_MINB=%d", minb)}
}

// baseStaged reports whether a baseline module of layer kind ("mamba2" or
// "gdn") stages its step's matrix by default (planBaseStage): GDN fp32.
func baseStaged(kind string, opt replay.Options) bool {
	return kind == "gdn" && opt.State == numeric.F32
}

// fmtDefine is a format's number in the kernels (replay_common.cu FMT_*).
func fmtDefine(f numeric.Format) int {
	switch f {
	case numeric.BF16:
		return 1
	case numeric.NVFP4:
		return 2
	case numeric.F16:
		return 3
	case numeric.E4M3:
		return 4
	}
	return 0
}

func (c *replayCommon) ring() int { return replayRing(c.opt) }

// replayRing is the ring size (entries per slot) of options with defaults.
func replayRing(opt replay.Options) int { return opt.Window + opt.MaxDraft }

// ringScalars is the length of a ring's per-head scalar row (Δ, decays, β):
// r entries rounded up to 4, so a row is a 16-byte multiple (RMAXP).
func ringScalars(r int) int { return (r + 3) &^ 3 }

// stateMatrices is the number of matrices in the state buffer.
func (c *replayCommon) stateMatrices() int { return c.capacity * c.stateBuffers() * c.heads }

// allocStates allocates the state buffer and the read copy (layouts at
// replayCommon.state and .codes).
func (c *replayCommon) allocStates() error {
	E, M := c.elems, c.stateMatrices()
	var err error
	if c.state, err = c.alloc(M * matrixBytes(c.opt.State, E)); err != nil {
		return err
	}
	if c.opt.ReadCopy == numeric.F32 {
		return nil
	}
	mats := c.capacity * c.heads
	if c.opt.ReadCopy == numeric.NVFP4 {
		if c.scales, err = c.alloc(mats * E / 16); err != nil {
			return err
		}
	}
	if c.codes, err = c.alloc(mats * codeBytes(c.opt.ReadCopy, E)); err != nil {
		return err
	}
	if c.opt.ReadCopy == numeric.NVFP4 || c.opt.ReadCopy == numeric.E4M3 {
		if c.scale, err = c.alloc(4 * mats); err != nil {
			return err
		}
	}
	return nil
}

// stateBytes is what one full state transfer of one slot moves (its
// matrices in the state format, with fp8 scales), and readBytes what a
// non-flush step reads of one slot: the read copy if there is one, else the
// checkpoint.
func (c *replayCommon) stateBytes() (state, read int) {
	state = c.heads * matrixBytes(c.opt.State, c.elems)
	read = state
	if c.opt.ReadCopy != numeric.F32 {
		read = c.heads * matrixBytes(c.opt.ReadCopy, c.elems)
	}
	return state, read
}

func (c *replayCommon) stateBuffers() int { return stateBuffers(c.opt) }

// stateBuffers is how many full states a slot keeps: the baseline keeps one
// per draft besides the current one.
func stateBuffers(opt replay.Options) int {
	if opt.Mode == replay.Baseline {
		return 1 + opt.MaxDraft
	}
	return 1
}

// replaySource is what a replay module compiles: replay_common.cu, then the
// layer's file.
func replaySource(file string) (string, error) {
	common, err := KernelSource("replay_common.cu")
	if err != nil {
		return "", err
	}
	src, err := KernelSource(file)
	if err != nil {
		return "", err
	}
	return common + "\n" + src, nil
}

// replayModuleOptions are the NVRTC options of a replay module: the matrix
// shape, formats, ring and draft sizes, the cache's mode, the layer's and
// pipeline's defines (defines), and last the experiment switches of tn (-D
// switches such as -DPIPE_RING=0, NOTES.md) so they override without
// rebuilding the program.
// stateMats is the number of state matrices (an fp8 checkpoint's scales
// follow all of their codes).
func replayModuleOptions(opt replay.Options, rows, cols, stateMats int, defines []string, tn tuning) []string {
	opts := append([]string{
		"--std=c++17",
		fmt.Sprintf("-DROWS=%d", rows), fmt.Sprintf("-DCOLS=%d", cols), fmt.Sprintf("-DNT=%d", moduleThreads(opt, rows, cols, tn)),
		fmt.Sprintf("-DSTATE_FMT=%d", fmtDefine(opt.State)), fmt.Sprintf("-DREAD_FMT=%d", fmtDefine(opt.ReadCopy)),
		fmt.Sprintf("-DRMAX=%d", replayRing(opt)), fmt.Sprintf("-DTMAX=%d", max(1, opt.MaxDraft)),
		fmt.Sprintf("-DCACHE_MODE=%d", cacheMode(opt.Mode)),
	}, defines...)
	if opt.State == numeric.E4M3 {
		opts = append(opts, fmt.Sprintf("-DSTATE_MATS=%d", stateMats))
	}
	if opt.Ring == numeric.BF16 {
		opts = append(opts, "-DRING_BF16=1")
	}
	return append(opts, tn.defines...)
}

// cacheMode is a module's CACHE_MODE (replay_common.cu): which mode's
// kernels it holds.
func cacheMode(m replay.Mode) int {
	if m == replay.Baseline {
		return 0
	}
	return 1
}

// init compiles the module (replay_common.cu + file) with the shape defines
// and allocates the cursors.
func (c *replayCommon) init(ctx context.Context, d *Device, opt replay.Options, capacity, rows, cols int, file string, defines []string, tn tuning) error {
	c.d, c.opt, c.capacity = d, opt, capacity
	c.threads = moduleThreads(opt, rows, cols, tn)
	var md []string
	c.base, c.overlap, md = planModule(d, c.kind, opt, rows, cols, c.threads, tn)
	defines = append(defines, md...)
	src, err := replaySource(file)
	if err != nil {
		return err
	}
	opts := replayModuleOptions(opt, rows, cols, c.stateMatrices(), defines, tn)
	if c.mod, err = d.Compile(ctx, file, src, opts...); err != nil {
		return err
	}
	for _, f := range []struct {
		dst  **Function
		name string
	}{{&c.cursorVerify, "cursor_verify"}, {&c.commitF, "commit"}} {
		if *f.dst, err = c.mod.Function(f.name); err != nil {
			return err
		}
	}
	for _, b := range []*Buffer{&c.hist, &c.cur, &c.pending} {
		if *b, err = c.alloc(4 * capacity); err != nil {
			return err
		}
	}
	// done: the non-flush kernel's block count, and with OVERLAP the flush
	// kernel's, the kernels finished and the group step's item counter;
	// done[4] the streamed flush's (FL_QUEUE).
	for _, b := range []struct {
		buf   *Buffer
		bytes int
	}{{&c.errFlag, 4}, {&c.done, 32}} {
		if *b.buf, err = c.alloc(b.bytes); err != nil {
			return err
		}
		if err := d.Memset(*b.buf, 0); err != nil {
			return err
		}
	}
	if c.overlap.on || c.overlap.verify {
		o := &c.overlap
		newSide := d.NewPriorityStream
		if o.low {
			newSide = d.NewStream
		}
		if o.side, err = newSide(); err != nil {
			return err
		}
		if o.fork, err = d.NewSyncEvent(); err != nil {
			return err
		}
		if o.join, err = d.NewSyncEvent(); err != nil {
			return err
		}
	}
	c.smallBatch = tn.smallBatch
	c.live = make([]bool, capacity)
	for i := capacity - 1; i >= 0; i-- {
		c.free = append(c.free, replay.Slot(i))
	}
	return nil
}

// alloc allocates a buffer that Close frees.
func (c *replayCommon) alloc(bytes int) (Buffer, error) {
	b, err := c.d.Alloc(max(bytes, 4))
	if err != nil {
		return Buffer{}, err
	}
	c.bufs = append(c.bufs, b)
	return b, nil
}

// uploadF64 allocates a buffer holding v as float64.
func (c *replayCommon) uploadF64(v []float64) (Buffer, error) {
	b, err := c.alloc(8 * len(v))
	if err != nil {
		return Buffer{}, err
	}
	raw := make([]byte, 8*len(v))
	for i, x := range v {
		putU64(raw[8*i:], math.Float64bits(x))
	}
	return b, c.d.CopyToDevice(b, raw)
}

// uploadF32 allocates a buffer holding v.
func (c *replayCommon) uploadF32(v []float32) (Buffer, error) {
	b, err := c.alloc(4 * len(v))
	if err != nil {
		return Buffer{}, err
	}
	return b, c.d.CopyToDeviceF32(b, v)
}

func (c *replayCommon) close() error {
	var errs []error
	for _, b := range c.bufs {
		if err := c.d.Free(b); err != nil {
			errs = append(errs, err)
		}
	}
	c.bufs = nil
	for _, e := range []*Event{c.overlap.fork, c.overlap.join} {
		if e != nil {
			errs = append(errs, e.Close())
		}
	}
	errs = append(errs, c.overlap.side.Close())
	c.overlap = overlap{}
	if c.small.mod != nil {
		errs = append(errs, c.small.mod.Close())
	}
	c.small = headSplit{}
	if err := c.mod.Close(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// admit takes the lowest free slot.
func (c *replayCommon) admit() (replay.Slot, error) {
	if len(c.free) == 0 {
		return -1, fmt.Errorf("cache full: all %d slots are live", c.capacity)
	}
	s := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	c.live[s] = true
	return s, nil
}

func (c *replayCommon) evict(s replay.Slot) error {
	if s < 0 || int(s) >= c.capacity || !c.live[s] {
		return fmt.Errorf("slot %d is not live", s)
	}
	c.live[s] = false
	c.free = append(c.free, s)
	return nil
}

// clearRegion queues zeroing bytes [off, off+n) of b on s.
func clearRegion(s *Stream, b Buffer, off, n int) error {
	if n == 0 {
		return nil
	}
	r, err := b.Slice(off, n)
	if err != nil {
		return err
	}
	return s.Memset32(r, 0)
}

// resetCursors queues zeroing slot s's cursors.
func (c *replayCommon) resetCursors(st *Stream, s replay.Slot) error {
	for _, b := range []Buffer{c.hist, c.cur, c.pending} {
		if err := clearRegion(st, b, 4*int(s), 4); err != nil {
			return err
		}
	}
	return nil
}

// need checks that a device buffer holds at least n bytes.
func need(name string, b Buffer, n int) error {
	if b.bytes < n || b.ptr == 0 {
		return fmt.Errorf("%s: %d bytes, want %d", name, b.bytes, n)
	}
	if b.ptr%4 != 0 {
		return fmt.Errorf("%s: device address %#x is not 4-byte aligned", name, b.ptr)
	}
	return nil
}

// needRows is need for a buffer of float rows (a layer's inputs and
// outputs), which the kernels move 16 bytes at a time (vector loads,
// cp.async, bulk copies): its address must be 16-byte aligned as well. A
// Buffer.Slice at another offset would fault on the device, and a faulted
// context loses every cache on it; here it is an error that names it.
func needRows(name string, b Buffer, n int) error {
	if err := need(name, b, n); err != nil {
		return err
	}
	if b.ptr%16 != 0 {
		return fmt.Errorf("%s: device address %#x is not 16-byte aligned (its rows move 16 bytes at a time)", name, b.ptr)
	}
	return nil
}

// launchSmallVerify queues the verify of a small batch whose arguments a
// holds by fn (on grid × block): the layer's one-kernel verify, which then
// takes the pending drafts, the block count and the batch and moves the
// cursors itself (Mamba-2), else the v4 verify and the cursor kernel
// (GDN's split verify).
func (c *replayCommon) launchSmallVerify(s *Stream, a *Args, fn *Function, grid, block [3]uint32, slots, counts Buffer, batch, T int) error {
	if c.verifySmall != nil {
		a.Ptr(c.pending)
		a.Ptr(c.done)
		a.I32(int32(batch))
		return c.d.Launch(fn, grid, block, 0, s, a)
	}
	if err := c.d.Launch(fn, grid, block, 0, s, a); err != nil {
		return err
	}
	return c.launchCursorVerify(s, slots, counts, batch, T)
}

// launchCursorVerify queues the cursor move after a verify.
func (c *replayCommon) launchCursorVerify(st *Stream, slots, counts Buffer, batch, T int) error {
	replayMode := int32(0)
	if c.opt.Mode == replay.Replay {
		replayMode = 1
	}
	a := &c.args
	a.Reset()
	a.Ptr(c.hist)
	a.Ptr(c.pending)
	a.Ptr(slots)
	a.Ptr(counts)
	a.I32(int32(T))
	a.I32(int32(batch))
	a.I32(int32(c.ring()))
	a.I32(replayMode)
	return c.d.Launch(c.cursorVerify, [3]uint32{uint32((batch + 127) / 128), 1, 1}, [3]uint32{128, 1, 1}, 0, st, a)
}

// commit queues the acceptance of accepted[b] (int32, device memory) drafts
// of slots[b]'s last verify: a cursor move in replay mode, the choice of a
// state buffer in baseline mode. Nothing is copied.
func (c *replayCommon) commit(st *Stream, batch int, slots, accepted Buffer) error {
	if batch < 1 || batch > c.capacity {
		return fmt.Errorf("commit: batch %d out of range [1, %d]", batch, c.capacity)
	}
	if err := need("slots", slots, 4*batch); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	if err := need("accepted", accepted, 4*batch); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	replayMode := int32(0)
	if c.opt.Mode == replay.Replay {
		replayMode = 1
	}
	a := &c.args
	a.Reset()
	a.Ptr(c.hist)
	a.Ptr(c.cur)
	a.Ptr(c.pending)
	a.Ptr(slots)
	a.Ptr(accepted)
	a.I32(int32(batch))
	a.I32(int32(c.stateBuffers()))
	a.I32(replayMode)
	a.Ptr(c.errFlag)
	return c.d.Launch(c.commitF, [3]uint32{uint32((batch + 127) / 128), 1, 1}, [3]uint32{128, 1, 1}, 0, st, a)
}

// commitErrors reads and clears the flag commit sets for accepted counts
// outside [0, pending]; it synchronises with st.
func (c *replayCommon) commitErrors(st *Stream) error {
	var b [4]byte
	if err := st.CopyFromDevice(b[:], c.errFlag); err != nil {
		return err
	}
	if b[0]|b[1]|b[2]|b[3] != 0 {
		if err := clearRegion(st, c.errFlag, 0, 4); err != nil {
			return err
		}
		return errors.New("commit: an accepted count was outside [0, pending drafts]; it was clamped")
	}
	return nil
}

// checkBatch validates the batch and its slot list.
func (c *replayCommon) checkBatch(batch int, slots Buffer) error {
	if batch < 1 || batch > c.capacity || batch > 65535 {
		return fmt.Errorf("batch %d out of range [1, %d]", batch, min(c.capacity, 65535))
	}
	return need("slots", slots, 4*batch)
}

// checkDrafts validates the draft stride T and the optional per-slot counts
// (int32 in 1..T, device memory) of a Verify.
func (c *replayCommon) checkDrafts(batch, T int, counts Buffer) error {
	if c.opt.MaxDraft == 0 {
		return errors.New("verify: cache built with MaxDraft 0")
	}
	if T < 1 || T > c.opt.MaxDraft {
		return fmt.Errorf("verify: %d drafts per slot, cache allows 1..%d", T, c.opt.MaxDraft)
	}
	if counts.ptr != 0 {
		return need("counts", counts, 4*batch)
	}
	return nil
}

// Close frees the cache's device memory and module. Work queued on it must
// have finished.
func (c *replayCommon) Close() error { return c.close() }

// Options returns the options in force (defaults filled in).
func (c *replayCommon) Options() replay.Options { return c.opt }

// Capacity is the number of slots.
func (c *replayCommon) Capacity() int { return c.capacity }

// ThreadsPerBlock is the CTA size the kernels were compiled for.
func (c *replayCommon) ThreadsPerBlock() int { return c.threads }

// Module is the compiled kernel module.
func (c *replayCommon) Module() *Module { return c.mod }

// Admit takes a free slot and queues on s the clearing of its state, read
// copy and cursors.
func (c *replayCommon) Admit(s *Stream) (replay.Slot, error) {
	slot, err := c.admit()
	if err != nil {
		return slot, fmt.Errorf("cuda: %s cache: %w", c.kind, err)
	}
	if err := c.clearSlot(s, slot); err != nil {
		return slot, fmt.Errorf("cuda: %s cache: admit: %w", c.kind, err)
	}
	return slot, nil
}

// Reset queues on s the clearing of a live slot's state and cursors.
func (c *replayCommon) Reset(s *Stream, slot replay.Slot) error {
	if slot < 0 || int(slot) >= c.capacity || !c.live[slot] {
		return fmt.Errorf("cuda: %s cache: reset: slot %d is not live", c.kind, slot)
	}
	return c.clearSlot(s, slot)
}

// Evict frees a slot.
func (c *replayCommon) Evict(slot replay.Slot) error {
	if err := c.evict(slot); err != nil {
		return fmt.Errorf("cuda: %s cache: evict: %w", c.kind, err)
	}
	return nil
}

func (c *replayCommon) clearSlot(st *Stream, s replay.Slot) error {
	H, E, nb := c.heads, c.elems, c.stateBuffers()
	es := elemBytes(c.opt.State)
	if err := clearRegion(st, c.state, int(s)*nb*H*E*es, nb*H*E*es); err != nil {
		return err
	}
	if c.opt.State == numeric.E4M3 { // the slot's scales, after every matrix
		if err := clearRegion(st, c.state, c.stateMatrices()*E+4*int(s)*nb*H, 4*nb*H); err != nil {
			return err
		}
	}
	if c.codes.ptr != 0 {
		per := H * codeBytes(c.opt.ReadCopy, E)
		if err := clearRegion(st, c.codes, int(s)*per, per); err != nil {
			return err
		}
	}
	if c.scales.ptr != 0 {
		if err := clearRegion(st, c.scales, int(s)*H*E/16, H*E/16); err != nil {
			return err
		}
	}
	if c.scale.ptr != 0 {
		if err := clearRegion(st, c.scale, 4*int(s)*H, 4*H); err != nil {
			return err
		}
	}
	return c.resetCursors(st, s)
}

// Commit accepts, for each of the batch's slots (device int32 arrays), the
// first accepted drafts of its last Verify: a cursor move (replay) or the
// accepted draft's state buffer (baseline), done on the device.
func (c *replayCommon) Commit(s *Stream, batch int, slots, accepted Buffer) error {
	if err := c.commit(s, batch, slots, accepted); err != nil {
		return fmt.Errorf("cuda: %s cache: %w", c.kind, err)
	}
	return nil
}

// CommitErrors reports (and clears) whether a Commit since the last call
// saw an accepted count outside [0, pending drafts]; it synchronises with s.
func (c *replayCommon) CommitErrors(s *Stream) error { return c.commitErrors(s) }

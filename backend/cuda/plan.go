package cuda

import (
	"fmt"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// A state cache is planned before anything is compiled: planMamba2 and
// planGDN are pure functions of the layer shape, the options and the GPU's
// properties, and return a cachePlan that says which kernels the cache's
// module holds (its NVRTC options) and how each operation launches them at
// every batch size. Binding (bind.go) then reads the compiled kernels'
// registers to size the persistent grids; launching (launch_replay.go)
// follows the plan. docs/PERF.md and KERNELS.md give the measurements
// behind each rule.

// gpuProps is what the planner reads of a GPU.
type gpuProps struct {
	major, minor int // compute capability
	sms          int // multiprocessors
	smemBlock    int // shared memory a block may opt in to, bytes
	smemSM       int // shared memory per multiprocessor, bytes
}

// props returns the device's properties for the planner.
func (d *Device) props() gpuProps {
	return gpuProps{major: d.ccMajor, minor: d.ccMinor, sms: d.smCount, smemBlock: d.sharedOptin, smemSM: d.sharedPerSM}
}

// cc is the compute capability as one number (90 for sm_90).
func (p gpuProps) cc() int { return 10*p.major + p.minor }

// perSM is the shared memory of one multiprocessor.
func (p gpuProps) perSM() int {
	if p.smemSM > 0 {
		return p.smemSM
	}
	return p.smemBlock
}

// defaultSmallBatch is the largest batch whose replay step runs as one
// kernel (flush and non-flush slots together, cursors moved by its last
// block): at a few slots a step costs what its launches cost.
const defaultSmallBatch = 4

// cachePlan is the plan of one cache's kernels.
type cachePlan struct {
	kind  string // "mamba2" or "gdn"
	file  string // the layer's kernel file
	opt   replay.Options
	rows  int // state matrix rows (Mamba-2 P, GDN dv)
	cols  int // state matrix columns (Mamba-2 N, GDN dk)
	heads int // state matrices per slot (Mamba-2 H, GDN Hv)
	// layer holds the layer's shape defines (heads, groups, eps).
	layer []string

	threads int // the one-block-per-matrix kernels' block size

	pipe    pipeline
	group   groupStep
	folds   foldPipe
	stream  streamPlan // GDN's folds by strips
	base    baseStage
	overlap bool // GDN: a step's flush on a second stream beside its non-flush kernel

	// Mamba-2 switches of the module.
	scalarsEarly bool // the small verify's drafts' scalars with its early loads
	storeV4      bool // 2-byte checkpoints folded by the pipelined folds store 16 bytes at once
	// GDN switches of the module.
	tcFold     bool // the flush's rank update on the tensor cores
	foldCached bool // a flush folds the ring's cached u (replay.Options.FoldsCachedU)

	// split is the small-batch module on heads split into split.parts
	// parts (nil: the heads stay whole), a plan of its own.
	split *cachePlan
	// parts is, in a split module's plan, its HSPLIT.
	parts int

	smallBatch int // batches up to this run the one-kernel step
	minItems   int // the group verify takes batches of this many items (groups × slots) and more
	// Test switches, read when binding (the module is the same):
	// maxBlocks bounds the persistent grids where positive, so that each
	// block takes many items in turn; perHead launches every operation on
	// the per-head kernels and the items flush, which every replay module
	// holds (the reference the other paths are checked against);
	// lateVerify takes the small batches' verify without its early start.
	maxBlocks  int
	perHead    bool
	lateVerify bool
}

// options are the module's NVRTC options for a cache of capacity slots.
func (p *cachePlan) options(capacity int) []string {
	opt := p.opt
	o := []string{
		"--std=c++17",
		fmt.Sprintf("-DROWS=%d", p.rows), fmt.Sprintf("-DCOLS=%d", p.cols), fmt.Sprintf("-DNT=%d", p.threads),
		fmt.Sprintf("-DSTATE_FMT=%d", fmtDefine(opt.State)), fmt.Sprintf("-DREAD_FMT=%d", fmtDefine(opt.ReadCopy)),
		fmt.Sprintf("-DRMAX=%d", ringEntries(opt)), fmt.Sprintf("-DTMAX=%d", max(1, opt.MaxDraft)),
		fmt.Sprintf("-DCACHE_MODE=%d", cacheMode(opt.Mode)),
	}
	o = append(o, p.layer...)
	o = append(o, p.pipe.defines()...)
	o = append(o, p.folds.defines()...)
	if p.folds.on && p.folds.verifyDots {
		o = append(o, "-DVFOLD_DOTS=1")
	}
	o = append(o, p.group.defines()...)
	if p.scalarsEarly {
		o = append(o, "-DSCALARS_EARLY=1")
	}
	if p.storeV4 {
		o = append(o, "-DSTORE_V4=1")
	}
	if p.kind == "gdn" {
		o = append(o, "-DBASE_REGS=40")
		if p.tcFold {
			o = append(o, "-DTC_FOLD=1")
		}
		o = append(o, fmt.Sprintf("-DFOLD_CACHED=%d", b2i(p.foldCached)))
		o = append(o, p.stream.defines()...)
	}
	o = append(o, p.base.defines()...)
	if p.overlap {
		o = append(o, "-DOVERLAP=1")
	}
	if p.parts > 1 {
		o = append(o, fmt.Sprintf("-DHSPLIT=%d", p.parts), "-DSPLIT_VERIFY=1")
	}
	if opt.State == numeric.E4M3 {
		o = append(o, fmt.Sprintf("-DSTATE_MATS=%d", capacity*stateBuffers(opt)*p.heads))
	}
	if opt.Ring == numeric.BF16 {
		o = append(o, "-DRING_BF16=1")
	}
	return o
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// newPlan starts a plan: the options checked and the block size chosen.
func newPlan(kind, file string, opt replay.Options, rows, cols, heads int, p gpuProps) (cachePlan, error) {
	opt, err := checkOptions(kind, opt)
	if err != nil {
		return cachePlan{}, err
	}
	if err := checkMatrix(rows, cols, heads); err != nil {
		return cachePlan{}, err
	}
	cp := cachePlan{kind: kind, file: file, opt: opt, rows: rows, cols: cols, heads: heads,
		threads: moduleThreads(opt, rows, cols), smallBatch: defaultSmallBatch, minItems: 2 * p.sms}
	return cp, nil
}

// finish plans what both layers' modules share: the baseline step's
// stage, the overlapped flush, and the small-batch module of split heads
// (split builds a layer's plan for a shape whose heads are split in parts).
func (cp *cachePlan) finish(p gpuProps, baseStaged bool, split func(parts int) (cachePlan, error)) error {
	cp.base = planBaseStage(p, cp.opt, cp.rows, cp.cols, cp.threads, baseStaged)
	cp.overlap = cp.kind == "gdn" && cp.opt.Mode == replay.Replay
	parts, _ := planHeadSplit(cp.opt, cp.heads, cp.rows, p.sms)
	if parts < 2 {
		return nil
	}
	sp, err := split(parts)
	if err != nil {
		return err
	}
	// The split module holds the small batches' kernels only: no nested
	// split, and no flush beside another kernel.
	sp.parts, sp.split, sp.overlap = parts, nil, false
	cp.split = &sp
	return nil
}

// splitMaxBatch is the largest batch a split plan's module takes.
func (cp *cachePlan) splitMaxBatch(p gpuProps) int {
	return splitBatches(cp.heads, cp.split.parts, p.sms)
}

// Capabilities is what the GPU caches take (replay.Options.Check): replay
// checkpoints and baseline states in fp32, fp16, bf16 or fp8-e4m3 (the
// naive nvfp4 state is CPU-only), read copies in bf16, fp8-e4m3 or nvfp4,
// a bf16 ring for Mamba-2 layers (the GDN ring keeps k normalised, which
// is not a bf16 value), at most replayRingMax ring entries, and no
// stochastic rounding. The Gated DeltaNet kernels keep per-draft tables in
// static shared memory (48 KiB a block), which holds 8 drafts at the
// target models' 128 × 128 heads with a ring of 32 entries (ptxas sm_90:
// gdn_replay_flush 49152 bytes; gdn_group_verify overflows from 12 drafts).
// An nvfp4 read copy of an fp8 checkpoint is refused: the conformance
// suite measured its outputs far off the reference on an H100 (relative
// error 0.97 against the CPU cache's 0.17), a bug not yet found.
func Capabilities() replay.Capabilities {
	states := []numeric.Format{numeric.F32, numeric.F16, numeric.BF16, numeric.E4M3}
	return replay.Capabilities{
		Backend:        "cuda",
		ReplayStates:   states,
		BaselineStates: states,
		ReadCopies:     []numeric.Format{numeric.BF16, numeric.E4M3, numeric.NVFP4},
		Rings:          map[string][]numeric.Format{"mamba2": {numeric.BF16}},
		MaxWindow:      replayRingMax,
		MaxRing:        replayRingMax,
		MaxDrafts:      map[string]int{"gdn": 8},
		ExcludedReadCopies: map[numeric.Format][]numeric.Format{
			numeric.E4M3: {numeric.NVFP4},
		},
	}
}

// checkOptions fills in package replay's defaults and checks the options
// against what the GPU kernels take.
func checkOptions(kind string, opt replay.Options) (replay.Options, error) {
	o, err := opt.Check(kind, Capabilities())
	if err != nil {
		return opt, fmt.Errorf("%w: %w", ErrReplayOptions, err)
	}
	return o, nil
}

// replayRingMax bounds window + max drafts: the ring's per-entry tables live
// in static shared memory (48 KiB per block).
const replayRingMax = 32

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

// cacheMode is a module's CACHE_MODE (replay_common.cu): which mode's
// kernels it holds.
func cacheMode(m replay.Mode) int {
	if m == replay.Baseline {
		return 0
	}
	return 1
}

// ringEntries is the ring size (entries per slot) of options with defaults.
func ringEntries(opt replay.Options) int { return opt.Window + opt.MaxDraft }

// ringScalars is the length of a ring's per-head scalar row (Δ, decays, β):
// r entries rounded up to 4, so a row is a 16-byte multiple (RMAXP).
func ringScalars(r int) int { return (r + 3) &^ 3 }

// stateBuffers is how many full states a slot keeps: the baseline keeps one
// per draft besides the current one.
func stateBuffers(opt replay.Options) int {
	if opt.Mode == replay.Baseline {
		return 1 + opt.MaxDraft
	}
	return 1
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

// ringElemBytes is the size of one of a ring's x or B (GDN: k or v)
// elements: 4, or 2 with a bf16 ring.
func ringElemBytes(opt replay.Options) int {
	if opt.Ring == numeric.BF16 {
		return 2
	}
	return 4
}

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

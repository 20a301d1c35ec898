package cuda

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// The target layer shapes (package bench's, which imports this package).
var (
	nanoShape     = ssm.Mamba2Shape{Heads: 96, HeadDim: 80, StateSize: 128, Groups: 8}
	superShape    = ssm.Mamba2Shape{Heads: 128, HeadDim: 64, StateSize: 128, Groups: 8}
	qwen4bShape   = ssm.GDNShape{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128}
	qwen122bShape = ssm.GDNShape{KeyHeads: 16, ValueHeads: 64, KeyDim: 128, ValueDim: 128}
)

// assemblyTools returns ptxas and an NVRTC that emits sm_90 code, or skips t
// (tools/get_ptxas.sh fetches ptxas on a Debian machine).
func assemblyTools(t *testing.T) (string, *nvrtcAPI) {
	t.Helper()
	ptxas := findPtxas(os.Getenv)
	if ptxas == "" {
		t.Skip("no ptxas (REPLAYSSM_PTXAS, the path, CUDA_HOME, /usr/local/cuda): tools/get_ptxas.sh fetches one")
	}
	n, err := loadNVRTC(newSearchPlan(os.Getenv, nil))
	if err != nil {
		t.Skipf("no NVRTC on this machine (%v)", err)
	}
	if !slices.Contains(n.archs, 90) {
		t.Skipf("NVRTC %d.%d emits no sm_90 code (%v)", n.major, n.minor, n.archs)
	}
	return ptxas, n
}

// h200Props is a Device with an H200's properties and no driver behind it:
// enough for the pipeline planner.
func h200Props() *Device {
	return &Device{ccMajor: 9, smCount: 132, sharedOptin: 227 << 10, sharedPerSM: 228 << 10}
}

// replayModuleSource plans a replay module of a Mamba-2 (m2) or GDN (g)
// layer as the constructors do on device d and returns its file, source,
// NVRTC options (no architecture), group plan and the layer's defines.
func replayModuleSource(d *Device, layer string, m2 ssm.Mamba2Shape, g ssm.GDNShape, opt replay.Options, tn tuning,
	capacity int) (file, src string, args []string, plan groupStep, defines []string, err error) {
	var rows, cols, heads int
	if layer == "mamba2" {
		file, rows, cols, heads = "replay_mamba2.cu", m2.HeadDim, m2.StateSize, m2.Heads
		_, plan, _, defines = mamba2Module(d, m2, opt, tn)
	} else {
		file, rows, cols, heads = "replay_gdn.cu", g.ValueDim, g.KeyDim, g.ValueHeads
		_, plan, _, defines = gdnModule(d, g, opt, tn)
	}
	_, _, md := planModule(d, layer, opt, rows, cols, moduleThreads(opt, rows, cols, tn), tn) // as replayCommon.init
	defines = append(defines, md...)
	if src, err = replaySource(file); err != nil {
		return
	}
	args = replayModuleOptions(opt, rows, cols, capacity*stateBuffers(opt)*heads, defines, tn)
	return
}

// TestReplayModulesCompile compiles the replay modules that the caches
// build, for every state and read-copy format, baseline and replay, with the
// options the constructors give them (pipeline planned for an H200), using
// whatever NVRTC this machine has, to PTX for the newest architecture it
// supports up to sm_90. A kernel source error then shows here, on a machine
// without a GPU, before a device run. It needs NVRTC only (no driver) and
// skips without it.
func TestReplayModulesCompile(t *testing.T) {
	n, arch := moduleCompiler(t)
	mamba2 := nanoShape
	gdn := qwen4bShape
	opts := []struct {
		name string
		opt  replay.Options
		tn   tuning // experiment knobs
	}{
		{"baseline/fp32", replay.Options{Mode: replay.Baseline}, tuning{}},
		{"baseline/bf16", replay.Options{Mode: replay.Baseline, State: numeric.BF16}, tuning{}},
		{"baseline/bf16/late", replay.Options{Mode: replay.Baseline, State: numeric.BF16}, tuning{defines: []string{"-DBASE_EARLY=0"}}},
		{"baseline/bf16/store_v4", replay.Options{Mode: replay.Baseline, State: numeric.BF16}, tuning{defines: []string{"-DSTORE_V4=1"}}},
		{"baseline/bf16/staged", replay.Options{Mode: replay.Baseline, State: numeric.BF16}, tuning{baseStage: "1"}},
		{"baseline/e4m3", replay.Options{Mode: replay.Baseline, State: numeric.E4M3}, tuning{}},
		{"replay/fp32", replay.Options{Mode: replay.Replay}, tuning{}},
		{"replay/fp32+bf16", replay.Options{Mode: replay.Replay, ReadCopy: numeric.BF16}, tuning{}},
		{"replay/bf16+nvfp4", replay.Options{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4}, tuning{}},
		{"replay/fp16+e4m3", replay.Options{Mode: replay.Replay, State: numeric.F16, ReadCopy: numeric.E4M3}, tuning{}},
		{"replay/e4m3", replay.Options{Mode: replay.Replay, State: numeric.E4M3}, tuning{}},
		{"replay/bf16/128 threads", replay.Options{Mode: replay.Replay, State: numeric.BF16}, tuning{groupNT: 128}}, // GDN: GV_PAIR
		{"replay/fp32/loads in loops", replay.Options{Mode: replay.Replay}, tuning{defines: []string{"-DLOAD_FIRST=0"}}},
		{"replay/bf16/token rows last", replay.Options{Mode: replay.Replay, State: numeric.BF16}, tuning{defines: []string{"-DTOKEN_ROWS=0"}}},
		{"replay/fp32/overlap forced", replay.Options{Mode: replay.Replay}, tuning{overlap: "1"}},
		{"replay/bf16+nvfp4/overlap off", replay.Options{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4}, tuning{overlap: "0"}},
		{"replay/bf16/verify overlap", replay.Options{Mode: replay.Replay, State: numeric.BF16}, tuning{overlapVer: true}},
		{"baseline/bf16/32 registers", replay.Options{Mode: replay.Baseline, State: numeric.BF16}, tuning{defines: []string{"-DBASE_REGS=32"}}},
		{"replay/fp32/exact fold", replay.Options{Mode: replay.Replay, ExactFold: true}, tuning{}},
		{"replay/bf16/exact fold", replay.Options{Mode: replay.Replay, State: numeric.BF16, ExactFold: true}, tuning{}},
		{"replay/e4m3/exact fold", replay.Options{Mode: replay.Replay, State: numeric.E4M3, ExactFold: true}, tuning{}},
		{"baseline/bf16/no arithmetic", replay.Options{Mode: replay.Baseline, State: numeric.BF16}, tuning{defines: []string{"-DBASE_SKIP=1"}}},
		{"baseline/fp32/no arithmetic", replay.Options{Mode: replay.Baseline}, tuning{defines: []string{"-DBASE_SKIP=1"}}},
		{"replay/bf16/verify scalars early", replay.Options{Mode: replay.Replay, State: numeric.BF16}, tuning{defines: []string{"-DSCALARS_EARLY=1"}}},
		{"replay/fp32+nvfp4/verify uloc fixed", replay.Options{Mode: replay.Replay, ReadCopy: numeric.NVFP4}, tuning{defines: []string{"-DULOC_FIXED=1", "-DSCALARS_EARLY=0"}}},
		{"replay/fp32/tensor-core fold", replay.Options{Mode: replay.Replay}, tuning{defines: []string{"-DTC_FOLD=1"}}},
		{"replay/bf16/fma fold", replay.Options{Mode: replay.Replay, State: numeric.BF16}, tuning{defines: []string{"-DTC_FOLD=0"}}},
		{"replay/bf16/tf32 splits by cvt", replay.Options{Mode: replay.Replay, State: numeric.BF16}, tuning{defines: []string{"-DTF32_RNA=1"}}},
		{"replay/e4m3/tensor-core fold pipe", replay.Options{Mode: replay.Replay, State: numeric.E4M3}, tuning{folds: "pipe", defines: []string{"-DTC_FOLD=1"}}},
		{"replay/bf16+nvfp4/loads in loops", replay.Options{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4},
			tuning{defines: []string{"-DLOAD_FIRST=0"}}},
		{"replay/bf16", replay.Options{Mode: replay.Replay, State: numeric.BF16}, tuning{}},
		{"replay/fp16", replay.Options{Mode: replay.Replay, State: numeric.F16}, tuning{}},
		{"replay/fp32/folds pipe", replay.Options{Mode: replay.Replay}, tuning{folds: "pipe"}},
		{"replay/bf16/folds pipe", replay.Options{Mode: replay.Replay, State: numeric.BF16}, tuning{folds: "pipe"}},
		{"replay/fp32/exact fold pipe", replay.Options{Mode: replay.Replay, ExactFold: true}, tuning{folds: "pipe"}},
		{"replay/bf16+nvfp4/folds pipe", replay.Options{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4}, tuning{folds: "pipe"}},
		{"replay/e4m3/folds pipe", replay.Options{Mode: replay.Replay, State: numeric.E4M3}, tuning{folds: "pipe"}},
		{"replay/bf16+nvfp4/fma stream", replay.Options{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4},
			tuning{defines: []string{"-DGROUP_TC=0"}}},
		{"replay/bf16+nvfp4/items in one loop", replay.Options{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4},
			tuning{defines: []string{"-DGDN_PF=1"}}},
		{"replay/fp32/items in one loop", replay.Options{Mode: replay.Replay}, tuning{defines: []string{"-DGDN_PF=1"}}},
		{"replay/bf16/tensor-core stream", replay.Options{Mode: replay.Replay, State: numeric.BF16}, tuning{defines: []string{"-DGROUP_TC=1"}}},
		{"replay/fp32+bf16/tensor-core stream", replay.Options{Mode: replay.Replay, ReadCopy: numeric.BF16},
			tuning{defines: []string{"-DGROUP_TC=1"}}},
		// The e4m3 FMA streams (the tensor cores' by default since
		// session 23).
		{"replay/fp32+e4m3/fma streams", replay.Options{Mode: replay.Replay, ReadCopy: numeric.E4M3},
			tuning{defines: []string{"-DGROUP_TC=0", "-DVERIFY_TC=0"}}},
		{"replay/e4m3/fma streams", replay.Options{Mode: replay.Replay, State: numeric.E4M3},
			tuning{defines: []string{"-DGROUP_TC=0", "-DVERIFY_TC=0"}}},
		// The GDN group verify's FMA stream where VERIFY_TC is on by
		// default (GV_PAIR's paired passes at 128 threads).
		{"replay/bf16/fma verify", replay.Options{Mode: replay.Replay, State: numeric.BF16}, tuning{groupNT: 128, defines: []string{"-DVERIFY_TC=0"}}},
		{"replay/bf16+nvfp4/fma verify", replay.Options{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4},
			tuning{defines: []string{"-DVERIFY_TC=0"}}},
		// The GDN folds by strips (gdn_fold_stream) and the flush by
		// strips (gdn_flush_stream), both by default (a zero tuning has
		// them off): one buffer of strips a block (fp32), two for the
		// folds (bf16).
		{"replay/fp32/streamed folds", replay.Options{Mode: replay.Replay}, tuning{foldItems: true, foldStream: true, flushStream: true}},
		{"replay/bf16/streamed folds", replay.Options{Mode: replay.Replay, State: numeric.BF16},
			tuning{foldItems: true, foldStream: true, flushStream: true}},
		// Mamba-2's pipelined folds by FMA (M2_TC_FOLD off; Nano's folds
		// are on the tensor cores by default in every format).
		{"replay/fp32/m2 FMA folds", replay.Options{Mode: replay.Replay}, tuning{m2TCFold: "0"}},
		{"replay/bf16/m2 FMA folds", replay.Options{Mode: replay.Replay, State: numeric.BF16}, tuning{m2TCFold: "0"}},
		{"replay/e4m3/m2 FMA folds", replay.Options{Mode: replay.Replay, State: numeric.E4M3}, tuning{m2TCFold: "0"}},
		{"replay/fp16+e4m3/m2 FMA folds", replay.Options{Mode: replay.Replay, State: numeric.F16, ReadCopy: numeric.E4M3},
			tuning{m2TCFold: "0"}},
		// The tensor-core fold's checkpoint read in order (M2_TC_SROT=0;
		// rotated by default).
		{"replay/bf16/m2 packed checkpoint reads", replay.Options{Mode: replay.Replay, State: numeric.BF16},
			tuning{m2TCFold: "1", defines: []string{"-DM2_TC_SROT=0"}}},
		{"replay/e4m3/m2 packed checkpoint reads", replay.Options{Mode: replay.Replay, State: numeric.E4M3},
			tuning{m2TCFold: "1", defines: []string{"-DM2_TC_SROT=0"}}},
		// e4m3 NaN codes by a branch to the software encoder (NAN_SELECT=0;
		// the conversion's own by default), with an nvfp4 read copy's block
		// scales too.
		{"replay/e4m3/NaN by branch", replay.Options{Mode: replay.Replay, State: numeric.E4M3},
			tuning{defines: []string{"-DNAN_SELECT=0"}}},
		{"replay/fp32+nvfp4/NaN by branch", replay.Options{Mode: replay.Replay, ReadCopy: numeric.NVFP4},
			tuning{defines: []string{"-DNAN_SELECT=0"}}},
		// bf16 stores with their NaN branch (BF16_NAN_BRANCH=1: numeric's
		// NaN codes; the conversion's own by default since session 34).
		{"replay/bf16/NaN by branch", replay.Options{Mode: replay.Replay, State: numeric.BF16},
			tuning{defines: []string{"-DBF16_NAN_BRANCH=1"}}},
		{"baseline/bf16/NaN by branch", replay.Options{Mode: replay.Baseline, State: numeric.BF16},
			tuning{defines: []string{"-DBF16_NAN_BRANCH=1"}}},
		// nvfp4 quotients by division (NV_QDIV=0; one reciprocal a chunk
		// by default since session 34).
		{"replay/fp32+nvfp4/quotients by division", replay.Options{Mode: replay.Replay, ReadCopy: numeric.NVFP4},
			tuning{defines: []string{"-DNV_QDIV=0"}}},
		{"replay/bf16+nvfp4/quotients by division", replay.Options{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4},
			tuning{defines: []string{"-DNV_QDIV=0"}}},
		// The lean quantiser (NV_LEAN: maxima by predicate, quotients masked
		// rather than branched around; session 34, off until measured).
		{"replay/fp32+nvfp4/lean quantiser", replay.Options{Mode: replay.Replay, ReadCopy: numeric.NVFP4},
			tuning{defines: []string{"-DNV_LEAN=1"}}},
		{"replay/bf16+nvfp4/lean quantiser", replay.Options{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4},
			tuning{defines: []string{"-DNV_LEAN=1"}}},
		// A bf16 ring (RING_BF16; Mamba-2 only), its rows widened by the
		// pipelined folds' producer too (the nvfp4 module's folds asked
		// for; PIPE_RING=0 for the bulk copies' path).
		{"replay/fp32/bf16 ring", replay.Options{Mode: replay.Replay, Ring: numeric.BF16}, tuning{}},
		{"replay/bf16+nvfp4/bf16 ring", replay.Options{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4, Ring: numeric.BF16},
			tuning{folds: "pipe"}},
		{"replay/e4m3/bf16 ring", replay.Options{Mode: replay.Replay, State: numeric.E4M3, Ring: numeric.BF16}, tuning{}},
		{"replay/fp32/bf16 ring, loads in loops", replay.Options{Mode: replay.Replay, Ring: numeric.BF16}, tuning{defines: []string{"-DLOAD_FIRST=0"}}},
		{"replay/bf16/bf16 ring, bulk ring copies", replay.Options{Mode: replay.Replay, State: numeric.BF16, Ring: numeric.BF16},
			tuning{folds: "pipe", defines: []string{"-DPIPE_RING=0"}}},
		// The Mamba-2 group step's per-token inputs where they are used
		// (GROUP_EARLY=0, the default before session 36), with either ring.
		{"replay/fp32/group inputs late", replay.Options{Mode: replay.Replay}, tuning{defines: []string{"-DGROUP_EARLY=0"}}},
		{"replay/bf16+nvfp4/bf16 ring, group inputs late", replay.Options{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4, Ring: numeric.BF16},
			tuning{defines: []string{"-DGROUP_EARLY=0"}}},
		// A Mamba-2 verify's early folds forming the group verify's dots
		// (VFOLD_DOTS, session 37): Nano's folds on the tensor cores, and
		// on the FMA update.
		{"replay/fp32/no verify fold dots", replay.Options{Mode: replay.Replay}, tuning{vfoldDots: "0"}},
		{"replay/fp32/verify fold dots, fma fold", replay.Options{Mode: replay.Replay}, tuning{m2TCFold: "0"}},
		{"replay/bf16/verify fold dots", replay.Options{Mode: replay.Replay, State: numeric.BF16}, tuning{vfoldDots: "1"}},
		{"replay/fp16/verify fold dots", replay.Options{Mode: replay.Replay, State: numeric.F16}, tuning{vfoldDots: "1"}},
		// The small step's last block moving its own row's cursor from
		// the slot and cursor it read (STEP_OWN, session 39; off).
		{"replay/fp32/step tail from its own cursor", replay.Options{Mode: replay.Replay}, tuning{defines: []string{"-DSTEP_OWN=1"}}},
		// GDN's streamed early folds forming the group verify's dots
		// (VFOLD_DOTS, session 38; asked for).
		{"replay/fp32/gdn verify fold dots", replay.Options{Mode: replay.Replay}, tuning{foldItems: true, foldStream: true, flushStream: true, vfoldDots: "1"}},
		{"replay/bf16/gdn verify fold dots", replay.Options{Mode: replay.Replay, State: numeric.BF16},
			tuning{foldItems: true, foldStream: true, flushStream: true, vfoldDots: "1"}},
	}
	const capacity = 8
	// Mamba-2 2.7B's layer: 80 heads of 64 in one group (the group step's
	// largest tables, three ring entries staged), in two formats, no drafts.
	oneGroup := ssm.Mamba2Shape{Heads: 80, HeadDim: 64, StateSize: 128, Groups: 1}
	// Options and knobs only a GDN module reads: Mamba-2's would be a
	// default module compiled again.
	gdnOnly := func(o replay.Options, tn tuning) bool {
		return o.ExactFold || slices.Contains(tn.defines, "-DGDN_PF=1") || slices.Contains(tn.defines, "-DVERIFY_TC=0") ||
			tn.foldStream || tn.flushStream
	}
	for _, layer := range []string{"mamba2", "gdn", "mamba2-1group"} {
		for _, o := range opts {
			if layer == "mamba2-1group" && o.name != "replay/fp32" && o.name != "replay/bf16+nvfp4" {
				continue
			}
			gdnRow := strings.Contains(o.name, "/gdn ")
			if layer != "gdn" && (gdnOnly(o.opt, o.tn) || gdnRow) || layer != "mamba2" && (o.tn.m2TCFold != "" || o.tn.vfoldDots != "" && !gdnRow) ||
				layer == "gdn" && (o.opt.Ring != numeric.F32 || definesName(o.tn.defines, "GROUP_EARLY")) {
				continue
			}
			t.Run(layer+"/"+o.name, func(t *testing.T) {
				t.Parallel()
				skipNearDeadline(t)
				o.opt.MaxDraft = 4
				if layer == "mamba2-1group" {
					o.opt.MaxDraft = 0 // with drafts its tables exceed static shared memory: v5 / v4 take it
				}
				opt, err := replayDefaults(o.opt)
				if err != nil {
					t.Fatal(err)
				}
				shape := mamba2
				if layer == "mamba2-1group" {
					shape = oneGroup
				}
				layerKind := "mamba2"
				if layer == "gdn" {
					layerKind = "gdn"
				}
				file, src, args, g, defines, err := replayModuleSource(h200Props(), layerKind, shape, gdn, opt, o.tn, capacity)
				if err != nil {
					t.Fatal(err)
				}
				args = append([]string{arch}, args...)
				if layerKind == "mamba2" && opt.Mode == replay.Replay && !g.on {
					t.Fatalf("the group step is not planned (%s): this test would not compile it", g.why)
				}
				if layerKind == "gdn" && opt.Mode == replay.Replay && !g.verifyOn {
					t.Fatalf("the group verify is not planned (%s): this test would not compile it", g.why)
				}
				if (o.tn.foldStream || o.tn.flushStream) && !(g.streamFold && g.streamFlush) {
					t.Fatalf("the streamed folds are not planned (fold %v, flush %v): this test would not compile them", g.streamFold, g.streamFlush)
				}
				// The pipelined step and verify: in every replay module but
				// one with a bf16 ring (its producer spilled widening rows).
				pipeOn := opt.Mode == replay.Replay && opt.Ring == numeric.F32
				if got := strings.Contains(strings.Join(defines, " "), "-DNCW="); got != pipeOn {
					t.Fatalf("the pipelined kernels planned %v, want %v (defines %v)", got, pipeOn, defines)
				}
				// The pipelined folds: Mamba-2's by default (but with an
				// nvfp4 read copy), GDN's when asked for.
				foldsOn := o.tn.folds == "pipe" || layerKind == "mamba2" && opt.Mode == replay.Replay && opt.ReadCopy != numeric.NVFP4
				if foldsOn && !strings.Contains(strings.Join(defines, " "), "-DFNSTAGE=") {
					t.Fatalf("the pipelined folds are not planned (defines %v): this test would not compile them", defines)
				}
				// Nano's pipelined folds: on the tensor cores but where
				// turned off.
				if tc := slices.Contains(defines, "-DM2_TC_FOLD=1"); layer == "mamba2" && foldsOn && tc != (o.tn.m2TCFold != "0") {
					t.Fatalf("the tensor-core folds planned %v (defines %v): this test would not compile the module it means to", tc, defines)
				}
				// The verify's fold dots where asked for (Mamba-2 fp32 has
				// them by default).
				if dots := slices.Contains(defines, "-DVFOLD_DOTS=1"); o.tn.vfoldDots == "1" && !dots {
					t.Fatalf("the verify's fold dots are not planned (defines %v): this test would not compile them", defines)
				}
				ptx, err := n.build(file, src, args, false)
				if err != nil {
					t.Fatalf("NVRTC %d.%d: %v", n.major, n.minor, err)
				}
				checkModeKernels(t, ptx, layerKind, opt.Mode)
			})
		}
	}
}

// checkModeKernels checks that a module of a layerKind cache in mode holds
// what the constructors look up in it (bindKernels' modeKernels, commit and
// cursor_verify; a replay module's small batches' early verify, which
// bindEarlyVerify looks up, and Mamba-2's one-kernel verify) and none of
// the other mode's kernels (CACHE_MODE: a baseline module compiles its two
// kernels alone).
func checkModeKernels(t *testing.T, ptx []byte, layerKind string, mode replay.Mode) {
	t.Helper()
	kernels := func(m replay.Mode) []string {
		c := replayCommon{kind: layerKind, opt: replay.Options{Mode: m}}
		var names []string
		for _, k := range c.modeKernels() {
			names = append(names, k.name)
		}
		if m == replay.Replay {
			names = append(names, map[string][]string{
				"mamba2": {"mamba2_replay_verify_small", "mamba2_replay_verify_small_early"},
				"gdn":    {"gdn_replay_verify_early"},
			}[layerKind]...)
		}
		return names
	}
	other := replay.Replay
	if mode == replay.Replay {
		other = replay.Baseline
	}
	for _, name := range append(kernels(mode), "commit", "cursor_verify") {
		if !bytes.Contains(ptx, []byte(".entry "+name+"(")) {
			t.Errorf("no %s in the %v module", name, mode)
		}
	}
	for _, name := range kernels(other) {
		if bytes.Contains(ptx, []byte(".entry "+name+"(")) {
			t.Errorf("%s in the %v module (CACHE_MODE: its mode's kernels alone)", name, mode)
		}
	}
}

// moduleCompiler is this machine's NVRTC and the option that has it emit
// PTX for the newest architecture it supports up to sm_90; the test skips
// without one. PTX, not SASS: the pipelined kernels' Hopper instructions
// are inline PTX that an older NVRTC's assembler rejects (11.8's for sm_90
// does not know the mbarrier completion forms of cp.async.bulk), so this
// checks the C++ side; the device run checks the rest.
func moduleCompiler(t *testing.T) (*nvrtcAPI, string) {
	t.Helper()
	n, err := loadNVRTC(newSearchPlan(os.Getenv, nil))
	if err != nil {
		t.Skipf("no NVRTC on this machine (%v): the GPU machine compiles every module in the replay tests", err)
	}
	best := 0
	for _, a := range n.archs {
		if a <= 90 && a > best {
			best = a
		}
	}
	if best == 0 {
		t.Skipf("NVRTC %d.%d emits nothing up to sm_90 (%v)", n.major, n.minor, n.archs)
	}
	return n, fmt.Sprintf("--gpu-architecture=compute_%d", best)
}

// skipNearDeadline skips a module compile within two minutes of the test
// binary's deadline: a machine with NVRTC and no GPU compiles every module
// in this file, 10-30 s each on two cores, and the package's default ten
// minutes would otherwise end in a timeout panic (`go test -timeout 30m`
// compiles them all).
func skipNearDeadline(t *testing.T) {
	t.Helper()
	if dl, ok := t.Deadline(); ok && time.Until(dl) < 2*time.Minute {
		t.Skipf("%v to the test binary's deadline: not compiled (go test -timeout gives more)", time.Until(dl).Round(time.Second))
	}
}

// TestHeadSplitModulesCompile compiles the small-batch modules of split
// heads (HSPLIT: Qwen3.5-4B's value heads and Nemotron-3-Nano's heads in 2
// and 4) as the caches build them, with whatever NVRTC this machine has.
func TestHeadSplitModulesCompile(t *testing.T) {
	n, arch := moduleCompiler(t)
	for _, tc := range []struct {
		layer  string
		state  numeric.Format
		split  int
		verify bool // the small verify in the module too (REPLAYSSM_CUDA_SPLIT_VERIFY=0: not)
	}{
		{"gdn", numeric.F32, 4, false}, {"gdn", numeric.BF16, 2, false}, {"mamba2", numeric.F32, 2, false}, {"mamba2", numeric.BF16, 4, false},
		{"gdn", numeric.F32, 4, true}, {"gdn", numeric.BF16, 4, true}, {"mamba2", numeric.F32, 2, true}, {"mamba2", numeric.BF16, 2, true},
	} {
		t.Run(fmt.Sprintf("%s/%v/%d/verify=%v", tc.layer, tc.state, tc.split, tc.verify), func(t *testing.T) {
			t.Parallel()
			skipNearDeadline(t)
			opt, err := replayDefaults(replay.Options{Mode: replay.Replay, State: tc.state, MaxDraft: 4})
			if err != nil {
				t.Fatal(err)
			}
			tn := tuning{headSplit: tc.split, smallBatch: defaultSmallBatch, wholeVerify: !tc.verify}
			heads, rows := qwen4bShape.ValueHeads, qwen4bShape.ValueDim
			source := func() (splitModule, error) { return gdnSplitSource(h200Props(), qwen4bShape, opt, tc.split, tn) }
			if tc.layer == "mamba2" {
				heads, rows = nanoShape.Heads, nanoShape.HeadDim
				source = func() (splitModule, error) { return mamba2SplitSource(h200Props(), nanoShape, opt, tc.split, tn) }
			}
			if split, why := planHeadSplit(opt, heads, rows, h200Props().smCount, tn); split != tc.split {
				t.Fatalf("planned %d (%s), want %d", split, why, tc.split)
			}
			m, err := source()
			if err != nil {
				t.Fatal(err)
			}
			if m.threads < 64 {
				t.Fatalf("%d threads: the steps need two warps", m.threads)
			}
			ptx, err := n.build(m.file, m.src, append([]string{arch}, m.opts...), false)
			if err != nil {
				t.Fatalf("NVRTC %d.%d: %v", n.major, n.minor, err)
			}
			// The verify the split module must hold (its name as
			// buildHeadSplit looks it up), and only then.
			verify := map[string]string{"gdn": "gdn_replay_verify", "mamba2": "mamba2_replay_verify_small"}[tc.layer]
			for _, name := range []string{verify, verify + "_early"} {
				if got := bytes.Contains(ptx, []byte(".entry "+name+"(")); got != tc.verify {
					t.Errorf("%s in the split module: %v, want %v", name, got, tc.verify)
				}
			}
			if !bytes.Contains(ptx, []byte(".entry "+tc.layer+"_replay_step_small(")) {
				t.Errorf("no %s_replay_step_small in the split module", tc.layer)
			}
		})
	}
}

// TestReplayKernelSpills assembles the group kernels for sm_90 with ptxas
// (REPLAYSSM_PTXAS, else ptxas on the path or under CUDA_HOME or
// /usr/local/cuda; tools/get_ptxas.sh fetches one on a Debian machine) and
// reports their registers and spills, the way TestReplayKernelResources
// does on the GPU: a kernel that spills at its register bound slows down
// (session 9: a group step that flushed its own slots, 268 bytes of spill
// loads).
// The modules are planned without the pipelined kernels, whose Hopper PTX
// an older ptxas rejects; the group kernels do not depend on them. It
// needs NVRTC and ptxas, no driver, and skips without them.
func TestReplayKernelSpills(t *testing.T) {
	if shared.dev != nil {
		// The GPU machine's CUDA 13 ptxas rejects some of this PTX (an
		// illegal rounding modifier on a mov in an nvfp4 module, session
		// 14); the driver's own figures are TestReplayKernelResources'.
		t.Skip("a GPU is here: TestReplayKernelResources reads the kernels' registers and spills from the driver")
	}
	ptxas, n := assemblyTools(t)
	noPipe := &Device{ccMajor: 8, smCount: 132, sharedOptin: 227 << 10, sharedPerSM: 228 << 10}
	nano := nanoShape
	super := superShape
	gdn := qwen4bShape
	// The group kernels may spill a few scalars (the default Nano fp32 group
	// step: 8 bytes); a spill in their streams is tens to hundreds of bytes.
	const maxSpillLoads = 64
	for _, tc := range []struct {
		name  string
		layer string
		m2    ssm.Mamba2Shape // the Mamba-2 layer's (GDN: Qwen3.5-4B's, gdn)
		opt   replay.Options
		tn    tuning
	}{
		{"nano/fp32", "mamba2", nano, replay.Options{Mode: replay.Replay}, tuning{}},
		{"nano/bf16", "mamba2", nano, replay.Options{Mode: replay.Replay, State: numeric.BF16}, tuning{}},
		{"nano/bf16+nvfp4", "mamba2", nano, replay.Options{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4}, tuning{}},
		{"super/fp32", "mamba2", super, replay.Options{Mode: replay.Replay}, tuning{}},
		{"qwen3.5-4b/fp32", "gdn", ssm.Mamba2Shape{}, replay.Options{Mode: replay.Replay}, tuning{}},
		{"qwen3.5-4b/bf16+nvfp4", "gdn", ssm.Mamba2Shape{}, replay.Options{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4}, tuning{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			skipNearDeadline(t)
			tc.opt.MaxDraft = 4
			opt, err := replayDefaults(tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			file, src, args, _, _, err := replayModuleSource(noPipe, tc.layer, tc.m2, gdn, opt, tc.tn, 8)
			if err != nil {
				t.Fatal(err)
			}
			ptx, err := n.build(file, src, append([]string{"--gpu-architecture=compute_90"}, args...), false)
			if err != nil {
				t.Fatalf("NVRTC %d.%d: %v", n.major, n.minor, err)
			}
			res := ptxasResources(assemble(t, ptxas, t.TempDir(), ptx))
			for _, k := range []string{tc.layer + "_group_step", tc.layer + "_group_verify"} {
				r, ok := res[k]
				if !ok {
					t.Errorf("ptxas reported no %s", k)
					continue
				}
				t.Logf("%s: %d registers, %d bytes of spill stores, %d of spill loads", k, r.regs, r.spillStores, r.spillLoads)
				if r.spillLoads > maxSpillLoads {
					t.Errorf("%s spills: %d bytes of spill loads (at most %d)", k, r.spillLoads, maxSpillLoads)
				}
			}
		})
	}
}

// assemble writes ptx to dir/module_ptxas.ptx, assembles it for sm_90 into
// dir/module.cubin with ptxas -v and returns the report (also written to
// dir/ptxas.txt); a failure ends t with the report.
func assemble(t *testing.T, ptxas, dir string, ptx []byte) string {
	t.Helper()
	in := filepath.Join(dir, "module_ptxas.ptx")
	// The module loader's PTX ends in a NUL, which a CUDA 13 ptxas reads
	// as an unexpected end of file.
	if err := os.WriteFile(in, bytes.TrimRight(ptx, "\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(ptxas, "-arch=sm_90", "-v", "-o", filepath.Join(dir, "module.cubin"), in).CombinedOutput()
	if werr := os.WriteFile(filepath.Join(dir, "ptxas.txt"), out, 0o644); werr != nil {
		t.Fatal(werr)
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", ptxas, err, out)
	}
	return string(out)
}

// findPtxas is the ptxas to use: REPLAYSSM_PTXAS, else the path, CUDA_HOME
// or /usr/local/cuda ("" if none).
func findPtxas(getenv func(string) string) string {
	if p := getenv("REPLAYSSM_PTXAS"); p != "" {
		return p
	}
	if p, err := exec.LookPath("ptxas"); err == nil {
		return p
	}
	for _, dir := range []string{getenv("CUDA_HOME"), "/usr/local/cuda"} {
		if dir == "" {
			continue
		}
		if _, err := os.Stat(dir + "/bin/ptxas"); err == nil {
			return dir + "/bin/ptxas"
		}
	}
	return ""
}

// kernelResources is what ptxas -v says of one entry function.
type kernelResources struct{ regs, spillStores, spillLoads int }

// ptxasResources reads ptxas -v's report ("Compiling entry function 'k'",
// "N bytes stack frame, N bytes spill stores, N bytes spill loads", "Used N
// registers") into resources per entry function.
func ptxasResources(report string) map[string]kernelResources {
	res := map[string]kernelResources{}
	cur := ""
	for _, line := range strings.Split(report, "\n") {
		switch {
		case strings.Contains(line, "Compiling entry function '"):
			cur = strings.SplitN(strings.SplitN(line, "'", 2)[1], "'", 2)[0]
		case cur != "" && strings.Contains(line, "bytes spill stores"):
			r := res[cur]
			var frame int
			fmt.Sscanf(strings.TrimSpace(line), "%d bytes stack frame, %d bytes spill stores, %d bytes spill loads", &frame, &r.spillStores, &r.spillLoads)
			res[cur] = r
		case cur != "" && strings.Contains(line, "Used "):
			r := res[cur]
			fmt.Sscanf(line[strings.Index(line, "Used "):], "Used %d registers", &r.regs)
			res[cur] = r
		}
	}
	return res
}

// TestPlanFoldStream checks where a GDN verify's early folds are streamed
// (planFoldStream: the tensor-core fold of cached u on sm_90, with the
// group verify and its resident-grid folds, unless a knob says otherwise)
// and what gdnModule then defines and sizes: one buffer of strips a block
// for fp32 checkpoints, two for 2-byte ones (FS_DB), four warps a block
// (FS_WARPS); and where the flush streams (planFlushStream), in blocks of
// eight warps for 2-byte checkpoints of 128-row matrices and four for
// fp32 ones (FL_WARPS).
func TestPlanFoldStream(t *testing.T) {
	base := replay.Options{Mode: replay.Replay, Window: 16, MaxDraft: 4}
	with := func(f func(*replay.Options)) replay.Options {
		o := base
		f(&o)
		return o
	}
	def := envTuning(func(string) string { return "" })
	knob := func(f func(*tuning)) tuning {
		tn := def
		f(&tn)
		return tn
	}
	ampere := &Device{ccMajor: 8, smCount: 108, sharedOptin: 163 << 10, sharedPerSM: 164 << 10}
	bf16 := with(func(o *replay.Options) { o.State = numeric.BF16 })
	cases := []struct {
		name  string
		d     *Device
		shape ssm.GDNShape
		opt   replay.Options
		tn    tuning
		want  bool
		nb    int // buffers a block
		warps int // FS_WARPS
	}{
		{"fp32", h200Props(), qwen4bShape, base, def, true, 1, 4},
		{"bf16", h200Props(), qwen4bShape, bf16, def, true, 2, 4},
		{"fp16 122B", h200Props(), qwen122bShape, with(func(o *replay.Options) { o.State = numeric.F16 }), def, true, 2, 4},
		{"bf16 two warps", h200Props(), qwen4bShape, bf16, knob(func(tn *tuning) { tn.fsWarps = 2 }), true, 2, 2},
		{"bf16 one buffer", h200Props(), qwen4bShape, bf16, knob(func(tn *tuning) { tn.fsDB = "0" }), true, 1, 4},
		{"fp32 two buffers", h200Props(), qwen4bShape, base, knob(func(tn *tuning) { tn.fsDB = "1" }), true, 2, 4},
		{"eight warps", h200Props(), qwen4bShape, base, knob(func(tn *tuning) { tn.fsWarps = 8 }), true, 1, 8},
		{"nvfp4 read copy", h200Props(), qwen4bShape, with(func(o *replay.Options) { o.ReadCopy = numeric.NVFP4 }), def, false, 0, 0},
		{"exact fold", h200Props(), qwen4bShape, with(func(o *replay.Options) { o.ExactFold = true }), def, false, 0, 0},
		{"fp8 checkpoint", h200Props(), qwen4bShape, with(func(o *replay.Options) { o.State = numeric.E4M3 }), def, false, 0, 0},
		{"sm_80", ampere, qwen4bShape, base, def, false, 0, 0},
		{"knob off", h200Props(), qwen4bShape, base, knob(func(tn *tuning) { tn.foldStream = false }), false, 0, 0},
		{"one block an item", h200Props(), qwen4bShape, base, knob(func(tn *tuning) { tn.foldItems = false }), false, 0, 0},
		{"TC_FOLD given", h200Props(), qwen4bShape, base, knob(func(tn *tuning) { tn.defines = []string{"-DTC_FOLD=1"} }), false, 0, 0},
		{"no group verify", h200Props(), qwen4bShape, with(func(o *replay.Options) { o.MaxDraft = 1 }), def, false, 0, 0},
		{"small heads", h200Props(), ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8}, base, def, false, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, g, _, defines := gdnModule(c.d, c.shape, c.opt, c.tn)
			if g.streamFold != c.want {
				t.Fatalf("streamed early folds %v, want %v", g.streamFold, c.want)
			}
			if !c.want {
				if slices.Contains(defines, "-DFOLD_STREAM=1") {
					t.Fatalf("FOLD_STREAM defined without the plan: %v", defines)
				}
				return
			}
			w := c.warps
			for _, d := range []string{"-DFOLD_STREAM=1", fmt.Sprintf("-DFS_WARPS=%d", w), fmt.Sprintf("-DFS_DB=%d", c.nb-1)} {
				if !slices.Contains(defines, d) {
					t.Errorf("defines %v lack %s", defines, d)
				}
			}
			if want := c.nb * w * 16 * c.shape.KeyDim * elemBytes(c.opt.State); g.streamThreads != 32*w || g.streamSmem != want {
				t.Errorf("%d threads and %d bytes of dynamic shared memory, want %d and %d", g.streamThreads, g.streamSmem, 32*w, want)
			}
		})
	}
	// The flush by strips where the folds can stream (by default;
	// REPLAYSSM_CUDA_FLUSH_STREAM=0 keeps gdn_replay_flush), with or
	// without the verify's streamed folds, in one buffer of strips.
	for _, c := range []struct {
		name      string
		opt       replay.Options
		tn        tuning
		want, fol bool
		d         *Device // nil: the H200's
		warps     int     // its strips a block
	}{
		{"flush fp32", base, def, true, true, nil, 4},
		{"flush bf16", bf16, def, true, true, nil, 8},
		{"flush bf16, four warps", bf16, knob(func(tn *tuning) { tn.flWarps = 4 }), true, true, nil, 4},
		{"flush fp32, the folds' eight warps", base, knob(func(tn *tuning) { tn.fsWarps = 8 }), true, true, nil, 8},
		{"flush fp32, two buffers for the folds", base, knob(func(tn *tuning) { tn.fsDB = "1" }), true, true, nil, 4},
		{"flush bf16, packed rows", bf16, knob(func(tn *tuning) { tn.flPad = "0" }), true, true, nil, 8},
		{"flush fp32, padded rows", base, knob(func(tn *tuning) { tn.flPad = "1" }), true, true, nil, 4},
		{"flush without the fold", base, knob(func(tn *tuning) { tn.foldStream = false }), true, false, nil, 4},
		{"flush knob off", base, knob(func(tn *tuning) { tn.flushStream = false }), false, true, nil, 0},
		{"flush with an nvfp4 read copy", with(func(o *replay.Options) { o.ReadCopy = numeric.NVFP4 }), def, false, false, nil, 0},
		{"flush on sm_80", base, def, false, false, ampere, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := c.d
			if d == nil {
				d = h200Props()
			}
			_, g, _, defines := gdnModule(d, qwen4bShape, c.opt, c.tn)
			if g.streamFlush != c.want || g.streamFold != c.fol {
				t.Fatalf("streamed flush %v, folds %v; want %v, %v", g.streamFlush, g.streamFold, c.want, c.fol)
			}
			if got := slices.Contains(defines, "-DFLUSH_STREAM=1"); got != c.want {
				t.Errorf("FLUSH_STREAM defined %v, want %v (%v)", got, c.want, defines)
			}
			// 2-byte checkpoints' strips in padded rows (FL_PAD), 16
			// elements longer, unless the knob says otherwise.
			pad, row := 0, qwen4bShape.KeyDim
			if c.tn.flPad == "1" || c.tn.flPad == "" && elemBytes(c.opt.State) == 2 && g.threads == 64 {
				pad, row = 1, row+16
			}
			if want := c.warps * 16 * row * elemBytes(c.opt.State); c.want && (g.flushSmem != want || g.flushThreads != 32*c.warps) {
				t.Errorf("flush: %d threads and %d bytes of dynamic shared memory, want %d and %d", g.flushThreads, g.flushSmem, 32*c.warps, want)
			}
			for _, d := range []string{fmt.Sprintf("-DFL_WARPS=%d", c.warps), fmt.Sprintf("-DFL_PAD=%d", pad)} {
				if c.want && !slices.Contains(defines, d) {
					t.Errorf("defines %v lack %s", defines, d)
				}
			}
		})
	}
}

// TestFlushPadPlan checks where the flush pads its shared rows (FL_PAD):
// for 2-byte checkpoints beside 64-thread group steps (Qwen3.5-4B), not
// beside 122B's 128-thread ones nor for fp32, unless the knob says.
func TestFlushPadPlan(t *testing.T) {
	base := replay.Options{Mode: replay.Replay, Window: 16, MaxDraft: 4}
	bf16 := base
	bf16.State = numeric.BF16
	def := envTuning(func(string) string { return "" })
	forced := def
	forced.flPad = "1"
	for _, c := range []struct {
		name  string
		shape ssm.GDNShape
		opt   replay.Options
		tn    tuning
		pad   int
	}{
		{"4B bf16", qwen4bShape, bf16, def, 1},
		{"122B bf16", qwen122bShape, bf16, def, 0},
		{"4B fp32", qwen4bShape, base, def, 0},
		{"122B bf16, forced", qwen122bShape, bf16, forced, 1},
	} {
		_, g, _, defines := gdnModule(h200Props(), c.shape, c.opt, c.tn)
		if !g.streamFlush {
			t.Fatalf("%s: the flush does not stream", c.name)
		}
		want := fmt.Sprintf("-DFL_PAD=%d", c.pad)
		rowBytes := (c.shape.KeyDim + 16*c.pad) * elemBytes(c.opt.State)
		if !slices.Contains(defines, want) || g.flushSmem != g.flushThreads/32*16*rowBytes {
			t.Errorf("%s: defines %v, %d bytes of strips for %d threads; want %s and rows of %d bytes", c.name, defines, g.flushSmem, g.flushThreads, want, rowBytes)
		}
	}
}

// TestFlushFewPlan checks the flush's defines for FL_FEW: one block an SM
// (h200Props: 132) from batch 256 for fp32, bf16 and fp16 checkpoints by
// default, not where turned off, and never with the item counter
// (FL_QUEUE).
func TestFlushFewPlan(t *testing.T) {
	base := replay.Options{Mode: replay.Replay, Window: 16, MaxDraft: 4}
	bf16, fp16 := base, base
	bf16.State = numeric.BF16
	fp16.State = numeric.F16
	def := envTuning(func(string) string { return "" })
	asked, queue, off := def, def, def
	asked.flFew = "8"
	queue.flQueue = "1"
	off.flFew = "0"
	few := []string{"-DFL_FEW=4", "-DFL_KEEP=132", "-DFL_FEW_BATCH=256"}
	for _, c := range []struct {
		name  string
		opt   replay.Options
		tn    tuning
		want  []string // nil: no FL_FEW define
		queue bool
	}{
		{"fp32", base, def, few, false},
		{"bf16", bf16, def, few, false},
		{"bf16, off", bf16, off, nil, false},
		{"fp16", fp16, def, few, false},
		{"bf16, asked", bf16, asked, []string{"-DFL_FEW=8", "-DFL_KEEP=132", "-DFL_FEW_BATCH=256"}, false},
		{"fp32, off", base, off, nil, false},
		{"fp32, queue", base, queue, nil, true},
	} {
		_, _, _, defines := gdnModule(h200Props(), qwen4bShape, c.opt, c.tn)
		has := slices.ContainsFunc(defines, func(d string) bool { return strings.HasPrefix(d, "-DFL_FEW=") })
		if c.want == nil && has || c.want != nil && !has {
			t.Errorf("%s: defines %v, want FL_FEW %v", c.name, defines, c.want)
		}
		for _, w := range c.want {
			if !slices.Contains(defines, w) {
				t.Errorf("%s: defines %v lack %s", c.name, defines, w)
			}
		}
		if got := slices.Contains(defines, "-DFL_QUEUE=1"); got != c.queue {
			t.Errorf("%s: FL_QUEUE %v, want %v", c.name, got, c.queue)
		}
	}
}

// TestStreamWarps checks the stream kernels' warps a block: the early
// folds four, or the knob's; the flush eight for 2-byte checkpoints whose
// matrices split into eight strips of 16 rows, else the folds' count, or
// its own knob's.
func TestStreamWarps(t *testing.T) {
	for _, c := range []struct {
		state          numeric.Format
		dv             int
		fold, flush    int // the knobs (0: none)
		wantFold, want int
	}{
		{numeric.F32, 128, 0, 0, 4, 4}, {numeric.BF16, 128, 0, 0, 4, 8}, {numeric.F16, 256, 0, 0, 4, 8},
		{numeric.BF16, 64, 0, 0, 4, 4}, {numeric.BF16, 192, 0, 0, 4, 4}, {numeric.BF16, 128, 2, 0, 2, 8},
		{numeric.BF16, 128, 0, 4, 4, 4}, {numeric.F32, 128, 8, 0, 8, 8}, {numeric.F32, 128, 2, 8, 2, 8},
	} {
		tn := tuning{fsWarps: c.fold, flWarps: c.flush}
		if got, gotFlush := tn.foldWarps(), tn.flushWarps(c.state, c.dv); got != c.wantFold || gotFlush != c.want {
			t.Errorf("%v, %d rows, knobs %d / %d: %d / %d warps, want %d / %d", c.state, c.dv, c.fold, c.flush, got, gotFlush, c.wantFold, c.want)
		}
	}
}

// TestUtilityKernelsCompile compiles the kernel files outside the replay
// modules (copy.cu's copy16 and read16, fill.cu, saxpy.cu) with this
// machine's NVRTC, as Device.Kernel does on the GPU, and checks that each
// entry point the Go side looks up is in the PTX.
func TestUtilityKernelsCompile(t *testing.T) {
	n, arch := moduleCompiler(t)
	for file, entries := range map[string][]string{
		"copy.cu":  {"copy16", "read16", "read_items"},
		"fill.cu":  {"fill_f32", "fill_uniform_f32", "fill_uniform_bf16"},
		"saxpy.cu": {"saxpy_f32"},
	} {
		src, err := KernelSource(file)
		if err != nil {
			t.Fatal(err)
		}
		ptx, err := n.build(file, src, []string{arch}, false)
		if err != nil {
			t.Fatalf("%s: NVRTC %d.%d: %v", file, n.major, n.minor, err)
		}
		for _, e := range entries {
			if !bytes.Contains(ptx, []byte(".entry "+e+"(")) {
				t.Errorf("%s: no entry %s in its PTX", file, e)
			}
		}
	}
}

// TestBaselinePlansNoReplayKernels checks what lets a baseline cache bind
// its two kernels alone (its module has nothing else: CACHE_MODE): under
// every knob that turns a replay kernel on, a baseline module plans no
// pipelined step, group step, group verify, streamed fold or flush,
// pipelined folds or split heads, so no bind looks one up.
func TestBaselinePlansNoReplayKernels(t *testing.T) {
	d := h200Props()
	for _, tn := range []tuning{
		{}, {folds: "pipe"}, {v5: true}, {groupAll: true}, {foldItems: true, foldStream: true, flushStream: true},
		{headSplit: 2}, {vfoldDots: "1"}, {overlap: "1", overlapVer: true},
	} {
		for _, f := range []numeric.Format{numeric.F32, numeric.BF16} {
			opt, err := replayDefaults(replay.Options{Mode: replay.Baseline, State: f, MaxDraft: 4})
			if err != nil {
				t.Fatal(err)
			}
			for _, layer := range []string{"mamba2", "gdn"} {
				var p pipeline
				var g groupStep
				var fp foldPipe
				heads, rows := nanoShape.Heads, nanoShape.HeadDim
				if layer == "mamba2" {
					p, g, fp, _ = mamba2Module(d, nanoShape, opt, tn)
				} else {
					p, g, fp, _ = gdnModule(d, qwen4bShape, opt, tn)
					heads, rows = qwen4bShape.ValueHeads, qwen4bShape.ValueDim
				}
				split, _ := planHeadSplit(opt, heads, rows, d.smCount, tn)
				if p.on || g.on || g.verifyOn || g.streamFold || g.streamFlush || fp.on || split != 1 {
					t.Errorf("%s %v baseline, knobs %+v: pipeline %v, group step %v, group verify %v, streams %v/%v, folds %v, split %d; want none",
						layer, f, tn, p.on, g.on, g.verifyOn, g.streamFold, g.streamFlush, fp.on, split)
				}
			}
		}
	}
}

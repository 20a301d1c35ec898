package cuda

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// h200Props is a Device with an H200's properties and no driver behind it:
// enough for the pipeline planner.
func h200Props() *Device {
	return &Device{ccMajor: 9, smCount: 132, sharedOptin: 227 << 10, sharedPerSM: 228 << 10}
}

// TestReplayModulesCompile compiles the replay modules that the caches
// build, for every state and read-copy format, baseline and replay, with the
// options the constructors give them (pipeline planned for an H200), using
// whatever NVRTC this machine has, to PTX for the newest architecture it
// supports up to sm_90. A kernel source error then shows here, on a machine
// without a GPU, before a device run. It needs NVRTC only (no driver) and
// skips without it.
func TestReplayModulesCompile(t *testing.T) {
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
	// PTX, not SASS: the pipelined kernels' Hopper instructions are inline
	// PTX that an older NVRTC's assembler rejects (11.8's for sm_90 does not
	// know the mbarrier completion forms of cp.async.bulk), so this checks
	// the C++ side; the device run checks the rest.
	arch := fmt.Sprintf("--gpu-architecture=compute_%d", best)
	mamba2 := ssm.Mamba2Shape{Heads: 96, HeadDim: 80, StateSize: 128, Groups: 8}
	gdn := ssm.GDNShape{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128}
	opts := []struct {
		name string
		opt  replay.Options
		tn   tuning // experiment knobs
	}{
		{"baseline/fp32", replay.Options{Mode: replay.Baseline}, tuning{}},
		{"baseline/bf16", replay.Options{Mode: replay.Baseline, State: numeric.BF16}, tuning{}},
		{"baseline/e4m3", replay.Options{Mode: replay.Baseline, State: numeric.E4M3}, tuning{}},
		{"replay/fp32", replay.Options{Mode: replay.Replay}, tuning{}},
		{"replay/fp32+bf16", replay.Options{Mode: replay.Replay, ReadCopy: numeric.BF16}, tuning{}},
		{"replay/bf16+nvfp4", replay.Options{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4}, tuning{}},
		{"replay/fp16+e4m3", replay.Options{Mode: replay.Replay, State: numeric.F16, ReadCopy: numeric.E4M3}, tuning{}},
		{"replay/e4m3", replay.Options{Mode: replay.Replay, State: numeric.E4M3}, tuning{}},
		{"replay/bf16/128 threads", replay.Options{Mode: replay.Replay, State: numeric.BF16}, tuning{groupNT: 128}}, // GDN: GV_PAIR
		{"replay/fp32/load first", replay.Options{Mode: replay.Replay}, tuning{defines: []string{"-DLOAD_FIRST=1"}}},
		{"replay/bf16+nvfp4/load first", replay.Options{Mode: replay.Replay, State: numeric.BF16, ReadCopy: numeric.NVFP4},
			tuning{defines: []string{"-DLOAD_FIRST=1"}}},
		{"replay/bf16", replay.Options{Mode: replay.Replay, State: numeric.BF16}, tuning{}},
		{"replay/fp16", replay.Options{Mode: replay.Replay, State: numeric.F16}, tuning{}},
		{"replay/fp32/flush kernel", replay.Options{Mode: replay.Replay}, tuning{}}, // REPLAYSSM_CUDA_GROUP_FLUSH=0
	}
	const capacity = 8
	// Mamba-2 2.7B's layer: 80 heads of 64 in one group (the group step's
	// largest tables, three ring entries staged), in two formats, no drafts.
	oneGroup := ssm.Mamba2Shape{Heads: 80, HeadDim: 64, StateSize: 128, Groups: 1}
	for _, layer := range []string{"mamba2", "gdn", "mamba2-1group"} {
		for _, o := range opts {
			if layer == "mamba2-1group" && o.name != "replay/fp32" && o.name != "replay/bf16+nvfp4" {
				continue
			}
			t.Run(layer+"/"+o.name, func(t *testing.T) {
				t.Parallel()
				o.opt.MaxDraft = 4
				// The group flush (Mamba-2, GFLUSH) as the constructors plan it.
				o.tn.groupFlush = !strings.HasSuffix(o.name, "/flush kernel")
				if layer == "mamba2-1group" {
					o.opt.MaxDraft = 0 // with drafts its tables exceed static shared memory: v5 / v4 take it
				}
				opt, err := replayDefaults(o.opt)
				if err != nil {
					t.Fatal(err)
				}
				var file string
				var rows, cols, heads int
				var defines []string
				if layer != "gdn" {
					shape := mamba2
					if layer == "mamba2-1group" {
						shape = oneGroup
					}
					file, rows, cols, heads = "replay_mamba2.cu", shape.HeadDim, shape.StateSize, shape.Heads
					var g groupStep
					_, g, defines = mamba2Module(h200Props(), shape, opt, o.tn)
					if opt.Mode == replay.Replay && !g.on {
						t.Fatalf("the group step is not planned (%s): this test would not compile it", g.why)
					}
				} else {
					file, rows, cols, heads = "replay_gdn.cu", gdn.ValueDim, gdn.KeyDim, gdn.ValueHeads
					var g groupStep
					_, g, defines = gdnModule(h200Props(), gdn, opt, o.tn)
					if opt.Mode == replay.Replay && !g.verifyOn {
						t.Fatalf("the group verify is not planned (%s): this test would not compile it", g.why)
					}
				}
				if opt.Mode == replay.Replay && !strings.Contains(strings.Join(defines, " "), "-DNCW=") {
					t.Fatalf("the pipelined kernels are not planned (defines %v): this test would not compile them", defines)
				}
				src, err := replaySource(file)
				if err != nil {
					t.Fatal(err)
				}
				args := append([]string{arch}, replayModuleOptions(opt, rows, cols, capacity*stateBuffers(opt)*heads, defines, o.tn)...)
				if _, err := n.build(file, src, args, false); err != nil {
					t.Fatalf("NVRTC %d.%d: %v", n.major, n.minor, err)
				}
			})
		}
	}
}

package cuda

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// TestPlanPipeline checks the launch plan of the pipelined kernels for the
// four target layer shapes on an H200-like device (no GPU needed): the
// blocks' shared memory fits, every stage has its own consumer group, the
// resident blocks fit the SM's shared memory and threads, an nvfp4 read copy
// takes at most four stages, and the plan is off (with its reason) on a
// pre-Hopper GPU, for shapes the bulk copies cannot move, and when asked.
func TestPlanPipeline(t *testing.T) {
	h200 := h200Props()
	type shape struct {
		name       string
		mamba2     bool
		rows, cols int
	}
	shapes := []shape{
		{"nemotron-3-nano-4b", true, 80, 128},
		{"nemotron-3-super", true, 64, 128},
		{"qwen3.5-4b", false, 128, 128},
		{"qwen3.5-122b", false, 128, 128},
	}
	opts := []replay.Options{
		{Mode: replay.Replay, Window: 16},
		{Mode: replay.Replay, Window: 16, MaxDraft: 4},
		{Mode: replay.Replay, Window: 16, State: numeric.BF16},
		{Mode: replay.Replay, Window: 16, MaxDraft: 4, ReadCopy: numeric.NVFP4},
		{Mode: replay.Replay, Window: 16, MaxDraft: 4, State: numeric.E4M3},
		{Mode: replay.Replay, Window: 16, MaxDraft: 4, State: numeric.F16, ReadCopy: numeric.E4M3},
		{Mode: replay.Replay, Window: 16, ReadCopy: numeric.BF16},
	}
	for _, sh := range shapes {
		for _, opt := range opts {
			t.Run(fmt.Sprintf("%s/%v/%v/T%d", sh.name, opt.State, opt.ReadCopy, opt.MaxDraft), func(t *testing.T) {
				var stage, scratch int
				if sh.mamba2 {
					stage, scratch = mamba2PipeBytes(sh.rows, sh.cols, opt, replayRing(opt))
				} else {
					stage, scratch = gdnPipeBytes(sh.cols, sh.rows, opt, replayRing(opt))
				}
				p, defines := planPipeline(h200, stage, scratch, opt, sh.rows, sh.cols, tuning{})
				if !p.on {
					t.Fatalf("pipeline off: %s", p.reasonDisabled)
				}
				if p.smem > h200.sharedOptin {
					t.Errorf("%d bytes of shared memory per block, the device allows %d", p.smem, h200.sharedOptin)
				}
				if p.stages < 2 || p.stages > pipeStages(opt) {
					t.Errorf("%d stages, want 2..%d", p.stages, pipeStages(opt))
				}
				if p.warps != pipeGroupWarps*p.stages {
					t.Errorf("%d consumer warps for %d stages, want one group of %d per stage", p.warps, p.stages, pipeGroupWarps)
				}
				if p.blocksPerSM < 1 || p.blocksPerSM*(p.smem+1024) > h200.sharedPerSM || p.blocksPerSM*32*(p.warps+1) > 2048 {
					t.Errorf("%d blocks per SM of %d bytes and %d threads do not fit", p.blocksPerSM, p.smem, 32*(p.warps+1))
				}
				if g := p.grid(1 << 20); int(g[0]) != h200.smCount*p.blocksPerSM {
					t.Errorf("grid %v for a large batch, want one wave of %d blocks", g, h200.smCount*p.blocksPerSM)
				}
				if g := p.grid(5); g[0] != 5 {
					t.Errorf("grid %v for 5 items, want 5 blocks", g)
				}
				want := []string{fmt.Sprintf("-DNSTAGE=%d", p.stages), fmt.Sprintf("-DNCW=%d", p.warps),
					fmt.Sprintf("-DSTAGE_BYTES=%d", p.stageBytes), fmt.Sprintf("-DSCR_BYTES=%d", p.scratchBytes)}
				for _, w := range want {
					if !strings.Contains(strings.Join(defines, " "), w) {
						t.Errorf("defines %v lack %s", defines, w)
					}
				}
				if p.stageBytes%128 != 0 || p.stageBytes < stage || p.scratchBytes < scratch {
					t.Errorf("stage %d / scratch %d bytes for a layout of %d / %d", p.stageBytes, p.scratchBytes, stage, scratch)
				}
			})
		}
	}
	for _, tc := range []struct {
		name   string
		d      *Device
		rows   int
		cols   int
		opt    replay.Options
		v4     bool
		reason string
	}{
		{"sm_80", &Device{ccMajor: 8, smCount: 108, sharedOptin: 163 << 10, sharedPerSM: 164 << 10}, 80, 128, replay.Options{Window: 16}, false, "compute capability 8"},
		{"unaligned rows", h200, 81, 128, replay.Options{Window: 16}, false, "16-byte multiples"},
		{"unaligned nvfp4 scales", h200, 8, 16, replay.Options{Window: 16, ReadCopy: numeric.NVFP4}, false, "16-byte multiples"},
		{"v4 asked for", h200, 80, 128, replay.Options{Window: 16}, true, "REPLAYSSM_CUDA_KERNELS=v4"},
		{"small shared memory", &Device{ccMajor: 9, smCount: 132, sharedOptin: 48 << 10, sharedPerSM: 100 << 10}, 80, 128, replay.Options{Window: 16}, false, "exceed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stage, scratch := mamba2PipeBytes(tc.rows, tc.cols, tc.opt, 16)
			p, defines := planPipeline(tc.d, stage, scratch, tc.opt, tc.rows, tc.cols, tuning{v4: tc.v4})
			if p.on || defines != nil || !strings.Contains(p.reasonDisabled, tc.reason) {
				t.Errorf("on %v, defines %v, reason %q; want off with %q", p.on, defines, p.reasonDisabled, tc.reason)
			}
		})
	}
}

// TestEnvTuning checks how the REPLAYSSM_CUDA_* knobs are read: set values
// win, malformed or out-of-range ones keep the defaults.
func TestEnvTuning(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want tuning
	}{
		{"unset", nil, tuning{foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"all set", map[string]string{
			"REPLAYSSM_CUDA_KERNELS": "v4", "REPLAYSSM_CUDA_PIPE_GROUPS": "2", "REPLAYSSM_CUDA_PIPE_BLOCKS": "3",
			"REPLAYSSM_CUDA_DEFINES": " -DA=1  -DB=0 ", "REPLAYSSM_CUDA_SMALL_BATCH": "0",
		}, tuning{v4: true, foldItems: true, foldStream: true, flushStream: true, pipeGroups: 2, pipeBlocks: 3, defines: []string{"-DA=1", "-DB=0"}, smallBatch: 0}},
		{"v5", map[string]string{"REPLAYSSM_CUDA_KERNELS": "v5"}, tuning{v5: true, foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"group threads", map[string]string{"REPLAYSSM_CUDA_GROUP_THREADS": "128"}, tuning{groupNT: 128, foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"group staged", map[string]string{"REPLAYSSM_CUDA_GROUP_STAGED": "6"}, tuning{groupX: 6, foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"fold early", map[string]string{"REPLAYSSM_CUDA_FOLD_ITEMS": "0"}, tuning{foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"streams", map[string]string{
			"REPLAYSSM_CUDA_FOLD_STREAM": "0", "REPLAYSSM_CUDA_FLUSH_STREAM": "0", "REPLAYSSM_CUDA_FS_WARPS": "8", "REPLAYSSM_CUDA_FS_DB": "1",
			"REPLAYSSM_CUDA_FL_PAD": "0",
		}, tuning{foldItems: true, fsWarps: 8, fsDB: "1", flPad: "0", smallBatch: defaultSmallBatch}},
		{"pipelined folds", map[string]string{"REPLAYSSM_CUDA_FOLDS": "pipe", "REPLAYSSM_CUDA_FOLD_STAGES": "3"},
			tuning{folds: "pipe", foldStages: 3, foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"folds by items", map[string]string{"REPLAYSSM_CUDA_FOLDS": "items"},
			tuning{folds: "items", foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"baseline threads", map[string]string{"REPLAYSSM_CUDA_BASE_THREADS": "128"},
			tuning{baseThreads: 128, foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"baseline stage off", map[string]string{"REPLAYSSM_CUDA_BASE_STAGE": "0"},
			tuning{baseStage: "0", foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"overlap", map[string]string{"REPLAYSSM_CUDA_OVERLAP": "1", "REPLAYSSM_CUDA_OVERLAP_BLOCKS": "132"},
			tuning{overlap: "1", overlapGrid: 132, foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"overlap at the default priority", map[string]string{"REPLAYSSM_CUDA_OVERLAP_PRIORITY": "0"},
			tuning{overlapLow: true, foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"overlap, the main stream's kernel first", map[string]string{"REPLAYSSM_CUDA_OVERLAP_ORDER": "main"},
			tuning{overlapMain: true, foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"flush on few blocks", map[string]string{"REPLAYSSM_CUDA_FL_FEW": "4"},
			tuning{flFew: "4", foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"flush queue", map[string]string{"REPLAYSSM_CUDA_FL_QUEUE": "1"},
			tuning{flQueue: "1", foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"overlap off", map[string]string{"REPLAYSSM_CUDA_OVERLAP": "0"},
			tuning{overlap: "0", foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"verify overlap", map[string]string{"REPLAYSSM_CUDA_VERIFY_OVERLAP": "1"},
			tuning{overlapVer: true, foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"carveout", map[string]string{"REPLAYSSM_CUDA_CARVEOUT": "100"},
			tuning{carveout: 100, foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"head split", map[string]string{"REPLAYSSM_CUDA_HEAD_SPLIT": "4"},
			tuning{headSplit: 4, foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"split verify (the default)", map[string]string{"REPLAYSSM_CUDA_SPLIT_VERIFY": "1"},
			tuning{foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"whole verify", map[string]string{"REPLAYSSM_CUDA_SPLIT_VERIFY": "0"},
			tuning{wholeVerify: true, foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"verify early always", map[string]string{"REPLAYSSM_CUDA_VERIFY_EARLY": "1"},
			tuning{verifyEarly: "1", foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"verify early never", map[string]string{"REPLAYSSM_CUDA_VERIFY_EARLY": "0"},
			tuning{verifyEarly: "0", foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"whole heads", map[string]string{"REPLAYSSM_CUDA_HEAD_SPLIT": "1"},
			tuning{headSplit: 1, foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"verify fold dots off", map[string]string{"REPLAYSSM_CUDA_VFOLD_DOTS": "0"},
			tuning{vfoldDots: "0", foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"verify fold dots asked for", map[string]string{"REPLAYSSM_CUDA_VFOLD_DOTS": "1", "REPLAYSSM_CUDA_M2_TC_FOLD": "0"},
			tuning{vfoldDots: "1", m2TCFold: "0", foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
		{"malformed", map[string]string{
			"REPLAYSSM_CUDA_KERNELS": "v6", "REPLAYSSM_CUDA_PIPE_GROUPS": "two",
			"REPLAYSSM_CUDA_GROUP_THREADS": "96", "REPLAYSSM_CUDA_GROUP_STAGED": "0", "REPLAYSSM_CUDA_PIPE_BLOCKS": "-1", "REPLAYSSM_CUDA_FOLD_ITEMS": "yes",
			"REPLAYSSM_CUDA_SMALL_BATCH": "-3", "REPLAYSSM_CUDA_FOLDS": "v7", "REPLAYSSM_CUDA_FOLD_STAGES": "1", "REPLAYSSM_CUDA_BASE_THREADS": "100",
			"REPLAYSSM_CUDA_BASE_STAGE": "yes", "REPLAYSSM_CUDA_OVERLAP": "on", "REPLAYSSM_CUDA_OVERLAP_BLOCKS": "-2", "REPLAYSSM_CUDA_VERIFY_OVERLAP": "yes", "REPLAYSSM_CUDA_HEAD_SPLIT": "0", "REPLAYSSM_CUDA_SPLIT_VERIFY": "off", "REPLAYSSM_CUDA_VERIFY_EARLY": "auto",
			"REPLAYSSM_CUDA_FOLD_STREAM": "no", "REPLAYSSM_CUDA_FLUSH_STREAM": "yes", "REPLAYSSM_CUDA_FS_WARPS": "3", "REPLAYSSM_CUDA_FS_DB": "2", "REPLAYSSM_CUDA_FL_PAD": "yes", "REPLAYSSM_CUDA_CARVEOUT": "101", "REPLAYSSM_CUDA_OVERLAP_PRIORITY": "low",
			"REPLAYSSM_CUDA_OVERLAP_ORDER": "group", "REPLAYSSM_CUDA_FL_QUEUE": "on", "REPLAYSSM_CUDA_FL_FEW": "65",
			"REPLAYSSM_CUDA_VFOLD_DOTS": "on", "REPLAYSSM_CUDA_M2_TC_FOLD": "yes",
		}, tuning{foldItems: true, foldStream: true, flushStream: true, smallBatch: defaultSmallBatch}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := envTuning(func(k string) string { return tc.env[k] })
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("envTuning = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestMatrixBytes checks the device layout sizes of one 80x128 matrix per
// format: elements, nvfp4 block scales, per-matrix scales.
func TestMatrixBytes(t *testing.T) {
	const e = 80 * 128
	tests := []struct {
		f                 numeric.Format
		codes, read, full int
	}{
		{numeric.F32, 4 * e, 4 * e, 4 * e},
		{numeric.F16, 2 * e, 2 * e, 2 * e},
		{numeric.BF16, 2 * e, 2 * e, 2 * e},
		{numeric.E4M3, e, e, e + 4},
		{numeric.NVFP4, e / 2, e/2 + e/16, e/2 + e/16 + 4},
	}
	for _, tt := range tests {
		read := readMatrixBytes(replay.Options{ReadCopy: tt.f}, e) // fp32: no copy, the fp32 state
		if got := codeBytes(tt.f, e); got != tt.codes {
			t.Errorf("%v: codeBytes %d, want %d", tt.f, got, tt.codes)
		}
		if read != tt.read {
			t.Errorf("%v: readMatrixBytes %d, want %d", tt.f, read, tt.read)
		}
		if got := matrixBytes(tt.f, e); got != tt.full {
			t.Errorf("%v: matrixBytes %d, want %d", tt.f, got, tt.full)
		}
	}
}

// TestBlocksPerSM checks the occupancy arithmetic the persistent grids are
// sized with against the CUDA occupancy calculator's figures for an H200
// (sm_90: 64K registers per SM allocated per warp in units of 256, 228 KiB
// of shared memory per SM with 1 KiB reserved per block, 2048 threads) and
// an sm_86 GPU (1536 threads per SM).
func TestBlocksPerSM(t *testing.T) {
	h200 := h200Props()
	sm86 := &Device{ccMajor: 8, ccMinor: 6, smCount: 84, sharedOptin: 99 << 10, sharedPerSM: 100 << 10}
	for _, tc := range []struct {
		name    string
		d       *Device
		regs    int
		static  int
		threads int
		dyn     int
		want    int
	}{
		{"group step, 128 registers", h200, 128, 16128, 256, 54 << 10, 2},
		{"group step, 80 registers", h200, 80, 16128, 256, 54 << 10, 3},
		{"flush, 96 registers, 160 threads", h200, 96, 15360, 160, 0, 4},
		{"flush, 97 registers round up to 104 a thread", h200, 97, 15360, 160, 0, 3},
		{"shared memory bound", h200, 32, 100 << 10, 128, 0, 2},
		{"thread bound", h200, 16, 0, 256, 0, 8},
		{"thread bound on sm_86", sm86, 16, 0, 256, 0, 6},
		{"at least one", h200, 255, 0, 1024, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Resources{Registers: tc.regs, StaticSharedBytes: tc.static}
			if got := blocksPerSM(tc.d, r, tc.threads, tc.dyn); got != tc.want {
				t.Errorf("blocksPerSM = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestGroupStepPlan checks when the Mamba-2 group step (v6) is planned, its
// dynamic shared memory (the ring's x rows of a window, at most 64 KiB) and
// the reasons it is off.
func TestGroupStepPlan(t *testing.T) {
	nano := nanoShape
	for _, tc := range []struct {
		name   string
		shape  ssm.Mamba2Shape
		opt    replay.Options
		tn     tuning
		smem   int    // when on
		reason string // when off
	}{
		{"nano, L=16", nano, replay.Options{Mode: replay.Replay, Window: 16}, tuning{}, 14 * 12 * 80 * 4, ""},
		{"nano nvfp4, L=8", nano, replay.Options{Mode: replay.Replay, Window: 8, ReadCopy: numeric.NVFP4}, tuning{}, 6 * 12 * 80 * 4, ""},
		{"Mamba2-2.7B: 80 heads of 64 in one group, 3 entries staged", ssm.Mamba2Shape{Heads: 80, HeadDim: 64, StateSize: 128, Groups: 1}, replay.Options{Mode: replay.Replay, Window: 16}, tuning{}, 3 * 80 * 64 * 4, ""},
		{"nano, L=32: 64 KiB of x rows", nano, replay.Options{Mode: replay.Replay, Window: 32}, tuning{}, 17 * 12 * 80 * 4, ""},
		{"test bound on staged entries", nano, replay.Options{Mode: replay.Replay, Window: 16}, tuning{groupX: 1}, 12 * 80 * 4, ""},
		{"128 threads: 32 KiB of x rows", nano, replay.Options{Mode: replay.Replay, Window: 16}, tuning{groupNT: 128}, 8 * 12 * 80 * 4, ""},
		{"64 threads: 16 KiB of x rows", nano, replay.Options{Mode: replay.Replay, Window: 16}, tuning{groupNT: 64}, 4 * 12 * 80 * 4, ""},
		{"64 threads, 80 heads of 64 in one group", ssm.Mamba2Shape{Heads: 80, HeadDim: 64, StateSize: 128, Groups: 1}, replay.Options{Mode: replay.Replay, Window: 16}, tuning{groupNT: 64}, 0, "80 heads per group (more than 64 threads)"},
		// GROUP_EARLY's per-token arrays count in the tables: Nano's fit,
		// the one-group layer's 80 heads tip it past the bound.
		{"nano, GROUP_EARLY", nano, replay.Options{Mode: replay.Replay, Window: 16}, tuning{defines: []string{"-DGROUP_EARLY=1"}}, 14 * 12 * 80 * 4, ""},
		{"80 heads of 64 in one group, GROUP_EARLY", ssm.Mamba2Shape{Heads: 80, HeadDim: 64, StateSize: 128, Groups: 1}, replay.Options{Mode: replay.Replay, Window: 16},
			tuning{defines: []string{"-DGROUP_EARLY=1"}}, 0, "shared memory"},
		{"80 heads of 64 in one group, GROUP_EARLY=0", ssm.Mamba2Shape{Heads: 80, HeadDim: 64, StateSize: 128, Groups: 1}, replay.Options{Mode: replay.Replay, Window: 16},
			tuning{defines: []string{"-DGROUP_EARLY=0"}}, 3 * 80 * 64 * 4, ""},
		{"baseline", nano, replay.Options{Mode: replay.Baseline, Window: 16}, tuning{}, 0, "baseline"},
		{"v5 asked for", nano, replay.Options{Mode: replay.Replay, Window: 16}, tuning{v5: true}, 0, "v5"},
		{"one group of 128 heads of 64", ssm.Mamba2Shape{Heads: 128, HeadDim: 64, StateSize: 128, Groups: 1}, replay.Options{Mode: replay.Replay, Window: 16}, tuning{}, 0, "shared memory"},
		{"state size not in chunks", ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 36, Groups: 1}, replay.Options{Mode: replay.Replay, Window: 16}, tuning{}, 0, "state size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt, err := replayDefaults(tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			g := mamba2GroupPlan(tc.shape, opt, tc.tn)
			threads := groupThreads
			if tc.tn.groupNT != 0 {
				threads = tc.tn.groupNT
			}
			switch {
			case tc.reason == "" && (!g.on || g.smem != tc.smem || g.groups != tc.shape.Groups || g.threads != threads):
				t.Errorf("plan %+v, want on with %d bytes of x rows", g, tc.smem)
			case tc.reason != "" && (g.on || !strings.Contains(g.why, tc.reason)):
				t.Errorf("plan %+v, want off with %q", g, tc.reason)
			}
		})
	}
}

// TestGDNGroupPlan checks the GDN group step's plan for the target shapes:
// on, its block size (about 32 passes an item) and dynamic shared memory
// (a window's u rows of a key head's value heads), off for v5 and v4.
func TestGDNGroupPlan(t *testing.T) {
	q4b := qwen4bShape
	q122b := qwen122bShape
	for _, tc := range []struct {
		name    string
		shape   ssm.GDNShape
		opt     replay.Options
		tn      tuning
		threads int
		smem    int
		reason  string
		verify  bool // the group verify planned
	}{
		{"4B: six entries for fp32 in 64-thread blocks", q4b, replay.Options{}, tuning{}, 64, gdnStaged64 * 2 * 128 * 4, "", false},
		{"4B, T=4", q4b, replay.Options{MaxDraft: 4}, tuning{}, 64, gdnStaged64 * 2 * 128 * 4, "", true},
		{"4B bf16", q4b, replay.Options{State: numeric.BF16}, tuning{}, 64, 14 * 2 * 128 * 4, "", false},
		{"4B, the knob's bound", q4b, replay.Options{}, tuning{groupX: 9}, 64, 9 * 2 * 128 * 4, "", false},
		{"122B, T=4", q122b, replay.Options{MaxDraft: 4}, tuning{}, 128, 14 * 4 * 128 * 4, "", true},
		{"4B, T=1: no group verify", q4b, replay.Options{MaxDraft: 1}, tuning{}, 64, gdnStaged64 * 2 * 128 * 4, "", false},
		{"4B nvfp4", q4b, replay.Options{ReadCopy: numeric.NVFP4}, tuning{}, 64, 14 * 2 * 128 * 4, "", false},
		{"122B", q122b, replay.Options{}, tuning{}, 128, 14 * 4 * 128 * 4, "", false},
		{"122B bf16, 256 threads asked for", q122b, replay.Options{State: numeric.BF16}, tuning{groupNT: 256}, 256, 14 * 4 * 128 * 4, "", false},
		{"4B, 128 threads, L=32: 32 KiB of u rows", q4b, replay.Options{Window: 32}, tuning{groupNT: 128}, 128, 30 * 2 * 128 * 4, "", false},
		{"v5", q4b, replay.Options{}, tuning{v5: true}, 0, 0, "v5", false},
		{"v4", q4b, replay.Options{}, tuning{v4: true}, 0, 0, "v4", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opt
			o.Mode = replay.Replay
			if o.Window == 0 {
				o.Window = 16
			}
			opt, err := replayDefaults(o)
			if err != nil {
				t.Fatal(err)
			}
			g := gdnGroupPlan(tc.shape, opt, tc.tn)
			switch {
			case tc.reason == "" && (!g.on || g.threads != tc.threads || g.smem != tc.smem || g.groups != tc.shape.KeyHeads):
				t.Errorf("plan %+v, want on with %d threads, %d bytes of u rows, %d groups", g, tc.threads, tc.smem, tc.shape.KeyHeads)
			case tc.reason != "" && (g.on || !strings.Contains(g.why, tc.reason)):
				t.Errorf("plan %+v, want off with %q", g, tc.reason)
			case g.verifyOn != tc.verify:
				t.Errorf("group verify planned %v, want %v", g.verifyOn, tc.verify)
			}
		})
	}
}

// TestGroupBlockSize checks the group kernels' block size rule: about 32
// passes of rows·lanes/threads rows an item, a power of two in [64, 256].
func TestGroupBlockSize(t *testing.T) {
	for _, tc := range []struct {
		rows, lanes, want int
	}{
		{256, 8, 64},   // Qwen3.5-4B key head: 2 value heads of 128
		{512, 8, 128},  // Qwen3.5-122B: 4 value heads
		{960, 8, 256},  // Nemotron-3-Nano: 12 heads of 80
		{1024, 8, 256}, // Nemotron-3-Super: 16 heads of 64
		{5120, 8, 256}, // Mamba2-2.7B: one group of 80 heads of 64
		{32, 2, 64},    // small test shapes
		{384, 8, 128},
	} {
		if got := groupBlockSize(tc.rows, tc.lanes); got != tc.want {
			t.Errorf("groupBlockSize(%d, %d) = %d, want %d", tc.rows, tc.lanes, got, tc.want)
		}
	}
}

// TestGroupVerifyPlan checks when the Mamba-2 group verify is planned: with
// the group step, with drafts, and tables that fit static shared memory.
func TestGroupVerifyPlan(t *testing.T) {
	nano := nanoShape
	oneGroup := ssm.Mamba2Shape{Heads: 80, HeadDim: 64, StateSize: 128, Groups: 1}
	for _, tc := range []struct {
		name  string
		shape ssm.Mamba2Shape
		T     int
		tn    tuning
		want  bool
	}{
		{"T=4", nano, 4, tuning{}, true},
		{"T=4, 128 threads", nano, 4, tuning{groupNT: 128}, true},
		{"no drafts", nano, 0, tuning{}, false},
		{"v5 asked for", nano, 4, tuning{v5: true}, false},
		{"v4 asked for", nano, 4, tuning{v4: true}, false},
		{"one group of 80 heads: tables too large", oneGroup, 4, tuning{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt, err := replayDefaults(replay.Options{Mode: replay.Replay, Window: 16, MaxDraft: tc.T})
			if err != nil {
				t.Fatal(err)
			}
			if g := mamba2GroupPlan(tc.shape, opt, tc.tn); g.verifyOn != tc.want {
				t.Errorf("verify planned %v, want %v (%+v)", g.verifyOn, tc.want, g)
			}
		})
	}
}

// TestMamba2TCFoldPlan checks where the Mamba-2 pipelined folds take the
// tensor-core rank update: by default with 2-byte and fp8 checkpoints and
// with fp32 ones where the warps take whole rows (Nano's 80 rows on 160
// threads, not Super's 64 on 256, two column parts), everywhere it
// applies with REPLAYSSM_CUDA_M2_TC_FOLD=1, nowhere with =0 or without the
// pipelined folds (an nvfp4 read copy); that the stage holds its padded B
// rows; and mamba2TCFolds' rule on other shapes.
func TestMamba2TCFoldPlan(t *testing.T) {
	h200 := h200Props()
	bf16 := replay.Options{Mode: replay.Replay, Window: 16, MaxDraft: 4, State: numeric.BF16}
	fp32 := replay.Options{Mode: replay.Replay, Window: 16, MaxDraft: 4}
	e4m3 := replay.Options{Mode: replay.Replay, Window: 16, MaxDraft: 4, State: numeric.E4M3}
	nvfp4 := bf16
	nvfp4.ReadCopy = numeric.NVFP4
	on, off := tuning{m2TCFold: "1"}, tuning{m2TCFold: "0"}
	for _, c := range []struct {
		name  string
		shape ssm.Mamba2Shape
		opt   replay.Options
		tn    tuning
		want  bool
	}{
		{"nano/bf16", nanoShape, bf16, tuning{}, true},
		{"nano/fp32", nanoShape, fp32, tuning{}, true},
		{"nano/e4m3", nanoShape, e4m3, tuning{}, true},
		{"super/bf16", superShape, bf16, tuning{}, true},
		{"super/fp32", superShape, fp32, tuning{}, false},
		{"super/fp32/asked", superShape, fp32, on, true},
		{"nano/bf16/off", nanoShape, bf16, off, false},
		{"nano/bf16+nvfp4", nanoShape, nvfp4, on, false},
	} {
		f, defines := mamba2FoldPlan(h200, c.shape, c.opt, c.tn, false)
		if f.tc != c.want || slices.Contains(defines, "-DM2_TC_FOLD=1") != c.want {
			t.Errorf("%s: tc %v, defines %v; want %v", c.name, f.tc, defines, c.want)
		}
		// The stage holds the layout: R rows of N+8 floats of B on the
		// tensor cores (M2_BROW), N without.
		if f.on {
			P, N, R := c.shape.HeadDim, c.shape.StateSize, replayRing(c.opt)
			brow := N
			if f.tc {
				brow += 8
			}
			if want := (P*N*max(1, elemBytes(c.opt.State))+15)/16*16 + 4*(R*P+R*brow+N); f.stageBytes < want {
				t.Errorf("%s: stage of %d bytes; the layout takes %d", c.name, f.stageBytes, want)
			}
		}
	}
	for _, c := range []struct {
		p, n, threads int
		want          bool
	}{
		{80, 128, 160, true},   // 5 blocks of 16 rows, 5 warps
		{64, 128, 256, true},   // 4 blocks, 8 warps: parts of 64 columns
		{64, 128, 128, true},   // one part
		{128, 128, 128, false}, // 8 blocks on 4 warps
		{48, 128, 256, false},  // 3 blocks do not divide 8 warps
		{8, 16, 128, false},    // fewer than 16 rows
		{64, 48, 256, false},   // parts of 24 columns
		{64, 128, 200, false},  // not whole warps
	} {
		if got := mamba2TCFolds(c.p, c.n, c.threads); got != c.want {
			t.Errorf("mamba2TCFolds(%d, %d, %d) = %v, want %v", c.p, c.n, c.threads, got, c.want)
		}
	}
}

// TestVerifyFoldDotsPlan checks where a Mamba-2 verify's early folds form
// the group verify's dots (VFOLD_DOTS): fp32 checkpoints by default, bf16
// ones asked for, never fp8; without a read copy, with drafts, a group
// verify and no VPART; and that the fold's stage then holds every draft's
// C row.
func TestVerifyFoldDotsPlan(t *testing.T) {
	h200 := h200Props()
	fp32 := replay.Options{Mode: replay.Replay, Window: 16, MaxDraft: 4}
	bf16, fp8, nvfp4, noDrafts := fp32, fp32, fp32, fp32
	bf16.State = numeric.BF16
	fp8.State = numeric.E4M3
	nvfp4.ReadCopy = numeric.NVFP4
	noDrafts.MaxDraft = 1
	asked := tuning{vfoldDots: "1"}
	vpart := asked
	vpart.overlapVer = true
	type dotsCase struct {
		name string
		opt  replay.Options
		tn   tuning
		want bool
	}
	for _, c := range []dotsCase{
		{"fp32", fp32, asked, true},
		{"default", fp32, tuning{}, true},
		{"turned off", fp32, tuning{vfoldDots: "0"}, false},
		{"bf16", bf16, asked, true},
		{"bf16 by default", bf16, tuning{}, false},
		{"fp8", fp8, asked, false},
		{"nvfp4 read copy", nvfp4, asked, false},
		{"one draft", noDrafts, asked, false},
		{"vpart", fp32, vpart, false},
	} {
		for _, shape := range []ssm.Mamba2Shape{nanoShape, superShape} {
			g := mamba2GroupPlan(shape, c.opt, c.tn)
			if got := mamba2VerifyFoldDots(c.opt, g, c.tn); got != c.want {
				t.Errorf("%s, %d heads: %v, want %v", c.name, shape.Heads, got, c.want)
			}
		}
	}
	// GDN: asked for, where the verify's early folds stream (the module's
	// knobs as envTuning gives them; not the pipelined folds), without a
	// read copy or VPART.
	streamed := envTuning(func(string) string { return "" })
	gdnAsked := streamed
	gdnAsked.vfoldDots = "1"
	gdnVpart := gdnAsked
	gdnVpart.overlapVer = true
	noStream := gdnAsked
	noStream.foldStream = false
	pipeFolds := gdnAsked
	pipeFolds.folds = "pipe"
	for _, c := range []dotsCase{
		{"gdn fp32", fp32, gdnAsked, true},
		{"gdn bf16", bf16, gdnAsked, true},
		{"gdn by default", fp32, streamed, false},
		{"gdn nvfp4 read copy", nvfp4, gdnAsked, false},
		{"gdn vpart", fp32, gdnVpart, false},
		{"gdn folds not streamed", fp32, noStream, false},
		{"gdn pipelined folds", fp32, pipeFolds, false},
	} {
		for _, shape := range []ssm.GDNShape{qwen4bShape, qwen122bShape} {
			_, g, _, defines := gdnModule(h200, shape, c.opt, c.tn)
			if g.foldDots != c.want || slices.Contains(defines, "-DVFOLD_DOTS=1") != c.want {
				t.Errorf("%s, %d value heads: %v (defines %v), want %v", c.name, shape.ValueHeads, g.foldDots, defines, c.want)
			}
		}
	}
	for _, shape := range []ssm.Mamba2Shape{nanoShape, superShape} {
		plain, _ := mamba2FoldPlan(h200, shape, fp32, asked, false)
		dots, _ := mamba2FoldPlan(h200, shape, fp32, asked, true)
		if !dots.on || dots.stageBytes < plain.stageBytes+4*(fp32.MaxDraft-1)*shape.StateSize {
			t.Errorf("%d heads: stage of %d bytes with the drafts' C rows against %d without (on %v)",
				shape.Heads, dots.stageBytes, plain.stageBytes, dots.on)
		}
	}
}

// TestFoldPipePlan checks the launch plan of the pipelined folds for the
// target shapes on an H200-like device (no GPU needed), asked for: the stages
// hold the fold's layout, a block's and the SM's shared memory and
// registers fit the blocks planned, GDN's folds (about 165 registers a
// thread) take one block per SM, and the plan is off, with its reason, on a
// pre-Hopper GPU, in baseline mode, for unaligned rows and unless asked for.
func TestFoldPipePlan(t *testing.T) {
	h200 := h200Props()
	for _, opt := range []replay.Options{
		{Mode: replay.Replay, Window: 16, MaxDraft: 4},
		{Mode: replay.Replay, Window: 16, MaxDraft: 4, State: numeric.BF16},
		{Mode: replay.Replay, Window: 16, MaxDraft: 4, ReadCopy: numeric.NVFP4},
		{Mode: replay.Replay, Window: 16, MaxDraft: 4, State: numeric.E4M3},
	} {
		pipe := tuning{folds: "pipe"}
		for _, tc := range []struct {
			name    string
			plan    func() (foldPipe, []string)
			layout  int // the stage layout's bytes (FS_END, GF_END)
			threads int
			gdn     bool
		}{
			{"nano", func() (foldPipe, []string) { return mamba2FoldPlan(h200, nanoShape, opt, pipe, false) },
				80*128*max(1, elemBytes(opt.State)) + 4*(20*80+20*128+128), replayThreads(80, 128, opt.State), false},
			{"super", func() (foldPipe, []string) { return mamba2FoldPlan(h200, superShape, opt, pipe, false) },
				64*128*max(1, elemBytes(opt.State)) + 4*(20*64+20*128+128), replayThreads(64, 128, opt.State), false},
			{"qwen3.5-4b", func() (foldPipe, []string) { return gdnFoldPlan(h200, qwen4bShape, opt, tuning{folds: "pipe"}) },
				128*128*max(1, elemBytes(opt.State)) + 4*(21*128+2*128+20*128+2*20), replayThreads(128, 128, opt.State), true},
		} {
			t.Run(fmt.Sprintf("%s/%v/%v", tc.name, opt.State, opt.ReadCopy), func(t *testing.T) {
				f, defines := tc.plan()
				if !f.on {
					t.Fatalf("off: %s", f.why)
				}
				if f.stageBytes < tc.layout || f.stageBytes%128 != 0 {
					t.Errorf("stage of %d bytes for a layout of %d", f.stageBytes, tc.layout)
				}
				if f.stages < 2 || f.stages > foldStagesMax || f.smem != f.stages*f.stageBytes {
					t.Errorf("%d stages, %d bytes", f.stages, f.smem)
				}
				if f.smem > h200.sharedOptin || f.blocksPerSM*(f.smem+1024) > h200.sharedPerSM {
					t.Errorf("%d blocks of %d bytes do not fit %d bytes per SM", f.blocksPerSM, f.smem, h200.sharedPerSM)
				}
				if tc.gdn && f.blocksPerSM != 1 {
					t.Errorf("GDN at %d blocks per SM: %d registers a thread, the fold needs ~165", f.blocksPerSM, 65536/(f.blocksPerSM*(tc.threads+32)))
				}
				for _, w := range []string{fmt.Sprintf("-DFNSTAGE=%d", f.stages), fmt.Sprintf("-DFSTAGE_BYTES=%d", f.stageBytes),
					fmt.Sprintf("-DFMINB=%d", f.blocksPerSM)} {
					if !strings.Contains(strings.Join(defines, " "), w) {
						t.Errorf("defines %v lack %s", defines, w)
					}
				}
			})
		}
	}
	fp32 := replay.Options{Mode: replay.Replay, Window: 16, MaxDraft: 4}
	on := tuning{folds: "pipe"}
	// Asked for nothing, Mamba-2 folds pipelined (but with an nvfp4 read
	// copy) and GDN by items.
	if f, _ := mamba2FoldPlan(h200, nanoShape, fp32, tuning{}, false); !f.on {
		t.Errorf("Mamba-2 folds by default: off (%s), want on", f.why)
	}
	nvfp4 := fp32
	nvfp4.ReadCopy = numeric.NVFP4
	if f, _ := mamba2FoldPlan(h200, nanoShape, nvfp4, tuning{}, false); f.on {
		t.Error("Mamba-2 folds with an nvfp4 read copy by default: on, want off")
	}
	if f, _ := gdnFoldPlan(h200, qwen4bShape, fp32, tuning{}); f.on || !strings.Contains(f.why, "REPLAYSSM_CUDA_FOLDS=pipe") {
		t.Errorf("GDN folds by default: on %v (%s), want off", f.on, f.why)
	}
	for _, tc := range []struct {
		name   string
		d      *Device
		shape  ssm.Mamba2Shape
		opt    replay.Options
		tn     tuning
		reason string
	}{
		{"sm_80", &Device{ccMajor: 8, smCount: 108, sharedOptin: 163 << 10, sharedPerSM: 164 << 10}, nanoShape, fp32, on, "compute capability 8"},
		{"baseline", h200, nanoShape, replay.Options{Mode: replay.Baseline, MaxDraft: 4}, on, "baseline mode"},
		{"unaligned rows", h200, ssm.Mamba2Shape{Heads: 8, HeadDim: 81, StateSize: 128, Groups: 1}, fp32, on, "16-byte multiples"},
		{"items asked for", h200, nanoShape, fp32, tuning{folds: "items"}, "REPLAYSSM_CUDA_FOLDS=items"},
		{"v4 asked for", h200, nanoShape, fp32, tuning{v4: true, folds: "pipe"}, "REPLAYSSM_CUDA_KERNELS=v4"},
		{"small shared memory", &Device{ccMajor: 9, smCount: 132, sharedOptin: 48 << 10, sharedPerSM: 100 << 10}, nanoShape, fp32, on, "exceed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt, err := replayDefaults(tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			f, defines := mamba2FoldPlan(tc.d, tc.shape, opt, tc.tn, false)
			if f.on || defines != nil || !strings.Contains(f.why, tc.reason) {
				t.Errorf("on %v, defines %v, reason %q; want off with %q", f.on, defines, f.why, tc.reason)
			}
		})
	}
}

// TestModuleThreads checks the block size of the one-block-per-matrix
// kernels: replay mode and fp32 baselines keep replayThreads, 2-byte
// baselines halve it (down to 128) while a block would stream fewer than
// four passes (Super's 64 rows: 128 threads; Nano's 80 and GDN's 128 rows
// keep theirs), and the knob wins.
func TestModuleThreads(t *testing.T) {
	base := func(f numeric.Format) replay.Options { return replay.Options{Mode: replay.Baseline, State: f} }
	for _, tc := range []struct {
		name       string
		opt        replay.Options
		rows, cols int
		tn         tuning
		want       int
	}{
		{"replay super bf16", replay.Options{Mode: replay.Replay, State: numeric.BF16}, 64, 128, tuning{}, 256},
		{"baseline super fp32", base(numeric.F32), 64, 128, tuning{}, 256},
		{"baseline super bf16", base(numeric.BF16), 64, 128, tuning{}, 128},
		{"baseline super fp16", base(numeric.F16), 64, 128, tuning{}, 128},
		{"baseline nano bf16", base(numeric.BF16), 80, 128, tuning{}, replayThreads(80, 128, numeric.BF16)},
		{"baseline gdn bf16", base(numeric.BF16), 128, 128, tuning{}, 256},
		{"baseline small bf16", base(numeric.BF16), 8, 16, tuning{}, 128},
		{"knob", base(numeric.F32), 64, 128, tuning{baseThreads: 96}, 96},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := moduleThreads(tc.opt, tc.rows, tc.cols, tc.tn); got != tc.want {
				t.Errorf("moduleThreads = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestBaseStagePlan checks when the baseline step stages its matrix
// (planBaseStage) and the blocks per SM it asks the registers for: the
// stage's shared memory with the tables and the 1 KiB a block reserves, at
// most 2048 threads and at least 40 registers a thread.
func TestBaseStagePlan(t *testing.T) {
	base := func(f numeric.Format) replay.Options {
		return replay.Options{Mode: replay.Baseline, State: f, MaxDraft: 4}
	}
	ampere := &Device{ccMajor: 8, smCount: 108, sharedOptin: 163 << 10, sharedPerSM: 164 << 10}
	for _, tc := range []struct {
		name       string
		d          *Device
		opt        replay.Options
		rows, cols int
		threads    int
		byDefault  bool
		tn         tuning
		smem, minb int
		why        string
	}{
		{"gdn bf16", h200Props(), base(numeric.BF16), 128, 128, 256, true, tuning{}, 32 << 10, 5, ""},
		{"gdn fp32", h200Props(), base(numeric.F32), 128, 128, 256, true, tuning{}, 64 << 10, 3, ""},
		{"nano bf16: 8 blocks of 160 threads (40 registers)", h200Props(), base(numeric.BF16), 80, 128, 160, true, tuning{}, 80 * 128 * 2, 8, ""},
		{"super bf16", h200Props(), base(numeric.BF16), 64, 128, 128, true, tuning{}, 16 << 10, 9, ""},
		{"fp16", h200Props(), base(numeric.F16), 64, 128, 128, true, tuning{}, 16 << 10, 9, ""},
		{"replay mode", h200Props(), replay.Options{Mode: replay.Replay, State: numeric.BF16}, 128, 128, 256, true, tuning{}, 0, 0, "replay mode"},
		{"fp8", h200Props(), base(numeric.E4M3), 128, 128, 256, true, tuning{}, 0, 0, "fp8"},
		{"knob", h200Props(), base(numeric.BF16), 128, 128, 256, true, tuning{baseStage: "0"}, 0, 0, "REPLAYSSM_CUDA_BASE_STAGE=0"},
		{"sm_80", ampere, base(numeric.BF16), 128, 128, 256, true, tuning{}, 0, 0, "no bulk copies"},
		{"unaligned", h200Props(), base(numeric.BF16), 3, 12, 128, true, tuning{}, 0, 0, "multiple of 16 bytes"},
		{"too large", h200Props(), base(numeric.F32), 256, 256, 256, true, tuning{}, 0, 0, "exceed"},
		{"not by default", h200Props(), base(numeric.BF16), 128, 128, 256, false, tuning{}, 0, 0, "not by default"},
		{"forced", h200Props(), base(numeric.BF16), 128, 128, 256, false, tuning{baseStage: "1"}, 32 << 10, 5, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, defines := planBaseStage(tc.d, tc.opt, tc.rows, tc.cols, tc.threads, tc.byDefault, tc.tn)
			if tc.why != "" {
				if b.on || defines != nil || !strings.Contains(b.why, tc.why) {
					t.Fatalf("plan %+v, defines %v; want off because of %q, no defines", b, defines, tc.why)
				}
				return
			}
			want := []string{"-DBASE_BULK=1", fmt.Sprintf("-DBASE_MINB=%d", tc.minb)}
			if !b.on || b.smem != tc.smem || !slices.Equal(defines, want) {
				t.Fatalf("plan %+v, defines %v; want %d bytes, %v", b, defines, tc.smem, want)
			}
		})
	}
}

// TestOverlapPlan checks which replay modules run a step's flush beside
// its non-flush kernel: GDN's by default, Mamba-2's when forced, never a
// baseline module's.
func TestOverlapPlan(t *testing.T) {
	rep := replay.Options{Mode: replay.Replay, Window: 16}
	for _, tc := range []struct {
		name   string
		kind   string
		opt    replay.Options
		tn     tuning
		on     bool
		verify bool
		grid   int
	}{
		{"gdn by default", "gdn", rep, tuning{}, true, false, 0},
		{"mamba2 not by default", "mamba2", rep, tuning{}, false, false, 0},
		{"mamba2 forced", "mamba2", rep, tuning{overlap: "1", overlapGrid: 132}, true, false, 132},
		{"gdn off", "gdn", rep, tuning{overlap: "0"}, false, false, 0},
		{"gdn, side at the default priority", "gdn", rep, tuning{overlapLow: true}, true, false, 0},
		{"gdn, the non-flush kernel first", "gdn", rep, tuning{overlapMain: true}, true, false, 0},
		{"verify alone", "mamba2", rep, tuning{overlapVer: true}, false, true, 0},
		{"both", "gdn", rep, tuning{overlapVer: true}, true, true, 0},
		{"baseline", "gdn", replay.Options{Mode: replay.Baseline}, tuning{overlap: "1", overlapVer: true}, false, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, defines := planOverlap(tc.kind, tc.opt, tc.tn)
			var want []string
			if tc.on {
				want = append(want, "-DOVERLAP=1")
			}
			if tc.verify {
				want = append(want, "-DVPART=1")
			}
			if o.on != tc.on || o.verify != tc.verify || o.blocks != tc.grid || !slices.Equal(defines, want) {
				t.Fatalf("plan %+v, defines %v; want on %v, verify %v, grid %d, defines %v", o, defines, tc.on, tc.verify, tc.grid, want)
			}
			if o.on && o.low != tc.tn.overlapLow {
				t.Errorf("side stream at the default priority %v, want %v", o.low, tc.tn.overlapLow)
			}
			if o.on && o.main != tc.tn.overlapMain {
				t.Errorf("the main stream's kernel first %v, want %v", o.main, tc.tn.overlapMain)
			}
		})
	}
}

// TestHeadSplitPlan checks when the small step splits a layer's heads:
// only where asked, in replay mode, without a read copy or an fp8 state,
// into parts of at least 8 rows.
func TestHeadSplitPlan(t *testing.T) {
	rep := replay.Options{Mode: replay.Replay, State: numeric.F32, ReadCopy: numeric.F32}
	const sms = 132 // H200
	for _, tc := range []struct {
		name        string
		opt         replay.Options
		heads, rows int
		tn          tuning
		split       int
		why         string
	}{
		// The default: the most parts of 32 rows or more, at most 1.5
		// blocks per SM at batch 1.
		{"Qwen3.5-4B", rep, 32, 128, tuning{}, 4, ""},
		{"Qwen3.5-122B", rep, 64, 128, tuning{}, 2, ""},
		{"Nemotron-3-Nano-4B", rep, 96, 80, tuning{}, 2, ""},
		{"Nemotron-3-Super", rep, 128, 64, tuning{}, 1, "fill the 132 SMs"},
		{"parts of 32 rows", rep, 8, 64, tuning{}, 2, ""},
		{"odd rows", rep, 8, 33, tuning{}, 1, "fill"},
		{"asked", rep, 128, 128, tuning{headSplit: 4}, 4, ""},
		{"asked none", rep, 32, 128, tuning{headSplit: 1}, 1, "HEAD_SPLIT=1"},
		{"baseline", replay.Options{Mode: replay.Baseline, ReadCopy: numeric.F32}, 32, 128, tuning{}, 1, "baseline"},
		{"read copy", replay.Options{Mode: replay.Replay, ReadCopy: numeric.NVFP4}, 32, 128, tuning{}, 1, "read copy"},
		{"fp8 state", replay.Options{Mode: replay.Replay, State: numeric.E4M3, ReadCopy: numeric.F32}, 32, 128, tuning{headSplit: 4}, 1, "fp8"},
		{"parts too small", rep, 32, 16, tuning{headSplit: 4}, 1, "8 rows"},
		{"does not divide", rep, 32, 96, tuning{headSplit: 5}, 1, "do not split"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			split, why := planHeadSplit(tc.opt, tc.heads, tc.rows, sms, tc.tn)
			if split != tc.split || (tc.why != "" && !strings.Contains(why, tc.why)) {
				t.Fatalf("planHeadSplit = %d (%q), want %d (%q)", split, why, tc.split, tc.why)
			}
		})
	}
}

// TestHeadSplitTakes checks which small steps the split module takes: at
// most three blocks per SM.
func TestHeadSplitTakes(t *testing.T) {
	for _, tc := range []struct {
		batch, heads int
		want         bool
	}{{1, 96, true}, {2, 96, true}, {3, 96, false}, {4, 32, true}, {7, 32, false}} {
		h := headSplit{split: 2, step: &Function{}, maxBatch: splitBatches(tc.heads, 2, 132)}
		if got := h.takes(tc.batch); got != tc.want {
			t.Errorf("batch %d of %d heads in 2 parts: takes %v, want %v", tc.batch, tc.heads, got, tc.want)
		}
	}
	if (&headSplit{maxBatch: splitBatches(1, 1, 132)}).takes(1) {
		t.Error("no split module, yet it takes a step")
	}
}

// TestDefinesName checks the lookup that keeps a layer's default define
// (GDN's BASE_REGS) from a second -D of the same name in
// REPLAYSSM_CUDA_DEFINES.
func TestDefinesName(t *testing.T) {
	for _, tc := range []struct {
		defines []string
		want    bool
	}{
		{nil, false},
		{[]string{"-DBASE_REGS=32"}, true},
		{[]string{"-DVERIFY=1", "-DBASE_REGS"}, true},
		{[]string{"-DBASE_REGS_X=1", "-DBASE=1", "-lineinfo"}, false},
		{[]string{"BASE_REGS=32"}, false},
	} {
		if got := definesName(tc.defines, "BASE_REGS"); got != tc.want {
			t.Errorf("definesName(%q, BASE_REGS) = %v, want %v", tc.defines, got, tc.want)
		}
	}
}

// TestEarlyVerifyPick checks the choice between a small batch's early and
// late verify: the early one only where it is bound and its grid fits the
// blocks the GPU holds at once.
func TestEarlyVerifyPick(t *testing.T) {
	late, early := &Function{name: "late"}, &Function{name: "early"}
	for _, tc := range []struct {
		name   string
		e      earlyVerify
		blocks int
		want   *Function
	}{
		{"fits", earlyVerify{early, 132}, 96, early},
		{"fills the GPU exactly", earlyVerify{early, 132}, 132, early},
		{"a second wave", earlyVerify{early, 132}, 256, late},
		{"two blocks an SM", earlyVerify{early, 264}, 256, early},
		{"not bound (REPLAYSSM_CUDA_VERIFY_EARLY=0)", earlyVerify{}, 1, late},
	} {
		if got := tc.e.pick(late, tc.blocks); got != tc.want {
			t.Errorf("%s: pick(%d blocks) = %s, want %s", tc.name, tc.blocks, got.Name(), tc.want.Name())
		}
	}
}

// TestGroupTC checks when the group steps' nvfp4 stream takes the tensor
// cores (groupTC) and the define it adds.
func TestGroupTC(t *testing.T) {
	nvfp4 := replay.Options{Mode: replay.Replay, ReadCopy: numeric.NVFP4}
	bf16 := replay.Options{Mode: replay.Replay, State: numeric.BF16}
	tests := []struct {
		name           string
		cc, rows, cols int
		opt            replay.Options
		defines        []string
		want           bool
		wantDefine     string
	}{
		{"qwen3.5 on an H200", 90, 256, 128, nvfp4, nil, true, "-DGROUP_TC=1"},
		{"nano on an L40S (sm_89)", 89, 960, 128, nvfp4, nil, true, "-DGROUP_TC=1"},
		{"64 columns", 90, 64, 64, nvfp4, nil, true, "-DGROUP_TC=1"},
		{"sm_86: no e4m3 conversion", 86, 256, 128, nvfp4, nil, false, ""},
		{"96 columns", 90, 256, 96, nvfp4, nil, false, ""},
		{"rows not a multiple of 16", 90, 24, 128, nvfp4, nil, false, ""},
		{"no read copy", 90, 256, 128, replay.Options{Mode: replay.Replay}, nil, false, ""},
		{"fp8 read copy", 90, 256, 128, replay.Options{Mode: replay.Replay, ReadCopy: numeric.E4M3}, nil, true, "-DGROUP_TC=1"},
		{"fp8 checkpoint", 89, 256, 128, replay.Options{Mode: replay.Replay, State: numeric.E4M3}, nil, true, "-DGROUP_TC=1"},
		{"turned off", 90, 256, 128, nvfp4, []string{"-DGROUP_TC=0"}, false, ""},
		{"asked for", 90, 256, 128, nvfp4, []string{"-DGROUP_TC=1"}, true, ""},
		{"asked for where it cannot run", 86, 256, 128, nvfp4, []string{"-DGROUP_TC=1"}, false, ""},
		{"the stream measured alone", 90, 256, 128, nvfp4, []string{"-DGROUP_NODOTS=1"}, false, ""},
		{"GROUP_NODOTS=0", 90, 256, 128, nvfp4, []string{"-DGROUP_NODOTS=0"}, true, "-DGROUP_TC=1"},
		{"bf16 checkpoint: only where asked", 90, 256, 128, bf16, nil, false, ""},
		{"bf16 checkpoint, asked for", 90, 256, 128, bf16, []string{"-DGROUP_TC=1"}, true, ""},
		{"bf16 read copy, asked for", 80, 256, 128, replay.Options{Mode: replay.Replay, ReadCopy: numeric.BF16}, []string{"-DGROUP_TC=1"}, true, ""},
		{"bf16 on sm_75, asked for", 75, 256, 128, bf16, []string{"-DGROUP_TC=1"}, false, ""},
		{"fp16 checkpoint, asked for", 90, 256, 128, replay.Options{Mode: replay.Replay, State: numeric.F16}, []string{"-DGROUP_TC=1"}, false, ""},
		{"fp8 read copy, asked for", 90, 256, 128, replay.Options{Mode: replay.Replay, ReadCopy: numeric.E4M3}, []string{"-DGROUP_TC=1"}, true, ""},
		{"fp8 checkpoint, asked for", 89, 256, 128, replay.Options{Mode: replay.Replay, State: numeric.E4M3}, []string{"-DGROUP_TC=1"}, true, ""},
		{"fp8 on sm_86, asked for", 86, 256, 128, replay.Options{Mode: replay.Replay, ReadCopy: numeric.E4M3}, []string{"-DGROUP_TC=1"}, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, def := groupTC(tc.cc, tc.rows, tc.cols, tc.opt, tuning{defines: tc.defines})
			if got != tc.want || def != tc.wantDefine {
				t.Errorf("groupTC = %v, %q; want %v, %q", got, def, tc.want, tc.wantDefine)
			}
		})
	}
}

// TestVerifyTC checks when the group verify's stream takes the tensor
// cores (verifyTC) and the define it adds.
func TestVerifyTC(t *testing.T) {
	nvfp4 := replay.Options{Mode: replay.Replay, MaxDraft: 4, ReadCopy: numeric.NVFP4}
	bf16 := replay.Options{Mode: replay.Replay, MaxDraft: 4, State: numeric.BF16}
	f32 := replay.Options{Mode: replay.Replay, MaxDraft: 4}
	tests := []struct {
		name                    string
		cc, rows, cols, vectors int
		opt                     replay.Options
		defines                 []string
		want                    bool
		wantDefine              string
	}{
		{"bf16 checkpoint, GDN T=4", 90, 256, 128, 8, bf16, nil, true, "-DVERIFY_TC=1"},
		{"bf16 read copy on sm_80", 80, 256, 128, 4, replay.Options{Mode: replay.Replay, MaxDraft: 4, ReadCopy: numeric.BF16}, nil, true, "-DVERIFY_TC=1"},
		{"nvfp4 read copy, Mamba-2 T=4", 90, 512, 128, 4, nvfp4, nil, true, "-DVERIFY_TC=1"},
		{"64 columns", 90, 64, 64, 8, bf16, nil, true, "-DVERIFY_TC=1"},
		{"GDN T=5: ten vectors", 90, 256, 128, 10, bf16, nil, false, ""},
		{"96 columns", 90, 256, 96, 8, bf16, nil, false, ""},
		{"rows not a multiple of 16", 90, 24, 128, 8, bf16, nil, false, ""},
		{"nvfp4 on sm_86", 86, 256, 128, 8, nvfp4, nil, false, ""},
		{"bf16 on sm_75", 75, 256, 128, 8, bf16, nil, false, ""},
		{"fp32 checkpoint: none (3xTF32 lost, removed)", 90, 256, 128, 8, f32, nil, false, ""},
		{"fp32 checkpoint, asked for", 90, 256, 128, 8, f32, []string{"-DVERIFY_TC=1"}, false, ""},
		{"fp8 read copy", 90, 256, 128, 8, replay.Options{Mode: replay.Replay, MaxDraft: 4, ReadCopy: numeric.E4M3}, nil, true, "-DVERIFY_TC=1"},
		{"fp8 checkpoint", 89, 256, 128, 8, replay.Options{Mode: replay.Replay, MaxDraft: 4, State: numeric.E4M3}, nil, true, "-DVERIFY_TC=1"},
		{"fp8 checkpoint on sm_86, asked for", 86, 256, 128, 8, replay.Options{Mode: replay.Replay, MaxDraft: 4, State: numeric.E4M3}, []string{"-DVERIFY_TC=1"}, false, ""},
		{"fp16 checkpoint", 90, 256, 128, 8, replay.Options{Mode: replay.Replay, MaxDraft: 4, State: numeric.F16}, nil, false, ""},
		{"turned off", 90, 256, 128, 8, bf16, []string{"-DVERIFY_TC=0"}, false, ""},
		{"the stream measured alone", 90, 256, 128, 8, nvfp4, []string{"-DGROUP_NODOTS=1"}, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, def := verifyTC(tc.cc, tc.rows, tc.cols, tc.vectors, tc.opt, tuning{defines: tc.defines})
			if got != tc.want || def != tc.wantDefine {
				t.Errorf("verifyTC = %v, %q; want %v, %q", got, def, tc.want, tc.wantDefine)
			}
		})
	}
}

// TestFlushFew checks FL_FEW's bound: on by default for 4- and 2-byte
// checkpoints, off for fp8 ones (not measured with it),
// REPLAYSSM_CUDA_FL_FEW over it.
func TestFlushFew(t *testing.T) {
	for _, tc := range []struct {
		few   string
		state numeric.Format
		want  int
	}{
		{"", numeric.F32, defaultFlFew},
		{"", numeric.BF16, defaultFlFew},
		{"", numeric.F16, defaultFlFew},
		{"", numeric.E4M3, 0},
		{"0", numeric.F32, 0},
		{"0", numeric.BF16, 0},
		{"8", numeric.BF16, 8},
	} {
		if got := (tuning{flFew: tc.few}).flushFew(tc.state); got != tc.want {
			t.Errorf("flFew %q, %v: %d, want %d", tc.few, tc.state, got, tc.want)
		}
	}
}

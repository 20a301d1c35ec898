package cuda

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

var update = flag.Bool("update", false, "rewrite testdata/plans.golden")

// The target layer shapes (package bench's, which imports this package).
var (
	nanoShape     = ssm.Mamba2Shape{Heads: 96, HeadDim: 80, StateSize: 128, Groups: 8}
	superShape    = ssm.Mamba2Shape{Heads: 128, HeadDim: 64, StateSize: 128, Groups: 8}
	qwen4bShape   = ssm.GDNShape{KeyHeads: 16, ValueHeads: 32, KeyDim: 128, ValueDim: 128}
	qwen122bShape = ssm.GDNShape{KeyHeads: 16, ValueHeads: 64, KeyDim: 128, ValueDim: 128}
)

// h200 is an H200's (and an H100 SXM's) properties as the planner reads
// them.
var h200 = gpuProps{major: 9, sms: 132, smemBlock: 227 << 10, smemSM: 228 << 10}

// planCase is one cache the golden file plans.
type planCase struct {
	name  string
	plan  func(opt replay.Options) (cachePlan, error)
	opt   replay.Options
	props gpuProps
}

// planCases are the target shapes in every mode and format, and small
// shapes and older GPUs where other rules decide.
func planCases() []planCase {
	type layer struct {
		name string
		plan func(replay.Options, gpuProps) (cachePlan, error)
	}
	m2 := func(s ssm.Mamba2Shape) func(replay.Options, gpuProps) (cachePlan, error) {
		return func(o replay.Options, p gpuProps) (cachePlan, error) { return planMamba2(s, o, p) }
	}
	gd := func(s ssm.GDNShape) func(replay.Options, gpuProps) (cachePlan, error) {
		return func(o replay.Options, p gpuProps) (cachePlan, error) { return planGDN(s, o, p) }
	}
	targets := []layer{
		{"nemotron-3-nano-4b", m2(nanoShape)}, {"nemotron-3-super", m2(superShape)},
		{"qwen3.5-4b", gd(qwen4bShape)}, {"qwen3.5-122b", gd(qwen122bShape)},
	}
	var cs []planCase
	add := func(l layer, opt replay.Options, p gpuProps, tag string) {
		name := fmt.Sprintf("%s %s", l.name, optName(opt))
		if tag != "" {
			name += " " + tag
		}
		cs = append(cs, planCase{name, func(o replay.Options) (cachePlan, error) { return l.plan(o, p) }, opt, p})
	}
	for _, l := range targets {
		for _, st := range []numeric.Format{numeric.F32, numeric.BF16, numeric.F16, numeric.E4M3} {
			add(l, replay.Options{Mode: replay.Baseline, State: st, MaxDraft: 4}, h200, "")
			for _, rd := range []numeric.Format{numeric.F32, numeric.BF16, numeric.E4M3, numeric.NVFP4} {
				add(l, replay.Options{State: st, ReadCopy: rd, MaxDraft: 4}, h200, "")
			}
		}
		add(l, replay.Options{MaxDraft: 0}, h200, "")
		add(l, replay.Options{ExactFold: true, MaxDraft: 4}, h200, "")
		if strings.HasPrefix(l.name, "nemotron") {
			add(l, replay.Options{Ring: numeric.BF16, MaxDraft: 4}, h200, "")
			add(l, replay.Options{State: numeric.BF16, Ring: numeric.BF16, MaxDraft: 4}, h200, "")
		}
	}
	small := []layer{
		{"mamba2 H4 P8 N16 G2", m2(ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 16, Groups: 2})},
		{"mamba2 H80 P64 N128 G1", m2(ssm.Mamba2Shape{Heads: 80, HeadDim: 64, StateSize: 128, Groups: 1})},
		{"gdn Hk2 Hv4 K16 V8", gd(ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8})},
		{"gdn Hk2 Hv4 K128 V128", gd(ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128})},
	}
	ampere := gpuProps{major: 8, sms: 108, smemBlock: 163 << 10, smemSM: 164 << 10}
	for _, l := range small {
		add(l, replay.Options{MaxDraft: 4}, h200, "")
		add(l, replay.Options{State: numeric.BF16, ReadCopy: numeric.NVFP4, MaxDraft: 4}, h200, "")
		add(l, replay.Options{MaxDraft: 4}, ampere, "on an A100")
	}
	return cs
}

func optName(o replay.Options) string {
	s := o.Mode.String() + " " + o.State.String()
	if o.ReadCopy != numeric.F32 {
		s += "+" + o.ReadCopy.String()
	}
	if o.Ring != numeric.F32 {
		s += " ring " + o.Ring.String()
	}
	if o.ExactFold {
		s += " exact-fold"
	}
	return fmt.Sprintf("%s T=%d", s, o.MaxDraft)
}

// describe is a plan as text: the module's options, then what runs at
// each batch size (as launch_replay.go decides, before binding sizes the
// grids).
func (cp *cachePlan) describe(p gpuProps) string {
	var b strings.Builder
	opts := cp.options(256)
	slices.Sort(opts)
	fmt.Fprintf(&b, "  threads %d\n  options %s\n", cp.threads, strings.Join(opts, " "))
	if sp := cp.split; sp != nil {
		so := sp.options(0)
		slices.Sort(so)
		fmt.Fprintf(&b, "  split in %d up to batch %d: %d threads, options %s\n", sp.parts, cp.splitMaxBatch(p), sp.threads, strings.Join(so, " "))
	}
	if cp.opt.Mode == replay.Baseline {
		stage := "per-head"
		if cp.base.on {
			stage = fmt.Sprintf("staged (%d bytes)", cp.base.smem)
		}
		fmt.Fprintf(&b, "  every batch: step %s, verify per-head\n", stage)
		return b.String()
	}
	fold := "items"
	switch {
	case cp.folds.on:
		fold = fmt.Sprintf("pipelined (%d stages, %d a SM)", cp.folds.stages, cp.folds.blocksPerSM)
	case cp.stream.flush:
		fold = fmt.Sprintf("streamed (%d warps)", cp.stream.flushWarps)
	}
	fmt.Fprintf(&b, "  flush %s; overlapped %v\n", fold, cp.overlap)
	for _, batch := range []int{1, 4, 5, 64, 256, 512} {
		var step, verify string
		switch {
		case batch <= cp.smallBatch && cp.split != nil && batch <= cp.splitMaxBatch(p):
			step = "small (heads split)"
		case batch <= cp.smallBatch:
			step = "small"
		case cp.group.on:
			step = fmt.Sprintf("group (%d threads)", cp.group.threads)
		case cp.pipe.on && cp.pipe.stepOn:
			step = fmt.Sprintf("pipelined (%d stages)", cp.pipe.stages)
		default:
			step = "per-head"
		}
		small := batch <= cp.smallBatch && (cp.kind == "mamba2" || cp.split != nil && batch <= cp.splitMaxBatch(p))
		switch {
		case cp.opt.MaxDraft == 0:
			verify = "none"
		case small:
			verify = step
		case cp.group.verifyOn && cp.group.groups*batch >= cp.minItems:
			verify = "group"
			if cp.stream.fold {
				verify += " after streamed folds"
			}
		case cp.pipe.on && cp.kind == "mamba2":
			verify = "pipelined"
		default:
			verify = "per-head"
		}
		fmt.Fprintf(&b, "  batch %d: step %s, verify %s\n", batch, step, verify)
	}
	return b.String()
}

// TestPlansGolden plans every case and compares the description with
// testdata/plans.golden (go test -run TestPlansGolden -update rewrites it):
// a change of any plan shows there, to be read in review.
func TestPlansGolden(t *testing.T) {
	var b strings.Builder
	for _, c := range planCases() {
		cp, err := c.plan(c.opt)
		if err != nil {
			fmt.Fprintf(&b, "%s\n  error: %v\n", c.name, err)
			continue
		}
		fmt.Fprintf(&b, "%s\n%s", c.name, cp.describe(c.props))
	}
	path := filepath.Join("testdata", "plans.golden")
	if *update {
		must(t, os.MkdirAll("testdata", 0o755))
		must(t, os.WriteFile(path, []byte(b.String()), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestPlansGolden -update writes it)", err)
	}
	if got := b.String(); got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("plans differ from testdata/plans.golden at line %d:\n got  %s\n want %s\n(go test -run TestPlansGolden -update rewrites it)", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("plans differ from testdata/plans.golden in length: %d lines, want %d", len(gl), len(wl))
	}
}

// TestPlanRefusals checks the options and shapes the GPU caches refuse,
// each with an error that names why.
func TestPlanRefusals(t *testing.T) {
	m2 := ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 16, Groups: 2}
	g := ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8}
	for _, tc := range []struct {
		name string
		plan func() (cachePlan, error)
		want string
	}{
		{"window + drafts over 32", func() (cachePlan, error) { return planMamba2(m2, replay.Options{Window: 24, MaxDraft: 9}, h200) }, "more than the 32"},
		{"stochastic", func() (cachePlan, error) { return planMamba2(m2, replay.Options{Stochastic: true}, h200) }, "stochastic"},
		{"nvfp4 state", func() (cachePlan, error) { return planMamba2(m2, replay.Options{State: numeric.NVFP4}, h200) }, "nvfp4 checkpoint"},
		{"read copy in baseline", func() (cachePlan, error) {
			return planMamba2(m2, replay.Options{Mode: replay.Baseline, ReadCopy: numeric.BF16}, h200)
		}, "replay mode"},
		{"gdn bf16 ring", func() (cachePlan, error) { return planGDN(g, replay.Options{Ring: numeric.BF16}, h200) }, "ring format bf16"},
		{"fp16 ring", func() (cachePlan, error) { return planMamba2(m2, replay.Options{Ring: numeric.F16}, h200) }, "ring"},
		{"state rows of 36", func() (cachePlan, error) {
			return planMamba2(ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 36, Groups: 1}, replay.Options{}, h200)
		}, "multiple of 16"},
		{"bad shape", func() (cachePlan, error) {
			return planGDN(ssm.GDNShape{KeyHeads: 3, ValueHeads: 4, KeyDim: 16, ValueDim: 8}, replay.Options{}, h200)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.plan()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestGemvSplit(t *testing.T) {
	for _, c := range []struct{ n, sms, want int }{
		{3136, 132, 8},   // Nemotron-3-Nano MLP down on an H100: 784 warps alone
		{12544, 132, 2},  // MLP up: 3,136 warps
		{17504, 132, 1},  // in_proj: 4,376 warps, past 32 an SM
		{131072, 132, 1}, // lm_head
		{8, 132, 8},      // never more than the block's warps
		{16896, 132, 1},  // exactly 32 warps an SM
		{16892, 132, 2},
	} {
		if got := gemvSplit(c.n, c.sms); got != c.want {
			t.Errorf("gemvSplit(%d, %d) = %d, want %d", c.n, c.sms, got, c.want)
		}
	}
}

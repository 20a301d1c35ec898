package cuda

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/replayssm/replayssm/replay"
)

// TestReplayModulesCompile compiles, with whatever NVRTC this machine has
// (no GPU needed), every module the golden plans build (split modules
// too) to PTX for the newest architecture it supports up to sm_90, so that
// a kernel source error shows before a device run. It checks that each
// module holds the kernels of its cache's mode that binding looks up. It
// skips without NVRTC (CI) and in -short mode.
func TestReplayModulesCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	n, err := loadNVRTC(newSearchPlan(os.Getenv, nil))
	if err != nil {
		t.Skipf("no NVRTC on this machine (%v)", err)
	}
	best := 0
	for _, a := range n.archs {
		if a <= 90 {
			best = max(best, a)
		}
	}
	arch := fmt.Sprintf("compute_%d", best)
	type module struct {
		name string
		plan *cachePlan
	}
	var mods []module
	seen := map[string]bool{}
	for _, c := range planCases() {
		cp, err := c.plan(c.opt)
		if err != nil {
			continue
		}
		for _, m := range []module{{c.name, &cp}, {c.name + " (split)", cp.split}} {
			if m.plan == nil {
				continue
			}
			key := m.plan.file + strings.Join(m.plan.options(8), " ")
			if !seen[key] {
				seen[key] = true
				mods = append(mods, m)
			}
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for _, m := range mods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			src, err := replaySource(m.plan.file)
			if err != nil {
				t.Error(err)
				return
			}
			ptx, err := n.build(m.plan.file, src, append([]string{"--gpu-architecture=" + arch}, m.plan.options(8)...), false)
			if err != nil {
				t.Errorf("%s: %v", m.name, err)
				return
			}
			for _, k := range modeKernels(m.plan) {
				if !strings.Contains(string(ptx), ".entry "+k+"(") {
					t.Errorf("%s: no kernel %s", m.name, k)
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d modules compiled with NVRTC %d.%d for %s", len(mods), n.major, n.minor, arch)
}

// modeKernels are the kernels binding looks up in a plan's module.
func modeKernels(p *cachePlan) []string {
	k := p.kind
	ks := []string{"cursor_verify", "commit"}
	if p.opt.Mode == replay.Baseline {
		return append(ks, k+"_baseline_step", k+"_baseline_verify")
	}
	ks = append(ks, k+"_replay_step_small")
	if k == "mamba2" {
		ks = append(ks, "mamba2_replay_verify_small", "mamba2_replay_verify_small_early")
	} else {
		ks = append(ks, "gdn_replay_verify", "gdn_replay_verify_early")
	}
	if p.parts > 0 { // a split module holds the small batches' kernels
		return ks
	}
	ks = append(ks, k+"_replay_nonflush", k+"_replay_flush", k+"_replay_verify")
	if p.pipe.on {
		ks = append(ks, k+"_pipe_step")
		if k == "mamba2" {
			ks = append(ks, "mamba2_pipe_verify", "mamba2_replay_verify_fold")
		}
	}
	if p.group.on {
		ks = append(ks, k+"_group_step")
		if p.group.verifyOn {
			ks = append(ks, k+"_group_verify", k+"_replay_fold_items")
		}
	}
	if p.folds.on {
		ks = append(ks, k+"_flush_pipe", k+"_fold_pipe")
	}
	if p.stream.flush {
		ks = append(ks, "gdn_flush_stream")
	}
	if p.stream.fold {
		ks = append(ks, "gdn_fold_stream")
	}
	return ks
}

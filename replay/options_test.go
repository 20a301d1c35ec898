package replay_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// gpuLike is a Capabilities value shaped as the GPU caches' are
// (docs/DESIGN.md 2.5): no nvfp4 baseline state, a ring of at most 32
// entries, no stochastic rounding, a bf16 ring for Mamba-2 only.
func gpuLike() replay.Capabilities {
	return replay.Capabilities{
		Backend:        "gpu",
		ReplayStates:   []numeric.Format{numeric.F32, numeric.F16, numeric.BF16, numeric.E4M3},
		BaselineStates: []numeric.Format{numeric.F32, numeric.F16, numeric.BF16, numeric.E4M3},
		ReadCopies:     []numeric.Format{numeric.BF16, numeric.E4M3, numeric.NVFP4},
		Rings:          map[string][]numeric.Format{"mamba2": {numeric.BF16}},
		MaxWindow:      32,
		MaxRing:        32,
	}
}

func TestOptionsCheck(t *testing.T) {
	cpu := replay.CPUCapabilities()
	tests := []struct {
		name   string
		kind   string
		caps   replay.Capabilities
		opt    replay.Options
		option string // the OptionsError's Option, "" for no error
		reason string // part of its Reason
	}{
		{"defaults", "mamba2", cpu, replay.Options{}, "", ""},
		{"every format", "gdn", cpu, replay.Options{State: numeric.E4M3, ReadCopy: numeric.NVFP4, Ring: numeric.BF16, MaxDraft: 16, Window: 256}, "", ""},
		{"nvfp4 naive baseline", "gdn", cpu, replay.Options{Mode: replay.Baseline, State: numeric.NVFP4}, "", ""},
		{"stochastic", "mamba2", cpu, replay.Options{State: numeric.BF16, Stochastic: true}, "", ""},
		{"window 0 after defaults", "mamba2", cpu, replay.Options{Window: -1}, "Window", "window -1 out of range [1, 256]"},
		{"window past the backend's", "mamba2", cpu, replay.Options{Window: 257}, "Window", "out of range [1, 256]"},
		{"negative max draft", "gdn", cpu, replay.Options{MaxDraft: -1}, "MaxDraft", "max draft -1 out of range [0, 16]"},
		{"max draft past the limit", "gdn", cpu, replay.Options{MaxDraft: 17}, "MaxDraft", "out of range [0, 16]"},
		{"unknown mode", "mamba2", cpu, replay.Options{Mode: 7}, "Mode", "Mode(7)"},
		{"nvfp4 checkpoint", "mamba2", cpu, replay.Options{State: numeric.NVFP4}, "State", "nvfp4 checkpoint"},
		{"e5m2 state", "mamba2", cpu, replay.Options{State: numeric.E5M2}, "State", "want fp32, fp16, bf16 or fp8-e4m3"},
		{"fp16 read copy", "mamba2", cpu, replay.Options{ReadCopy: numeric.F16}, "ReadCopy", "want none, bf16, fp8-e4m3 or nvfp4"},
		{"baseline read copy", "mamba2", cpu, replay.Options{Mode: replay.Baseline, ReadCopy: numeric.BF16}, "ReadCopy", "needs replay mode"},
		{"fp16 ring", "gdn", cpu, replay.Options{Ring: numeric.F16}, "Ring", "want fp32 or bf16"},
		{"baseline ring", "gdn", cpu, replay.Options{Mode: replay.Baseline, Ring: numeric.BF16}, "Ring", "needs replay mode"},
		{"unknown kind", "lstm", cpu, replay.Options{}, "Kind", "lstm"},
		{"kda: every format", "kda", cpu, replay.Options{State: numeric.F16, ReadCopy: numeric.NVFP4, Ring: numeric.BF16, MaxDraft: 16, ExactFold: true}, "", ""},
		{"kda: fp16 ring", "kda", cpu, replay.Options{Ring: numeric.F16}, "Ring", "want fp32 or bf16"},

		{"gpu: defaults", "gdn", gpuLike(), replay.Options{State: numeric.BF16, ReadCopy: numeric.NVFP4, MaxDraft: 16}, "", ""},
		{"gpu: a full ring", "mamba2", gpuLike(), replay.Options{Window: 16, MaxDraft: 16, Ring: numeric.BF16}, "", ""},
		{"gpu: ring too long", "mamba2", gpuLike(), replay.Options{Window: 20, MaxDraft: 16}, "MaxDraft", "36 ring entries, more than the 32"},
		{"gpu: window too long", "mamba2", gpuLike(), replay.Options{Window: 64}, "Window", "out of range [1, 32]"},
		{"gpu: nvfp4 naive baseline", "gdn", gpuLike(), replay.Options{Mode: replay.Baseline, State: numeric.NVFP4}, "State", "baseline state format nvfp4 not supported (want fp32, fp16, bf16 or fp8-e4m3)"},
		{"gpu: gdn bf16 ring", "gdn", gpuLike(), replay.Options{Ring: numeric.BF16}, "Ring", "ring format bf16 not supported (want fp32)"},
		{"gpu: kda bf16 ring", "kda", gpuLike(), replay.Options{Ring: numeric.BF16}, "Ring", "ring format bf16 not supported (want fp32)"},
		{"gpu: a bf16 ring every kind takes", "", gpuLike(), replay.Options{Ring: numeric.BF16}, "Ring", "want fp32"},
		{"gpu: stochastic", "mamba2", gpuLike(), replay.Options{State: numeric.BF16, Stochastic: true}, "Stochastic", "stochastic"},
	}
	for _, tt := range tests {
		got, err := tt.opt.Check(tt.kind, tt.caps)
		if tt.option == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			} else if got.Window < 1 || got.Threads < 1 {
				t.Errorf("%s: defaults not filled in: %+v", tt.name, got)
			}
			continue
		}
		var oe *replay.OptionsError
		if !errors.As(err, &oe) {
			t.Errorf("%s: error %v, want an *OptionsError", tt.name, err)
			continue
		}
		if oe.Option != tt.option || !strings.Contains(oe.Reason, tt.reason) || oe.Backend != tt.caps.Backend ||
			!strings.HasPrefix(err.Error(), tt.caps.Backend+" ") {
			t.Errorf("%s: %+v (%q), want option %s and a reason with %q", tt.name, oe, err, tt.option, tt.reason)
		}
	}
}

// TestConstructorsCheck checks that the CPU constructors refuse what
// CPUCapabilities refuses, with Check's error.
func TestConstructorsCheck(t *testing.T) {
	opt := replay.Options{Mode: replay.Baseline, Ring: numeric.BF16}
	_, want := opt.Check("gdn", replay.CPUCapabilities())
	_, err := replay.NewGDN(ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8}, replay.GDNParams{ALog: make([]float32, 4), DtBias: make([]float32, 4)}, replay.ConvWeights{}, 1, opt)
	if err == nil || want == nil || err.Error() != want.Error() {
		t.Errorf("NewGDN: %v, want %v", err, want)
	}
	opt = replay.Options{Mode: replay.Replay, State: numeric.E5M2}
	_, want = opt.Check("kda", replay.CPUCapabilities())
	_, err = replay.NewKDA(ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8}, replay.ConvWeights{}, 1, opt)
	if err == nil || want == nil || err.Error() != want.Error() {
		t.Errorf("NewKDA: %v, want %v", err, want)
	}
	opt = replay.Options{Mode: replay.Replay, State: numeric.NVFP4}
	_, want = opt.Check("mamba2", replay.CPUCapabilities())
	_, err = replay.NewMamba2(ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 16, Groups: 2}, replay.Mamba2Params{ALog: make([]float32, 4), DtBias: make([]float32, 4), D: make([]float32, 4)}, replay.ConvWeights{}, 1, opt)
	if err == nil || want == nil || err.Error() != want.Error() {
		t.Errorf("NewMamba2: %v, want %v", err, want)
	}
}

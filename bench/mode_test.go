package bench

import (
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

func TestModes(t *testing.T) {
	want := []string{"baseline", "replay", "replay-nvfp4", "replay-fp8", "verify-baseline", "verify", "verify-nvfp4", "verify-fp8"}
	if len(Modes) != len(want) {
		t.Fatalf("Modes = %v, want %v", Modes, want)
	}
	for i, name := range want {
		m, err := ParseMode(name)
		if err != nil || m.String() != name || Modes[i] != name {
			t.Errorf("%s: ParseMode = %v (%v), Modes[%d] = %s", name, m, err, i, Modes[i])
		}
	}
	for _, bad := range []string{"", "fast", "replay-bf16", "baseline-nvfp4", "verify-fp8-e4m3"} {
		if _, err := ParseMode(bad); err == nil {
			t.Errorf("ParseMode(%q) succeeded", bad)
		}
	}
}

// TestModeOptions checks each mode's options on a base that sets every
// field a mode may change.
func TestModeOptions(t *testing.T) {
	base := replay.Options{Mode: replay.Replay, Window: 8, State: numeric.BF16, ReadCopy: numeric.BF16, Ring: numeric.BF16, MaxDraft: 2, Threads: 3}
	with := func(f func(*replay.Options)) replay.Options {
		o := base
		f(&o)
		return o
	}
	baseline := func(o *replay.Options) { o.Mode, o.ReadCopy, o.Ring = replay.Baseline, numeric.F32, numeric.F32 }
	tests := []struct {
		mode      string
		positions int
		want      replay.Options
	}{
		{"baseline", 5, with(baseline)},
		{"replay", 5, base},
		{"replay-nvfp4", 5, with(func(o *replay.Options) { o.ReadCopy = numeric.NVFP4 })},
		{"replay-fp8", 5, with(func(o *replay.Options) { o.ReadCopy = numeric.E4M3 })},
		{"verify-baseline", 5, with(func(o *replay.Options) { baseline(o); o.MaxDraft = 5 })},
		{"verify", 5, with(func(o *replay.Options) { o.MaxDraft = 5 })},
		{"verify", 1, base}, // MaxDraft stays at least base's
		{"verify-nvfp4", 4, with(func(o *replay.Options) { o.ReadCopy, o.MaxDraft = numeric.NVFP4, 4 })},
		{"verify-fp8", 4, with(func(o *replay.Options) { o.ReadCopy, o.MaxDraft = numeric.E4M3, 4 })},
	}
	for _, tt := range tests {
		m, err := ParseMode(tt.mode)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Options(base, tt.positions); got != tt.want {
			t.Errorf("%s, %d positions: %+v, want %+v", tt.mode, tt.positions, got, tt.want)
		}
	}
	// bench kernels' rows: the configuration's window and ring on replay
	// rows, cfg.Drafts positions on verify rows.
	cfg := KernelConfig{Window: 16, Drafts: 4, Ring: numeric.BF16}
	if got, want := kernelOptions("verify-nvfp4", numeric.F16, cfg), (replay.Options{Window: 16, State: numeric.F16, ReadCopy: numeric.NVFP4, Ring: numeric.BF16, MaxDraft: 4}); got != want {
		t.Errorf("verify-nvfp4: %+v, want %+v", got, want)
	}
	if got, want := kernelOptions("baseline", numeric.F16, cfg), (replay.Options{Mode: replay.Baseline, Window: 16, State: numeric.F16}); got != want {
		t.Errorf("baseline: %+v, want %+v", got, want)
	}
}

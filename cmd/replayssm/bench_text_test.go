package main

import (
	"strings"
	"testing"

	"github.com/replayssm/replayssm/bench"
	"github.com/replayssm/replayssm/numeric"
)

// TestKernelsText checks the text table of bench kernels: small times keep
// a decimal, unmeasured ratios and bandwidths are not printed as zeros.
func TestKernelsText(t *testing.T) {
	gpu := bench.Row{Device: "cuda", Shape: "qwen3.5-4b", StateDtype: "fp32", Batch: 1, Mode: "replay",
		UsPerStep: 7.46, UsNonflush: 6.52, UsFlush: 24.55, BytesPerStep: 2.2e6, GBps: 297.7, PctCopy: 7, SpeedupVsBaseline: 0.7612}
	cpu := bench.Row{Device: "cpu", Threads: 2, Shape: "nemotron-3-nano-4b", StateDtype: "bf16", Batch: 64, Mode: "replay-fp8",
		UsPerStep: 4211.4, UsNonflush: 3950.2, UsFlush: 8120.9, BytesPerStep: 1.23e8, GBps: 29.2, PctCopy: 38, NonflushVsReplay: 1.52}
	tests := []struct {
		name string
		got  string
		want []string
		not  []string
	}{
		{"gpu header", kernelsHeader(bench.Row{Device: "cuda", CopyGBps: 4262.4}, 16, 4, numeric.F32),
			[]string{"device cuda, copy bandwidth 4262.4 GB/s (read+write), window L=16, verify T=4\n", "us/step"}, []string{"read-only", "rings"}},
		{"bf16 ring header", kernelsHeader(bench.Row{Device: "cuda", CopyGBps: 4262.4}, 16, 4, numeric.BF16),
			[]string{"window L=16, verify T=4, replay rings in bf16\n"}, nil},
		{"cpu header", kernelsHeader(bench.Row{Device: "cpu", Threads: 2, CopyGBps: 61.2, ReadGBps: 47.9}, 8, 2, numeric.F32),
			[]string{"device cpu (2 threads), copy bandwidth 61.2 GB/s (read+write), read-only 47.9 GB/s, window L=8, verify T=2\n"}, nil},
		{"batch 1 row", kernelsLine(gpu),
			[]string{"qwen3.5-4b", "      7.5       6.5      24.6", "0.76x"}, []string{" 7 ", "\n"}},
		{"ring share", kernelsLine(bench.Row{Device: "cuda", Shape: "nemotron-3-nano-4b", StateDtype: "fp32", Batch: 256,
			Mode: "replay", UsPerStep: 328, UsNonflush: 276, UsFlush: 756, BytesPerStep: 1.07e9, GBps: 3260, PctCopy: 76,
			PctCopyWithRing: 81.6, SpeedupVsBaseline: 1.51}),
			[]string{"1.51x  82% with the ring"}, []string{"faster than replay"}},
		{"no baseline in the run", kernelsLine(cpu),
			[]string{"     4211      3950      8121", "       -  non-flush 1.52x faster than replay"}, []string{"0.00x"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, w := range tc.want {
				if !strings.Contains(tc.got, w) {
					t.Errorf("%q lacks %q", tc.got, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(tc.got, n) {
					t.Errorf("%q contains %q", tc.got, n)
				}
			}
		})
	}
}

package bench

import (
	"math"
	"testing"

	"github.com/replayssm/replayssm/numeric"
)

// TestRatiosFill checks a group's derived figures against sums done by hand:
// bandwidth, % of copy with and without the ring, the speedup over the
// group's baseline and the read copy's non-flush speedup over plain replay.
func TestRatiosFill(t *testing.T) {
	const copyGBps = 4000.0
	var g ratios
	rows := []struct {
		row      Row
		gbps     float64
		pct      float64
		withRing float64 // 0: not reported
		speedup  float64
		nonflush float64
	}{
		// 2 GB in 500 us: 4000 GB/s, the copy bandwidth.
		{Row{Mode: "baseline", UsPerStep: 500, UsNonflush: 500, BytesPerStep: 2e9}, 4000, 100, 0, 1, 0},
		// 1 GB + 0.2 GB of ring in 400 us: 2500 GB/s of state, 3000 in all.
		{Row{Mode: "replay", UsPerStep: 400, UsNonflush: 300, BytesPerStep: 1e9, RingBytesPerStep: 2e8}, 2500, 62.5, 75, 1.25, 0},
		{Row{Mode: "replay-nvfp4", UsPerStep: 250, UsNonflush: 150, BytesPerStep: 2.5e8, RingBytesPerStep: 2e8}, 1000, 25, 45, 2, 2},
		{Row{Mode: "verify-baseline", UsPerStep: 1000, BytesPerStep: 3e9}, 3000, 75, 0, 1, 0},
		{Row{Mode: "verify", UsPerStep: 400, BytesPerStep: 1e9}, 2500, 62.5, 0, 2.5, 0},
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	for _, tc := range rows {
		r := tc.row
		g.fill(&r, copyGBps)
		if !near(r.GBps, tc.gbps) || !near(r.PctCopy, tc.pct) || !near(r.PctCopyWithRing, tc.withRing) ||
			!near(r.SpeedupVsBaseline, tc.speedup) || !near(r.NonflushVsReplay, tc.nonflush) {
			t.Errorf("%s: GB/s %v, %% copy %v, with the ring %v, speedup %v, non-flush %v; want %v, %v, %v, %v, %v",
				tc.row.Mode, r.GBps, r.PctCopy, r.PctCopyWithRing, r.SpeedupVsBaseline, r.NonflushVsReplay,
				tc.gbps, tc.pct, tc.withRing, tc.speedup, tc.nonflush)
		}
	}
}

// TestRingTraffic checks the window average of the ring's bytes against a
// walk through the window, step by step (a slot at ring position n reads n
// entries and appends one; at n = L-1 it folds the L-1 entries and appends
// none), and the layers' entry sizes against their rings' fields.
func TestRingTraffic(t *testing.T) {
	walk := func(r ringTraffic, L int) float64 {
		total := 0
		for n := 0; n < L; n++ {
			if n < L-1 {
				total += n*r.read + r.write
			} else {
				total += n * r.fold
			}
		}
		return float64(total) / float64(L)
	}
	r := ringTraffic{write: 7, read: 3, fold: 5}
	for _, L := range []int{1, 2, 4, 16, 33} {
		if got, want := r.perStep(L), walk(r, L); math.Abs(got-want) > 1e-9*want {
			t.Errorf("L=%d: %v bytes a step, want %v", L, got, want)
		}
	}
	for _, tc := range []struct {
		name string
		got  ringTraffic
		want ringTraffic
	}{
		// Nemotron-3-Nano-4B: x 96x80, B 8x128, Δ and decay 96 each.
		{"nano", mamba2Ring(96, 80, 8, 128, 4), ringTraffic{4 * (7680 + 1024 + 192), 4 * (7680 + 1024 + 192), 4 * (7680 + 1024 + 192)}},
		// A bf16 ring on the GPU: x and B in 2 bytes, Δ and the decay in 4.
		{"nano/bf16 ring", mamba2Ring(96, 80, 8, 128, ringElemBytes(numeric.BF16)),
			ringTraffic{2*(7680+1024) + 4*192, 2*(7680+1024) + 4*192, 2*(7680+1024) + 4*192}},
		// Qwen3.5-4B: k 16x128; v, u 32x128; gate, β 32 each. Read: k, u,
		// gate; fold: k, v, gate, β.
		{"qwen3.5-4b", gdnRing(16, 32, 128, 128), ringTraffic{4 * (2048 + 8192 + 64), 4 * (2048 + 4096 + 32), 4 * (2048 + 4096 + 64)}},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, tc.got, tc.want)
		}
	}
}

package cuda

import (
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// roundRingFields returns in with l's ring fields (the inputs a bf16 ring
// keeps) rounded to bf16 by package numeric, the other fields shared.
func roundRingFields(l gpuLayer, in [][]float32) [][]float32 {
	out := append([][]float32(nil), in...)
	for _, f := range l.ringFields {
		r := make([]float32, len(in[f]))
		for i, v := range in[f] {
			r[i] = numeric.F32FromBF16(numeric.BF16FromF32(v))
		}
		out[f] = r
	}
	return out
}

// TestReplayRingBF16IsRoundedInputs is the GPU side of package replay's
// test of the same name: a Mamba-2 cache with a bf16 ring
// (replay.Options.Ring), fed the drawn inputs, must give bit for bit the
// outputs of the same cache with an fp32 ring fed those inputs rounded to
// bf16 by package numeric, through sameOutputs' 40 rounds of steps,
// verifies and commits over slots at different phases. Bit for bit because
// the kernels' arithmetic is the fp32 ring's: only where a value comes from
// (a bf16 code, or a float that round_bf16 rounded) differs, and the value
// is the same float. (The fp32 ring's outputs are checked against the
// float64 reference by TestReplayCacheMatchesReference, so this makes the
// bf16 ring's the reference's on rounded inputs, as on the CPU.) Each
// kernel path is run: the one-kernel small step and verify, the group step
// and group verify and the v4 kernels, with the work_items flush and early
// folds or the pipelined ones (whose producers widen the bf16 rows:
// Piece.widen). A bf16 ring has no pipelined step or verify (v5). The rounding must change
// some of the drawn inputs, else the comparison could not tell the rings
// apart.
func TestReplayRingBF16IsRoundedInputs(t *testing.T) {
	d := gpu(t)
	formats := []struct {
		name string
		opt  replay.Options
	}{
		{"fp32", replay.Options{Mode: replay.Replay, Window: 5, MaxDraft: 3}},
		{"bf16+nvfp4", replay.Options{Mode: replay.Replay, Window: 5, MaxDraft: 3, State: numeric.BF16, ReadCopy: numeric.NVFP4}},
		{"e4m3", replay.Options{Mode: replay.Replay, Window: 5, MaxDraft: 3, State: numeric.E4M3}},
		{"fp16+e4m3-L1", replay.Options{Mode: replay.Replay, Window: 1, MaxDraft: 3, State: numeric.F16, ReadCopy: numeric.E4M3}},
	}
	variants := []struct {
		name  string
		small int    // the largest batch whose step is one kernel
		folds string // the fold kernels ("items", "v7": the pipelined folds)
		tune  func(*tuning)
	}{
		{"small", pairSlots, "items", func(*tuning) {}},
		{"group", 0, "items", func(tn *tuning) { tn.groupAll = true }},
		{"group+pipelined-folds", 0, "v7", func(tn *tuning) { tn.groupAll = true }},
		{"v4", 0, "items", func(tn *tuning) { tn.v4 = true }},
	}
	layers := []gpuLayer{smallLayers()[0], largeLayers()[0]}
	for li, l := range layers {
		for _, f := range formats {
			for _, v := range variants {
				t.Run(l.name+"/"+f.name+"/"+v.name, func(t *testing.T) {
					t.Parallel()
					tn := envTuning(os.Getenv)
					tn.folds = "items"
					if v.folds == "v7" {
						tn.folds = "pipe"
					}
					v.tune(&tn)
					build := func(ring numeric.Format) *gpuCache {
						opt := f.opt
						opt.Ring = ring
						c, err := l.buildWith(d, opt, pairSlots, tn)
						if err != nil {
							t.Fatal(err)
						}
						t.Cleanup(func() { must(t, c.close()) })
						c.setSmallBatch(v.small)
						if got, why := c.foldKernel(); got != v.folds {
							t.Fatalf("%v ring: fold kernels %s (%s), want %s", ring, got, why, v.folds)
						}
						// Both sides take the same kernels, so even a
						// tensor-core stream sums in the same order.
						c.inexact = func() bool { return false }
						return c
					}
					a, b := build(numeric.BF16), build(numeric.F32)
					// Where the fp32 ring takes the pipelined step or
					// verify (v5), the bf16 ring has none and takes v4,
					// whose outputs v5's equal bit for bit
					// (TestReplayPipelineMatchesV4).
					v4 := func(k string) string { return strings.Replace(k, "v5", "v4", 1) }
					for batch := 1; batch <= pairSlots; batch++ {
						if sa, sb := a.stepKernel(batch), v4(b.stepKernel(batch)); sa != sb {
							t.Fatalf("batch %d: step kernels %s (bf16 ring) and %s (fp32 ring)", batch, sa, sb)
						}
						if va, vb := a.verifyKernel(batch), v4(b.verifyKernel(batch)); va != vb {
							t.Fatalf("batch %d: verify kernels %s (bf16 ring) and %s (fp32 ring)", batch, va, vb)
						}
					}
					changed := 0
					sameOutputsOf(t, d, li, l, a, b, "bf16 ring", "fp32 ring, rounded inputs", func(in [][]float32) [][]float32 {
						out := roundRingFields(l, in)
						for _, fi := range l.ringFields {
							for i := range in[fi] {
								if math.Float32bits(in[fi][i]) != math.Float32bits(out[fi][i]) {
									changed++
								}
							}
						}
						return out
					})
					if changed == 0 {
						t.Fatal("rounding to bf16 changed none of the drawn inputs")
					}
				})
			}
		}
	}
}

// TestReplayRingRefusals checks the ring formats the GPU caches refuse,
// before any device work: GDN caches keep an fp32 ring (their ring holds
// the normalised k, which is not a bf16 value; NOTES.md, session 35),
// and neither cache takes an fp16 ring or a ring in baseline mode. (A
// Mamba-2 cache's bf16 ring needed REPLAYSSM_CUDA_RING_BF16=1 until its
// first device run, session 36.)
func TestReplayRingRefusals(t *testing.T) {
	ctx := context.Background()
	shape := ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8}
	prm := replay.GDNParams{ALog: make([]float32, 4), DtBias: make([]float32, 4)}
	// The refusal comes before the device is touched: no GPU is needed
	// (a nil device would fail any later step).
	_, err := newGDNCache(ctx, nil, shape, prm, 2, replay.Options{Mode: replay.Replay, Ring: numeric.BF16}, tuning{})
	if !errors.Is(err, ErrReplayOptions) {
		t.Errorf("GDN cache with a bf16 ring: error %v, want ErrReplayOptions", err)
	}
	m2 := ssm.Mamba2Shape{Heads: 4, HeadDim: 8, StateSize: 16, Groups: 2}
	m2prm := replay.Mamba2Params{ALog: make([]float32, 4), DtBias: make([]float32, 4), D: make([]float32, 4)}
	for _, opt := range []replay.Options{
		{Mode: replay.Replay, Ring: numeric.F16},
		{Mode: replay.Baseline, Ring: numeric.BF16},
	} {
		if _, err := newMamba2Cache(ctx, nil, m2, m2prm, 2, opt, tuning{}); !errors.Is(err, ErrReplayOptions) {
			t.Errorf("Mamba-2 cache, %v ring, mode %v: error %v, want ErrReplayOptions", opt.Ring, opt.Mode, err)
		}
	}
}

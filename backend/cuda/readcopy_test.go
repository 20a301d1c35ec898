package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
)

// TestReplayReadCopyIsNumerics checks the read copy a flush writes against
// package numeric's encoding of the checkpoint the same flush wrote, byte
// for byte: nvfp4 (codes, block scales and the global scale against
// numeric.QuantizeNVFP4), fp8 (codes and the matrix scale against replay's
// store: amax/448 and numeric.EncodeE4M3) and bf16. The CPU cache writes
// its copies so; the reference tests bound only what reads of the copy
// give. At batch 2 the small-batch step flushes by default; the "split
// kernels" cases take the flush kernels. The "non-finite" cases put
// infinities and NaNs into an nvfp4 cache's checkpoint before a second
// flush (the quantiser's maxima, saturation, NaN codes and zero-scale
// blocks).
func TestReplayReadCopyIsNumerics(t *testing.T) {
	d := gpu(t)
	const L, batch = 4, 2
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for li, l := range []pathLayer{
		mamba2PathLayer(13, ssm.Mamba2Shape{Heads: 4, HeadDim: 80, StateSize: 128, Groups: 2}),
		gdnPathLayer(14, ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 128, ValueDim: 128}),
	} {
		for _, tc := range []struct {
			name string
			read numeric.Format
		}{
			{"fp32+nvfp4", numeric.NVFP4},
			{"fp32+e4m3", numeric.E4M3},
			{"fp32+bf16", numeric.BF16},
		} {
			for _, variant := range []struct {
				split, nonFinite bool
			}{{false, false}, {true, false}, {false, true}, {true, true}} {
				split := variant.split
				kernels := "small step"
				if split {
					kernels = "split kernels"
				}
				if variant.nonFinite {
					if tc.read != numeric.NVFP4 {
						// e4m3's matrix scale counts infinities (replay's
						// store) and its NaN codes are the GPU's; bf16's
						// NaN codes too (BF16_NAN_BRANCH): nvfp4 alone
						// has one answer for them.
						continue
					}
					kernels += "/non-finite"
				}
				t.Run(l.name+"/"+tc.name+"/"+kernels, func(t *testing.T) {
					t.Parallel()
					opt := replay.Options{Mode: replay.Replay, Window: L, MaxDraft: 2, ReadCopy: tc.read}
					s := stream(t, d)
					c, err := l.build(s, opt, batch, func(p *cachePlan) {
						if split {
							// The flush kernels rather than the
							// small-batch step's own.
							p.smallBatch = 0
						}
					})
					if err != nil {
						t.Fatal(err)
					}
					rc := c.common
					closeAfter(t, rc)
					var slots []replay.Slot
					for range batch {
						slot, err := rc.Admit()
						if err != nil {
							t.Fatal(err)
						}
						slots = append(slots, slot)
					}
					in := make([]Buffer, len(l.perRow))
					for i, n := range l.perRow {
						in[i] = alloc(t, d, 4*batch*n)
					}
					y := alloc(t, d, 4*batch*l.width)
					// The copy poisoned (0xa5 bytes), so that what the
					// flush leaves unwritten fails the comparison. With a
					// read copy both layers fold from the checkpoint and
					// the raw inputs (the exact fold), so the poison the
					// non-flush steps read does not reach the checkpoint.
					must(t, s.Synchronize()) // the admissions' clears first
					for _, b := range []Buffer{rc.codes, rc.scales, rc.scale} {
						must(t, d.Memset32(b, 0xa5a5a5a5))
					}
					// L+1 steps: every slot has flushed once, and its
					// checkpoint and copy are that flush's.
					rng := rand.New(rand.NewPCG(seed, uint64(li)))
					steps := func(n int) {
						for range n {
							for i, v := range l.draw(rng, batch) {
								must(t, s.CopyToDevice(in[i], f32Bytes(v)))
							}
							must(t, c.step(slots, in, y))
						}
						must(t, s.Synchronize())
					}
					steps(L + 1)
					E := rc.elems
					if variant.nonFinite {
						// Infinities and NaNs in the first slot's
						// checkpoint, then L more steps: its next flush
						// folds them into the new checkpoint (Mamba-2 in
						// place; GDN through its rows' S·k, whole rows),
						// and the quantiser must leave them out of its
						// maxima, saturate the infinities and give NaNs
						// code 0, and give the blocks they fill scale 0,
						// as numeric does.
						inf, nan := float32(math.Inf(1)), float32(math.NaN())
						for h := range min(rc.heads, 2) {
							m := int(slots[0])*rc.heads + h
							ck := make([]float32, E)
							b := slice(t, rc.state, m*4*E, 4*E)
							must(t, d.CopyFromDeviceF32(ck, b))
							if h == 0 {
								ck[5], ck[37], ck[100], ck[E-1] = inf, -inf, nan, inf
								ck[E/2+3] = math.Float32frombits(0xffc00000) // a negative NaN
							} else {
								for i := 32; i < 48; i++ {
									ck[i], ck[i+32] = nan, inf // a block of each
								}
							}
							must(t, d.CopyToDeviceF32(b, ck))
						}
						steps(L)
					}
					for _, slot := range slots {
						for h := range rc.heads {
							m := int(slot)*rc.heads + h
							ck := make([]float32, E)
							must(t, d.CopyFromDeviceF32(ck, slice(t, rc.state, m*4*E, 4*E)))
							if maxAbs(ck) == 0 {
								t.Fatalf("slot %d head %d: the checkpoint is all zeros after %d steps", slot, h, L+1)
							}
							where := func(what string, i int) string {
								return fmt.Sprintf("%s of slot %d head %d at %d", what, slot, h, i)
							}
							switch tc.read {
							case numeric.NVFP4:
								codes, scales, g := make([]byte, E/2), make([]byte, E/16), make([]float32, 1)
								must(t, d.CopyFromDevice(codes, slice(t, rc.codes, m*E/2, E/2)))
								must(t, d.CopyFromDevice(scales, slice(t, rc.scales, m*E/16, E/16)))
								must(t, d.CopyFromDeviceF32(g, slice(t, rc.scale, 4*m, 4)))
								wantCodes, wantScales := make([]byte, E/2), make([]byte, E/16)
								wantG := numeric.QuantizeNVFP4(wantCodes, wantScales, ck)
								if math.Float32bits(g[0]) != math.Float32bits(wantG) {
									t.Fatalf("%s: %g, numeric %g", where("global scale", 0), g[0], wantG)
								}
								compareBytes(t, where, "block scale", scales, wantScales)
								compareBytes(t, where, "codes", codes, wantCodes)
							case numeric.E4M3:
								codes, sc := make([]byte, E), make([]float32, 1)
								must(t, d.CopyFromDevice(codes, slice(t, rc.codes, m*E, E)))
								must(t, d.CopyFromDeviceF32(sc, slice(t, rc.scale, 4*m, 4)))
								scale := maxAbs(ck) / 448
								want := make([]byte, E)
								numeric.EncodeE4M3(want, ck, 1/scale)
								if math.Float32bits(sc[0]) != math.Float32bits(scale) {
									t.Fatalf("%s: %g, replay's %g", where("matrix scale", 0), sc[0], scale)
								}
								compareBytes(t, where, "codes", codes, want)
							case numeric.BF16:
								codes := make([]byte, 2*E)
								must(t, d.CopyFromDevice(codes, slice(t, rc.codes, m*2*E, 2*E)))
								want := make([]byte, 2*E)
								for i, v := range ck {
									binary.LittleEndian.PutUint16(want[2*i:], numeric.BF16FromF32(v))
								}
								compareBytes(t, where, "codes", codes, want)
							}
						}
					}
				})
			}
		}
	}
}

func slice(t *testing.T, b Buffer, off, n int) Buffer {
	t.Helper()
	s, err := b.Slice(off, n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func maxAbs(v []float32) float32 {
	var m float32
	for _, x := range v {
		m = max(m, float32(math.Abs(float64(x))))
	}
	return m
}

func compareBytes(t *testing.T, where func(string, int) string, what string, got, want []byte) {
	t.Helper()
	bad := 0
	for i := range want {
		if got[i] != want[i] {
			if bad++; bad <= 5 {
				t.Errorf("%s: %#02x, numeric %#02x", where(what, i), got[i], want[i])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%s: %d of %d bytes differ", what, bad, len(want))
	}
}

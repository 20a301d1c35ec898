package replay

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/replayssm/replayssm/numeric"
)

// exportRingOffset is the offset of exportHeader.Ring in an exported
// blob's header (after Version, Kind, Dims, Mode, State and Read).
const exportRingOffset = 4 + 8 + 16 + 3

// roundRingInputs returns in with the inputs a ring keeps (Mamba-2's x and
// B, GDN's k and v) rounded to bf16, the rest as drawn.
func roundRingInputs(in input) input {
	rounded := func(v []float32) []float32 {
		out := make([]float32, len(v))
		for i, x := range v {
			out[i] = numeric.F32FromBF16(numeric.BF16FromF32(x))
		}
		return out
	}
	switch in := in.(type) {
	case mamba2Rows:
		out := in
		out.X, out.B = rounded(in.X), rounded(in.B)
		return out
	case gdnRows:
		out := in
		out.K, out.V = rounded(in.K), rounded(in.V)
		return out
	}
	panic("unknown input kind")
}

// TestRingBF16IsRoundedInputs is the metamorphic test of Options.Ring: a
// cache with a bf16 ring, fed the drawn inputs, must give bit for bit the
// outputs and slot states of the same cache with an fp32 ring fed those
// inputs rounded to bf16 beforehand, through steps, verifies, commits and
// flushes, admissions mid-stream, with and without a read copy. (The fp32
// ring's outputs are the float64 reference's, within the bounds of
// TestStepMatchesReference and TestSpeculativeMatchesSequential.) The same
// cache fed the unrounded inputs must differ: the rounding happens.
func TestRingBF16IsRoundedInputs(t *testing.T) {
	for _, l := range testLayers() {
		for _, tc := range []struct {
			name string
			opt  Options
		}{
			{"fp32", Options{Mode: Replay, Window: 4, MaxDraft: 3, Threads: 2}},
			{"bf16+nvfp4", Options{Mode: Replay, Window: 5, MaxDraft: 3, State: numeric.BF16, ReadCopy: numeric.NVFP4, Threads: 2}},
			{"fp32-exact-fold", Options{Mode: Replay, Window: 3, MaxDraft: 2, ExactFold: true, Threads: 1}},
		} {
			t.Run(l.name()+"/"+tc.name, func(t *testing.T) {
				ringOpt := tc.opt
				ringOpt.Ring = numeric.BF16
				caches := make([]cache, 3) // bf16 ring; fp32 ring, rounded inputs; fp32 ring, drawn inputs
				for i, opt := range []Options{ringOpt, tc.opt, tc.opt} {
					c, err := l.build(opt, 4)
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					caches[i] = c
				}
				rng := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
				var slots []Slot
				admit := func() {
					var first Slot
					for i, c := range caches {
						s, err := c.Admit()
						if err != nil {
							t.Fatal(err)
						}
						if i == 0 {
							first = s
						} else if s != first {
							t.Fatalf("the caches admitted slots %d and %d", first, s)
						}
					}
					slots = append(slots, first)
				}
				admit()
				admit()
				w := l.width()
				differ := 0
				for round := range 40 {
					if round == 9 || round == 21 {
						admit()
					}
					T, verify := 1, tc.opt.MaxDraft > 0 && rng.IntN(3) == 0
					if verify {
						T = 1 + rng.IntN(tc.opt.MaxDraft)
					}
					counts := make([]int, len(slots))
					for i := range counts {
						counts[i] = 1 + rng.IntN(T)
					}
					in := l.draw(len(slots) * T)
					ins := []input{in, roundRingInputs(in), in}
					ys := make([][]float32, len(caches))
					for i, c := range caches {
						ys[i] = make([]float32, len(slots)*T*w)
						poison(ys[i])
						var err error
						if verify {
							err = c.verify(slots, T, counts, ins[i], ys[i])
						} else {
							err = c.step(slots, ins[i], ys[i])
						}
						if err != nil {
							t.Fatal(err)
						}
					}
					for k := range ys[0] {
						a, b := ys[0][k], ys[1][k]
						if math.Float32bits(a) != math.Float32bits(b) && !(a != a && b != b) {
							t.Fatalf("round %d (T=%d) output %d: %g with the bf16 ring, %g with the fp32 ring on rounded inputs", round, T, k, a, b)
						}
						if ys[0][k] != ys[2][k] {
							differ++
						}
					}
					if verify {
						acc := make([]int, len(slots))
						for i := range acc {
							acc[i] = rng.IntN(counts[i] + 1)
						}
						for _, c := range caches {
							if err := c.Commit(slots, acc); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
				for _, s := range slots {
					a, err := caches[0].export(s)
					if err != nil {
						t.Fatal(err)
					}
					b, err := caches[1].export(s)
					if err != nil {
						t.Fatal(err)
					}
					// The blobs differ in the header's ring format alone.
					p := len(exportMagic) + exportRingOffset
					if len(a) != len(b) || a[p] != uint8(numeric.BF16) || b[p] != uint8(numeric.F32) ||
						!bytes.Equal(a[:p], b[:p]) || !bytes.Equal(a[p+1:], b[p+1:]) {
						t.Fatalf("slot %d: the exported states differ", s)
					}
					if err := caches[1].import_(s, a); err == nil {
						t.Fatalf("slot %d: an fp32-ring cache imported a bf16 ring's state", s)
					}
				}
				if differ == 0 {
					t.Fatal("the bf16 ring's outputs equal the fp32 ring's on the drawn inputs: nothing was rounded")
				}
				st := caches[0].Stats()
				t.Logf("%d outputs differ from the unrounded ring's; flushes %d, verifies %d", differ, st.Flushes, st.Verifies)
			})
		}
	}
}

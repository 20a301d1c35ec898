package replay

import (
	"math"
	"slices"
	"testing"

	"github.com/replayssm/replayssm/numeric"
)

// FuzzOperations drives a cache with an arbitrary sequence of operations
// (admit, evict, reset, fork, step, verify+commit, export+import, bad
// requests) and checks after every operation that each live slot still
// produces exactly the float64 reference's outputs for the inputs it
// accepted, that rejected operations change nothing, and that the cache
// never panics. ops[0] picks the layer (ops[0] mod 3: Mamba-2, Gated
// DeltaNet, Kimi Delta Attention) and the options (ops[0]/3 mod 4).
func FuzzOperations(f *testing.F) {
	f.Add([]byte{0, 0, 0, 4, 4, 5, 1, 5, 6, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3, 4, 2, 7, 4})
	f.Add([]byte{1, 0, 0, 0, 5, 5, 5, 5, 6, 6, 6, 4, 4, 4, 4, 8, 8, 9, 1, 1, 5, 4})
	f.Add([]byte{3, 0, 3, 0, 5, 5, 7, 7, 9, 9, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5})
	f.Add([]byte{4, 0, 0, 0, 0, 0, 0, 0, 4, 5, 4, 5, 4, 5, 2, 2, 2, 2})
	// Kimi Delta Attention under each of the four option sets.
	f.Add([]byte{2, 0, 0, 0, 5, 5, 5, 5, 6, 6, 6, 4, 4, 4, 4, 8, 8, 9, 1, 1, 5, 4})
	f.Add([]byte{5, 0, 0, 0, 0, 0, 0, 0, 4, 5, 4, 5, 4, 5, 2, 2, 2, 2})
	f.Add([]byte{8, 0, 0, 4, 4, 5, 1, 5, 6, 4, 4, 4, 4, 4, 4, 4, 4, 4, 3, 4, 2, 7, 4})
	f.Add([]byte{11, 0, 3, 0, 5, 5, 7, 7, 9, 9, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5})
	f.Fuzz(runOperations)
}

func runOperations(t *testing.T, ops []byte) {
	{
		if len(ops) < 2 || len(ops) > 400 {
			return
		}
		layers := testLayers()
		l := layers[int(ops[0])%3]
		opt := []Options{
			{Mode: Replay, Window: 4, MaxDraft: 3, Threads: 2},
			{Mode: Baseline, MaxDraft: 3, Threads: 2},
			{Mode: Replay, Window: 2, MaxDraft: 3, Threads: 1},
			{Mode: Replay, Window: 3, MaxDraft: 3, ReadCopy: numeric.BF16, Threads: 2},
		}[int(ops[0]/3)%4]
		bound := boundFor(l, 1e-5)
		if opt.ReadCopy != numeric.F32 {
			bound = boundFor(l, 8e-3)
		}
		c, err := l.build(opt, 3)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		refs := map[Slot][]float64{}
		live := func() []Slot {
			var s []Slot
			for k := range refs {
				s = append(s, k)
			}
			slices.Sort(s)
			return s
		}
		w := l.width()
		// The error of a row is relative to its norm floored at 1e-3 per
		// element (rms). A fresh slot's first delta-rule output is
		// (k̂·q̂)·β·v: where k̂ and q̂ are nearly orthogonal its norm is tiny
		// (1e-4), and the float32 rounding of their normalisation, 2^-24 of
		// each element, is then a relative error past the fp32 bound (6.7e-5
		// in one found case), though its absolute error (6e-9) is far below
		// the bound's share of an ordinary row (norm 0.1 to 1).
		floor := 1e-3 * math.Sqrt(float64(w))
		check := func(what string, y []float32, want []float64) {
			var norm float64
			for _, v := range want {
				norm += v * v
			}
			e := relErr(y, want) * min(1, math.Sqrt(norm)/floor)
			if e > bound || math.IsNaN(e) {
				t.Fatalf("%s: relative error %.3g > %.3g", what, e, bound)
			}
		}
		for pc, op := range ops[1:] {
			slots := live()
			pick := func() (Slot, bool) {
				if len(slots) == 0 {
					return 0, false
				}
				return slots[int(op>>4)%len(slots)], true
			}
			switch op % 10 {
			case 0: // admit
				s, err := c.Admit()
				if len(refs) == 3 {
					if err == nil {
						t.Fatalf("op %d: admitted a 4th slot into 3", pc)
					}
					continue
				}
				if err != nil {
					t.Fatalf("op %d: %v", pc, err)
				}
				refs[s] = l.refState()
			case 1: // evict
				if s, ok := pick(); ok {
					if err := c.Evict(s); err != nil {
						t.Fatal(err)
					}
					delete(refs, s)
				}
			case 2: // reset
				if s, ok := pick(); ok {
					if err := c.Reset(s); err != nil {
						t.Fatal(err)
					}
					refs[s] = l.refState()
				}
			case 3: // fork
				if s, ok := pick(); ok {
					d, err := c.Fork(s)
					if len(refs) == 3 {
						if err == nil {
							t.Fatal("fork into a full cache succeeded")
						}
						continue
					}
					if err != nil {
						t.Fatal(err)
					}
					refs[d] = slices.Clone(refs[s])
				}
			case 4, 5, 6: // step all live slots
				if len(slots) == 0 {
					continue
				}
				in := l.draw(len(slots))
				y := make([]float32, len(slots)*w)
				poison(y)
				if err := c.step(slots, in, y); err != nil {
					t.Fatal(err)
				}
				for i, s := range slots {
					check("step", y[i*w:(i+1)*w], l.ref(refs[s], in, i))
				}
			case 7, 8: // verify T drafts and commit a prefix
				if len(slots) == 0 {
					continue
				}
				T := 1 + int(op>>4)%3
				in := l.draw(len(slots) * T)
				y := make([]float32, len(slots)*T*w)
				poison(y)
				if err := c.verify(slots, T, nil, in, y); err != nil {
					t.Fatal(err)
				}
				acc := make([]int, len(slots))
				for i, s := range slots {
					acc[i] = (int(op>>5) + i) % (T + 1)
					for k := 0; k < acc[i]; k++ {
						r := i*T + k
						check("verify", y[r*w:(r+1)*w], l.ref(refs[s], in, r))
					}
				}
				if err := c.Commit(slots, acc); err != nil {
					t.Fatal(err)
				}
			case 9: // export a slot and import it over another, or a bad request
				s, ok := pick()
				if !ok {
					if err := c.Commit([]Slot{0}, []int{1}); err == nil {
						t.Fatal("commit on an empty cache succeeded")
					}
					continue
				}
				blob, err := c.Export(s)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Import(s, blob[:len(blob)-1]); err == nil {
					t.Fatal("truncated import accepted")
				}
				d := slots[(int(op>>4)+1)%len(slots)]
				if err := c.Import(d, blob); err != nil {
					t.Fatal(err)
				}
				refs[d] = slices.Clone(refs[s])
				if err := c.Commit([]Slot{d}, []int{1}); err == nil {
					t.Fatal("commit without pending drafts succeeded")
				}
			}
		}
	}
}

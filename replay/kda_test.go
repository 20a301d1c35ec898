package replay

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/ssm"
)

// The Kimi Delta Attention cache's own tests. The contract (every mode,
// precision, fork, export, error case, against ssm.KDAStep64) is package
// replaytest's (conformance_test.go); the fuzz, allocation and read-copy
// tests run it as a testLayers() layer; here: its decay loops, its replay
// and fold against ssm.KDAReplay64 from a checkpoint that is not zero, the
// refusal of a Gated DeltaNet state, and the fold of cached u.

// TestKDADecayLoops checks the per-channel decay loops, the plain-Go
// versions and the SIMD ones where they run, against float64 on lengths
// around their unrolling and blocks (so the blocks and the tails both
// run): decayDots, decayDot and scaleDecay compute in float64 and must
// match to its rounding (1e-12 relative to the sums of magnitudes, the
// decayed vectors exactly: one product each); scaleColumns is one float32
// product per element, exact to float32 rounding (2^-24).
func TestKDADecayLoops(t *testing.T) {
	type impl struct {
		name     string
		dots     func(yk, yq []float64, a, x []float32) (float64, float64)
		decayDot func(y []float64, a, x []float32) float64
	}
	impls := []impl{{"go", decayDotsGo, decayDotGo}}
	if simd {
		impls = append(impls, impl{"simd", decayDotsSIMD, decayDotSIMD})
	}
	for _, im := range impls {
		testDecayLoops(t, im.name, im.dots, im.decayDot)
	}
}

func testDecayLoops(t *testing.T, name string, decayDots func(yk, yq []float64, a, x []float32) (float64, float64),
	decayDot func(y []float64, a, x []float32) float64) {
	rng := rand.New(rand.NewPCG(5, 6))
	decays := func(n int) []float32 {
		a := make([]float32, n)
		for i := range a {
			a[i] = float32(math.Exp(-3 * rng.Float64()))
		}
		return a
	}
	for _, n := range []int{1, 2, 3, 7, 8, 9, 16, 17, 127, 128} {
		a, x := decays(n), normals(rng, n)
		yk, yq := to64(normals(rng, n)), to64(normals(rng, n))
		wk, wq, ak, aq := 0.0, 0.0, 0.0, 0.0
		wantK, wantQ := make([]float64, n), make([]float64, n)
		for c := range n {
			wantK[c], wantQ[c] = yk[c]*float64(a[c]), yq[c]*float64(a[c])
			wk += wantK[c] * float64(x[c])
			wq += wantQ[c] * float64(x[c])
			ak += math.Abs(wantK[c] * float64(x[c]))
			aq += math.Abs(wantQ[c] * float64(x[c]))
		}
		y1 := append([]float64(nil), yk...)
		gk, gq := decayDots(yk, yq, a, x)
		g1 := decayDot(y1, a, x)
		if math.Abs(gk-wk) > 1e-12*ak || math.Abs(gq-wq) > 1e-12*aq || math.Abs(g1-wk) > 1e-12*ak {
			t.Fatalf("%s n %d: decayDots %v %v, decayDot %v, want %v %v", name, n, gk, gq, g1, wk, wq)
		}
		for c := range n {
			if yk[c] != wantK[c] || yq[c] != wantQ[c] || y1[c] != wantK[c] {
				t.Fatalf("%s n %d channel %d: decayed %v %v %v, want %v %v", name, n, c, yk[c], yq[c], y1[c], wantK[c], wantQ[c])
			}
		}
		z, dst := append([]float64(nil), yk...), make([]float32, n)
		scaleDecay(dst, z, x, a)
		for c := range n {
			if dst[c] != float32(yk[c]*float64(x[c])) || z[c] != yk[c]*float64(a[c]) {
				t.Fatalf("n %d channel %d: scaleDecay %v %v", n, c, dst[c], z[c])
			}
		}
		rows := 3
		S := normals(rng, rows*n)
		want := append([]float32(nil), S...)
		scaleColumns(S, n, a)
		for i, v := range want {
			if w := float64(v) * float64(a[i%n]); math.Abs(float64(S[i])-w) > 0x1p-24*math.Abs(w) {
				t.Fatalf("n %d element %d: scaleColumns %v, want %v", n, i, S[i], w)
			}
		}
	}
}

// TestKDAReplayMatchesSSM holds the cache's replay to ssm.KDAReplay64 on
// one slot whose fp32 checkpoint is set to random values (so that its
// per-channel decayed read Γ(t)·q_t, not only the ring, carries the
// outputs): window-1 steps read from the checkpoint and the ring, and the
// flush step's fold, against the float64 replay's outputs and folded
// state, with the decays from e⁻³ to 1 per channel. The cache computes in
// float32 on inputs the float64 replay takes exactly: sums of dk products
// of magnitude below 1 round to about 1e-7, and a checkpoint of entries of
// order 1 gives outputs of order 0.1, so 1e-5 relative (per row, and per
// state matrix) holds with room while a wrong decay is off by 1e-2 or
// more. Both folds run: of the cached u, and exact.
func TestKDAReplayMatchesSSM(t *testing.T) {
	const W = 7
	sh := ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 24, ValueDim: 20}
	Hv, dk, dv := sh.ValueHeads, sh.KeyDim, sh.ValueDim
	for _, exact := range []bool{false, true} {
		l := newKDALayer(31, sh)
		tc, err := l.build(Options{Mode: Replay, Window: W, ExactFold: exact, Threads: 2}, 2)
		if err != nil {
			t.Fatal(err)
		}
		c := tc.impl.(*KDACache)
		slots := admitAll(t, c, 2)
		s := slots[1]
		// S0[j][i][m] for the reference, stored transposed: row m of dk.
		S0 := make([][]float64, Hv)
		for j := range Hv {
			S0[j] = to64(normals(l.rng, dk*dv))
			raw := c.state.raw(int(s)*Hv + j)
			for i := range dk {
				for m := range dv {
					raw[m*dk+i] = float32(S0[j][i*dv+m])
					S0[j][i*dv+m] = float64(raw[m*dk+i])
				}
			}
		}
		entries := make([][]ssm.KDAEntry, Hv)
		y := make([]float32, Hv*dv)
		for step := range W {
			in := l.draw(1).(kdaRows)
			poison(y)
			if err := c.Step([]Slot{s}, in.KDAInput, y); err != nil {
				t.Fatal(err)
			}
			for j := range Hv {
				kh := sh.KeyHead(j)
				e := ssm.KDAEntry{K: make([]float64, dk), Q: make([]float64, dk), V: to64(in.V[j*dv : (j+1)*dv]),
					Alpha: make([]float64, dk), Beta: ssm.Sigmoid(float64(in.B[j]))}
				ssm.L2Normalize(e.K, to64(in.K[kh*dk:(kh+1)*dk]))
				ssm.L2Normalize(e.Q, to64(in.Q[kh*dk:(kh+1)*dk]))
				for i := range dk {
					e.Q[i] /= math.Sqrt(float64(dk))
					e.Alpha[i] = math.Exp(float64(in.G[j*dk+i]))
				}
				entries[j] = append(entries[j], e)
				o, folded := ssm.KDAReplay64(S0[j], dk, dv, entries[j])
				if err := relErr(y[j*dv:(j+1)*dv], o[step]); err > 1e-5 {
					t.Fatalf("exact fold %v, step %d, value head %d: relative error %.3g", exact, step, j, err)
				}
				if step < W-1 {
					continue
				}
				// The flush: the checkpoint is the folded state.
				raw := c.state.raw(int(s)*Hv + j)
				got := make([]float32, dk*dv)
				for i := range dk {
					for m := range dv {
						got[i*dv+m] = raw[m*dk+i]
					}
				}
				if err := relErr(got, folded); err > 1e-5 {
					t.Fatalf("exact fold %v, value head %d: folded checkpoint relative error %.3g", exact, j, err)
				}
			}
		}
		c.Close()
	}
}

// TestKDAImportRefusesGDN: a Gated DeltaNet slot state of the same shape
// and options is not a KDA state (its ring holds one decay per head, not
// one per channel), and neither cache takes the other's.
func TestKDAImportRefusesGDN(t *testing.T) {
	sh := ssm.GDNShape{KeyHeads: 2, ValueHeads: 4, KeyDim: 16, ValueDim: 8}
	opt := Options{Mode: Replay, Window: 4, MaxDraft: 2, State: numeric.BF16, Threads: 1}
	g := newGDNLayer(12, sh)
	gc, err := g.build(opt, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	kc, err := NewKDA(sh, ConvWeights{}, 2, opt)
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	gs, ks := admitAll(t, gc, 1)[0], admitAll(t, kc, 1)[0]
	gb, err := gc.Export(gs)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := kc.Export(ks)
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.Import(ks, gb); err == nil {
		t.Error("a KDA cache imported a GDN slot state")
	}
	if err := gc.Import(gs, kb); err == nil {
		t.Error("a GDN cache imported a KDA slot state")
	}
	if err := kc.Import(ks, kb); err != nil {
		t.Errorf("a KDA cache refused its own slot state: %v", err)
	}
}

// TestKDAFoldCachedNoDrift is TestGDNFoldCachedNoDrift's contract on the
// cache itself: over 64 windows of 16 steps with a long memory (decays per
// channel from e^-0.12 to e^-0.02), a cache that folds the ring's cached u
// (no read copy, the default) stays as close to the float64 recurrence as
// one that folds exactly (Options.ExactFold), in its outputs and in its
// checkpoints after each fold: within 2x and an absolute 2e-6 of the exact
// fold's worst relative errors. Each cached u was formed from the same
// checkpoint by the same formula as the exact fold's, so only the order of
// float32 sums differs; a fold that drifted (a wrong decay on the cached
// u, a u from another checkpoint) compounds over the windows far past that.
func TestKDAFoldCachedNoDrift(t *testing.T) {
	const L, windows = 16, 64
	sh := ssm.GDNShape{KeyHeads: 1, ValueHeads: 2, KeyDim: 32, ValueDim: 16}
	Hv, dk, dv := sh.ValueHeads, sh.KeyDim, sh.ValueDim
	for _, f := range []numeric.Format{numeric.F32, numeric.BF16} {
		t.Run(f.String(), func(t *testing.T) {
			l := newKDALayer(41, sh)
			l.gate, l.gShift = 0.1, -0.02
			var caches [2]*testCache
			for i, exact := range []bool{false, true} {
				c, err := l.build(Options{Mode: Replay, Window: L, State: f, ExactFold: exact, Threads: 1}, 1)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := c.Admit(); err != nil {
					t.Fatal(err)
				}
				caches[i] = c
			}
			truth := l.refState()
			var worst, ckpt [2]float64
			y, S := make([]float32, Hv*dv), make([]float32, dk*dv)
			got := make([]float32, Hv*dk*dv)
			for step := range windows * L {
				in := l.draw(1)
				want := l.ref(truth, in, 0)
				for i, c := range caches {
					poison(y)
					if err := c.step([]Slot{0}, in, y); err != nil {
						t.Fatal(err)
					}
					worst[i] = max(worst[i], relErr(y, want))
					if (step+1)%L != 0 {
						continue
					}
					// Folded: the checkpoint against the state, [j][i][m].
					for j := range Hv {
						c.state.load(j, S)
						for k := range dk {
							for m := range dv {
								got[(j*dk+k)*dv+m] = S[m*dk+k]
							}
						}
					}
					ckpt[i] = max(ckpt[i], relErr(got, truth))
				}
			}
			t.Logf("worst relative error against float64: outputs cached fold %.3g, exact fold %.3g; checkpoints %.3g, %.3g",
				worst[0], worst[1], ckpt[0], ckpt[1])
			if worst[0] > 2*worst[1]+2e-6 || ckpt[0] > 2*ckpt[1]+2e-6 {
				t.Errorf("cached fold %.3g / %.3g against the exact fold's %.3g / %.3g (outputs / checkpoints): the cached u drift",
					worst[0], ckpt[0], worst[1], ckpt[1])
			}
		})
	}
}

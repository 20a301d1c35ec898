package bench

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

// newLayerCache builds a cache of the shape with random constants and
// inputSets batches of random inputs (rows for T drafts when T > 0).
func newLayerCache(sh LayerShape, batch int, opt replay.Options, T int) (layerCache, error) {
	r := newRand(uint64(batch))
	rows := batch * max(1, T)
	switch sh.Layer {
	case "mamba2":
		s := sh.Mamba2
		H, P, N, G := s.Heads, s.HeadDim, s.StateSize, s.Groups
		prm := randomMamba2Params(r, H)
		c, err := replay.NewMamba2(s, prm, replay.ConvWeights{}, batch, opt)
		if err != nil {
			return nil, err
		}
		m := &mamba2Bench{c: c, H: H, P: P, N: N, G: G}
		for i := 0; i < inputSets; i++ {
			in := replay.Mamba2Input{X: make([]float32, rows*H*P), B: make([]float32, rows*G*N), C: make([]float32, rows*G*N), Dt: make([]float32, rows*H)}
			fill(r, in.X, 1, 0)
			fill(r, in.B, float32(1/math.Sqrt(float64(N))), 0)
			fill(r, in.C, float32(1/math.Sqrt(float64(N))), 0)
			fill(r, in.Dt, 1, 0)
			m.in = append(m.in, in)
		}
		m.y = make([]float32, rows*H*P)
		return m, nil
	case "gdn":
		s := sh.GDN
		Hk, Hv, dk, dv := s.KeyHeads, s.ValueHeads, s.KeyDim, s.ValueDim
		prm := randomGDNParams(r, Hv)
		c, err := replay.NewGDN(s, prm, replay.ConvWeights{}, batch, opt)
		if err != nil {
			return nil, err
		}
		g := &gdnBench{c: c, s: s}
		for i := 0; i < inputSets; i++ {
			in := replay.GDNInput{Q: make([]float32, rows*Hk*dk), K: make([]float32, rows*Hk*dk), V: make([]float32, rows*Hv*dv), A: make([]float32, rows*Hv), B: make([]float32, rows*Hv)}
			fill(r, in.Q, 1, 0)
			fill(r, in.K, 1, 0)
			fill(r, in.V, 1, 0)
			fill(r, in.A, 1, 0)
			fill(r, in.B, 1, 0)
			g.in = append(g.in, in)
		}
		g.o = make([]float32, rows*Hv*dv)
		return g, nil
	}
	return nil, fmt.Errorf("unknown layer kind %q", sh.Layer)
}

// randomMamba2Params draws a layer's constants as the benchmarks use them:
// A in [-16, -1], Δ around softplus(-2), D standard normal.
func randomMamba2Params(r *rand.Rand, H int) replay.Mamba2Params {
	prm := replay.Mamba2Params{ALog: make([]float32, H), DtBias: make([]float32, H), D: make([]float32, H)}
	for h := range H {
		prm.ALog[h] = float32(math.Log(1 + 15*r.Float64()))
		prm.DtBias[h] = float32(r.NormFloat64()*0.5 - 2)
		prm.D[h] = float32(r.NormFloat64())
	}
	return prm
}

// randomGDNParams draws a GDN layer's constants the same way.
func randomGDNParams(r *rand.Rand, Hv int) replay.GDNParams {
	prm := replay.GDNParams{ALog: make([]float32, Hv), DtBias: make([]float32, Hv)}
	for j := range Hv {
		prm.ALog[j] = float32(math.Log(1 + 15*r.Float64()))
		prm.DtBias[j] = float32(r.NormFloat64()*0.5 - 2)
	}
	return prm
}

type mamba2Bench struct {
	c          *replay.Mamba2Cache
	H, P, N, G int
	in         []replay.Mamba2Input
	y          []float32
}

func (m *mamba2Bench) admit() (replay.Slot, error) { return m.c.Admit() }
func (m *mamba2Bench) step(slots []replay.Slot, set int) error {
	in := m.in[set]
	n := len(slots)
	sub := replay.Mamba2Input{X: in.X[:n*m.H*m.P], B: in.B[:n*m.G*m.N], C: in.C[:n*m.G*m.N], Dt: in.Dt[:n*m.H]}
	return m.c.Step(slots, sub, m.y[:n*m.H*m.P])
}
func (m *mamba2Bench) verify(slots []replay.Slot, set, T int) error {
	return m.c.Verify(slots, T, nil, m.in[set], m.y)
}
func (m *mamba2Bench) commit(slots []replay.Slot, acc []int) error { return m.c.Commit(slots, acc) }
func (m *mamba2Bench) stats() replay.Stats                         { return m.c.Stats() }
func (m *mamba2Bench) close()                                      { m.c.Close() }
func (m *mamba2Bench) ring() ringTraffic                           { return mamba2Ring(m.H, m.P, m.G, m.N, 4) }

type gdnBench struct {
	c  *replay.GDNCache
	s  interface{ StateElems() int }
	in []replay.GDNInput
	o  []float32
}

func (g *gdnBench) dims() (int, int, int, int) {
	sh := g.c.Shape()
	return sh.KeyHeads, sh.ValueHeads, sh.KeyDim, sh.ValueDim
}
func (g *gdnBench) admit() (replay.Slot, error) { return g.c.Admit() }
func (g *gdnBench) step(slots []replay.Slot, set int) error {
	Hk, Hv, dk, dv := g.dims()
	in := g.in[set]
	n := len(slots)
	sub := replay.GDNInput{Q: in.Q[:n*Hk*dk], K: in.K[:n*Hk*dk], V: in.V[:n*Hv*dv], A: in.A[:n*Hv], B: in.B[:n*Hv]}
	return g.c.Step(slots, sub, g.o[:n*Hv*dv])
}
func (g *gdnBench) verify(slots []replay.Slot, set, T int) error {
	return g.c.Verify(slots, T, nil, g.in[set], g.o)
}
func (g *gdnBench) commit(slots []replay.Slot, acc []int) error { return g.c.Commit(slots, acc) }
func (g *gdnBench) stats() replay.Stats                         { return g.c.Stats() }
func (g *gdnBench) close()                                      { g.c.Close() }
func (g *gdnBench) ring() ringTraffic {
	Hk, Hv, dk, dv := g.dims()
	return gdnRing(Hk, Hv, dk, dv)
}

// ringTraffic is a layer's ring bytes per entry, slot and step: what a step
// appends (write), what a non-flush step reads of each entry since the
// checkpoint (read), what a flush reads of each entry it folds (fold).
type ringTraffic struct{ write, read, fold int }

// mamba2Ring: every step appends x (H*P), B (G*N, once per group), Δ and
// the decay (H each); the output path and the fold read all of them.
func mamba2Ring(H, P, G, N, rowBytes int) ringTraffic {
	e := rowBytes*(H*P+G*N) + 4*2*H
	return ringTraffic{write: e, read: e, fold: e}
}

// ringDtype is a row's RingDtype: the ring format of a replay cache whose
// ring is not fp32, else "".
func ringDtype(opt replay.Options) string {
	if opt.Mode != replay.Replay || opt.Ring == numeric.F32 {
		return ""
	}
	return opt.Ring.String()
}

// ringElemBytes is the bytes of one element of a GPU ring's input rows in
// format f: 2 for bf16 codes, else 4. (The CPU caches keep a bf16 ring's
// rounded values as float32s: their rows move 4 bytes an element either
// way.)
func ringElemBytes(f numeric.Format) int {
	if f == numeric.BF16 {
		return 2
	}
	return 4
}

// gdnRing: every step appends k (Hk*dk), v and u (Hv*dv each), the gate and
// β (Hv each); the output path reads k, u and the gates (β only of the
// current token), the fold k, v, the gates and β (never the cached u:
// docs/DESIGN.md 2.2).
func gdnRing(Hk, Hv, dk, dv int) ringTraffic {
	return ringTraffic{
		write: 4 * (Hk*dk + 2*Hv*dv + 2*Hv),
		read:  4 * (Hk*dk + Hv*dv + Hv),
		fold:  4 * (Hk*dk + Hv*dv + 2*Hv),
	}
}

// perStep is the ring bytes one slot moves in a step, averaged over a window
// of L steps with the slot's own phase: the steps at ring position
// n = 0..L-2 read n entries and append one, the flush (n = L-1) folds those
// L-1 entries and appends none (the current token goes straight into the
// checkpoint).
func (r ringTraffic) perStep(L int) float64 {
	l := float64(L)
	return (float64(r.read)*(l-1)*(l-2)/2 + float64(r.write+r.fold)*(l-1)) / l
}

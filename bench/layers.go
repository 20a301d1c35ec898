package bench

import (
	"math"
	"math/rand/v2"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
)

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

// ringOf is the ring traffic of a CPU cache of the shape (rows of 4-byte
// elements).
func ringOf(sh LayerShape) ringTraffic {
	if sh.Layer == "mamba2" {
		s := sh.Mamba2
		return mamba2Ring(s.Heads, s.HeadDim, s.Groups, s.StateSize, 4)
	}
	s := sh.GDN
	return gdnRing(s.KeyHeads, s.ValueHeads, s.KeyDim, s.ValueDim)
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

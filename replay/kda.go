package replay

import (
	"fmt"
	"math"

	"github.com/replayssm/replayssm/ssm"
)

// KDAInput is a batch of Kimi Delta Attention inputs in host memory, the
// CPU cache's KDABatch.
type KDAInput = KDABatch[[]float32]

// KDACache is the state cache of one Kimi Delta Attention layer: Gated
// DeltaNet with a forget gate per key channel (docs/DESIGN.md 2.2b).
// deltaCore holds its layout and the steps it shares with GDNCache; only
// the decay differs. The ring keeps each step's α = exp(g) as a vector
// [Hv·dk], and every decay the formulas need is a per-channel product of
// them, accumulated in float64: Γ(t,j) = Π_{l=j+1..t} Diag(α_l) between
// ring entries j < t, and Γ(t) = Π_{l≤t} Diag(α_l) since the checkpoint.
// The checkpoint is read against the decayed key and query Γ(t)·k_t
// and Γ(t)·q_t, the pair weights are decay-weighted dot products
// (Γ(t,j)·k_j)·x, and a fold scales every key channel of the checkpoint by
// its own Γ(T)_i before the rank-T update with the keys decayed to the
// last entry. A flush folds the cached u, or with a read copy (or
// Options.ExactFold) recomputes them from the raw inputs, as GDNCache's.
type KDACache struct {
	deltaCore
}

var _ KDAState[[]float32] = (*KDACache)(nil)

// NewKDA builds a cache of capacity slots for one Kimi Delta Attention
// layer. The layer computes the log-decay g itself (KDABatch), so the cache
// takes no constants. conv may have zero Channels when the caller runs the
// convolution itself.
func NewKDA(shape ssm.GDNShape, conv ConvWeights, capacity int, opt Options) (*KDACache, error) {
	opt, err := opt.Check("kda", CPUCapabilities())
	if err != nil {
		return nil, err
	}
	if err := shape.Validate(); err != nil {
		return nil, fmt.Errorf("kda cache: %w", err)
	}
	dc, err := newDeltaCore("kda", "g", shape, shape.KeyDim, opt, capacity, conv)
	if err != nil {
		return nil, err
	}
	c := &KDACache{deltaCore: dc}
	c.bind(c)
	return c, nil
}

// Step runs one standard decode step for each slot and writes o
// [len(slots)][Hv·dv] (before the gated norm). See Mamba2Cache.Step.
func (c *KDACache) Step(slots []Slot, in KDAInput, o []float32) error {
	return c.step(slots, kdaInputRows(in), o)
}

// Verify computes the outputs of T draft inputs per slot without writing any
// checkpoint. See Mamba2Cache.Verify.
func (c *KDACache) Verify(slots []Slot, T int, counts []int, in KDAInput, o []float32) error {
	return c.verify(slots, T, counts, kdaInputRows(in), o)
}

// kdaInputRows is a KDA batch as the shared steps read it, g as the decay input.
func kdaInputRows(in KDAInput) deltaRows { return deltaRows{in.Q, in.K, in.V, in.G, in.B} }

// appendDecay writes value head j's decays α = exp(g) for op row r, one per
// key channel, into ring entry e of slot s.
func (c *KDACache) appendDecay(s Slot, j, r, e int) {
	dk := c.shape.KeyDim
	alpha := c.ringVec(c.ringA, s, j, e, dk)
	for i, g := range c.opIn.Gate[(r*c.shape.ValueHeads+j)*dk:][:dk] {
		alpha[i] = float32(math.Exp(float64(g)))
	}
}

// outputs computes, for nd entries appended at ring positions n..n+nd-1 of
// slot s (their q in scratch drafts 0..nd-1, op rows r0..), the corrected
// updates u (cached in the ring) and the outputs, from the read copy (or
// checkpoint) S₀ and the ring (docs/DESIGN.md 2.2b):
//
//	u_t = β_t·(v_t − [S₀ᵀ(Γ(t)·k_t) + Σ_{i<t} ((Γ(t,i)·k_i)·k_t)·u_i])
//	o_t = S₀ᵀ(Γ(t)·q_t) + Σ_{i≤t} ((Γ(t,i)·k_i)·q_t)·u_i
//
// The weights and decayed vectors depend on the keys, queries and decays
// alone, so every entry's are formed first and S₀ is read once for all of
// them. A verify's drafts are then the same formula run forward over t,
// each u_t using the drafts' u before it: the UT transform of docs/DESIGN.md
// 2.3, A_{s,s'} = β_s·(Γ(s,s')·k_{s'})·k_s, solved by forward substitution,
// with the per-channel decay inside the pair weights instead of a scalar
// before them.
func (c *KDACache) outputs(sc *deltaScratch, s Slot, kh, n, nd, r0 int) {
	Hk, Hv, dk, dv := c.shape.KeyHeads, c.shape.ValueHeads, c.shape.KeyDim, c.shape.ValueDim
	vpk := Hv / Hk
	b := r0 / c.opT
	W := n + nd
	// The key head's ring entries are contiguous (head-major ring).
	keys := c.ringK[(int(s)*Hk+kh)*c.opt.ring()*dk:][:W*dk]
	for j := kh * vpk; j < (kh+1)*vpk; j++ {
		// The next head's ring rows start a new run: ask for them now, a
		// head's work ahead.
		c.prefetchHead(b, j+1)
		alphas := c.ringA[c.at(s, j, 0)*dk:][:W*dk]
		// Entry t = n+k: gram[k·W+i] = −(Γ(t,i)·k_i)·k_t and
		// gram[(nd+k)·W+i] = (Γ(t,i)·k_i)·q_t for i < t, coef[k] = k_t·q_t;
		// vecs[k] = Γ(t)·k_t and vecs[nd+k] = Γ(t)·q_t, the vectors S₀ is
		// read against.
		for k := 0; k < nd; k++ {
			t := n + k
			sc.coef[k] = decayedWeights(sc, keys, alphas, dk, t, sc.q[k*dk:(k+1)*dk],
				sc.gram[k*W:][:t], sc.gram[(nd+k)*W:][:t], sc.vecs[k*dk:(k+1)*dk], sc.vecs[(nd+k)*dk:(nd+k+1)*dk])
		}
		src, mat := c.state, int(s)*Hv+j
		if c.read != nil {
			src = c.read
		}
		readDots(src, mat, dv, dk, sc.vecs, dk, 2*nd, sc.proj, &sc.rb)
		uBase := c.ringU[c.at(s, j, 0)*dv:]
		for k := 0; k < nd; k++ {
			t := n + k
			// The decay is inside the projections and weights: gdnOut's
			// scalar decay is 1.
			gdnOut(c.ringVec(c.ringV, s, j, t, dv), sc.proj[k*dv:(k+1)*dv], sc.proj[(nd+k)*dv:(nd+k+1)*dv],
				uBase[:t*dv], sc.gram[k*W:][:t], sc.gram[(nd+k)*W:][:t], 1, c.ringBeta[c.at(s, j, t)], sc.coef[k],
				c.ringVec(c.ringU, s, j, t, dv), c.opOut[((r0+k)*Hv+j)*dv:][:dv])
		}
	}
}

// decayedWeights forms entry t's weights against the ring entries before
// it, with keys [W][dk] the key head's ring keys (entry t's among them),
// alphas [W][dk] the value head's decays and q entry t's query: ck[i] =
// −(Γ(t,i)·k_i)·k_t and cq[i] = (Γ(t,i)·k_i)·q_t for i < t, and the decayed
// key and query gk = Γ(t)·k_t, gq = Γ(t)·q_t. It returns k_t·q_t, the weight
// of entry t's own update in its output (Γ(t,t) = I). k_t and q_t are
// decayed one entry at a time, back from t, in float64: the decay products
// are never exponentials of sums nor quotients, so nothing overflows or
// divides by zero when a product underflows.
func decayedWeights(sc *deltaScratch, keys, alphas []float32, dk, t int, q, ck, cq, gk, gq []float32) float32 {
	kt := keys[t*dk : (t+1)*dk]
	yk, yq := sc.yk[:dk], sc.yq[:dk]
	var self float64
	for c, x := range kt {
		yk[c], yq[c] = float64(x), float64(q[c])
		self += float64(x) * float64(q[c])
	}
	for i := t - 1; i >= 0; i-- {
		wk, wq := decayDots(yk, yq, alphas[(i+1)*dk:(i+2)*dk], keys[i*dk:(i+1)*dk])
		ck[i], cq[i] = float32(-wk), float32(wq)
	}
	for c, a := range alphas[:dk] {
		gk[c] = float32(yk[c] * float64(a))
		gq[c] = float32(yq[c] * float64(a))
	}
	return float32(self)
}

// fold is the flush of slot s's ring entries 0..t-1 into the checkpoint for
// key head kh's value heads, of which entries 0..cached-1 hold their
// corrected update u in the ring (the step's own token, entry t-1 of a
// step's flush, does not). The exact fold (docs/DESIGN.md 2.2b; with a read
// copy or Options.ExactFold) recomputes every corrected update from the raw
// k, v, α, β on the high-precision checkpoint S₀, never from the cached u:
//
//	u'_i = β_i·(v_i − [S₀ᵀ(Γ(i)·k_i) + Σ_{l<i} ((Γ(i,l)·k_l)·k_i)·u'_l])
//	S₀  ← Γ(t-1)·S₀ + Σ_i Γ(t-1,i)·k_i ⊗ u'_i
//
// (entries 0..t-1, the last t-1), the plain recurrence S = Diag(α)·S; u = β(v − Sᵀk); S += k⊗u over the
// window in closed form: one pass over the state scales its columns by
// Γ(t-1), one more applies the rank-t update (GDN's scalar decay folds into
// the update's single pass).
// Without a read copy (Options.FoldsCachedU) u'_i for i < cached is the
// ring's u_i, formed by the steps since the checkpoint from this same S₀
// by the same formula, and only the rest are recomputed. With r ≥ 0 it also
// writes the output of the last entry (q in scratch draft 0) for op row r:
// o = S₀ᵀq after the fold.
func (c *KDACache) fold(sc *deltaScratch, s Slot, kh, t, cached, r int) {
	Hk, Hv, dk, dv := c.shape.KeyHeads, c.shape.ValueHeads, c.shape.KeyDim, c.shape.ValueDim
	vpk := Hv / Hk
	nc := c.foldsCached(cached, t)
	keys := c.ringK[(int(s)*Hk+kh)*c.opt.ring()*dk:][:t*dk]
	ones := sc.coef[:t]
	for i := range ones {
		ones[i] = 1
	}
	c.prefetchFold(s, kh*vpk, t)
	for j := kh * vpk; j < (kh+1)*vpk; j++ {
		if j+1 < (kh+1)*vpk {
			c.prefetchFold(s, j+1, t)
		}
		S := c.checkpoint(sc.s, int(s)*c.shape.ValueHeads+j)
		alphas := c.ringA[c.at(s, j, 0)*dk:][:t*dk]
		// The recomputed rows i ≥ nc: cm[i·t+l] = −(Γ(i,l)·k_l)·k_i and
		// vecs[i] = Γ(i)·k_i, then S₀ᵀ(Γ(i)·k_i) for all of them in one
		// pass over the state.
		cm := sc.cmat[:t*t]
		for i := nc; i < t; i++ {
			y := sc.yk[:dk]
			for ch, x := range keys[i*dk : (i+1)*dk] {
				y[ch] = float64(x)
			}
			for l := i - 1; l >= 0; l-- {
				cm[i*t+l] = float32(-decayDot(y, alphas[(l+1)*dk:(l+2)*dk], keys[l*dk:(l+1)*dk]))
			}
			g := sc.vecs[i*dk : (i+1)*dk]
			for ch, a := range alphas[:dk] {
				g[ch] = float32(y[ch] * float64(a))
			}
		}
		if t > nc {
			dotRowsMulti(S, dk, sc.vecs[nc*dk:t*dk], t-nc, sc.proj[nc*dv:t*dv])
		}
		// u'_i = β_i·(v_i − S₀ᵀ(Γ(i)·k_i) + Σ_{l<i} cm[i·t+l]·u'_l): GDN's
		// kernel with its scalar decays at 1, the decay being inside.
		c.foldU(sc, s, j, t, nc, cm, ones)
		// The keys decayed to the last entry, Γ(t-1,i)·k_i = Π_{m=i+1..t-1}
		// α_m·k_i, and the whole window's decay Γ(t-1), per channel.
		z, dec := sc.yk[:dk], sc.keys[:t*dk]
		for ch := range z {
			z[ch] = 1
		}
		for i := t - 1; i >= 0; i-- {
			scaleDecay(dec[i*dk:(i+1)*dk], z, keys[i*dk:(i+1)*dk], alphas[i*dk:(i+1)*dk])
		}
		gam := sc.alpha[:dk]
		for ch, x := range z {
			gam[ch] = float32(x)
		}
		// S_m ← Γ∘S_m + Σ_i u'_i[m]·(Γ(t-1,i)·k_i), row by row: the
		// per-channel decay first, then the rank-t update; with r ≥ 0 the
		// kernel also reads the output o = Sᵀq of the folded state.
		scaleColumns(S, dk, gam)
		var q, o []float32
		if r >= 0 {
			q, o = sc.q[:dk], c.opOut[(r*Hv+j)*dv:][:dv]
		}
		rankUpdateDotRows(S, dv, dk, 1, sc.u[:t*dv], dv, t, dec, dk, q, o)
		c.storeFolded(sc.sr, s, int(s)*c.shape.ValueHeads+j, S)
	}
}

// baselineUpdate is the in-place step of value head j's state S by op row r
// (normalised k and q kt, qt).
func (c *KDACache) baselineUpdate(sc *deltaScratch, j, r int, kt, qt, S []float32) {
	Hv, dk, dv := c.shape.ValueHeads, c.shape.KeyDim, c.shape.ValueDim
	alpha := sc.alpha[:dk]
	for i, g := range c.opIn.Gate[(r*Hv+j)*dk:][:dk] {
		alpha[i] = float32(math.Exp(float64(g)))
	}
	beta := float32(ssm.Sigmoid(float64(c.opIn.B[r*Hv+j])))
	c.update(sc, S, kt, qt, c.opIn.V[(r*Hv+j)*dv:][:dv], alpha, beta, c.opOut[(r*Hv+j)*dv:][:dv])
}

// update is one step of the recurrence on a value head's state S with
// normalised k and q, value v, decays alpha and β, writing its output o:
// Sᵀk read against the decayed key α∘k (the decayed state's Sᵀk, without
// decaying it first); u = β(v − Sᵀ(α∘k)); then every row decayed per
// channel, S_m = α∘S_m + u[m]·k, and the output o[m] = S_m·q read in the
// update's pass.
func (c *KDACache) update(sc *deltaScratch, S, k, q, v, alpha []float32, beta float32, o []float32) {
	dk, dv := c.shape.KeyDim, c.shape.ValueDim
	ak := sc.vecs[:dk]
	for i, a := range alpha[:dk] {
		ak[i] = a * k[i]
	}
	sk := sc.proj[:dv]
	dotRows(S, dk, ak, sk)
	u := sc.u[:dv]
	for m := range u {
		u[m] = beta * (v[m] - sk[m])
	}
	scaleColumns(S, dk, alpha)
	updateRows(S, dk, 1, u, k, q, o)
}

// Prefill runs T consecutive inputs per slot through the recurrence (see
// Mamba2Cache.Prefill); o receives [slot][T][Hv·dv].
func (c *KDACache) Prefill(slots []Slot, T int, counts []int, in KDAInput, o []float32) error {
	return c.prefill(slots, T, counts, kdaInputRows(in), o)
}

// prefillEntry steps value head j's float32 state S by ring entry e of
// slot s (key k), its output dropped: u recomputed from the raw v, α and β
// on S, the exact fold's.
func (c *KDACache) prefillEntry(sc *deltaScratch, S []float32, s Slot, j, e int, k []float32) {
	dk, dv := c.shape.KeyDim, c.shape.ValueDim
	c.update(sc, S, k, k, c.ringVec(c.ringV, s, j, e, dv), c.ringVec(c.ringA, s, j, e, dk), c.ringBeta[c.at(s, j, e)], sc.rowc[:dv])
}

// prefillInput steps value head j's float32 state S by op row r and writes
// its output: the baseline's step, whose decays are the ring's too.
func (c *KDACache) prefillInput(sc *deltaScratch, S []float32, j, r int, kt, qt []float32) {
	c.baselineUpdate(sc, j, r, kt, qt, S)
}

// halfStep reports false: KDA has no fused half-precision step, and the
// baseline decodes, updates and rounds the state in separate passes.
func (c *KDACache) halfStep(*deltaScratch, int, int, int) bool { return false }

// The loops of the per-channel decay. decayDots and decayDot run for every
// pair of ring entries a step or fold weighs, t·dk multiply-adds per entry
// and value head, as many as the state read's dk·dv at a ring of dv
// entries: they have AVX2 kernels (kda_amd64.s). scaleDecay runs once per
// fold over t keys and scaleColumns once per fold over the state, beside
// the rank update's t passes: plain Go.

// decayDots does yk[c] *= a[c], yq[c] *= a[c] and returns Σ_c yk[c]·x[c]
// and Σ_c yq[c]·x[c], in float64: a key and a query decayed one more entry
// back, and their weights against that entry's key x. The SIMD version
// sums in another order (and with FMA): the same values to float64
// rounding.
func decayDots(yk, yq []float64, a, x []float32) (float64, float64) {
	if simd {
		return decayDotsSIMD(yk, yq, a, x)
	}
	return decayDotsGo(yk, yq, a, x)
}

// decayDot does y[c] *= a[c] and returns Σ_c y[c]·x[c], in float64.
func decayDot(y []float64, a, x []float32) float64 {
	if simd {
		return decayDotSIMD(y, a, x)
	}
	return decayDotGo(y, a, x)
}

func decayDotsGo(yk, yq []float64, a, x []float32) (float64, float64) {
	n := len(yk)
	yq, a, x = yq[:n], a[:n], x[:n]
	var k0, k1, q0, q1 float64
	c := 0
	for ; c+2 <= n; c += 2 {
		a0, a1 := float64(a[c]), float64(a[c+1])
		x0, x1 := float64(x[c]), float64(x[c+1])
		yk0, yk1 := yk[c]*a0, yk[c+1]*a1
		yq0, yq1 := yq[c]*a0, yq[c+1]*a1
		yk[c], yk[c+1], yq[c], yq[c+1] = yk0, yk1, yq0, yq1
		k0 += yk0 * x0
		k1 += yk1 * x1
		q0 += yq0 * x0
		q1 += yq1 * x1
	}
	for ; c < n; c++ {
		ac, xc := float64(a[c]), float64(x[c])
		yk[c] *= ac
		yq[c] *= ac
		k0 += yk[c] * xc
		q0 += yq[c] * xc
	}
	return k0 + k1, q0 + q1
}

func decayDotGo(y []float64, a, x []float32) float64 {
	n := len(y)
	a, x = a[:n], x[:n]
	var s0, s1 float64
	c := 0
	for ; c+2 <= n; c += 2 {
		y0, y1 := y[c]*float64(a[c]), y[c+1]*float64(a[c+1])
		y[c], y[c+1] = y0, y1
		s0 += y0 * float64(x[c])
		s1 += y1 * float64(x[c+1])
	}
	for ; c < n; c++ {
		y[c] *= float64(a[c])
		s0 += y[c] * float64(x[c])
	}
	return s0 + s1
}

// scaleDecay does dst[c] = z[c]·x[c] (rounded to float32), then z[c] *=
// a[c]: key x decayed by the running product z, which then takes in one
// more entry's decay a.
func scaleDecay(dst []float32, z []float64, x, a []float32) {
	n := len(z)
	dst, x, a = dst[:n], x[:n], a[:n]
	for c, zc := range z {
		dst[c] = float32(zc * float64(x[c]))
		z[c] = zc * float64(a[c])
	}
}

// scaleColumns does S[p·n+i] *= d[i] for every row p of n: Diag(d) applied
// to a transposed delta-rule state, whose rows run over the key channels.
func scaleColumns(S []float32, n int, d []float32) {
	d = d[:n]
	for p := 0; p+n <= len(S); p += n {
		row := S[p : p+n]
		for i, x := range d {
			row[i] *= x
		}
	}
}

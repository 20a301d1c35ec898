package replay

import (
	"fmt"
	"math"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/ssm"
)

// GDNParams are a Gated DeltaNet layer's per-value-head constants, as stored
// in a checkpoint.
type GDNParams struct {
	ALog   []float32
	DtBias []float32
}

// GDNInput is a batch of Gated DeltaNet inputs in host memory, the CPU
// cache's GDNBatch.
type GDNInput = GDNBatch[[]float32]

// GDNCache is the state cache of one Gated DeltaNet layer. The state of value
// head j, S[i][m] (i < dk, m < dv), is stored transposed: dv rows of dk, row m
// holding S[·][m]. Then Sᵀk is one dot product per row and the update
// S += k⊗u scales and adds k to each row, the same row kernels as Mamba-2's
// (with dv, dk in the roles of P, N). Its layout, ring and steps are
// KDACache's too; the two differ in the decay.
//
// The delta rule is not additive in v but it is in the corrected update u
// (docs/DESIGN.md 2.2), so the ring stores the raw k, v, g, β of each step and
// caches u for the output path. With a read copy (or Options.ExactFold) a
// flush never folds cached u, which would carry the read copy's error: it
// recomputes every u from the raw inputs on the high-precision checkpoint
// (the exact fold). Without one, every cached u was formed from the
// checkpoint itself, and the flush folds them (Options.FoldsCachedU).
type GDNCache struct {
	deltaCore
	negA []float64 // −exp(A_log)
	dtb  []float64
}

var _ GDNState[[]float32] = (*GDNCache)(nil)

// NewGDN builds a cache of capacity slots for one Gated DeltaNet layer. conv
// may have zero Channels when the caller runs the convolution itself.
func NewGDN(shape ssm.GDNShape, prm GDNParams, conv ConvWeights, capacity int, opt Options) (*GDNCache, error) {
	opt, err := opt.Check("gdn", CPUCapabilities())
	if err != nil {
		return nil, err
	}
	if err := shape.Validate(); err != nil {
		return nil, err
	}
	Hv := shape.ValueHeads
	if len(prm.ALog) != Hv || len(prm.DtBias) != Hv {
		return nil, fmt.Errorf("gdn cache: A_log and dt_bias need %d values each, have %d and %d", Hv, len(prm.ALog), len(prm.DtBias))
	}
	dc, err := newDeltaCore("gdn", "a", shape, 1, opt, capacity, conv)
	if err != nil {
		return nil, err
	}
	c := &GDNCache{deltaCore: dc}
	for j := range Hv {
		c.negA = append(c.negA, -math.Exp(float64(prm.ALog[j])))
		c.dtb = append(c.dtb, float64(prm.DtBias[j]))
	}
	c.bind(c)
	return c, nil
}

// Step runs one standard decode step for each slot and writes o
// [len(slots)][Hv·dv] (before the gated norm). See Mamba2Cache.Step.
func (c *GDNCache) Step(slots []Slot, in GDNInput, o []float32) error {
	return c.step(slots, gdnInputRows(in), o)
}

// Verify computes the outputs of T draft inputs per slot without writing any
// checkpoint. See Mamba2Cache.Verify.
func (c *GDNCache) Verify(slots []Slot, T int, counts []int, in GDNInput, o []float32) error {
	return c.verify(slots, T, counts, gdnInputRows(in), o)
}

// gdnInputRows is a GDN batch as the shared steps read it, a as the decay input.
func gdnInputRows(in GDNInput) deltaRows { return deltaRows{in.Q, in.K, in.V, in.A, in.B} }

// logDecay is value head j's g for op row r: −exp(A_log)·softplus(a +
// dt_bias), the decay being exp(g).
func (c *GDNCache) logDecay(j, r int) float64 {
	return c.negA[j] * ssm.Softplus(float64(c.opIn.Gate[r*c.shape.ValueHeads+j])+c.dtb[j])
}

// appendDecay writes value head j's decay exp(g) for op row r, g rounded
// to float32 first, into ring entry e of slot s.
func (c *GDNCache) appendDecay(s Slot, j, r, e int) {
	c.ringA[c.at(s, j, e)] = float32(math.Exp(float64(float32(c.logDecay(j, r)))))
}

// outputs computes, for nd entries appended at ring positions n..n+nd-1 of
// slot s (their q in scratch drafts 0..nd-1, op rows r0..), the corrected
// updates u (cached in the ring) and the outputs, from the read copy (or
// checkpoint) S₀ and the ring (docs/DESIGN.md 2.2):
//
//	u_t = β_t·(v_t − [γ_t·S₀ᵀk_t + Σ_{i<t} (γ_t/γ_i)(k_i·k_t)·u_i])
//	o_t = γ_t·S₀ᵀq_t + Σ_{i≤t} (γ_t/γ_i)(k_i·q_t)·u_i
//
// Verify's drafts are the same formula run forward over several t: the UT
// transform solved by forward substitution.
func (c *GDNCache) outputs(sc *deltaScratch, s Slot, kh, n, nd, r0 int) {
	Hk, Hv, dk, dv := c.shape.KeyHeads, c.shape.ValueHeads, c.shape.KeyDim, c.shape.ValueDim
	vpk := Hv / Hk
	nb := c.opt.stateBuffers()
	b := r0 / c.opT
	// Project S₀ on k and q of each new entry: vecs = [k_n.. | q_0..].
	for k := 0; k < nd; k++ {
		copy(sc.vecs[k*dk:(k+1)*dk], c.ringKey(s, kh, n+k))
	}
	copy(sc.vecs[nd*dk:2*nd*dk], sc.q[:nd*dk])
	// k_i·k_t and k_i·q_t depend on the key head only: compute them once
	// for all its value heads. gram[k][i] = k_i·k_t, gram[nd+k][i] = k_i·q_t.
	// The key head's ring entries are contiguous (head-major ring): one
	// multi-vector pass over them.
	W := n + nd
	keys := c.ringK[(int(s)*Hk+kh)*c.opt.ring()*dk:][:W*dk]
	dotRowsMulti(keys, dk, sc.vecs[:2*nd*dk], 2*nd, sc.gram[:2*nd*W])
	for j := kh * vpk; j < (kh+1)*vpk; j++ {
		// The next head's ring rows start a new run: ask for them now, a
		// head's work ahead.
		c.prefetchHead(b, j+1)
		src, mat := c.state, (int(s)*nb)*Hv+j
		if c.read != nil {
			src, mat = c.read, int(s)*Hv+j
		}
		readDots(src, mat, dv, dk, sc.vecs, dk, 2*nd, sc.proj, &sc.rb)
		uBase := c.ringU[c.at(s, j, 0)*dv:]
		for k := 0; k < nd; k++ {
			t := n + k // 0-based ring position of this entry
			// suf[i] = Π_{l=i..t} exp(g_l): γ_t = suf[0], γ_t/γ_i = suf[i+1].
			ra := c.ringA[c.at(s, j, 0):][:t+1]
			suf := sc.suf[:t+2]
			suf[t+1] = 1
			for i := t; i >= 0; i-- {
				suf[i] = suf[i+1] * float64(ra[i])
			}
			gt := float32(sc.suf[0])
			beta := c.ringBeta[c.at(s, j, t)]
			ut := c.ringVec(c.ringU, s, j, t, dv)
			vt := c.ringVec(c.ringV, s, j, t, dv)
			sk := sc.proj[k*dv : (k+1)*dv]
			sq := sc.proj[(nd+k)*dv : (nd+k+1)*dv]
			// u_t = β_t·(v_t − γ_t·S₀ᵀk_t − Σ_i (γ_t/γ_i)(k_i·k_t)·u_i) and
			// o = γ_t·S₀ᵀq_t + Σ_{i≤t} (γ_t/γ_i)(k_i·q_t)·u_i: both ring
			// sums in one pass over u_0..u_{t-1}.
			ck, cq := sc.rowc[:t], sc.rowc[t:2*t]
			gk, gq := sc.gram[k*W:][:t], sc.gram[(nd+k)*W:][:t]
			for i := range ck {
				w := float32(suf[i+1])
				ck[i] = -w * gk[i]
				cq[i] = w * gq[i]
			}
			cqt := float32(sc.suf[t+1]) * sc.gram[(nd+k)*W+t]
			o := c.opOut[((r0+k)*Hv+j)*dv:][:dv]
			gdnOut(vt, sk, sq, uBase[:t*dv], ck, cq, gt, beta, cqt, ut, o)
		}
	}
}

// fold is the flush of slot s's ring entries 0..t-1 into the checkpoint
// for key head kh's value heads, of which entries 0..cached-1 hold their
// corrected update u in the ring (the step's own token, entry t-1 of a
// step's flush, does not). The exact fold (docs/DESIGN.md 2.2; with a read copy
// or Options.ExactFold) recomputes every corrected update from the raw
// k, v, g, β on the high-precision checkpoint S₀, never from the cached u:
//
//	u'_i = β_i·(v_i − [γ_i·S₀ᵀk_i + Σ_{l<i} (γ_i/γ_l)(k_l·k_i)·u'_l])
//	S₀  ← γ_t·S₀ + Σ_i (γ_t/γ_i)·k_i ⊗ u'_i
//
// which is the plain recurrence S = e^g·S; u = β(v − Sᵀk); S += k⊗u run over
// the window, written in closed form so the state is read once and written
// once. Without a read copy (Options.FoldsCachedU) u'_i for i < cached is
// the ring's u_i, formed by the steps since the checkpoint from this same
// S₀ by the same formula, and only the rest are recomputed. With r ≥ 0 it
// also writes the output of the last entry (q in scratch draft 0) for op
// row r: o = S₀ᵀq after the fold.
func (c *GDNCache) fold(sc *deltaScratch, s Slot, kh, t, cached, r int) {
	Hk, Hv, dk, dv := c.shape.KeyHeads, c.shape.ValueHeads, c.shape.KeyDim, c.shape.ValueDim
	vpk := Hv / Hk
	// nc: the entries whose u the fold takes from the ring.
	nc := c.foldsCached(cached, t)
	// The key head's k_0..k_{t-1} are contiguous (head-major ring).
	keys := c.ringK[(int(s)*Hk+kh)*c.opt.ring()*dk:][:t*dk]
	fresh := keys[nc*dk:]
	// gram[i·t+l] = k_l·k_i for the recomputed rows i ≥ nc, shared by the
	// value heads: one multi-vector pass over the keys.
	if t > nc {
		dotRowsMulti(keys, dk, fresh, t-nc, sc.gram[nc*t:t*t])
	}
	// The u' recurrence reads each value head's v_0..v_{t-1}, decays and
	// β after the state pass: ask for them a head ahead.
	c.prefetchFold(s, kh*vpk, t)
	for j := kh * vpk; j < (kh+1)*vpk; j++ {
		if j+1 < (kh+1)*vpk {
			c.prefetchFold(s, j+1, t)
		}
		S := c.checkpoint(sc.s, int(s)*c.shape.ValueHeads+j)
		// S₀ᵀk_i for every recomputed key in one pass over the state.
		if t > nc {
			dotRowsMulti(S, dk, fresh, t-nc, sc.proj[nc*dv:t*dv])
		}
		// Decays as products of the per-step exp(g) (no exp per pair, and
		// no division, so nothing overflows when a decay underflows).
		aj := func(i int) float64 { return float64(c.ringA[c.at(s, j, i)]) }
		// u'_i = β_i·(v_i − γ_i·S₀ᵀk_i + Σ_{l<i} cm[i·t+l]·u'_l) with
		// cm[i·t+l] = −(γ_i/γ_l)(k_l·k_i), all recomputed rows in one call.
		gprod := 1.0
		gs, cm := sc.coef[:t], sc.cmat[:t*t]
		for i := 0; i < t; i++ {
			gprod *= aj(i)
			gs[i] = float32(gprod)
			if i < nc {
				continue
			}
			w := 1.0 // γ_i/γ_l = Π_{m=l+1..i} exp(g_m)
			for l := i - 1; l >= 0; l-- {
				w *= aj(l + 1)
				cm[i*t+l] = -float32(w) * sc.gram[i*t+l]
			}
		}
		c.foldU(sc, s, j, t, nc, cm, gs)
		gt := float32(gprod)
		// S_m ← γ_t·S_m + Σ_i (γ_t/γ_i)·u'_i[m]·k_i, row by row, with
		// coefficient columns W_i = (γ_t/γ_i)·u'_i; γ_t/γ_i =
		// Π_{m=i+1..t-1} exp(g_m). With r ≥ 0 the kernel also reads the
		// output o = Sᵀq of the folded state.
		W := sc.rowc[:t*dv]
		w := 1.0
		for i := t - 1; i >= 0; i-- {
			scaleTo(W[i*dv:(i+1)*dv], sc.u[i*dv:(i+1)*dv], float32(w))
			w *= aj(i)
		}
		var q, o []float32
		if r >= 0 {
			q, o = sc.q[:dk], c.opOut[(r*Hv+j)*dv:][:dv]
		}
		rankUpdateDotRows(S, dv, dk, gt, W, dv, t, keys, dk, q, o)
		c.storeFolded(sc.sr, s, int(s)*c.shape.ValueHeads+j, S)
	}
}

// baselineUpdate is the in-place step of value head j's state S by op row
// r (normalised k and q kt, qt).
func (c *GDNCache) baselineUpdate(sc *deltaScratch, j, r int, kt, qt, S []float32) {
	Hv, dv := c.shape.ValueHeads, c.shape.ValueDim
	g := float32(math.Exp(c.logDecay(j, r)))
	beta := float32(ssm.Sigmoid(float64(c.opIn.B[r*Hv+j])))
	c.update(sc, S, kt, qt, c.opIn.V[(r*Hv+j)*dv:][:dv], g, beta, c.opOut[(r*Hv+j)*dv:][:dv])
}

// update is one step of the recurrence on a value head's state S with
// normalised k and q, value v, decay g and β, writing its output o: pass 1
// reads Sᵀk; u = β(v − g·Sᵀk); pass 2 updates each row, S_m = g·S_m +
// u[m]·k, and reads the output o[m] = S_m·q.
func (c *GDNCache) update(sc *deltaScratch, S, k, q, v []float32, g, beta float32, o []float32) {
	dk, dv := c.shape.KeyDim, c.shape.ValueDim
	sk := sc.proj[:dv]
	dotRows(S, dk, k, sk)
	u := sc.u[:dv]
	for m := 0; m < dv; m++ {
		u[m] = beta * (v[m] - g*sk[m])
	}
	updateRows(S, dk, g, u, k, q, o)
}

// halfStep is the in-place step of value head j on a bf16 or fp16 state,
// fused: one read pass for Sᵀk, then the update, its output read and the
// rounding in one read-write pass. It reports false where the kernels cannot
// run.
func (c *GDNCache) halfStep(sc *deltaScratch, b, j, mat int) bool {
	Hv, dk, dv := c.shape.ValueHeads, c.shape.KeyDim, c.shape.ValueDim
	e := c.state.elems
	S := c.state.u16[mat*e : (mat+1)*e]
	kt, qt := sc.k[:dk], sc.q[:dk]
	sk := sc.proj[:dv]
	dot, update := dotRowsBF16SIMD, updateRowsBF16
	if c.state.format == numeric.F16 {
		dot, update = dotRowsF16SIMD, updateRowsF16
	}
	if !dot(S, dk, kt, sk) {
		return false
	}
	g := float32(math.Exp(c.logDecay(j, b)))
	beta := float32(ssm.Sigmoid(float64(c.opIn.B[b*Hv+j])))
	v := c.opIn.V[(b*Hv+j)*dv:][:dv]
	u := sc.u[:dv]
	for m := 0; m < dv; m++ {
		u[m] = beta * (v[m] - g*sk[m])
	}
	return update(S, dk, g, u, kt, qt, c.opOut[(b*Hv+j)*dv:][:dv])
}

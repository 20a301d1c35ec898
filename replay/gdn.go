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
// (with dv, dk in the roles of P, N).
//
// The delta rule is not additive in v but it is in the corrected update u
// (docs/DESIGN.md 2.2), so the ring stores the raw k, v, g, β of each step and
// caches u for the output path. With a read copy (or Options.ExactFold) a
// flush never folds cached u, which would carry the read copy's error: it
// recomputes every u from the raw inputs on the high-precision checkpoint
// (the exact fold). Without one, every cached u was formed from the
// checkpoint itself, and the flush folds them (Options.FoldsCachedU).
type GDNCache struct {
	core
	shape ssm.GDNShape
	negA  []float64 // −exp(A_log)
	dtb   []float64

	// Ring, [slot][entry][...]: k after l2norm [Hk·dk], v [Hv·dv], decay
	// exp(g) [Hv], β [Hv], and the cached corrected update u [Hv·dv].
	// The per-step decay is kept as exp(g), the factor the recurrence
	// applies, so decay products need no exp.
	ringK, ringV, ringA, ringBeta, ringU []float32

	scratch []gdnScratch

	opSlots  []Slot
	opIn     GDNInput
	opOut    []float32
	opT      int
	opCounts []int
	taskStep func(worker, i int)
	taskVer  func(worker, i int)
}

type gdnScratch struct {
	s    []float32 // one head's state, dv·dk
	q    []float32 // normalised, scaled q per draft [T][dk]
	k    []float32 // normalised k per draft [T][dk]
	vecs []float32 // vectors to project the state on [R+T][dk]
	proj []float32 // S₀ᵀv for each of vecs [R+T][dv]
	u    []float32 // corrected updates for a fold [R][dv]
	suf  []float64 // decay products from each entry to the current one [R+2]
	coef []float32 // per-entry decay weights [R+T]
	rowc []float32 // ring-sum and rank-update coefficients [t][dv]
	gram []float32 // key-head dot products shared by its value heads
	cmat []float32 // a fold's u' recurrence coefficients [R][R]
	rb   readBuffers
	sr   *numeric.Stochastic
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
	Hk, Hv, dk, dv := shape.KeyHeads, shape.ValueHeads, shape.KeyDim, shape.ValueDim
	if len(prm.ALog) != Hv || len(prm.DtBias) != Hv {
		return nil, fmt.Errorf("gdn cache: A_log and dt_bias need %d values each, have %d and %d", Hv, len(prm.ALog), len(prm.DtBias))
	}
	cr, err := newCore("gdn", [4]int32{int32(Hk), int32(Hv), int32(dk), int32(dv)}, opt, Hv, dk*dv, capacity, conv,
		[]int{Hk * dk, Hv * dv, Hv, Hv, Hv * dv})
	if err != nil {
		return nil, err
	}
	c := &GDNCache{core: cr, shape: shape}
	for j := range Hv {
		c.negA = append(c.negA, -math.Exp(float64(prm.ALog[j])))
		c.dtb = append(c.dtb, float64(prm.DtBias[j]))
	}
	if c.rings != nil {
		c.ringK, c.ringV, c.ringA, c.ringBeta, c.ringU = c.rings[0], c.rings[1], c.rings[2], c.rings[3], c.rings[4]
	}
	R := opt.ring()
	T := max(1, opt.MaxDraft)
	for range opt.Threads {
		sc := gdnScratch{
			s:    make([]float32, dk*dv),
			q:    make([]float32, T*dk),
			k:    make([]float32, T*dk),
			vecs: make([]float32, (R+2*T)*dk),
			proj: make([]float32, (R+2*T)*dv),
			u:    make([]float32, R*dv),
			suf:  make([]float64, R+2),
			coef: make([]float32, R+T),
			rowc: make([]float32, dv*(R+T)),
			rb:   newReadBuffers(dk*dv, dk),
			gram: make([]float32, (R+2*T)*(R+2*T)),
			cmat: make([]float32, R*R),
		}
		if opt.Stochastic {
			sc.sr = numeric.NewStochastic(opt.Seed)
		}
		c.scratch = append(c.scratch, sc)
	}
	c.taskStep = c.stepTask
	c.taskVer = c.verifyTask
	return c, nil
}

// Shape returns the layer shape.
func (c *GDNCache) Shape() ssm.GDNShape { return c.shape }

func (c *GDNCache) checkIO(slots []Slot, T int, in GDNInput, o []float32) error {
	if err := c.ledger.CheckBatch(slots); err != nil {
		return err
	}
	Hk, Hv, dk, dv := c.shape.KeyHeads, c.shape.ValueHeads, c.shape.KeyDim, c.shape.ValueDim
	rows := len(slots) * T
	for _, e := range []error{
		checkLen("q", len(in.Q), rows*Hk*dk), checkLen("k", len(in.K), rows*Hk*dk),
		checkLen("v", len(in.V), rows*Hv*dv), checkLen("a", len(in.A), rows*Hv),
		checkLen("b", len(in.B), rows*Hv), checkLen("o", len(o), rows*Hv*dv),
	} {
		if e != nil {
			return e
		}
	}
	return nil
}

// Step runs one standard decode step for each slot and writes o
// [len(slots)][Hv·dv] (before the gated norm). See Mamba2Cache.Step.
func (c *GDNCache) Step(slots []Slot, in GDNInput, o []float32) error {
	if err := c.checkIO(slots, 1, in, o); err != nil {
		return fmt.Errorf("gdn cache: step: %w", err)
	}
	c.recordStep(slots)
	c.opSlots, c.opIn, c.opOut, c.opT, c.opCounts = slots, in, o, 1, nil
	c.work.run(len(slots)*c.shape.KeyHeads, c.taskStep)
	c.opSlots, c.opIn, c.opOut = nil, GDNInput{}, nil
	return nil
}

// prepare normalises q and k of op rows r0..r0+n-1 for key head kh into the
// scratch: k̂ = l2norm(k), q̂ = l2norm(q)/√dk.
func (c *GDNCache) prepare(sc *gdnScratch, kh, r0, n int) {
	Hk, dk := c.shape.KeyHeads, c.shape.KeyDim
	qs := float32(1 / math.Sqrt(float64(dk)))
	for k := 0; k < n; k++ {
		r := r0 + k
		l2norm(sc.q[k*dk:(k+1)*dk], c.opIn.Q[(r*Hk+kh)*dk:][:dk], qs)
		kIn := c.opIn.K[(r*Hk+kh)*dk:][:dk]
		if c.opt.roundsRing() {
			// The ring's k is the normalised bf16 k (Options.Ring).
			roundBF16(sc.k[k*dk:(k+1)*dk], kIn)
			kIn = sc.k[k*dk : (k+1)*dk]
		}
		l2norm(sc.k[k*dk:(k+1)*dk], kIn, 1)
	}
}

func l2norm(dst, x []float32, scale float32) {
	r := float32(1/math.Sqrt(sumSquares(x)+ssm.L2NormEps)) * scale
	scaleTo(dst, x, r)
}

// appendRing writes normalised k (from scratch draft k), and v, g, β of op
// row r into ring entry e of slot s for key head kh and its value heads.
func (c *GDNCache) appendRing(sc *gdnScratch, s Slot, kh, k, r, e int) {
	Hk, Hv, dk, dv := c.shape.KeyHeads, c.shape.ValueHeads, c.shape.KeyDim, c.shape.ValueDim
	copy(c.ringKey(s, kh, e), sc.k[k*dk:(k+1)*dk])
	vpk := Hv / Hk
	for j := kh * vpk; j < (kh+1)*vpk; j++ {
		c.opt.toRing(c.ringVec(c.ringV, s, j, e, dv), c.opIn.V[(r*Hv+j)*dv:][:dv])
		g := float32(c.negA[j] * ssm.Softplus(float64(c.opIn.A[r*Hv+j])+c.dtb[j]))
		c.ringA[c.at(s, j, e)] = float32(math.Exp(float64(g)))
		c.ringBeta[c.at(s, j, e)] = float32(ssm.Sigmoid(float64(c.opIn.B[r*Hv+j])))
	}
}

func (c *GDNCache) stepTask(worker, i int) {
	Hk := c.shape.KeyHeads
	b, kh := i/Hk, i%Hk
	sc := &c.scratch[worker]
	c.prepare(sc, kh, b, 1)
	if c.opt.Mode == Baseline {
		c.baselineGroup(sc, b, kh, 1, 1, false)
		return
	}
	s := c.opSlots[b]
	n := int(c.opHist[s])
	c.appendRing(sc, s, kh, 0, b, n)
	if n+1 >= c.opt.Window {
		c.fold(sc, s, kh, n+1, n, b)
		return
	}
	c.outputs(sc, s, kh, n, 1, b)
}

// ringKey returns ring entry e's normalised k for key head kh of slot s.
func (c *GDNCache) ringKey(s Slot, kh, e int) []float32 {
	Hk, dk := c.shape.KeyHeads, c.shape.KeyDim
	return c.ringK[((int(s)*Hk+kh)*c.opt.ring()+e)*dk:][:dk]
}

// ringVec returns ring entry e of value head j of slot s in a per-value-head
// ring of the given width (ringV, ringU).
func (c *GDNCache) ringVec(ring []float32, s Slot, j, e, width int) []float32 {
	return ring[c.at(s, j, e)*width:][:width]
}

// at is the index of ring entry e of value head j of slot s in the
// per-head rings (ringA, ringBeta; times the width for ringV, ringU). The
// rings are head-major so that a head's entries are contiguous.
func (c *GDNCache) at(s Slot, j, e int) int {
	return (int(s)*c.shape.ValueHeads+j)*c.opt.ring() + e
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
func (c *GDNCache) outputs(sc *gdnScratch, s Slot, kh, n, nd, r0 int) {
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

// prefetchHead prefetches what value head j of op slot b (j = Hv: the next
// slot's first head) reads from the ring in a step or verify: its cached u
// and decays up to the entries the op appends, the v rows it appends, its
// output row and, for a key head's first value head, the key head's keys,
// its q and k inputs and the v, a and b inputs of all its value heads.
func (c *GDNCache) prefetchHead(b, j int) {
	Hk, Hv, dk, dv := c.shape.KeyHeads, c.shape.ValueHeads, c.shape.KeyDim, c.shape.ValueDim
	if j == Hv {
		b, j = b+1, 0
	}
	if b >= len(c.opSlots) {
		return
	}
	s := c.opSlots[b]
	R := c.opt.ring()
	T := c.opT
	n := int(c.opHist[s])
	if n+T > R {
		return
	}
	vpk := Hv / Hk
	if j%vpk == 0 {
		// The key head's task first normalises its q and k inputs and
		// appends k and every value head's v.
		kh := j / vpk
		prefetch(c.ringK[(int(s)*Hk+kh)*R*dk:][:(n+T)*dk])
		for jj := j; jj < j+vpk; jj++ {
			prefetch(c.ringV[(c.at(s, jj, 0)+n)*dv:][:T*dv])
		}
		for r := b * T; r < (b+1)*T; r++ {
			prefetch(c.opIn.Q[(r*Hk+kh)*dk:][:dk])
			prefetch(c.opIn.K[(r*Hk+kh)*dk:][:dk])
			prefetch(c.opIn.V[(r*Hv+j)*dv:][:vpk*dv])
			prefetch(c.opIn.A[r*Hv+j:][:vpk])
			prefetch(c.opIn.B[r*Hv+j:][:vpk])
		}
	}
	base := c.at(s, j, 0)
	prefetch(c.ringU[base*dv:][:(n+T)*dv])
	prefetch(c.ringA[base:][:n+T])
	prefetch(c.ringBeta[base:][:n+T])
	prefetch(c.opOut[(b*T*Hv+j)*dv:][:dv])
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
func (c *GDNCache) fold(sc *gdnScratch, s Slot, kh, t, cached, r int) {
	Hk, Hv, dk, dv := c.shape.KeyHeads, c.shape.ValueHeads, c.shape.KeyDim, c.shape.ValueDim
	vpk := Hv / Hk
	// nc: the entries whose u the fold takes from the ring.
	nc := 0
	if c.opt.FoldsCachedU() {
		nc = min(cached, t)
	}
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
		mat := int(s)*Hv + j
		S := c.state.raw(mat)
		if S == nil {
			S = sc.s
			c.state.load(mat, S)
		}
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
		base := c.at(s, j, 0)
		copy(sc.u[:nc*dv], c.ringU[base*dv:][:nc*dv])
		switch {
		case nc == 0 && t > 0:
			gdnFoldU(c.ringV[base*dv:][:t*dv], sc.proj[:t*dv], cm, gs, c.ringBeta[base:][:t], t, dv, sc.u[:t*dv])
		case t > nc:
			gdnFoldUFrom(nc, c.ringV[base*dv:][:t*dv], sc.proj[:t*dv], cm, gs, c.ringBeta[base:][:t], t, dv, sc.u[:t*dv])
		}
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
		if c.state.raw(mat) == nil {
			sr := sc.sr
			c.reseed(sr, s, mat, int64(c.opFlushes[s]))
			c.state.store(mat, S, sr)
		}
		if c.read != nil {
			c.read.store(int(s)*Hv+j, S, nil)
		}
	}
}

// prefetchFold prefetches the ring rows a fold reads for value head j of
// slot s over t entries: v, the per-step decays and β.
func (c *GDNCache) prefetchFold(s Slot, j, t int) {
	if t == 0 {
		return
	}
	dv := c.shape.ValueDim
	base := c.at(s, j, 0)
	prefetch(c.ringV[base*dv:][:t*dv])
	prefetch(c.ringA[base:][:t])
	prefetch(c.ringBeta[base:][:t])
}

// baselineGroup runs the in-place recurrence for the value heads of key head
// kh over nd consecutive inputs of op slot b (rows b·T..; their normalised
// q, k in scratch). For a verify, input k's state goes to buffer cur+1+k.
func (c *GDNCache) baselineGroup(sc *gdnScratch, b, kh, T, nd int, verify bool) {
	Hk, Hv, dk, dv := c.shape.KeyHeads, c.shape.ValueHeads, c.shape.KeyDim, c.shape.ValueDim
	_ = Hk
	vpk := Hv / Hk
	nb := c.opt.stateBuffers()
	s := c.opSlots[b]
	cur := c.cur(s)
	sk := sc.proj[:dv]
	for j := kh * vpk; j < (kh+1)*vpk; j++ {
		src := (int(s)*nb+cur)*Hv + j
		if !verify && (c.state.format == numeric.BF16 || c.state.format == numeric.F16) && sc.sr == nil && c.halfStep(sc, b, j, src) {
			continue
		}
		S := sc.s
		if raw := c.state.raw(src); raw != nil && !verify {
			S = raw
		} else {
			c.state.load(src, S)
		}
		for k := 0; k < nd; k++ {
			r := b*T + k
			kt, qt := sc.k[k*dk:(k+1)*dk], sc.q[k*dk:(k+1)*dk]
			g := float32(math.Exp(c.negA[j] * ssm.Softplus(float64(c.opIn.A[r*Hv+j])+c.dtb[j])))
			beta := float32(ssm.Sigmoid(float64(c.opIn.B[r*Hv+j])))
			// Pass 1 reads Sᵀk; u = β(v − g·Sᵀk); pass 2 updates each row,
			// S_m = g·S_m + u[m]·k, and reads the output o[m] = S_m·q.
			dotRows(S, dk, kt, sk)
			v := c.opIn.V[(r*Hv+j)*dv:][:dv]
			o := c.opOut[(r*Hv+j)*dv:][:dv]
			u := sc.u[:dv]
			for m := 0; m < dv; m++ {
				u[m] = beta * (v[m] - g*sk[m])
			}
			updateRows(S, dk, g, u, kt, qt, o)
			dst := src
			if verify {
				dst = (int(s)*nb+(cur+1+k)%nb)*Hv + j
			}
			if raw := c.state.raw(dst); raw != nil {
				if &raw[0] != &S[0] {
					copy(raw, S)
				}
			} else {
				sr := sc.sr
				c.reseed(sr, s, dst, c.opSteps+int64(k))
				c.state.store(dst, S, sr)
				c.state.load(dst, S)
			}
		}
	}
}

// halfStep is the in-place step of value head j on a bf16 or fp16 state,
// fused: one read pass for Sᵀk, then the update, its output read and the
// rounding in one read-write pass. It reports false where the kernels cannot
// run.
func (c *GDNCache) halfStep(sc *gdnScratch, b, j, mat int) bool {
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
	g := float32(math.Exp(c.negA[j] * ssm.Softplus(float64(c.opIn.A[b*Hv+j])+c.dtb[j])))
	beta := float32(ssm.Sigmoid(float64(c.opIn.B[b*Hv+j])))
	v := c.opIn.V[(b*Hv+j)*dv:][:dv]
	u := sc.u[:dv]
	for m := 0; m < dv; m++ {
		u[m] = beta * (v[m] - g*sk[m])
	}
	return update(S, dk, g, u, kt, qt, c.opOut[(b*Hv+j)*dv:][:dv])
}

// Verify computes the outputs of T draft inputs per slot without writing any
// checkpoint. See Mamba2Cache.Verify.
func (c *GDNCache) Verify(slots []Slot, T int, counts []int, in GDNInput, o []float32) error {
	if err := checkDrafts(counts, len(slots), T, c.opt.MaxDraft); err != nil {
		return fmt.Errorf("gdn cache: %w", err)
	}
	if err := c.checkIO(slots, T, in, o); err != nil {
		return fmt.Errorf("gdn cache: verify: %w", err)
	}
	c.opSlots, c.opIn, c.opOut, c.opT, c.opCounts = slots, in, o, T, counts
	c.recordVerify(slots, T, counts)
	c.work.run(len(slots)*c.shape.KeyHeads, c.taskVer)
	c.opSlots, c.opIn, c.opOut, c.opCounts = nil, GDNInput{}, nil, nil
	return nil
}

func (c *GDNCache) verifyTask(worker, i int) {
	Hk := c.shape.KeyHeads
	b, kh := i/Hk, i%Hk
	T := c.opT
	cnt := T
	if c.opCounts != nil {
		cnt = c.opCounts[b]
	}
	sc := &c.scratch[worker]
	c.prepare(sc, kh, b*T, cnt)
	if c.opt.Mode == Baseline {
		c.baselineGroup(sc, b, kh, T, cnt, true)
		return
	}
	s := c.opSlots[b]
	n := int(c.opHist[s])
	if c.opFold[s] {
		c.fold(sc, s, kh, n, n, -1)
		n = 0
	}
	for k := 0; k < cnt; k++ {
		c.appendRing(sc, s, kh, k, b*T+k, n+k)
	}
	c.outputs(sc, s, kh, n, cnt, b*T)
}

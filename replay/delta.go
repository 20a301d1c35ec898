package replay

import (
	"fmt"
	"math"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/ssm"
)

// deltaCore is what the two delta-rule caches, Gated DeltaNet (GDNCache)
// and Kimi Delta Attention (KDACache), share beyond core: the shape, the
// ring, the operation in flight, the per-worker scratch and the skeleton
// of Step, Verify and Prefill (normalise q and k, append the inputs to the
// ring, then read the outputs from the checkpoint and the ring, or fold;
// or the in-place update of the baseline; or a prefill's recurrence on the
// float32 state). The two layers differ only in their
// decay, one factor per value head and step for GDN and one per key
// channel for KDA (docs/DESIGN.md 2.2, 2.2b); what that changes is the
// layer's deltaLayer methods.
//
// The state of value head j, S[i][m] (i < dk, m < dv), is stored
// transposed: dv rows of dk, row m holding S[·][m]. Then Sᵀk is one dot
// product per row and the update S += k⊗u scales and adds k to each row,
// the same row kernels as Mamba-2's (with dv, dk in the roles of P, N).
type deltaCore struct {
	core
	shape ssm.GDNShape
	layer deltaLayer
	// decays is the decay factors per value head and step: 1 for GDN, dk
	// for KDA. gateName names the decay input in errors.
	decays   int
	gateName string

	// Ring, [slot][head][entry][...] (head-major, so that one head's
	// entries are contiguous): k after l2norm [Hk·dk] (per key head), v
	// [Hv·dv], the decay [Hv·decays], β [Hv], and the cached corrected
	// update u [Hv·dv]. The per-step decay is kept as exp(g), the factor
	// the recurrence applies, so decay products need no exp.
	ringK, ringV, ringA, ringBeta, ringU []float32

	scratch []deltaScratch

	// Arguments of the operation in flight, read by the task methods.
	opSlots  []Slot
	opIn     deltaRows
	opOut    []float32
	opT      int
	opCounts []int
	taskStep func(worker, i int)
	taskVer  func(worker, i int)
	taskPre  func(worker, i int)
}

// deltaRows is a delta-rule batch in host memory as the shared steps read
// it: GDNBatch's or KDABatch's rows, with the decay input (GDN's raw a
// [Hv], KDA's log-decay g [Hv·dk]) as Gate.
type deltaRows struct {
	Q, K, V, Gate, B []float32
}

// deltaLayer is the math of one delta-rule layer kind over the shared ring
// and scratch: what GDNCache and KDACache do differently.
type deltaLayer interface {
	// appendDecay writes value head j's decays for op row r into ring
	// entry e of slot s.
	appendDecay(s Slot, j, r, e int)
	// outputs computes the corrected updates (cached in the ring) and the
	// outputs of nd entries appended at ring positions n..n+nd-1 of slot
	// s for key head kh's value heads, their q in scratch drafts 0..nd-1
	// and their outputs at op rows r0...
	outputs(sc *deltaScratch, s Slot, kh, n, nd, r0 int)
	// fold folds ring entries 0..t-1 of slot s into the checkpoint for key
	// head kh's value heads, entries 0..cached-1 holding their corrected
	// update in the ring; with r ≥ 0 it also writes the output of the last
	// entry (q in scratch draft 0) for op row r, read from the folded state.
	fold(sc *deltaScratch, s Slot, kh, t, cached, r int)
	// baselineUpdate runs the in-place update of value head j's state S by
	// op row r, whose normalised k and q are kt and qt, and writes its
	// output.
	baselineUpdate(sc *deltaScratch, j, r int, kt, qt, S []float32)
	// halfStep is the layer's fused in-place step of value head j of op
	// slot b on a bf16 or fp16 state matrix mat; it reports false where it
	// has none or its kernels cannot run.
	halfStep(sc *deltaScratch, b, j, mat int) bool
	// prefillEntry steps value head j's float32 state S by ring entry e of
	// slot s, whose key is k, dropping its output.
	prefillEntry(sc *deltaScratch, S []float32, s Slot, j, e int, k []float32)
	// prefillInput steps value head j's float32 state S by op row r, whose
	// normalised k and q are kt and qt, and writes its output.
	prefillInput(sc *deltaScratch, S []float32, j, r int, kt, qt []float32)
}

// deltaScratch is one worker's scratch. The fields after sr are Kimi Delta
// Attention's only (nil for Gated DeltaNet).
type deltaScratch struct {
	s    []float32 // one head's state, dv·dk
	q    []float32 // normalised, scaled q per draft [T][dk]
	k    []float32 // normalised k per draft [T][dk]
	vecs []float32 // vectors to project the state on [R+T][dk]
	proj []float32 // S₀ᵀv for each of vecs [R+T][dv]
	u    []float32 // corrected updates for a fold [R][dv]
	suf  []float64 // decay products from each entry to the current one [R+2]
	coef []float32 // per-entry decay weights (KDA: k_t·q_t per draft, or ones) [R+T]
	rowc []float32 // ring-sum and rank-update coefficients [t][dv]
	gram []float32 // key-head dot products shared by its value heads (KDA: a value head's pair weights)
	cmat []float32 // a fold's u' recurrence coefficients [R][R]
	rb   readBuffers
	sr   *numeric.Stochastic

	yk, yq []float64 // a key and a query decayed entry by entry [dk]
	keys   []float32 // a fold's keys decayed to its last entry [R][dk]
	alpha  []float32 // one step's decays, or a fold's decay product [dk]
}

// newDeltaCore allocates everything of a delta-rule cache for options opt
// (checked) but the layer's constants; the caller binds its layer.
func newDeltaCore(kind, gateName string, shape ssm.GDNShape, decays int, opt Options, capacity int, conv ConvWeights) (deltaCore, error) {
	Hk, Hv, dk, dv := shape.KeyHeads, shape.ValueHeads, shape.KeyDim, shape.ValueDim
	cr, err := newCore(kind, [4]int32{int32(Hk), int32(Hv), int32(dk), int32(dv)}, opt, Hv, dk*dv, capacity, conv,
		[]int{Hk * dk, Hv * dv, Hv * decays, Hv, Hv * dv})
	if err != nil {
		return deltaCore{}, err
	}
	c := deltaCore{core: cr, shape: shape, decays: decays, gateName: gateName}
	if c.rings != nil {
		c.ringK, c.ringV, c.ringA, c.ringBeta, c.ringU = c.rings[0], c.rings[1], c.rings[2], c.rings[3], c.rings[4]
	}
	R := opt.ring()
	T := max(1, opt.MaxDraft)
	for range opt.Threads {
		sc := deltaScratch{
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
		if decays > 1 {
			sc.yk, sc.yq = make([]float64, dk), make([]float64, dk)
			sc.keys = make([]float32, R*dk)
			sc.alpha = make([]float32, dk)
		}
		if opt.Stochastic {
			sc.sr = numeric.NewStochastic(opt.Seed)
		}
		c.scratch = append(c.scratch, sc)
	}
	return c, nil
}

// bind makes l the layer whose math the tasks run.
func (c *deltaCore) bind(l deltaLayer) {
	c.layer = l
	c.taskStep = c.stepTask
	c.taskVer = c.verifyTask
	c.taskPre = c.prefillTask
}

// Shape returns the layer shape.
func (c *deltaCore) Shape() ssm.GDNShape { return c.shape }

func (c *deltaCore) checkIO(slots []Slot, T int, in deltaRows, o []float32) error {
	if err := c.ledger.CheckBatch(slots); err != nil {
		return err
	}
	Hk, Hv, dk, dv := c.shape.KeyHeads, c.shape.ValueHeads, c.shape.KeyDim, c.shape.ValueDim
	rows := len(slots) * T
	for _, e := range []error{
		checkLen("q", len(in.Q), rows*Hk*dk), checkLen("k", len(in.K), rows*Hk*dk),
		checkLen("v", len(in.V), rows*Hv*dv), checkLen(c.gateName, len(in.Gate), rows*Hv*c.decays),
		checkLen("b", len(in.B), rows*Hv), checkLen("o", len(o), rows*Hv*dv),
	} {
		if e != nil {
			return e
		}
	}
	return nil
}

// step runs one standard decode step for each slot and writes o
// [len(slots)][Hv·dv] (before the gated norm).
func (c *deltaCore) step(slots []Slot, in deltaRows, o []float32) error {
	if err := c.checkIO(slots, 1, in, o); err != nil {
		return fmt.Errorf("%s cache: step: %w", c.kind, err)
	}
	c.recordStep(slots)
	c.opSlots, c.opIn, c.opOut, c.opT, c.opCounts = slots, in, o, 1, nil
	c.work.run(len(slots)*c.shape.KeyHeads, c.taskStep)
	c.opSlots, c.opIn, c.opOut = nil, deltaRows{}, nil
	return nil
}

// verify computes the outputs of T draft inputs per slot without writing
// any checkpoint (but an early fold's).
func (c *deltaCore) verify(slots []Slot, T int, counts []int, in deltaRows, o []float32) error {
	if err := checkDrafts(counts, len(slots), T, c.opt.MaxDraft); err != nil {
		return fmt.Errorf("%s cache: %w", c.kind, err)
	}
	if err := c.checkIO(slots, T, in, o); err != nil {
		return fmt.Errorf("%s cache: verify: %w", c.kind, err)
	}
	c.opSlots, c.opIn, c.opOut, c.opT, c.opCounts = slots, in, o, T, counts
	c.recordVerify(slots, T, counts)
	c.work.run(len(slots)*c.shape.KeyHeads, c.taskVer)
	c.opSlots, c.opIn, c.opOut, c.opCounts = nil, deltaRows{}, nil, nil
	return nil
}

// prefill runs T consecutive inputs per slot through the recurrence as
// one multi-token forward (the contract's Prefill).
func (c *deltaCore) prefill(slots []Slot, T int, counts []int, in deltaRows, o []float32) error {
	if err := checkPrefill(counts, len(slots), T); err != nil {
		return fmt.Errorf("%s cache: %w", c.kind, err)
	}
	if err := c.checkIO(slots, T, in, o); err != nil {
		return fmt.Errorf("%s cache: prefill: %w", c.kind, err)
	}
	c.recordPrefill(slots, T, counts)
	c.opSlots, c.opIn, c.opOut, c.opT, c.opCounts = slots, in, o, T, counts
	c.work.run(len(slots)*c.shape.KeyHeads, c.taskPre)
	c.opSlots, c.opIn, c.opOut, c.opCounts = nil, deltaRows{}, nil, nil
	return nil
}

// prefillTask handles one (slot, key head) of a Prefill: for each of the
// key head's value heads, the plain recurrence on the float32 state over
// the ring's entries (replay), then over the inputs, with their outputs;
// a replay slot's state is then rounded once into the checkpoint, a
// baseline's after every input, as its Step rounds it.
func (c *deltaCore) prefillTask(worker, i int) {
	Hk, Hv, dk := c.shape.KeyHeads, c.shape.ValueHeads, c.shape.KeyDim
	b, kh := i/Hk, i%Hk
	sc := &c.scratch[worker]
	s := c.opSlots[b]
	replayMode := c.opt.Mode == Replay
	T, count := c.opT, c.opT
	if c.opCounts != nil {
		count = c.opCounts[b]
	}
	n, mat0 := 0, (int(s)*c.opt.stateBuffers()+c.cur(s))*Hv
	if replayMode {
		n, mat0 = int(c.opHist[s]), int(s)*Hv
	}
	qs := float32(1 / math.Sqrt(float64(dk)))
	kt, qt := sc.k[:dk], sc.q[:dk]
	vpk := Hv / Hk
	for j := kh * vpk; j < (kh+1)*vpk; j++ {
		mat := mat0 + j
		S := c.state.raw(mat)
		if S == nil {
			S = sc.s
			c.state.load(mat, S)
		}
		for e := range n {
			c.layer.prefillEntry(sc, S, s, j, e, c.ringKey(s, kh, e))
		}
		for k := range count {
			r := b*T + k
			l2norm(kt, c.opIn.K[(r*Hk+kh)*dk:][:dk], 1)
			l2norm(qt, c.opIn.Q[(r*Hk+kh)*dk:][:dk], qs)
			c.layer.prefillInput(sc, S, j, r, kt, qt)
			if !replayMode {
				c.storeStep(sc.sr, s, mat, S, c.opSteps+int64(k))
			}
		}
		if replayMode {
			c.storeFolded(sc.sr, s, int(s)*c.shape.ValueHeads+j, S)
		}
	}
}

func (c *deltaCore) stepTask(worker, i int) {
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
		c.layer.fold(sc, s, kh, n+1, n, b)
		return
	}
	c.layer.outputs(sc, s, kh, n, 1, b)
}

func (c *deltaCore) verifyTask(worker, i int) {
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
		c.layer.fold(sc, s, kh, n, n, -1)
		n = 0
	}
	for k := 0; k < cnt; k++ {
		c.appendRing(sc, s, kh, k, b*T+k, n+k)
	}
	c.layer.outputs(sc, s, kh, n, cnt, b*T)
}

// prepare normalises q and k of op rows r0..r0+n-1 for key head kh into the
// scratch: k̂ = l2norm(k), q̂ = l2norm(q)/√dk.
func (c *deltaCore) prepare(sc *deltaScratch, kh, r0, n int) {
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

// appendRing writes normalised k (from scratch draft k), and v, the decays
// and β of op row r into ring entry e of slot s for key head kh and its
// value heads.
func (c *deltaCore) appendRing(sc *deltaScratch, s Slot, kh, k, r, e int) {
	Hk, Hv, dk, dv := c.shape.KeyHeads, c.shape.ValueHeads, c.shape.KeyDim, c.shape.ValueDim
	copy(c.ringKey(s, kh, e), sc.k[k*dk:(k+1)*dk])
	vpk := Hv / Hk
	for j := kh * vpk; j < (kh+1)*vpk; j++ {
		c.opt.toRing(c.ringVec(c.ringV, s, j, e, dv), c.opIn.V[(r*Hv+j)*dv:][:dv])
		c.layer.appendDecay(s, j, r, e)
		c.ringBeta[c.at(s, j, e)] = float32(ssm.Sigmoid(float64(c.opIn.B[r*Hv+j])))
	}
}

// ringKey returns ring entry e's normalised k for key head kh of slot s.
func (c *deltaCore) ringKey(s Slot, kh, e int) []float32 {
	Hk, dk := c.shape.KeyHeads, c.shape.KeyDim
	return c.ringK[((int(s)*Hk+kh)*c.opt.ring()+e)*dk:][:dk]
}

// ringVec returns ring entry e of value head j of slot s in a per-value-head
// ring of the given width (ringV, ringU; ringA with the decays' width).
func (c *deltaCore) ringVec(ring []float32, s Slot, j, e, width int) []float32 {
	return ring[c.at(s, j, e)*width:][:width]
}

// at is the index of ring entry e of value head j of slot s in the
// per-head rings (ringBeta, GDN's ringA; times the width for ringV, ringU
// and KDA's ringA). The rings are head-major so that a head's entries are
// contiguous.
func (c *deltaCore) at(s Slot, j, e int) int {
	return (int(s)*c.shape.ValueHeads+j)*c.opt.ring() + e
}

// prefetchHead prefetches what value head j of op slot b (j = Hv: the next
// slot's first head) reads from the ring in a step or verify: its cached u
// and decays up to the entries the op appends, the v rows it appends, its
// output row and, for a key head's first value head, the key head's keys,
// its q and k inputs and the v, decay and b inputs of all its value heads.
func (c *deltaCore) prefetchHead(b, j int) {
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
	vpk, w := Hv/Hk, c.decays
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
			prefetch(c.opIn.Gate[(r*Hv+j)*w:][:vpk*w])
			prefetch(c.opIn.B[r*Hv+j:][:vpk])
		}
	}
	base := c.at(s, j, 0)
	prefetch(c.ringU[base*dv:][:(n+T)*dv])
	prefetch(c.ringA[base*w:][:(n+T)*w])
	prefetch(c.ringBeta[base:][:n+T])
	prefetch(c.opOut[(b*T*Hv+j)*dv:][:dv])
}

// prefetchFold prefetches the ring rows a fold reads for value head j of
// slot s over t entries: v, the per-step decays and β.
func (c *deltaCore) prefetchFold(s Slot, j, t int) {
	if t == 0 {
		return
	}
	dv, w := c.shape.ValueDim, c.decays
	base := c.at(s, j, 0)
	prefetch(c.ringV[base*dv:][:t*dv])
	prefetch(c.ringA[base*w:][:t*w])
	prefetch(c.ringBeta[base:][:t])
}

// foldsCached is how many of a fold's t entries, the first cached of which
// hold their corrected update in the ring, it takes u from the ring rather
// than recomputing (Options.FoldsCachedU): all it has, or none.
func (c *deltaCore) foldsCached(cached, t int) int {
	if c.opt.FoldsCachedU() {
		return min(cached, t)
	}
	return 0
}

// foldU writes into the scratch the corrected updates a fold of t entries of
// value head j of slot s folds: the ring's u for entries 0..nc-1, and
// u'_i = β_i·(v_i − g[i]·P_i + Σ_{l<i} cm[i·t+l]·u'_l) for the rest, P_i
// in scratch proj (S₀ᵀk_i for GDN, S₀ᵀ(Γ(i)·k_i) with g at 1 for KDA).
func (c *deltaCore) foldU(sc *deltaScratch, s Slot, j, t, nc int, cm, g []float32) {
	dv := c.shape.ValueDim
	base := c.at(s, j, 0)
	copy(sc.u[:nc*dv], c.ringU[base*dv:][:nc*dv])
	switch {
	case nc == 0 && t > 0:
		gdnFoldU(c.ringV[base*dv:][:t*dv], sc.proj[:t*dv], cm, g, c.ringBeta[base:][:t], t, dv, sc.u[:t*dv])
	case t > nc:
		gdnFoldUFrom(nc, c.ringV[base*dv:][:t*dv], sc.proj[:t*dv], cm, g, c.ringBeta[base:][:t], t, dv, sc.u[:t*dv])
	}
}

// baselineGroup runs the in-place recurrence for the value heads of key head
// kh over nd consecutive inputs of op slot b (rows b·T..; their normalised
// q, k in scratch). For a verify, input k's state goes to buffer cur+1+k.
func (c *deltaCore) baselineGroup(sc *deltaScratch, b, kh, T, nd int, verify bool) {
	Hk, Hv, dk := c.shape.KeyHeads, c.shape.ValueHeads, c.shape.KeyDim
	vpk := Hv / Hk
	nb := c.opt.stateBuffers()
	s := c.opSlots[b]
	cur := c.cur(s)
	for j := kh * vpk; j < (kh+1)*vpk; j++ {
		src := (int(s)*nb+cur)*Hv + j
		if !verify && (c.state.format == numeric.BF16 || c.state.format == numeric.F16) && sc.sr == nil && c.layer.halfStep(sc, b, j, src) {
			continue
		}
		S := sc.s
		if raw := c.state.raw(src); raw != nil && !verify {
			S = raw
		} else {
			c.state.load(src, S)
		}
		for k := 0; k < nd; k++ {
			c.layer.baselineUpdate(sc, j, b*T+k, sc.k[k*dk:(k+1)*dk], sc.q[k*dk:(k+1)*dk], S)
			dst := src
			if verify {
				dst = (int(s)*nb+(cur+1+k)%nb)*Hv + j
			}
			c.storeStep(sc.sr, s, dst, S, c.opSteps+int64(k))
		}
	}
}

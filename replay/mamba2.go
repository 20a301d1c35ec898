package replay

import (
	"fmt"
	"math"

	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/ssm"
)

// Mamba2Params are a Mamba-2 layer's per-head constants, as stored in a
// checkpoint (A_log, not A).
type Mamba2Params struct {
	ALog   []float32
	DtBias []float32
	D      []float32
}

// Mamba2Input is a batch of Mamba-2 inputs in host memory, the CPU cache's
// Mamba2Batch.
type Mamba2Input = Mamba2Batch[[]float32]

// Mamba2Cache is the state cache of one Mamba-2 layer in host memory.
type Mamba2Cache struct {
	core
	shape ssm.Mamba2Shape
	a     []float64 // A = −exp(A_log)
	dtb   []float64
	d     []float32

	// Ring of raw inputs since the checkpoint, views of core.rings, laid
	// out head-major so that one head's (group's) entries are contiguous:
	// the output path reads them as one stream (xAt, bAt, at).
	ringX  []float32 // [slot][head][entry][P]
	ringB  []float32 // [slot][group][entry][N]
	ringDt []float32 // [slot][head][entry]: Δ after the softplus
	ringA  []float32 // [slot][head][entry]: the step's decay exp(Δ·A)

	scratch []mamba2Scratch

	// Arguments of the operation in flight, read by the task methods.
	opSlots  []Slot
	opIn     Mamba2Input
	opOut    []float32
	opT      int
	opCounts []int
	taskStep func(worker, i int)
	taskVer  func(worker, i int)
}

type mamba2Scratch struct {
	s    []float32 // one head's state, P·N
	bc   []float32 // B_j·C per ring entry (and per draft for verify)
	w    []float64 // per-entry decay weights
	suf  []float64 // decay products from each entry to the current one
	dots []float32 // P·T dot products for verify
	tmp  []float32 // one row's dot products
	coef []float32 // rank-update coefficients [P][t]
	xc   []float32 // Δ·x per row for the in-place update
	rb   readBuffers
	sr   *numeric.Stochastic
}

var _ Mamba2State[[]float32] = (*Mamba2Cache)(nil)

// NewMamba2 builds a cache of capacity slots for one Mamba-2 layer.
// conv may have zero Channels when the caller runs the convolution itself.
func NewMamba2(shape ssm.Mamba2Shape, prm Mamba2Params, conv ConvWeights, capacity int, opt Options) (*Mamba2Cache, error) {
	opt, err := opt.Check("mamba2", CPUCapabilities())
	if err != nil {
		return nil, err
	}
	if err := shape.Validate(); err != nil {
		return nil, err
	}
	H, P, N, G := shape.Heads, shape.HeadDim, shape.StateSize, shape.Groups
	if len(prm.ALog) != H || len(prm.DtBias) != H || len(prm.D) != H {
		return nil, fmt.Errorf("mamba2 cache: A_log, dt_bias and D need %d values each, have %d, %d, %d", H, len(prm.ALog), len(prm.DtBias), len(prm.D))
	}
	cr, err := newCore("mamba2", [4]int32{int32(H), int32(P), int32(N), int32(G)}, opt, H, P*N, capacity, conv,
		[]int{H * P, G * N, H, H})
	if err != nil {
		return nil, err
	}
	c := &Mamba2Cache{core: cr, shape: shape}
	c.a = make([]float64, H)
	c.dtb = make([]float64, H)
	c.d = append([]float32(nil), prm.D...)
	for h := range H {
		c.a[h] = -math.Exp(float64(prm.ALog[h]))
		c.dtb[h] = float64(prm.DtBias[h])
	}
	if c.rings != nil {
		c.ringX, c.ringB, c.ringDt, c.ringA = c.rings[0], c.rings[1], c.rings[2], c.rings[3]
	}
	R := opt.ring() + 1
	for range opt.Threads {
		sc := mamba2Scratch{
			s:    make([]float32, P*N),
			bc:   make([]float32, R*max(1, opt.MaxDraft)),
			w:    make([]float64, R),
			suf:  make([]float64, R+1),
			dots: make([]float32, P*max(1, opt.MaxDraft)),
			tmp:  make([]float32, max(1, opt.MaxDraft)),
			coef: make([]float32, P*R),
			xc:   make([]float32, P),
			rb:   newReadBuffers(P*N, N),
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
func (c *Mamba2Cache) Shape() ssm.Mamba2Shape { return c.shape }

// Step runs one standard decode step for each slot: it appends the inputs to
// the slot's ring and writes y [len(slots)][H·P] (the SSM output before the
// gated norm). A replay slot whose ring reaches the window flushes: its
// checkpoint (and read copy) are rewritten with the current token folded in.
// Slots flush at their own phases. Pending drafts of a previous Verify are
// dropped.
func (c *Mamba2Cache) Step(slots []Slot, in Mamba2Input, y []float32) error {
	if err := c.checkIO(slots, 1, in, y); err != nil {
		return fmt.Errorf("mamba2 cache: step: %w", err)
	}
	c.recordStep(slots)
	c.opSlots, c.opIn, c.opOut, c.opT = slots, in, y, 1
	c.work.run(len(slots)*c.shape.Groups, c.taskStep)
	c.opSlots, c.opIn, c.opOut = nil, Mamba2Input{}, nil
	return nil
}

func (c *Mamba2Cache) checkIO(slots []Slot, T int, in Mamba2Input, y []float32) error {
	if err := c.ledger.CheckBatch(slots); err != nil {
		return err
	}
	H, P, N, G := c.shape.Heads, c.shape.HeadDim, c.shape.StateSize, c.shape.Groups
	rows := len(slots) * T
	for _, e := range []error{
		checkLen("x", len(in.X), rows*H*P), checkLen("B", len(in.B), rows*G*N),
		checkLen("C", len(in.C), rows*G*N), checkLen("dt", len(in.Dt), rows*H),
		checkLen("y", len(y), rows*H*P),
	} {
		if e != nil {
			return e
		}
	}
	return nil
}

// stepTask handles one (slot, group) of a Step.
func (c *Mamba2Cache) stepTask(worker, i int) {
	G := c.shape.Groups
	b, g := i/G, i%G
	if c.opt.Mode == Baseline {
		c.baselineGroup(worker, b, g, 1, false)
		return
	}
	s := c.opSlots[b]
	n := int(c.opHist[s])
	sc := &c.scratch[worker]
	t := n + 1
	C := c.groupVec(c.opIn.C, b, g)
	if t >= c.opt.Window {
		c.appendRing(s, b, g, n)
		c.flushGroup(sc, s, g, t, C, c.opOut, b, true)
		return
	}
	// outputsGroup appends each head's x as it reaches it.
	c.appendB(s, b, g, n)
	c.outputsGroup(sc, s, g, t, t, b)
}

// xAt is ring entry e's x for head h of slot s.
func (c *Mamba2Cache) xAt(s Slot, h, e int) []float32 {
	P := c.shape.HeadDim
	return c.ringX[((int(s)*c.shape.Heads+h)*c.opt.ring()+e)*P:][:P]
}

// bAt is ring entry e's B for group g of slot s.
func (c *Mamba2Cache) bAt(s Slot, g, e int) []float32 {
	N := c.shape.StateSize
	return c.ringB[((int(s)*c.shape.Groups+g)*c.opt.ring()+e)*N:][:N]
}

// at is the index of ring entry e of head h in ringDt and ringA.
func (c *Mamba2Cache) at(s Slot, h, e int) int {
	return (int(s)*c.shape.Heads+h)*c.opt.ring() + e
}

// groupVec returns the G·N-strided vector of group g in row r.
func (c *Mamba2Cache) groupVec(v []float32, r, g int) []float32 {
	N := c.shape.StateSize
	return v[(r*c.shape.Groups+g)*N:][:N]
}

// appendRing writes input row r of the op into ring entry e of slot s, for the
// heads of group g (and the group's B).
func (c *Mamba2Cache) appendRing(s Slot, r, g, e int) {
	H, G := c.shape.Heads, c.shape.Groups
	hpg := H / G
	c.appendB(s, r, g, e)
	for h := g * hpg; h < (g+1)*hpg; h++ {
		c.appendHead(s, r, h, e)
	}
}

// appendB writes input row r's B of group g into ring entry e of slot s.
func (c *Mamba2Cache) appendB(s Slot, r, g, e int) {
	N, G := c.shape.StateSize, c.shape.Groups
	c.opt.toRing(c.bAt(s, g, e), c.opIn.B[(r*G+g)*N:(r*G+g+1)*N])
}

// appendHead writes input row r's x, Δ and decay of head h into ring entry e
// of slot s.
func (c *Mamba2Cache) appendHead(s Slot, r, h, e int) {
	c.appendX(s, r, h, e)
	c.appendDecay(s, r, h, e)
}

// appendX writes input row r's x of head h into ring entry e of slot s.
func (c *Mamba2Cache) appendX(s Slot, r, h, e int) {
	H, P := c.shape.Heads, c.shape.HeadDim
	c.opt.toRing(c.xAt(s, h, e), c.opIn.X[(r*H+h)*P:(r*H+h+1)*P])
}

// appendDecay writes input row r's Δ and decay of head h into ring entry e
// of slot s.
func (c *Mamba2Cache) appendDecay(s Slot, r, h, e int) {
	H := c.shape.Heads
	delta := max(float32(ssm.Softplus(float64(c.opIn.Dt[r*H+h])+c.dtb[h])), c.opIn.DtMin)
	c.ringDt[c.at(s, h, e)] = delta
	c.ringA[c.at(s, h, e)] = float32(math.Exp(float64(delta) * c.a[h]))
}

// prefetchHead prefetches what head h of op slot b (h = H: the next slot's
// first head) touches in the ring in a step or verify: its x, Δ and decay up
// to the entries the op appends, its output row, its op inputs x and dt
// and, for a group's first head, the group's ring B and input B and C. The
// op inputs are read once per step, far apart: no hardware prefetcher
// follows them, and an input row missed in the ring append stalls the head.
func (c *Mamba2Cache) prefetchHead(b, h int) {
	H, P, N, G := c.shape.Heads, c.shape.HeadDim, c.shape.StateSize, c.shape.Groups
	if h == H {
		b, h = b+1, 0
	}
	if b >= len(c.opSlots) {
		return
	}
	s := c.opSlots[b]
	R := c.opt.ring()
	T := c.opT
	cnt := int(c.opHist[s]) + T
	if cnt > R {
		return
	}
	if hpg := H / G; h%hpg == 0 {
		g := h / hpg
		prefetch(c.ringB[(int(s)*G+g)*R*N:][:cnt*N])
		for k := 0; k < T; k++ {
			prefetch(c.groupVec(c.opIn.B, b*T+k, g))
			prefetch(c.groupVec(c.opIn.C, b*T+k, g))
		}
	}
	base := c.at(s, h, 0)
	prefetch(c.ringX[base*P:][:cnt*P])
	prefetch(c.ringDt[base:][:cnt])
	prefetch(c.ringA[base:][:cnt])
	prefetch(c.opOut[(b*T*H+h)*P:][:P])
	for k := 0; k < T; k++ {
		r := b*T + k
		prefetch(c.opIn.X[(r*H+h)*P:][:P])
		prefetch(c.opIn.Dt[r*H+h:][:1])
	}
}

// suffix fills sc.suf[j] = Π_{l=j+1..t} a_l for j = 0..t (suf[t] = 1), the
// decay from entry j to entry t of slot s's ring for head h (1-based
// entries; a_l = exp(Δ_l·A)). So e^{Λ_t} = suf[0] and e^{Λ_t−Λ_j} = suf[j].
// Products of the per-step decays, as the recurrence itself applies them,
// need no exp per term.
func (c *Mamba2Cache) suffix(sc *mamba2Scratch, s Slot, h, t int) {
	base := c.at(s, h, 0)
	sc.suf[t] = 1
	for j := t - 1; j >= 0; j-- {
		sc.suf[j] = sc.suf[j+1] * float64(c.ringA[base+j])
	}
}

// flushGroup folds ring entries 1..t of slot s into the checkpoint for the
// heads of group g (docs/DESIGN.md 2.1):
//
//	S₀ ← e^{Λ_t}·S₀ + Σ_j Δ_j·e^{Λ_t−Λ_j}·x_j ⊗ B_j
//
// and, when withOutput, writes y = S₀·C + D·x for op row r.
func (c *Mamba2Cache) flushGroup(sc *mamba2Scratch, s Slot, g, t int, C []float32, y []float32, r int, withOutput bool) {
	H, P, N, G := c.shape.Heads, c.shape.HeadDim, c.shape.StateSize, c.shape.Groups
	R := c.opt.ring()
	hpg := H / G
	// The group's B_j are contiguous (head-major ring): the rank update
	// streams them from L1.
	ringB := c.ringB[((int(s)*G+g)*R)*N:][:t*N]
	for h := g * hpg; h < (g+1)*hpg; h++ {
		c.suffix(sc, s, h, t)
		decay := float32(sc.suf[0])
		mat := int(s)*H + h
		S := c.checkpoint(sc.s, mat)
		// S ← e^{Λ_t}·S + Wᵀ·B with W[j][p] = w_j·x_j[p]: one rank-t
		// update. The head's x_j are contiguous (head-major ring), so W is
		// t scaled copies of them, and the kernel takes it entry by entry.
		X := c.ringX[c.at(s, h, 0)*P:][:t*P]
		coef := sc.coef[:t*P]
		for j := 0; j < t; j++ {
			w := float32(float64(c.ringDt[c.at(s, h, j)]) * sc.suf[j+1])
			scaleTo(coef[j*P:(j+1)*P], X[j*P:(j+1)*P], w)
		}
		var Cv, yh []float32
		if withOutput {
			Cv, yh = C, y[(r*H+h)*P:][:P]
		}
		rankUpdateDotRows(S, P, N, decay, coef, P, t, ringB, N, Cv, yh)
		if withOutput {
			xt := X[(t-1)*P:]
			for p := range yh {
				yh[p] += c.d[h] * xt[p]
			}
		}
		c.storeFolded(sc.sr, s, mat, S)
	}
}

// outputsGroup computes outputs for op rows r0..r0+T-1 of slot s (row r0+k
// at ring position tFirst+k, 1-based) from the checkpoint or its read copy
// and the ring (docs/DESIGN.md 2.1):
//
//	y_t = e^{Λ_t}·(S₀·C_t) + Σ_{j≤t} Δ_j·e^{Λ_t−Λ_j}·(B_j·C_t)·x_j + D·x_t
//
// The group's B of those rows must be in the ring; each head's x, Δ and
// decay are appended here (Δ and decay for the whole group first, x just
// before the head is read).
func (c *Mamba2Cache) outputsGroup(sc *mamba2Scratch, s Slot, g, tFirst, tLast, r0 int) {
	H, P, N, G := c.shape.Heads, c.shape.HeadDim, c.shape.StateSize, c.shape.Groups
	R := c.opt.ring()
	hpg := H / G
	nd := tLast - tFirst + 1
	b := r0 / c.opT
	// B_j·C_t for every ring entry j ≤ t and every output t: shared by all
	// heads of the group. The group's B_j are contiguous (head-major ring).
	ringB := c.ringB[(int(s)*G+g)*R*N:]
	for k := 0; k < nd; k++ {
		t := tFirst + k
		dotRows(ringB[:t*N], N, c.groupVec(c.opIn.C, r0+k, g), sc.bc[k*(R+1):][:t])
	}
	// Δ and decay of every head of the group first: each is a chain of three
	// dependent exp/log1p calls, and back to back the chains of different
	// heads overlap (between two state reads they ran one at a time).
	for h := g * hpg; h < (g+1)*hpg; h++ {
		for k := 0; k < nd; k++ {
			c.appendDecay(s, r0+k, h, tFirst-1+k)
		}
	}
	for h := g * hpg; h < (g+1)*hpg; h++ {
		// The next head's ring rows start a new run: ask for them now, a
		// head's work ahead.
		c.prefetchHead(b, h+1)
		for k := 0; k < nd; k++ {
			c.appendX(s, r0+k, h, tFirst-1+k)
		}
		// S₀·C_t for all outputs, one pass over the state.
		c.readDots(sc, s, h, g, r0, nd)
		for k := 0; k < nd; k++ {
			t := tFirst + k
			yh := c.opOut[((r0+k)*H+h)*P:][:P]
			c.suffix(sc, s, h, t)
			e := float32(sc.suf[0])
			scaleAdd2(yh, sc.dots[k*P:][:P], c.xAt(s, h, t-1), e, c.d[h])
			coef := sc.coef[:t]
			dts, suf, bc := c.ringDt[c.at(s, h, 0):][:t], sc.suf[1:][:t], sc.bc[k*(R+1):][:t]
			for j := range coef {
				coef[j] = float32(float64(dts[j])*suf[j]) * bc[j]
			}
			combine(yh, coef, c.ringX[c.at(s, h, 0)*P:][:t*P], P)
		}
	}
}

// readDots writes sc.dots[k·P+p] = S₀[p]·C_k for nd outputs, reading the read
// copy when there is one, else the checkpoint.
func (c *Mamba2Cache) readDots(sc *mamba2Scratch, s Slot, h, g, r0, nd int) {
	P, N, H, G := c.shape.HeadDim, c.shape.StateSize, c.shape.Heads, c.shape.Groups
	src := c.state
	mat := int(s)*c.opt.stateBuffers()*H + h
	if c.read != nil {
		src, mat = c.read, int(s)*H+h
	}
	readDots(src, mat, P, N, c.opIn.C[(r0*G+g)*N:], G*N, nd, sc.dots, &sc.rb)
}

// baselineGroup runs the in-place recurrence for T consecutive inputs of op
// slot b (rows b·T..b·T+T-1) on the heads of group g. A verify's input k
// goes to buffer cur+1+k, so that Commit can select the accepted one; a
// step (T = 1) and a prefill (any T) update the state in its own buffer.
func (c *Mamba2Cache) baselineGroup(worker, b, g, T int, verify bool) {
	H, P, N, G := c.shape.Heads, c.shape.HeadDim, c.shape.StateSize, c.shape.Groups
	nb := c.opt.stateBuffers()
	sc := &c.scratch[worker]
	s := c.opSlots[b]
	cur := c.cur(s)
	count := T
	if c.opCounts != nil {
		count = c.opCounts[b]
	}
	hpg := H / G
	for h := g * hpg; h < (g+1)*hpg; h++ {
		src := (int(s)*nb+cur)*H + h
		if !verify && T == 1 && (c.state.format == numeric.BF16 || c.state.format == numeric.F16) && sc.sr == nil && c.halfStep(sc, b, g, h, src) {
			continue
		}
		S := sc.s
		if raw := c.state.raw(src); raw != nil && !verify {
			S = raw
		} else {
			c.state.load(src, S)
		}
		for k := 0; k < count; k++ {
			r := b*T + k
			delta := max(ssm.Softplus(float64(c.opIn.Dt[r*H+h])+c.dtb[h]), float64(c.opIn.DtMin))
			a := float32(math.Exp(delta * c.a[h]))
			xh := c.opIn.X[(r*H+h)*P:][:P]
			Bv := c.groupVec(c.opIn.B, r, g)
			Cv := c.groupVec(c.opIn.C, r, g)
			yh := c.opOut[(r*H+h)*P:][:P]
			for p, xp := range xh {
				sc.xc[p] = float32(delta) * xp
			}
			updateRows(S, N, a, sc.xc, Bv, Cv, yh)
			for p, xp := range xh {
				yh[p] += c.d[h] * xp
			}
			dst := src
			if verify {
				dst = (int(s)*nb+(cur+1+k)%nb)*H + h
			}
			c.storeStep(sc.sr, s, dst, S, c.opSteps+int64(k))
		}
	}
}

// halfStep is the in-place step of head h on a bf16 or fp16 state, fused:
// the state is read and written once in its format (decode, update and round
// in registers). It reports false where the kernels cannot run.
func (c *Mamba2Cache) halfStep(sc *mamba2Scratch, b, g, h, mat int) bool {
	H, P, N := c.shape.Heads, c.shape.HeadDim, c.shape.StateSize
	delta := max(ssm.Softplus(float64(c.opIn.Dt[b*H+h])+c.dtb[h]), float64(c.opIn.DtMin))
	a := float32(math.Exp(delta * c.a[h]))
	xh := c.opIn.X[(b*H+h)*P:][:P]
	yh := c.opOut[(b*H+h)*P:][:P]
	for p, xp := range xh {
		sc.xc[p] = float32(delta) * xp
	}
	e := c.state.elems
	update := updateRowsBF16
	if c.state.format == numeric.F16 {
		update = updateRowsF16
	}
	if !update(c.state.u16[mat*e:(mat+1)*e], N, a, sc.xc, c.groupVec(c.opIn.B, b, g), c.groupVec(c.opIn.C, b, g), yh) {
		return false
	}
	for p, xp := range xh {
		yh[p] += c.d[h] * xp
	}
	return true
}

// Verify computes the outputs of T draft inputs per slot (rows [slot][T] of
// in and y; counts, if not nil, gives each slot's own number of drafts ≤ T)
// without writing any checkpoint (docs/DESIGN.md 2.3). In replay mode the drafts
// are appended to the ring; if the committed history plus 2T would overflow
// the ring, the history is folded first (early flush). In baseline mode each
// draft's state is written to its own buffer. Commit then accepts a prefix.
func (c *Mamba2Cache) Verify(slots []Slot, T int, counts []int, in Mamba2Input, y []float32) error {
	if err := checkDrafts(counts, len(slots), T, c.opt.MaxDraft); err != nil {
		return fmt.Errorf("mamba2 cache: %w", err)
	}
	if err := c.checkIO(slots, T, in, y); err != nil {
		return fmt.Errorf("mamba2 cache: verify: %w", err)
	}
	c.opSlots, c.opIn, c.opOut, c.opT, c.opCounts = slots, in, y, T, counts
	c.recordVerify(slots, T, counts)
	c.work.run(len(slots)*c.shape.Groups, c.taskVer)
	c.opSlots, c.opIn, c.opOut, c.opCounts = nil, Mamba2Input{}, nil, nil
	return nil
}

func (c *Mamba2Cache) verifyTask(worker, i int) {
	G := c.shape.Groups
	b, g := i/G, i%G
	T := c.opT
	if c.opt.Mode == Baseline {
		c.baselineGroup(worker, b, g, T, true)
		return
	}
	s := c.opSlots[b]
	sc := &c.scratch[worker]
	n := int(c.opHist[s])
	if c.opFold[s] {
		c.flushGroup(sc, s, g, n, nil, nil, 0, false)
		n = 0
	}
	cnt := T
	if c.opCounts != nil {
		cnt = c.opCounts[b]
	}
	for k := 0; k < cnt; k++ {
		c.appendB(s, b*T+k, g, n+k)
	}
	c.outputsGroup(sc, s, g, n+1, n+cnt, b*T)
}

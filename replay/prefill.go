package replay

import (
	"fmt"
	"math"

	"github.com/replayssm/replayssm/ssm"
)

// ConvPrefill runs the convolution over T consecutive inputs per slot
// ([slot][T][Channels]; counts, when not nil, each slot's own number) and
// moves each window on by its count.
func (c *core) ConvPrefill(slots []Slot, T int, counts []int, in, out []float32) error {
	if c.conv == nil {
		return fmt.Errorf("conv: cache built without conv weights")
	}
	if err := c.ledger.CheckPrefill(slots, T, counts); err != nil {
		return fmt.Errorf("conv: %w", err)
	}
	C := c.conv.w.Channels
	if err := checkLen("conv input", len(in), len(slots)*T*C); err != nil {
		return fmt.Errorf("conv: %w", err)
	}
	if err := checkLen("conv output", len(out), len(slots)*T*C); err != nil {
		return fmt.Errorf("conv: %w", err)
	}
	for i, s := range slots {
		n := T
		if counts != nil {
			n = counts[i]
		}
		c.conv.prefill(s, in[i*T*C:][:n*C], out[i*T*C:][:n*C], n)
	}
	return nil
}

// prefill computes the outputs of n inputs of slot s (in, out: [n][C]),
// each seeing the window and the inputs before it, in apply's order of
// operations, and makes the last K−1 of window and inputs the window.
func (c *convWindow) prefill(s Slot, in, out []float32, n int) {
	C, K := c.w.Channels, c.w.Kernel
	win := c.slot(s)
	// row(t) is input t, the window's rows at t < 0.
	row := func(t int) []float32 {
		if t < 0 {
			return win[(t+K-1)*C:][:C]
		}
		return in[t*C:][:C]
	}
	for t := range n {
		o := out[t*C:][:C]
		if c.w.Bias != nil {
			copy(o, c.w.Bias)
		} else {
			clear(o)
		}
		for k := range K {
			x := row(t - (K - 1) + k)
			for ch := range C {
				o[ch] += c.w.Weight[ch*K+k] * x[ch]
			}
		}
	}
	if keep := K - 1 - n; keep > 0 {
		copy(win, win[n*C:(K-1)*C])
		copy(win[keep*C:(K-1)*C], in[:n*C])
	} else {
		copy(win[:(K-1)*C], in[(n-(K-1))*C:n*C])
	}
}

// recordPrefill records a prefill of the (checked) slots in the ledger,
// after taking each slot's history before it; the flush counts that seed
// stochastic rounding are the ones after it.
func (c *core) recordPrefill(slots []Slot, T int, counts []int) {
	for _, s := range slots {
		c.opHist[s], _, _ = c.ledger.Cursors(s)
	}
	c.opSteps = c.ledger.Stats().Steps + c.ledger.Stats().Prefilled
	c.ledger.Prefill(slots, T, counts)
	for _, s := range slots {
		_, _, c.opFlushes[s] = c.ledger.Cursors(s)
	}
}

// Prefill runs T consecutive inputs per slot through the recurrence as one
// multi-token forward (the contract's Prefill; rows as Verify's, counts,
// when not nil, each slot's own number): y receives every input's output
// from the float32 state. Replay mode folds the ring and the inputs into
// the checkpoint, rounded once, and empties the ring; baseline mode rounds
// the state after every input, as Step does.
func (c *Mamba2Cache) Prefill(slots []Slot, T int, counts []int, in Mamba2Input, y []float32) error {
	if err := checkPrefill(counts, len(slots), T); err != nil {
		return fmt.Errorf("mamba2 cache: %w", err)
	}
	if err := c.checkIO(slots, T, in, y); err != nil {
		return fmt.Errorf("mamba2 cache: prefill: %w", err)
	}
	c.recordPrefill(slots, T, counts)
	c.opSlots, c.opIn, c.opOut, c.opT, c.opCounts = slots, in, y, T, counts
	c.work.run(len(slots)*c.shape.Groups, c.prefillTask)
	c.opSlots, c.opIn, c.opOut, c.opCounts = nil, Mamba2Input{}, nil, nil
	return nil
}

// prefillTask handles one (slot, group) of a Prefill.
func (c *Mamba2Cache) prefillTask(worker, i int) {
	G := c.shape.Groups
	b, g := i/G, i%G
	if c.opt.Mode == Baseline {
		c.baselineGroup(worker, b, g, c.opT, false)
		return
	}
	H, P, N := c.shape.Heads, c.shape.HeadDim, c.shape.StateSize
	R := c.opt.ring()
	sc := &c.scratch[worker]
	s := c.opSlots[b]
	n := int(c.opHist[s])
	T, count := c.opT, c.opT
	if c.opCounts != nil {
		count = c.opCounts[b]
	}
	hpg := H / G
	for h := g * hpg; h < (g+1)*hpg; h++ {
		mat := int(s)*H + h
		S := c.checkpoint(sc.s, mat)
		// The ring's entries first, stepped as the recurrence steps them
		// (their outputs were written when they were appended).
		for j := range n {
			e := c.at(s, h, j)
			scaleTo(sc.xc[:P], c.xAt(s, h, j), c.ringDt[e])
			Bj := c.ringB[((int(s)*G+g)*R+j)*N:][:N]
			updateRows(S, N, c.ringA[e], sc.xc[:P], Bj, Bj, sc.dots[:P])
		}
		for k := range count {
			r := b*T + k
			delta := max(ssm.Softplus(float64(c.opIn.Dt[r*H+h])+c.dtb[h]), float64(c.opIn.DtMin))
			a := float32(math.Exp(delta * c.a[h]))
			xh := c.opIn.X[(r*H+h)*P:][:P]
			yh := c.opOut[(r*H+h)*P:][:P]
			scaleTo(sc.xc[:P], xh, float32(delta))
			updateRows(S, N, a, sc.xc[:P], c.groupVec(c.opIn.B, r, g), c.groupVec(c.opIn.C, r, g), yh)
			for p, xp := range xh {
				yh[p] += c.d[h] * xp
			}
		}
		c.storeFolded(sc.sr, s, mat, S)
	}
}

// Prefill runs T consecutive inputs per slot through the recurrence (see
// Mamba2Cache.Prefill); o receives [slot][T][Hv·dv].
func (c *GDNCache) Prefill(slots []Slot, T int, counts []int, in GDNInput, o []float32) error {
	return c.prefill(slots, T, counts, gdnInputRows(in), o)
}

// prefillEntry steps value head j's float32 state S by ring entry e of
// slot s (key k), as the step appended it, its output dropped: u recomputed
// from the raw v, exp(g) and β on S, the exact fold's.
func (c *GDNCache) prefillEntry(sc *deltaScratch, S []float32, s Slot, j, e int, k []float32) {
	dv := c.shape.ValueDim
	c.update(sc, S, k, k, c.ringVec(c.ringV, s, j, e, dv), c.ringA[c.at(s, j, e)], c.ringBeta[c.at(s, j, e)], sc.rowc[:dv])
}

// prefillInput steps value head j's float32 state S by op row r (its
// normalised k and q kt, qt) and writes its output: a replay slot's decay
// exp(g) with g rounded first, as appendDecay keeps it in the ring, a
// baseline's as its Step.
func (c *GDNCache) prefillInput(sc *deltaScratch, S []float32, j, r int, kt, qt []float32) {
	if c.opt.Mode != Replay {
		c.baselineUpdate(sc, j, r, kt, qt, S)
		return
	}
	Hv, dv := c.shape.ValueHeads, c.shape.ValueDim
	g := float32(math.Exp(float64(float32(c.logDecay(j, r)))))
	beta := float32(ssm.Sigmoid(float64(c.opIn.B[r*Hv+j])))
	c.update(sc, S, kt, qt, c.opIn.V[(r*Hv+j)*dv:][:dv], g, beta, c.opOut[(r*Hv+j)*dv:][:dv])
}

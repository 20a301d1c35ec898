package nn

import (
	"fmt"
	"math"
	"sort"

	"github.com/replayssm/replayssm/model/hfconfig"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
)

// Activation selects a dense MLP's nonlinearity.
type Activation uint8

const (
	// SwiGLU is down(silu(gate(x))·up(x)) (Qwen).
	SwiGLU Activation = iota
	// ReLU2 is down(relu(up(x))²), not gated (NemotronH).
	ReLU2
)

// MLP is a dense feed-forward block. Gate is unused (zero) for ReLU2.
type MLP struct {
	Act            Activation
	Gate, Up, Down Linear
}

// Kind is hfconfig.MLP.
func (m *MLP) Kind() hfconfig.LayerKind { return hfconfig.MLP }

// Params is the number of weights.
func (m *MLP) Params() int { return m.Gate.Params() + m.Up.Params() + m.Down.Params() }

// Validate checks that the projections chain.
func (m *MLP) Validate() error {
	if err := m.Up.check("up_proj"); err != nil {
		return err
	}
	if err := m.Down.check("down_proj"); err != nil {
		return err
	}
	if m.Down.In != m.Up.Out || m.Down.Out != m.Up.In {
		return fmt.Errorf("up_proj is %d×%d but down_proj is %d×%d", m.Up.Out, m.Up.In, m.Down.Out, m.Down.In)
	}
	if m.Act == SwiGLU {
		if err := m.Gate.check("gate_proj"); err != nil {
			return err
		}
		if m.Gate.In != m.Up.In || m.Gate.Out != m.Up.Out {
			return fmt.Errorf("gate_proj is %d×%d, want %d×%d", m.Gate.Out, m.Gate.In, m.Up.Out, m.Up.In)
		}
	}
	return nil
}

func (m *MLP) place(be Backend) {
	if m.Act == SwiGLU {
		m.Gate.place(be)
	}
	m.Up.place(be)
	m.Down.place(be)
}

func (m *MLP) newState(Backend, int, replay.Options) (blockState, error) { return nil, nil }

func (m *MLP) forward(b *batch, _ blockState, x, out Tensor) error {
	m.apply(b, x, out)
	return nil
}

// apply writes out [n][Down.Out] from x [n][Up.In].
func (m *MLP) apply(b *batch, x, out Tensor) {
	be := b.be
	u := b.mem.Alloc(x.Rows, m.Up.Out)
	m.Up.apply(be, u, x)
	switch m.Act {
	case SwiGLU:
		g := b.mem.Alloc(x.Rows, m.Gate.Out)
		m.Gate.apply(be, g, x)
		be.SwiGLU(u, g)
	case ReLU2:
		be.ReLU2(u)
	}
	m.Down.apply(be, out, u)
}

// Router says how router logits become expert weights.
type Router uint8

const (
	// SoftmaxRouter: softmax over all experts, top-k, renormalised if
	// NormTopK (Qwen).
	SoftmaxRouter Router = iota
	// SigmoidRouter: s = sigmoid(logits), top-k of s + CorrectionBias (within
	// the best TopKGroups of Groups expert groups), weights s of the chosen,
	// divided by their sum + 1e-20 if NormTopK, × Scale (NemotronH).
	SigmoidRouter
)

// MoE is a mixture of experts with optional shared expert:
//
//	w, e   = route(router(x))                 top-k experts per token
//	y      = fc2(Σ w·expert_e(fc1(x)))        fc1/fc2: latent projections, optional
//	out    = y + shared(x)·[sigmoid(shared_gate(x))]
type MoE struct {
	Router         Linear // [experts][hidden], logits in float32
	Routing        Router
	CorrectionBias []float32 // sigmoid router only; nil for none
	TopK           int
	NormTopK       bool
	Scale          float32 // routed scaling factor (1 for none)
	Groups         int     // expert groups (≤1: none)
	TopKGroups     int
	LatentIn       *Linear // fc1_latent_proj hidden → latent, or nil
	LatentOut      *Linear // fc2_latent_proj latent → hidden, or nil
	Experts        []MLP
	Shared         *MLP    // or nil
	SharedGate     *Linear // [1][hidden] or nil
}

// Kind is hfconfig.MoE.
func (m *MoE) Kind() hfconfig.LayerKind { return hfconfig.MoE }

// Params is the number of weights.
func (m *MoE) Params() int {
	n := m.Router.Params() + len(m.CorrectionBias)
	for _, l := range []*Linear{m.LatentIn, m.LatentOut, m.SharedGate} {
		if l != nil {
			n += l.Params()
		}
	}
	for i := range m.Experts {
		n += m.Experts[i].Params()
	}
	if m.Shared != nil {
		n += m.Shared.Params()
	}
	return n
}

// Validate checks the expert count and shapes.
func (m *MoE) Validate() error {
	E := len(m.Experts)
	if E == 0 || m.Router.Out != E {
		return fmt.Errorf("moe: router scores %d experts, have %d", m.Router.Out, E)
	}
	if m.TopK <= 0 || m.TopK > E {
		return fmt.Errorf("moe: top-k %d out of range [1, %d]", m.TopK, E)
	}
	if m.CorrectionBias != nil && len(m.CorrectionBias) != E {
		return fmt.Errorf("moe: correction bias has %d values, want %d", len(m.CorrectionBias), E)
	}
	if m.Groups > 1 && (E%m.Groups != 0 || m.TopKGroups < 1 || m.TopKGroups > m.Groups) {
		return fmt.Errorf("moe: %d experts in %d groups, top %d groups", E, m.Groups, m.TopKGroups)
	}
	if err := m.Router.check("router"); err != nil {
		return err
	}
	for i := range m.Experts {
		if err := m.Experts[i].Validate(); err != nil {
			return fmt.Errorf("expert %d: %w", i, err)
		}
	}
	if m.Shared != nil {
		if err := m.Shared.Validate(); err != nil {
			return fmt.Errorf("shared expert: %w", err)
		}
	}
	return nil
}

func (m *MoE) place(be Backend) {
	m.Router.placeExact(be)
	for _, l := range []*Linear{m.LatentIn, m.LatentOut, m.SharedGate} {
		if l != nil {
			l.place(be)
		}
	}
	for i := range m.Experts {
		m.Experts[i].place(be)
	}
	if m.Shared != nil {
		m.Shared.place(be)
	}
}

func (m *MoE) newState(Backend, int, replay.Options) (blockState, error) { return nil, nil }

func (m *MoE) forward(b *batch, _ blockState, x, out Tensor) error {
	be := b.be
	n, E, k := b.n, len(m.Experts), m.TopK
	logits := b.mem.Alloc(n, E)
	m.Router.apply(be, logits, x)

	// Route every token on the host: chosen experts and their weights,
	// [n][k].
	b.host = grow(b.host, n*E+n*k+2*E)
	lg, weight, sel, prob := b.host[:n*E], b.host[n*E:n*E+n*k], b.host[n*E+n*k:n*E+n*k+E], b.host[n*E+n*k+E:]
	be.Download(lg, logits)
	if err := be.Err(); err != nil {
		return err
	}
	if cap(b.chosen) < n*k {
		b.chosen = make([]int, n*k)
	}
	chosen := b.chosen[:n*k]
	for r := range n {
		m.route(lg[r*E:(r+1)*E], prob, sel, chosen[r*k:(r+1)*k], weight[r*k:(r+1)*k])
	}

	xe := x
	if m.LatentIn != nil {
		xe = b.mem.Alloc(n, m.LatentIn.Out)
		m.LatentIn.apply(be, xe, x)
	}
	din, dout := m.Experts[0].Up.In, m.Experts[0].Down.Out
	acc := b.mem.Zeros(n, dout)
	for e := range E {
		rows, rw := b.rows[:0], b.rw[:0]
		for i, c := range chosen {
			if c == e {
				rows = append(rows, int32(i/k))
				rw = append(rw, weight[i])
			}
		}
		b.rows, b.rw = rows, rw
		if len(rows) == 0 {
			continue
		}
		mark := b.mem.Mark()
		xin := b.mem.Alloc(len(rows), din)
		be.Gather(xin, xe, rows)
		y := b.mem.Alloc(len(rows), dout)
		m.Experts[e].apply(b, xin, y)
		be.AxpyRows(acc, y, rows, rw)
		b.mem.Rewind(mark)
	}
	if m.LatentOut != nil {
		m.LatentOut.apply(be, out, acc)
	} else {
		be.Copy(out, acc)
	}
	if m.Shared != nil {
		s := b.mem.Alloc(n, out.Cols)
		m.Shared.apply(b, x, s)
		if m.SharedGate != nil {
			g := b.mem.Alloc(n, 1)
			m.SharedGate.apply(be, g, x)
			be.MulSigmoidRows(s, g)
		}
		be.Add(out, s)
	}
	return nil
}

// route picks one token's experts and weights from its router logits.
func (m *MoE) route(logits, prob, sel []float32, chosen []int, weight []float32) {
	copy(prob, logits)
	switch m.Routing {
	case SoftmaxRouter:
		tensor.Softmax(prob)
		copy(sel, prob)
	case SigmoidRouter:
		for e, l := range logits {
			prob[e] = tensor.Sigmoid(l)
			sel[e] = prob[e]
			if m.CorrectionBias != nil {
				sel[e] = prob[e] + m.CorrectionBias[e]
			}
		}
		if m.Groups > 1 {
			m.maskGroups(sel)
		}
	}
	// Top-k by selection score, ties to the lower index (k passes over the
	// experts: k ≤ 22 and E ≤ 512 in the supported models, no sorting).
	var sum float32
	for j := range chosen {
		best := -1
		for e, v := range sel {
			if v == v && (best < 0 || v > sel[best]) { // NaN marks a taken expert
				best = e
			}
		}
		if best < 0 {
			best = 0
		}
		chosen[j] = best
		weight[j] = prob[best]
		sum += weight[j]
		sel[best] = float32(math.NaN()) // taken
	}
	if m.NormTopK {
		if m.Routing == SigmoidRouter {
			sum += 1e-20
		}
		for j := range weight {
			weight[j] /= sum
		}
	}
	if m.Scale != 0 && m.Scale != 1 {
		for j := range weight {
			weight[j] *= m.Scale
		}
	}
}

// maskGroups keeps the experts of the TopKGroups groups whose two best
// selection scores sum highest and excludes the others from the top-k.
func (m *MoE) maskGroups(sel []float32) {
	G := m.Groups
	size := len(sel) / G
	type gs struct {
		g int
		s float32
	}
	score := make([]gs, G)
	for g := range G {
		a, b := float32(math.Inf(-1)), float32(math.Inf(-1))
		for _, v := range sel[g*size : (g+1)*size] {
			if v > a {
				a, b = v, a
			} else if v > b {
				b = v
			}
		}
		if size == 1 {
			b = 0
		}
		score[g] = gs{g, a + b}
	}
	sort.SliceStable(score, func(i, j int) bool { return score[i].s > score[j].s })
	for _, x := range score[m.TopKGroups:] {
		for e := x.g * size; e < (x.g+1)*size; e++ {
			sel[e] = float32(math.Inf(-1))
		}
	}
}

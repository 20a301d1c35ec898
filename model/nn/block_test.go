package nn_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/tensor"
)

// The block tests run one block as the only residual branch of a decoder,
//
//	h = embed(token);  h += block(rmsnorm(h)·w)
//
// and read the block's output as the residual stream after the layer
// (State.OnLayer) minus the embedding, against a float64 reference of the
// block (refBlock) fed the same normalised embeddings: through prompts (the
// SSM caches' Prefill), batched decode steps, and a Verify whose rows past
// an accepted prefix are rejected by Commit.

// refBlock is a float64 reference of one block, with per-sequence state.
type refBlock interface {
	// step runs one token of sequence seq with input x and returns the
	// block's output.
	step(seq int, x []float64) []float64
	// save returns a copy of a sequence's state and restore puts one
	// back, so that a verify's rejected rows can be undone.
	save(seq int) any
	restore(seq int, s any)
}

// blockHarness is the decoder around the block, its State, and the
// reference.
type blockHarness struct {
	t      *testing.T
	d      *nn.Decoder
	s      *nn.State
	ref    refBlock
	seqs   []nn.Seq
	out    []float32 // the last pass's rows' residual stream after the layer
	worst  float64
	tol    float64
	hidden int
}

func newBlockHarness(t *testing.T, rng *rand.Rand, hidden, vocab int, blk nn.Block, ref refBlock, opt replay.Options, seqs int, tol float64) *blockHarness {
	t.Helper()
	d := &nn.Decoder{Hidden: hidden, Vocab: vocab,
		Embed:     tensor.Weights{F32: normals(rng, vocab*hidden, 1)},
		Layers:    []nn.Layer{{Branches: []nn.Branch{{Norm: nn.RMSNorm{W: normals(rng, hidden, 0.3, 1), Eps: 1e-5}, Block: blk}}}},
		FinalNorm: nn.RMSNorm{W: ones(hidden), Eps: 1e-5},
		LMHead:    nn.Linear{In: hidden, Out: vocab, W: tensor.Weights{F32: normals(rng, vocab*hidden, 0.1)}},
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	s, err := d.NewState(seqs, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	h := &blockHarness{t: t, d: d, s: s, ref: ref, tol: tol, hidden: hidden}
	s.OnLayer = func(_ int, x []float32) { h.out = append(h.out[:0], x...) }
	for range seqs {
		q, err := s.Admit()
		if err != nil {
			t.Fatal(err)
		}
		h.seqs = append(h.seqs, q)
	}
	return h
}

// input is the block's input for token tok: the normalised embedding.
func (h *blockHarness) input(tok int) []float64 {
	d := h.d
	e := d.Embed.F32[tok*d.Hidden : (tok+1)*d.Hidden]
	w := d.Layers[0].Branches[0].Norm
	var ss float64
	for _, v := range e {
		ss += float64(v) * float64(v)
	}
	r := 1 / math.Sqrt(ss/float64(len(e))+float64(w.Eps))
	x := make([]float64, len(e))
	for i, v := range e {
		x[i] = float64(v) * r * float64(w.W[i])
	}
	return x
}

// check compares row i of the last pass with want, the reference output of
// token tok.
func (h *blockHarness) check(what string, i, tok int, want []float64) {
	h.t.Helper()
	H := h.hidden
	e := h.d.Embed.F32[tok*H : (tok+1)*H]
	scale := 1e-30
	for _, w := range want {
		scale = max(scale, math.Abs(w))
	}
	for c := range H {
		got := float64(h.out[i*H+c]) - float64(e[c])
		err := math.Abs(got-want[c]) / scale
		h.worst = max(h.worst, err)
		if !(err <= h.tol) {
			h.t.Fatalf("%s: column %d: %v, want %v (%.2e of the row's largest, bound %.0e)", what, c, got, want[c], err, h.tol)
		}
	}
}

// pass runs rows (sequence index, token) through Forward and checks every
// row against the reference, stepped in row order.
func (h *blockHarness) pass(what string, rows [][2]int) {
	h.t.Helper()
	nr := make([]nn.Row, len(rows))
	for i, r := range rows {
		nr[i] = nn.Row{Seq: h.seqs[r[0]], Token: r[1]}
	}
	if err := h.d.Forward(context.Background(), h.s, nr, nil); err != nil {
		h.t.Fatalf("%s: %v", what, err)
	}
	for i, r := range rows {
		h.check(fmt.Sprintf("%s row %d", what, i), i, r[1], h.ref.step(r[0], h.input(r[1])))
	}
}

// verify runs toks as a Verify of sequence seq, checks every row as
// sequential decoding, and commits the first accept of them.
func (h *blockHarness) verify(what string, seq int, toks []int, accept int) {
	h.t.Helper()
	nr := make([]nn.Row, len(toks))
	for i, tok := range toks {
		nr[i] = nn.Row{Seq: h.seqs[seq], Token: tok}
	}
	if err := h.d.Verify(context.Background(), h.s, nr, nil); err != nil {
		h.t.Fatalf("%s: %v", what, err)
	}
	var kept any
	for i, tok := range toks {
		if i == accept {
			kept = h.ref.save(seq)
		}
		h.check(fmt.Sprintf("%s row %d", what, i), i, tok, h.ref.step(seq, h.input(tok)))
	}
	if accept == len(toks) {
		kept = h.ref.save(seq)
	}
	h.ref.restore(seq, kept)
	if err := h.d.Commit(h.s, []nn.Seq{h.seqs[seq]}, []int{accept}); err != nil {
		h.t.Fatalf("%s: commit: %v", what, err)
	}
}

// script drives two sequences through prompts of different lengths in one
// pass, batched decode steps across several replay windows, a verify with
// a partial commit, and more decode steps.
func (h *blockHarness) script(rng *rand.Rand) {
	tok := func() int { return rng.IntN(h.d.Vocab) }
	var rows [][2]int
	for i := range 7 {
		rows = append(rows, [2]int{0, tok()})
		if i < 3 {
			rows = append(rows, [2]int{1, tok()})
		}
	}
	h.pass("prompts", rows)
	for k := range 9 {
		h.pass(fmt.Sprintf("decode %d", k), [][2]int{{0, tok()}, {1, tok()}})
	}
	h.verify("verify", 0, []int{tok(), tok(), tok()}, 2)
	h.verify("verify all", 1, []int{tok(), tok()}, 2)
	for k := range 6 {
		h.pass(fmt.Sprintf("decode after verify %d", k), [][2]int{{1, tok()}, {0, tok()}})
	}
	h.pass("single row", [][2]int{{0, tok()}})
}

// normals returns n values of N(mean, sd²): normals(rng, n, sd) or
// normals(rng, n, sd, mean).
func normals(rng *rand.Rand, n int, sd float64, mean ...float64) []float32 {
	m := 0.0
	if len(mean) > 0 {
		m = mean[0]
	}
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(m + sd*rng.NormFloat64())
	}
	return v
}

func ones(n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = 1
	}
	return v
}

// linear returns a random out × in projection with weights of N(0, 1/in).
func linear(rng *rand.Rand, out, in int) nn.Linear {
	return nn.Linear{In: in, Out: out, W: tensor.Weights{F32: normals(rng, out*in, 1/math.Sqrt(float64(in)))}}
}

// apply64 is y = W·x in float64.
func apply64(l nn.Linear, x []float64) []float64 {
	y := make([]float64, l.Out)
	for o := range y {
		var s float64
		for i, w := range l.W.Float32()[o*l.In : (o+1)*l.In] {
			s += float64(w) * x[i]
		}
		if l.B != nil {
			s += float64(l.B[o])
		}
		y[o] = s
	}
	return y
}

// rmsnorm64 is x̂·w over groups of len(w) values.
func rmsnorm64(x []float64, w []float32, eps float64) []float64 {
	out := make([]float64, len(x))
	g := len(w)
	for o := 0; o < len(x); o += g {
		var ss float64
		for _, v := range x[o : o+g] {
			ss += v * v
		}
		r := 1 / math.Sqrt(ss/float64(g)+eps)
		for i := range g {
			out[o+i] = x[o+i] * r * float64(w[i])
		}
	}
	return out
}

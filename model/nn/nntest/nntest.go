// Package nntest is the conformance suite of nn.Backend: every operation the
// blocks use, on fresh random inputs, against float64 references written
// from the definitions, with the outputs poisoned (NaN) before each call so
// that a value not written shows. The CPU backend runs it in CI; a device
// backend runs it on its machine.
package nntest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/tensor"
)

// Tolerances bound a backend's relative error against the float64
// references (of the row's largest reference value).
type Tolerances struct {
	// MatMul bounds products with float32 weights (Backend.Weight) and
	// what follows from products (attention).
	MatMul float64
	// Product bounds products with weights in the backend's product
	// format (Backend.Matrix) and embeddings read from such a table: a
	// backend that rounds weights and activations to bfloat16 (2⁻⁹
	// relative each) needs 1e-2 for a few hundred terms.
	Product float64
	// Elementwise bounds norms, activations, gates, RoPE and Δ clamps.
	Elementwise float64
	// Sample bounds, as a fraction of the kept tokens' total weight, how
	// near a boundary of the draw's inverse CDF (or a top-p running sum
	// near TopP) a Backend.Sample draw may differ from nn.SampleRow's.
	Sample float64
}

// Float32 are the bounds for a backend computing in float32 with float32
// weights: a product of a few hundred terms is within 1e-5 of its row's
// largest value; an elementwise function within a few float32 ulps; a
// draw whose float32 weights are each within a few ulps and summed
// exactly within 2e-6 of the total weight.
var Float32 = Tolerances{MatMul: 1e-5, Product: 1e-5, Elementwise: 2e-6, Sample: 2e-6}

// Run checks every operation of be.
func Run(t *testing.T, be nn.Backend, tol Tolerances) {
	t.Helper()
	c := &checker{be: be, tol: tol, rng: rand.New(rand.NewPCG(7, 11)), arena: be.NewArena()}
	for _, tc := range []struct {
		name string
		f    func(t *testing.T)
	}{
		{"arena", c.arenaReuse},
		{"embed", c.embed},
		{"argmax", c.argmax},
		{"sample", c.sample},
		{"matmul", c.matmul},
		{"rmsnorm", c.rmsnorm},
		{"add-copy-views", c.addCopy},
		{"gather-scatter", c.gatherScatter},
		{"activations", c.activations},
		{"clamp-delta", c.clampDelta},
		{"kda-gate", c.kdaGate},
		{"rope", c.rope},
		{"attention", c.attention},
		{"latent", c.latent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.arena.Reset()
			tc.f(t)
			if err := be.Err(); err != nil {
				t.Fatalf("backend error: %v", err)
			}
		})
	}
}

type checker struct {
	be    nn.Backend
	tol   Tolerances
	rng   *rand.Rand
	arena nn.Arena
}

func (c *checker) normals(n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(c.rng.NormFloat64() * scale)
	}
	return v
}

// tensor uploads v as a rows × cols tensor.
func (c *checker) tensor(v []float32, rows, cols int) nn.Tensor {
	t := c.arena.Alloc(rows, cols)
	c.be.Upload(t, v)
	return t
}

// poisoned returns a rows × cols tensor of NaNs.
func (c *checker) poisoned(rows, cols int) nn.Tensor {
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(math.NaN())
	}
	return c.tensor(v, rows, cols)
}

func (c *checker) download(x nn.Tensor) []float32 {
	v := make([]float32, x.Rows*x.Cols)
	c.be.Download(v, x)
	return v
}

// expect compares x with want row by row, relative to the row's largest
// reference value.
func (c *checker) expect(t *testing.T, what string, x nn.Tensor, want []float64, tol float64) {
	t.Helper()
	got := c.download(x)
	if len(want) != len(got) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for r := range x.Rows {
		scale := 1e-30
		for _, w := range want[r*x.Cols : (r+1)*x.Cols] {
			scale = max(scale, math.Abs(w))
		}
		for i := r * x.Cols; i < (r+1)*x.Cols; i++ {
			if e := math.Abs(float64(got[i])-want[i]) / scale; !(e <= tol) {
				t.Fatalf("%s: row %d column %d: %v, want %v (%.3g of the row's largest, bound %.3g)",
					what, r, i-r*x.Cols, got[i], want[i], e, tol)
			}
		}
	}
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// arenaReuse checks that a rewound arena hands its memory out again (in
// the second pass, once Reset has sized it) and that Zeros zeroes what an
// earlier tensor left there.
func (c *checker) arenaReuse(t *testing.T) {
	for pass := range 2 {
		c.arena.Reset()
		mark := c.arena.Mark()
		p := c.poisoned(6, 40)
		c.arena.Rewind(mark)
		z := c.arena.Zeros(6, 40)
		if pass == 1 && (z.S != p.S || z.Off != p.Off) {
			t.Errorf("after Rewind, Alloc gave other memory (%p+%d) than the rewound tensor's (%p+%d)", z.S, z.Off, p.S, p.Off)
		}
		c.expect(t, "zeros over a poisoned tensor", z, make([]float64, 6*40), 0)
	}
}

// placement is one way a backend holds weights, with the bound it earns.
type placement struct {
	name string
	// place puts w on the backend and returns the values the placed
	// weights stand for (w, or w rounded to bfloat16 first).
	place func(w []float32, rows, cols int) (nn.Weight, []float32)
	tol   float64
}

// placements are the ways a backend holds weights: float32 exactly
// (Weight), and a product's float32 or bfloat16 weights in its product
// format (Matrix).
func (c *checker) placements() []placement {
	return []placement{
		{"weight", func(w []float32, rows, cols int) (nn.Weight, []float32) {
			return c.be.Weight(w, rows, cols), w
		}, c.tol.MatMul},
		{"matrix", func(w []float32, rows, cols int) (nn.Weight, []float32) {
			return c.be.Matrix(tensor.Weights{F32: w}, rows, cols), w
		}, c.tol.Product},
		{"bf16 matrix", func(w []float32, rows, cols int) (nn.Weight, []float32) {
			b := tensor.Weights{F32: w}.Round(tensor.BFloat16)
			return c.be.Matrix(b, rows, cols), b.Float32()
		}, c.tol.Product},
	}
}

func (c *checker) embed(t *testing.T) {
	V, H := 37, 24
	table := c.normals(V*H, 1)
	tokens := []int32{3, 0, 36, 3, 17}
	for _, p := range c.placements() {
		w, vals := p.place(table, V, H)
		var want []float64
		for _, tok := range tokens {
			want = append(want, f64(vals[int(tok)*H:(int(tok)+1)*H])...)
		}
		dst := c.poisoned(len(tokens), H)
		c.be.Embed(dst, w, tokens)
		tol := p.tol
		if p.name == "weight" {
			tol = 0 // a copy
		}
		c.expect(t, "embed from a "+p.name, dst, want, tol)
	}
}

func (c *checker) argmax(t *testing.T) {
	rows, cols := 8, 5003
	v := c.normals(rows*cols, 1)
	v[1*cols+17] = 9 // a tie: the first wins
	v[1*cols+4000] = 9
	v[2*cols+cols-1] = 9 // the last column
	v[3*cols] = 9        // the first
	// A broken row gives -1: a NaN, an infinity, a NaN beside the row's
	// largest value.
	v[5*cols+2500] = float32(math.NaN())
	v[6*cols+cols-1] = float32(math.Inf(1))
	v[7*cols+10] = 9
	v[7*cols+11] = float32(math.NaN())
	got := make([]int32, rows)
	for i := range got {
		got[i] = -7
	}
	c.be.Argmax(got, c.tensor(v, rows, cols))
	for r := range rows {
		if r >= 5 {
			if got[r] != -1 {
				t.Fatalf("argmax of row %d, which holds a non-finite value: %d, want -1", r, got[r])
			}
			continue
		}
		want := 0
		for i, x := range v[r*cols : (r+1)*cols] {
			if x > v[r*cols+want] {
				want = i
			}
		}
		if int(got[r]) != want {
			t.Fatalf("argmax of row %d: column %d, want %d", r, got[r], want)
		}
	}
}

func (c *checker) matmul(t *testing.T) {
	for _, p := range c.placements() {
		for _, sh := range []struct {
			n, in, out int
			bias       bool
		}{{1, 64, 48, false}, {1, 37, 5, false}, {7, 96, 33, true}, {16, 256, 40, false}, {3, 100, 9, false}, {8, 512, 70, true}, {9, 72, 17, false}} {
			x, W := c.normals(sh.n*sh.in, 1), c.normals(sh.out*sh.in, 1/math.Sqrt(float64(sh.in)))
			var b []float32
			if sh.bias {
				b = c.normals(sh.out, 1)
			}
			y := c.poisoned(sh.n, sh.out)
			pw, W := p.place(W, sh.out, sh.in)
			c.be.MatMul(y, c.tensor(x, sh.n, sh.in), pw, c.be.Weight(b, 1, sh.out))
			want := make([]float64, sh.n*sh.out)
			for r := range sh.n {
				for o := range sh.out {
					s := 0.0
					if b != nil {
						s = float64(b[o])
					}
					for i := range sh.in {
						s += float64(x[r*sh.in+i]) * float64(W[o*sh.in+i])
					}
					want[r*sh.out+o] = s
				}
			}
			c.expect(t, fmt.Sprintf("matmul %d×%d·%d×%dᵀ (%s)", sh.n, sh.in, sh.out, sh.in, p.name), y, want, p.tol)
		}
		// Strided inputs and outputs (column ranges of wider tensors).
		for _, n := range []int{3, 12} {
			in, out := 32, 8
			wide := c.normals(n*(in+5), 1)
			W := c.normals(out*in, 0.2)
			yw := c.poisoned(n, out+3)
			y := yw.Columns(2, out)
			pw, W := p.place(W, out, in)
			c.be.MatMul(y, c.tensor(wide, n, in+5).Columns(5, in), pw, nn.Weight{})
			want := make([]float64, n*out)
			for r := range n {
				for o := range out {
					for i := range in {
						want[r*out+o] += float64(wide[r*(in+5)+5+i]) * float64(W[o*in+i])
					}
				}
			}
			got := c.arena.Alloc(n, out)
			c.be.Copy(got, y)
			c.expect(t, fmt.Sprintf("matmul of column views, %d rows (%s)", n, p.name), got, want, p.tol)
		}
	}
}

func (c *checker) rmsnorm(t *testing.T) {
	const eps = 1e-6
	for _, sh := range []struct{ n, d, group int }{{5, 64, 0}, {3, 96, 32}} {
		x, w := c.normals(sh.n*sh.d, 3), c.normals(sh.d, 1)
		g := sh.group
		if g == 0 {
			g = sh.d
		}
		want := make([]float64, sh.n*sh.d)
		for r := range sh.n {
			for o := 0; o < sh.d; o += g {
				ss := 0.0
				for i := o; i < o+g; i++ {
					ss += float64(x[r*sh.d+i]) * float64(x[r*sh.d+i])
				}
				inv := 1 / math.Sqrt(ss/float64(g)+eps)
				for i := o; i < o+g; i++ {
					want[r*sh.d+i] = float64(x[r*sh.d+i]) * inv * float64(w[i])
				}
			}
		}
		dst := c.poisoned(sh.n, sh.d)
		c.be.RMSNorm(dst, c.tensor(x, sh.n, sh.d), c.be.Weight(w, 1, sh.d), eps, sh.group)
		c.expect(t, fmt.Sprintf("rmsnorm groups of %d", g), dst, want, c.tol.Elementwise)
		in := c.tensor(x, sh.n, sh.d)
		c.be.RMSNorm(in, in, c.be.Weight(w, 1, sh.d), eps, sh.group)
		c.expect(t, "rmsnorm in place", in, want, c.tol.Elementwise)
	}
}

func (c *checker) addCopy(t *testing.T) {
	n, d := 4, 40
	a, b := c.normals(n*d, 1), c.normals(n*(d+8), 1)
	dst := c.tensor(a, n, d)
	src := c.tensor(b, n, d+8).Columns(8, d)
	c.be.Add(dst, src)
	want := make([]float64, n*d)
	for r := range n {
		for i := range d {
			want[r*d+i] = float64(a[r*d+i]) + float64(b[r*(d+8)+8+i])
		}
	}
	c.expect(t, "add of a column view", dst, want, 1e-7)

	cp := c.poisoned(n, d)
	c.be.Copy(cp, src)
	for r := range n {
		for i := range d {
			want[r*d+i] = float64(b[r*(d+8)+8+i])
		}
	}
	c.expect(t, "copy of a column view", cp, want, 0)

	// Into a column view: the other columns keep their values.
	wide := c.tensor(b, n, d+8)
	c.be.Copy(wide.Columns(0, 8), c.tensor(a[:n*8], n, 8))
	wantWide := f64(b)
	for r := range n {
		for i := range 8 {
			wantWide[r*(d+8)+i] = float64(a[r*8+i])
		}
	}
	c.expect(t, "copy into a column view", wide, wantWide, 0)

	// Rows of a tensor (Slice) and a reshape.
	sl := c.tensor(a, n, d)
	c.be.Copy(sl.Slice(1, 3), c.tensor(b[:2*d], 2, d))
	wantSl := f64(a)
	for i := range 2 * d {
		wantSl[d+i] = float64(b[i])
	}
	c.expect(t, "copy into a slice of rows", sl.Reshape(n*4, d/4), wantSl, 0)
}

func (c *checker) gatherScatter(t *testing.T) {
	n, d := 6, 20
	src := c.normals(n*(d+3), 1)
	rows := []int32{4, -1, 0, 4, 5}
	dst := c.poisoned(len(rows), d)
	c.be.Gather(dst, c.tensor(src, n, d+3).Columns(3, d), rows)
	want := make([]float64, len(rows)*d)
	for i, r := range rows {
		for j := range d {
			if r >= 0 {
				want[i*d+j] = float64(src[int(r)*(d+3)+3+j])
			}
		}
	}
	c.expect(t, "gather (a −1 row gives zeros)", dst, want, 0)

	base := c.normals(n*d, 1)
	out := c.tensor(base, n, d)
	vals := c.normals(4*d, 1)
	srows := []int32{2, -1, 0, 5}
	c.be.Scatter(out, c.tensor(vals, 4, d), srows)
	wantS := f64(base)
	for i, r := range srows {
		if r >= 0 {
			copy(wantS[int(r)*d:(int(r)+1)*d], f64(vals[i*d:(i+1)*d]))
		}
	}
	c.expect(t, "scatter (a −1 row is skipped)", out, wantS, 0)

	acc := c.tensor(base, n, d)
	arows := []int32{1, 3, 1}
	aw := []float32{0.5, -2, 0.25}
	c.be.AxpyRows(acc, c.tensor(vals[:3*d], 3, d), arows, aw)
	wantA := f64(base)
	for i, r := range arows {
		for j := range d {
			wantA[int(r)*d+j] += float64(aw[i]) * float64(vals[i*d+j])
		}
	}
	c.expect(t, "axpy rows (a row twice)", acc, wantA, 1e-6)
}

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

func (c *checker) activations(t *testing.T) {
	n, d := 3, 50
	x, z := c.normals(n*d, 3), c.normals(n*d, 3)
	want := make([]float64, n*d)
	for _, tc := range []struct {
		name string
		op   func(a, b nn.Tensor)
		ref  func(a, b float64) float64
	}{
		{"silu", func(a, _ nn.Tensor) { c.be.SiLU(a) }, func(a, _ float64) float64 { return a * sigmoid(a) }},
		{"relu²", func(a, _ nn.Tensor) { c.be.ReLU2(a) }, func(a, _ float64) float64 { return math.Pow(max(a, 0), 2) }},
		{"mul silu", func(a, b nn.Tensor) { c.be.MulSiLU(a, b) }, func(a, b float64) float64 { return a * b * sigmoid(b) }},
		{"mul sigmoid", func(a, b nn.Tensor) { c.be.MulSigmoid(a, b) }, func(a, b float64) float64 { return a * sigmoid(b) }},
		{"swiglu", func(a, b nn.Tensor) { c.be.SwiGLU(a, b) }, func(a, b float64) float64 { return a * b * sigmoid(b) }},
	} {
		a := c.tensor(x, n, d)
		tc.op(a, c.tensor(z, n, d))
		for i := range want {
			want[i] = tc.ref(float64(x[i]), float64(z[i]))
		}
		c.expect(t, tc.name, a, want, c.tol.Elementwise)
	}
	g := c.normals(n, 2)
	a := c.tensor(x, n, d)
	c.be.MulSigmoidRows(a, c.tensor(g, n, 1))
	for i := range want {
		want[i] = float64(x[i]) * sigmoid(float64(g[i/d]))
	}
	c.expect(t, "mul sigmoid rows", a, want, c.tol.Elementwise)
}

func softplus(x float64) float64 {
	if x > 20 {
		return x
	}
	return math.Log1p(math.Exp(x))
}

func (c *checker) clampDelta(t *testing.T) {
	n, H := 4, 8
	dt, bias := c.normals(n*H, 4), c.normals(H, 2)
	const lo, hi = 0.05, 3.0
	x := c.tensor(dt, n, H)
	c.be.ClampDelta(x, c.be.Weight(bias, 1, H), lo, hi)
	got := c.download(x)
	for i, v := range got {
		h := i % H
		raw := softplus(float64(dt[i]) + float64(bias[h]))
		want := math.Min(math.Max(raw, lo), hi)
		if d := softplus(float64(v) + float64(bias[h])); math.Abs(d-want) > 1e-5*want {
			t.Fatalf("clamp delta: row %d head %d: Δ %v, want %v", i/H, h, d, want)
		}
		if raw >= lo && raw <= hi && v != dt[i] {
			t.Fatalf("clamp delta: row %d head %d: in-range dt %v changed to %v", i/H, h, dt[i], v)
		}
	}
}

func (c *checker) kdaGate(t *testing.T) {
	n, heads, dk := 3, 4, 8
	f, aLog, bias := c.normals(n*heads*dk, 4), c.normals(heads, 1.5), c.normals(heads*dk, 3)
	f[5], bias[5] = 30, 0  // softplus's linear branch
	f[6], bias[6] = -30, 0 // and its far tail
	x := c.tensor(f, n, heads*dk)
	c.be.KDAGate(x, c.be.Weight(aLog, 1, heads), c.be.Weight(bias, 1, heads*dk))
	want := make([]float64, len(f))
	for i, v := range f {
		col := i % (heads * dk)
		want[i] = -math.Exp(float64(aLog[col/dk])) * softplus(float64(v)+float64(bias[col]))
	}
	c.expect(t, "kda gate", x, want, c.tol.Elementwise)
}

func (c *checker) rope(t *testing.T) {
	n, heads, hd, rot := 3, 2, 16, 8 // partial rotary: 8 of 16 dimensions
	const theta = 10000.0
	rp, err := tensor.NewRope(rot, theta)
	if err != nil {
		t.Fatal(err)
	}
	x := c.normals(n*heads*hd, 1)
	pos := []int32{0, 7, 1000}
	xt := c.tensor(x, n*heads, hd)
	c.be.Rope(xt, rp, pos, heads)
	want := f64(x)
	for r := range n {
		for h := range heads {
			v := want[(r*heads+h)*hd : (r*heads+h+1)*hd]
			for i := range rot / 2 {
				// float32 angles, as transformers computes them
				inv := float32(1 / math.Pow(theta, float64(float32(2*i)/float32(rot))))
				ang := float64(float32(pos[r]) * inv)
				a, b := v[i], v[i+rot/2]
				v[i] = a*math.Cos(ang) - b*math.Sin(ang)
				v[i+rot/2] = b*math.Cos(ang) + a*math.Sin(ang)
			}
		}
	}
	c.expect(t, "rope", xt, want, 1e-5)
}

// attention checks the KV cache's Append and Attend against float64 math
// at head dimensions a GPU may treat apart: small, not a multiple of 8, and
// the real models' 128 and 256; with prompts long enough for a tiled
// kernel's several row and key tiles beside decode rows; then its paging
// (paging) and that its results do not depend on where its blocks lie
// (kvOrder).
func (c *checker) attention(t *testing.T) {
	for _, hd := range []int{16, 20, 128, 256} {
		t.Run(fmt.Sprintf("hd=%d", hd), func(t *testing.T) {
			c.attentionAt(t, hd)
			c.paging(t, hd)
		})
	}
	for _, hd := range []int{20, 128} {
		t.Run(fmt.Sprintf("block-order/hd=%d", hd), func(t *testing.T) { c.kvOrder(t, hd) })
	}
	t.Run("pool-growth", c.poolGrowth)
}

// kvRef is a KV cache under test beside a host copy of what it holds, the
// input of the float64 reference. Its caches have 4 query heads over 2
// key/value heads.
type kvRef struct {
	c          *checker
	kv         nn.KVCache
	hd         int
	keys, vals [][]float32 // per sequence, [position][kvHeads·hd]
}

const refHeads, refKVHeads = 4, 2

func (c *checker) newKVRef(capacity, hd int) *kvRef {
	return &kvRef{c: c, kv: c.be.NewKV(capacity, refKVHeads*hd), hd: hd,
		keys: make([][]float32, capacity), vals: make([][]float32, capacity)}
}

func (r *kvRef) width() int { return refKVHeads * r.hd }

// next returns each row's position: its sequence's next one after the
// rows before it.
func (r *kvRef) next(seqs []int32) []int32 {
	pos := make([]int32, len(seqs))
	after := map[int32]int32{}
	for i, q := range seqs {
		pos[i] = int32(r.kv.Len(int(q))) + after[q]
		after[q]++
	}
	return pos
}

// append appends random keys and values for rows of seqs at their next
// positions, and returns the positions.
func (r *kvRef) append(t *testing.T, seqs []int32) []int32 {
	t.Helper()
	n, kw := len(seqs), r.width()
	pos := r.next(seqs)
	k, v := r.c.normals(n*kw, 1), r.c.normals(n*kw, 1)
	if err := r.kv.Append(r.c.tensor(k, n, kw), r.c.tensor(v, n, kw), seqs, pos); err != nil {
		t.Fatal(err)
	}
	for i, s := range seqs {
		r.keys[s] = append(r.keys[s], k[i*kw:(i+1)*kw]...)
		r.vals[s] = append(r.vals[s], v[i*kw:(i+1)*kw]...)
	}
	for _, s := range seqs {
		if got, want := r.kv.Len(int(s)), len(r.keys[s])/kw; got != want {
			t.Fatalf("sequence %d holds %d positions after an append, want %d", s, got, want)
		}
	}
	return pos
}

func (r *kvRef) truncate(seq, n int) {
	r.kv.Truncate(seq, n)
	r.keys[seq], r.vals[seq] = r.keys[seq][:n*r.width()], r.vals[seq][:n*r.width()]
}

func (r *kvRef) scale() float32 { return float32(1 / math.Sqrt(float64(r.hd))) }

// attend runs Attend for rows (seqs[i] at position pos[i]) on random
// queries into a poisoned output and returns the output and the queries.
func (r *kvRef) attend(seqs, pos []int32) (nn.Tensor, []float32) {
	n, qw := len(seqs), refHeads*r.hd
	q := r.c.normals(n*qw, 1)
	o := r.c.poisoned(n, qw)
	r.kv.Attend(o, r.c.tensor(q, n, qw), seqs, pos, refHeads, refKVHeads, r.hd, r.scale())
	return o, q
}

// check runs attend and compares the output with the float64 causal
// softmax attention over the host copy, within the backend's MatMul bound
// of each row's largest value.
func (r *kvRef) check(t *testing.T, what string, seqs, pos []int32) {
	t.Helper()
	o, q := r.attend(seqs, pos)
	r.c.expect(t, fmt.Sprintf("%s: attention over %s", what, rowsString(seqs, pos)), o, r.want(q, seqs, pos), r.c.tol.MatMul)
}

// step appends rows of seqs and checks their attention.
func (r *kvRef) step(t *testing.T, what string, seqs []int32) {
	t.Helper()
	r.check(t, what, seqs, r.append(t, seqs))
}

// want is the float64 reference of Attend for queries q.
func (r *kvRef) want(q []float32, seqs, pos []int32) []float64 {
	hd, kw := r.hd, r.width()
	want := make([]float64, len(seqs)*refHeads*hd)
	for i, s := range seqs {
		for h := range refHeads {
			off := (h / (refHeads / refKVHeads)) * hd
			T := int(pos[i]) + 1
			sc := make([]float64, T)
			mx := math.Inf(-1)
			for p := range T {
				for j := range hd {
					sc[p] += float64(q[i*refHeads*hd+h*hd+j]) * float64(r.keys[s][p*kw+off+j])
				}
				sc[p] *= float64(r.scale())
				mx = math.Max(mx, sc[p])
			}
			sum := 0.0
			for p := range sc {
				sc[p] = math.Exp(sc[p] - mx)
				sum += sc[p]
			}
			out := want[i*refHeads*hd+h*hd : i*refHeads*hd+(h+1)*hd]
			for p := range T {
				for j := range hd {
					out[j] += sc[p] / sum * float64(r.vals[s][p*kw+off+j])
				}
			}
		}
	}
	return want
}

// rowsString summarises rows as runs "seq@first..last".
func rowsString(seqs, pos []int32) string {
	var b strings.Builder
	for i := 0; i < len(seqs); {
		j := i + 1
		for j < len(seqs) && seqs[j] == seqs[i] && pos[j] == pos[j-1]+1 {
			j++
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		if j-i == 1 {
			fmt.Fprintf(&b, "%d@%d", seqs[i], pos[i])
		} else {
			fmt.Fprintf(&b, "%d@%d..%d", seqs[i], pos[i], pos[j-1])
		}
		i = j
	}
	return b.String()
}

// positions is from, from+1, ..., from+n-1.
func positions(from, n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(from + i)
	}
	return p
}

// repeat is n rows of sequence seq.
func repeat(seq int32, n int) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = seq
	}
	return s
}

func (c *checker) attentionAt(t *testing.T, hd int) {
	r := c.newKVRef(3, hd)
	defer r.kv.Close()
	kv := r.kv
	r.step(t, "two prompts", []int32{0, 0, 0, 0, 2, 2})
	r.step(t, "decode", []int32{0, 1, 2})
	r.step(t, "mixed", []int32{1, 1, 1, 0})
	if kv.Len(0) != 6 || kv.Len(1) != 4 || kv.Len(2) != 3 {
		t.Fatalf("lengths %d %d %d, want 6 4 3", kv.Len(0), kv.Len(1), kv.Len(2))
	}
	r.truncate(1, 2)
	r.step(t, "after a truncation", []int32{1, 2})
	// A chunk of 9 prompt rows, one of 75, and a decode row in one pass.
	r.step(t, "prompt chunks", append(append(repeat(0, 9), repeat(2, 75)...), 1))
	// A row out of order is an error and appends nothing.
	n0 := kv.Len(0)
	one := c.normals(r.width(), 1)
	if err := kv.Append(c.tensor(one, 1, r.width()), c.tensor(one, 1, r.width()), []int32{0}, []int32{int32(n0 + 1)}); err == nil {
		t.Fatal("append past the next position accepted")
	}
	if kv.Len(0) != n0 {
		t.Fatalf("a refused append changed the length to %d", kv.Len(0))
	}
}

// paging checks what a paged cache's block tables must get right, each
// pass against the float64 reference (the MatMul bound) with its output
// poisoned: sequences decoded side by side across several block
// boundaries, so that their blocks interleave in the pool; truncation
// mid-block and at a block boundary, then appends again (a rejected
// speculation); a sequence evicted (Truncate 0) and its blocks taken by
// another, the pool not growing; and a context of 3,000 positions, read
// by a prompt's tile and by decode rows alone (a GPU splits those over
// its multiprocessors) and beside a short row.
func (c *checker) paging(t *testing.T, hd int) {
	r := c.newKVRef(4, hd)
	defer r.kv.Close()
	kv := r.kv
	blocks := func(seq int) int { return (kv.Len(seq) + nn.KVBlock - 1) / nn.KVBlock }
	r.append(t, repeat(0, 5))
	r.append(t, repeat(1, 3))
	for i := range 3*nn.KVBlock + 3 {
		seqs := []int32{0, 1, 2}
		if i%7 == 3 {
			seqs = []int32{2, 0, 0, 1} // two rows of one sequence in a decode pass
		}
		r.step(t, fmt.Sprintf("interleaved decode step %d", i), seqs)
	}
	used, held := kv.Blocks()
	if want := blocks(0) + blocks(1) + blocks(2); used != want || held < used {
		t.Fatalf("%d blocks used of %d held, want %d used", used, held, want)
	}

	// Speculative rejection: back to mid-block, and to a block boundary.
	r.truncate(0, 2*nn.KVBlock+5)
	r.truncate(1, 2*nn.KVBlock)
	r.truncate(2, nn.KVBlock-1)
	r.step(t, "after truncations", []int32{0, 0, 0, 1, 1, 2, 2, 2})
	r.step(t, "after truncations, decode", []int32{0, 1, 2})

	// Eviction: sequence 0's blocks go back to the pool and sequence 3's
	// prompt takes them.
	used, held = kv.Blocks()
	freed := blocks(0)
	r.truncate(0, 0)
	if u, h := kv.Blocks(); u != used-freed || h != held {
		t.Fatalf("after evicting %d blocks: %d used of %d held, want %d of %d", freed, u, h, used-freed, held)
	}
	r.step(t, "a prompt into freed blocks", repeat(3, freed*nn.KVBlock))
	if u, h := kv.Blocks(); u != used || h != held {
		t.Fatalf("a prompt of %d blocks after an eviction of as many: %d used of %d held, want %d of %d", freed, u, h, used, held)
	}
	r.step(t, "decode beside the reused blocks", []int32{3, 1, 2})

	// A long context, appended in chunks; rows read it without appending.
	const long = 3000
	for kv.Len(0) < long {
		r.append(t, repeat(0, min(700, long-kv.Len(0))))
	}
	r.check(t, "a prompt's rows at the end of a long context", repeat(0, 40), positions(long-40, 40))
	r.step(t, "one decode row over a long context", []int32{0})
	r.check(t, "a decode row mid-context", []int32{0}, []int32{1234})
	r.step(t, "a long and a short decode row", []int32{0, 1})
	r.truncate(0, long-7)
	r.step(t, "a long context truncated mid-block", []int32{0})
	r.truncate(0, 0)
	if u, _ := kv.Blocks(); u != blocks(1)+blocks(2)+blocks(3) {
		t.Fatalf("%d blocks used after evicting the long context, want %d", u, blocks(1)+blocks(2)+blocks(3))
	}
}

// poolGrowth checks a pool grown to more than 16 chunks of blocks (a
// device backend's first chunk address array) under one sequence of
// 17,000 positions, beside a short one: decode rows against the float64
// reference (the MatMul bound), and the pool's counts as the long
// sequence is evicted (the blocks stay held for reuse).
func (c *checker) poolGrowth(t *testing.T) {
	const hd, long = 16, 17 * nn.KVChunkBlocks * nn.KVBlock
	r := c.newKVRef(2, hd)
	defer r.kv.Close()
	kv := r.kv
	r.append(t, repeat(1, 20))
	for kv.Len(0) < long-nn.KVBlock/2 {
		r.append(t, repeat(0, min(4096, long-nn.KVBlock/2-kv.Len(0))))
	}
	r.step(t, "decode over a long context", []int32{0})
	r.step(t, "a long and a short decode row", []int32{0, 1})
	used, held := kv.Blocks()
	if want := (kv.Len(0)+nn.KVBlock-1)/nn.KVBlock + 2; used != want || held%nn.KVChunkBlocks != 0 || held < used {
		t.Fatalf("%d blocks used of %d held, want %d used of a whole number of %d-block chunks", used, held, want, nn.KVChunkBlocks)
	}
	r.truncate(0, 0)
	if u, h := kv.Blocks(); u != 2 || h != held {
		t.Fatalf("after the eviction %d blocks used of %d held, want 2 of %d", u, h, held)
	}
	r.step(t, "the short row after the eviction", []int32{1})
}

// kvOrder is a metamorphic check: two caches given the same positions,
// one sequence after another in the first, interleaved in reverse order
// after an evicted sequence's blocks in the second (so each sequence's
// blocks lie elsewhere in the pool), must attend identically, to the bit.
func (c *checker) kvOrder(t *testing.T, hd int) {
	const capacity = 3
	lens := [capacity]int{70, 37, 20}
	kw := refKVHeads * hd
	var keys, vals [capacity][]float32
	for q, n := range lens {
		keys[q], vals[q] = c.normals(n*kw, 1), c.normals(n*kw, 1)
	}
	// add appends positions [from, from+n) of sequence seq.
	add := func(kv nn.KVCache, seq, from, n int) {
		t.Helper()
		seqs, pos := repeat(int32(seq), n), positions(from, n)
		k, v := keys[seq][from*kw:(from+n)*kw], vals[seq][from*kw:(from+n)*kw]
		if err := kv.Append(c.tensor(k, n, kw), c.tensor(v, n, kw), seqs, pos); err != nil {
			t.Fatal(err)
		}
	}
	inOrder := c.be.NewKV(capacity, kw)
	defer inOrder.Close()
	for q, n := range lens {
		add(inOrder, q, 0, n)
	}
	shuffled := c.be.NewKV(capacity, kw)
	defer shuffled.Close()
	scratch := c.normals(50*kw, 1)
	if err := shuffled.Append(c.tensor(scratch, 50, kw), c.tensor(scratch, 50, kw), repeat(2, 50), positions(0, 50)); err != nil {
		t.Fatal(err)
	}
	shuffled.Truncate(2, 0)
	for done := false; !done; {
		done = true
		for q := capacity - 1; q >= 0; q-- {
			at := shuffled.Len(q)
			if n := min(lens[q]-at, 1+q); n > 0 {
				add(shuffled, q, at, n)
				done = false
			}
		}
	}
	for q, n := range lens {
		if inOrder.Len(q) != n || shuffled.Len(q) != n {
			t.Fatalf("sequence %d holds %d and %d positions, want %d", q, inOrder.Len(q), shuffled.Len(q), n)
		}
	}
	// Decode rows and a prompt's tile, in one call.
	seqs := append([]int32{0, 1, 2}, repeat(0, 30)...)
	pos := append([]int32{69, 36, 19}, positions(40, 30)...)
	n, qw := len(seqs), refHeads*hd
	qt := c.tensor(c.normals(n*qw, 1), n, qw)
	scale := float32(1 / math.Sqrt(float64(hd)))
	var out [2][]float32
	for i, kv := range []nn.KVCache{inOrder, shuffled} {
		o := c.poisoned(n, qw)
		kv.Attend(o, qt, seqs, pos, refHeads, refKVHeads, hd, scale)
		out[i] = c.download(o)
	}
	for i := range out[0] {
		if math.Float32bits(out[0][i]) != math.Float32bits(out[1][i]) || out[0][i] != out[0][i] {
			t.Fatalf("row %d (%s) column %d: %v with blocks in order, %v with them shuffled",
				i/qw, rowsString(seqs[i/qw:i/qw+1], pos[i/qw:i/qw+1]), i%qw, out[0][i], out[1][i])
		}
	}
}

// latent checks a latent cache: appends of several sequences in one call,
// reads of a sequence's positions, truncation, and a refused append.
func (c *checker) latent(t *testing.T) {
	const capacity, width = 3, 20
	lc := c.be.NewLatent(capacity, width)
	defer lc.Close()
	rows := make([][]float32, capacity) // host mirror
	add := func(seqs []int32) {
		t.Helper()
		pos := make([]int32, len(seqs))
		next := map[int32]int32{}
		for i, q := range seqs {
			pos[i] = int32(lc.Len(int(q))) + next[q]
			next[q]++
		}
		x := c.normals(len(seqs)*width, 1)
		if err := lc.Append(c.tensor(x, len(seqs), width), seqs, pos); err != nil {
			t.Fatal(err)
		}
		for i, q := range seqs {
			rows[q] = append(rows[q], x[i*width:(i+1)*width]...)
		}
	}
	read := func(seq int) {
		t.Helper()
		n := lc.Len(seq)
		if n != len(rows[seq])/width {
			t.Fatalf("sequence %d holds %d positions, want %d", seq, n, len(rows[seq])/width)
		}
		dst := c.poisoned(n, width)
		lc.Read(dst, seq, n)
		c.expect(t, fmt.Sprintf("latents of sequence %d", seq), dst, f64(rows[seq]), 0)
	}
	add([]int32{0, 0, 0, 2, 2})
	add([]int32{1, 0, 2})
	for range 70 { // past a device cache's first growth (64 positions)
		add([]int32{2, 1})
	}
	for q := range capacity {
		read(q)
	}
	lc.Truncate(2, 5)
	rows[2] = rows[2][:5*width]
	add([]int32{2})
	read(2)
	n0 := lc.Len(0)
	one := c.normals(width, 1)
	if err := lc.Append(c.tensor(one, 1, width), []int32{0}, []int32{int32(n0 + 1)}); err == nil {
		t.Fatal("append past the next position accepted")
	}
	if lc.Len(0) != n0 {
		t.Fatalf("a refused append changed the length to %d", lc.Len(0))
	}
	read(0)
}

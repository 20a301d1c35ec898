package nn

import (
	"math"

	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
	"github.com/replayssm/replayssm/tensor"
)

// CPU returns the backend that computes on this machine's cores in float32
// (package tensor's kernels, package replay's caches). It keeps weights
// where they are, in their format (a bfloat16 checkpoint's products read
// bfloat16 weights, widened as they are used), so placing a model on it
// copies nothing.
func CPU() Backend { return cpuBackend{} }

type cpuBackend struct{}

// cpuBuf is the CPU's storage: a Tensor's or Weight's S.
type cpuBuf struct{ f []float32 }

// cpuBF16 is a Weight's S for a bfloat16 matrix (Matrix).
type cpuBF16 struct{ w []uint16 }

func (cpuBackend) Name() string { return "cpu" }
func (cpuBackend) Err() error   { return nil }

func (cpuBackend) Weight(w []float32, rows, cols int) Weight {
	if len(w) == 0 {
		return Weight{}
	}
	return Weight{S: &cpuBuf{f: w[: rows*cols : rows*cols]}, Rows: rows, Cols: cols}
}

// Matrix keeps w as it is, float32 or bfloat16.
func (c cpuBackend) Matrix(w tensor.Weights, rows, cols int) Weight {
	if len(w.BF16) == 0 {
		return c.Weight(w.F32, rows, cols)
	}
	return Weight{S: &cpuBF16{w: w.BF16[: rows*cols : rows*cols]}, Rows: rows, Cols: cols}
}

func (cpuBackend) NewArena() Arena { return &cpuArena{} }

func (cpuBackend) Argmax(dst []int32, x Tensor) {
	for r := range x.Rows {
		v := row(x, r)
		dst[r] = -1
		if finite(v) {
			dst[r] = int32(tensor.Argmax(v))
		}
	}
}

func (cpuBackend) Sample(dst []int32, x Tensor, p []SampleParams) {
	for r := range x.Rows {
		v := row(x, r)
		dst[r] = -1
		if finite(v) {
			dst[r] = int32(SampleRow(v, p[r]))
		}
	}
}

// finite reports whether v holds no NaN and no infinity.
func finite(v []float32) bool {
	for _, f := range v {
		if f-f != 0 {
			return false
		}
	}
	return true
}

// host is t's values when t is contiguous (nn only passes such tensors
// where this is called).
func host(t Tensor) []float32 {
	if t.Rows == 0 {
		return nil
	}
	end := t.Off + (t.Rows-1)*t.Stride + t.Cols
	return t.S.(*cpuBuf).f[t.Off:end:end]
}

// row is row r of t.
func row(t Tensor, r int) []float32 {
	o := t.Off + r*t.Stride
	return t.S.(*cpuBuf).f[o : o+t.Cols : o+t.Cols]
}

func weights(w Weight) []float32 {
	if !w.Present() {
		return nil
	}
	return w.S.(*cpuBuf).f
}

// matrix is a product's weights in their format.
func matrix(w Weight) tensor.Weights {
	if b, ok := w.S.(*cpuBF16); ok {
		return tensor.Weights{BF16: b.w}
	}
	return tensor.Weights{F32: weights(w)}
}

func (cpuBackend) Embed(dst Tensor, table Weight, tokens []int32) {
	tab := matrix(table)
	for i, t := range tokens {
		lo := int(t) * table.Cols
		if tab.BF16 != nil {
			tensor.WidenBF16(row(dst, i), tab.BF16[lo:lo+table.Cols])
			continue
		}
		copy(row(dst, i), tab.F32[lo:lo+table.Cols])
	}
}

func (cpuBackend) MatMul(y, x Tensor, w, bias Weight) {
	if !x.Contiguous() {
		c := Tensor{S: &cpuBuf{f: make([]float32, x.Rows*x.Cols)}, Rows: x.Rows, Cols: x.Cols, Stride: x.Cols}
		cpuBackend{}.Copy(c, x)
		x = c
	}
	out := y
	if !y.Contiguous() {
		out = Tensor{S: &cpuBuf{f: make([]float32, y.Rows*y.Cols)}, Rows: y.Rows, Cols: y.Cols, Stride: y.Cols}
	}
	tensor.Product(host(out), host(x), matrix(w), x.Rows, w.Cols, w.Rows)
	if b := weights(bias); b != nil {
		for r := range out.Rows {
			tensor.Add(row(out, r), b)
		}
	}
	if out != y {
		cpuBackend{}.Copy(y, out)
	}
}

func (cpuBackend) RMSNorm(dst, x Tensor, w Weight, eps float32, group int) {
	wf := weights(w)
	g := group
	if g <= 0 {
		g = x.Cols
	}
	for r := range x.Rows {
		d, s := row(dst, r), row(x, r)
		for o := 0; o < x.Cols; o += g {
			tensor.RMSNorm(d[o:o+g], s[o:o+g], wf[o:o+g], eps)
		}
	}
}

func (cpuBackend) Add(dst, src Tensor) {
	if dst.Contiguous() && src.Contiguous() {
		tensor.Add(host(dst), host(src))
		return
	}
	for r := range dst.Rows {
		tensor.Add(row(dst, r), row(src, r))
	}
}

func (cpuBackend) Copy(dst, src Tensor) {
	if dst.Contiguous() && src.Contiguous() {
		copy(host(dst), host(src))
		return
	}
	for r := range dst.Rows {
		copy(row(dst, r), row(src, r))
	}
}

func (cpuBackend) Gather(dst, src Tensor, rows []int32) {
	for i, r := range rows {
		if r < 0 {
			clear(row(dst, i))
		} else {
			copy(row(dst, i), row(src, int(r)))
		}
	}
}

func (cpuBackend) Scatter(dst, src Tensor, rows []int32) {
	for i, r := range rows {
		if r >= 0 {
			copy(row(dst, int(r)), row(src, i))
		}
	}
}

func (cpuBackend) AxpyRows(dst, src Tensor, rows []int32, w []float32) {
	for i, r := range rows {
		tensor.Axpy(row(dst, int(r)), w[i], row(src, i))
	}
}

func (cpuBackend) SiLU(x Tensor) {
	for r := range x.Rows {
		tensor.SiLUInPlace(row(x, r))
	}
}

func (cpuBackend) MulSiLU(dst, z Tensor) {
	for r := range dst.Rows {
		d, g := row(dst, r), row(z, r)
		for i := range d {
			d[i] *= tensor.SiLU(g[i])
		}
	}
}

func (cpuBackend) MulSigmoid(dst, g Tensor) {
	for r := range dst.Rows {
		d, s := row(dst, r), row(g, r)
		for i := range d {
			d[i] *= tensor.Sigmoid(s[i])
		}
	}
}

func (cpuBackend) MulSigmoidRows(dst, g Tensor) {
	for r := range dst.Rows {
		s := tensor.Sigmoid(row(g, r)[0])
		d := row(dst, r)
		for i := range d {
			d[i] *= s
		}
	}
}

func (cpuBackend) SwiGLU(up, gate Tensor) {
	for r := range up.Rows {
		u := row(up, r)
		tensor.SwiGLU(u, row(gate, r), u)
	}
}

func (cpuBackend) ReLU2(x Tensor) {
	for r := range x.Rows {
		tensor.ReLU2InPlace(row(x, r))
	}
}

func (cpuBackend) ClampDelta(dt Tensor, dtBias Weight, lo, hi float64) {
	if lo <= 0 && math.IsInf(hi, 1) {
		return
	}
	b := weights(dtBias)
	for r := range dt.Rows {
		clampDelta(row(dt, r), b, lo, hi)
	}
}

func (cpuBackend) Rope(x Tensor, rp *tensor.Rope, pos []int32, heads int) {
	for r, p := range pos {
		for h := range heads {
			rp.Apply(row(x, r*heads+h), int(p))
		}
	}
}

func (cpuBackend) KDAGate(f Tensor, aLog, dtBias Weight) {
	a, b := weights(aLog), weights(dtBias)
	for r := range f.Rows {
		kdaGate(row(f, r), a, b)
	}
}

// kdaGate turns one row of forget-gate logits f [heads·dk] into log-decays
// in place: g = −exp(aLog[h])·softplus(f + dtBias), in float64.
func kdaGate(f, aLog, dtBias []float32) {
	dk := len(f) / len(aLog)
	for h, al := range aLog {
		A := math.Exp(float64(al))
		for i := h * dk; i < (h+1)*dk; i++ {
			f[i] = float32(-A * tensor.Softplus(float64(f[i])+float64(dtBias[i])))
		}
	}
}

func (cpuBackend) Upload(dst Tensor, src []float32) { copy(host(dst), src) }

func (cpuBackend) Download(dst []float32, src Tensor) {
	if src.Contiguous() {
		copy(dst, host(src))
		return
	}
	for r := range src.Rows {
		copy(dst[r*src.Cols:(r+1)*src.Cols], row(src, r))
	}
}

// cpuArena is a State's scratch on the CPU: a stack of values in one
// buffer sized by the largest pass so far, so that steady-state decode
// allocates nothing. A tensor that does not fit is served from the heap,
// and the buffer grows to the pass's high-water mark at the next Reset.
type cpuArena struct {
	buf  *cpuBuf
	used int // the stack's top, in values
	peak int // its high-water mark this pass
}

func (a *cpuArena) Alloc(rows, cols int) Tensor {
	n := rows * cols
	at := a.used
	a.used += (n + 15) &^ 15 // 64-byte aligned
	a.peak = max(a.peak, a.used)
	if a.buf == nil || at+n > len(a.buf.f) {
		return Tensor{S: &cpuBuf{f: make([]float32, n)}, Rows: rows, Cols: cols, Stride: cols}
	}
	return Tensor{S: a.buf, Off: at, Rows: rows, Cols: cols, Stride: cols}
}

func (a *cpuArena) Zeros(rows, cols int) Tensor {
	t := a.Alloc(rows, cols)
	clear(host(t))
	return t
}

func (a *cpuArena) Mark() int       { return a.used }
func (a *cpuArena) Rewind(mark int) { a.used = min(a.used, mark) }
func (a *cpuArena) Close()          { a.buf = nil }

func (a *cpuArena) Reset() {
	if a.buf == nil || a.peak > len(a.buf.f) {
		a.buf = &cpuBuf{f: make([]float32, a.peak+a.peak/4)}
	}
	a.used, a.peak = 0, 0
}

// cpuLatent keeps each sequence's latents, [position][width].
type cpuLatent struct {
	x     [][]float32
	width int
}

func (cpuBackend) NewLatent(capacity, width int) LatentCache {
	return &cpuLatent{x: make([][]float32, capacity), width: width}
}

func (c *cpuLatent) Len(seq int) int { return len(c.x[seq]) / c.width }

func (c *cpuLatent) Truncate(seq, n int) {
	if n *= c.width; len(c.x[seq]) > n {
		c.x[seq] = c.x[seq][:n]
	}
}

func (c *cpuLatent) Append(x Tensor, seqs, pos []int32) error {
	if _, err := CheckAppend(seqs, pos, c.Len); err != nil { // every row checked before any is appended
		return err
	}
	for i, q := range seqs {
		c.x[q] = append(c.x[q], row(x, i)...)
	}
	return nil
}

func (c *cpuLatent) Read(dst Tensor, seq, n int) {
	src := c.x[seq]
	for t := range n {
		copy(row(dst, t), src[t*c.width:(t+1)*c.width])
	}
}

func (c *cpuLatent) Close() {}

// cpuSSM is a replay CPU cache over the CPU's tensors: the contract's
// bookkeeping methods come from the cache, the batch methods take the
// tensors' host slices.
type cpuSSM[In, TIn any] struct {
	replay.Cache[[]float32, In]
	in func(TIn) In
}

func (c cpuSSM[In, TIn]) Conv(slots []replay.Slot, in, out Tensor) error {
	return c.Cache.Conv(slots, host(in), host(out))
}

func (c cpuSSM[In, TIn]) ConvVerify(slots []replay.Slot, T int, in, out Tensor) error {
	return c.Cache.ConvVerify(slots, T, host(in), host(out))
}

func (c cpuSSM[In, TIn]) Step(slots []replay.Slot, in TIn, y Tensor) error {
	return c.Cache.Step(slots, c.in(in), host(y))
}

func (c cpuSSM[In, TIn]) Verify(slots []replay.Slot, T int, counts []int, in TIn, y Tensor) error {
	return c.Cache.Verify(slots, T, counts, c.in(in), host(y))
}

func (c cpuSSM[In, TIn]) ConvPrefill(slots []replay.Slot, T int, counts []int, in, out Tensor) error {
	return c.Cache.ConvPrefill(slots, T, counts, host(in), host(out))
}

func (c cpuSSM[In, TIn]) Prefill(slots []replay.Slot, T int, counts []int, in TIn, y Tensor) error {
	return c.Cache.Prefill(slots, T, counts, c.in(in), host(y))
}

func (cpuBackend) NewMamba2(shape ssm.Mamba2Shape, prm replay.Mamba2Params, conv replay.ConvWeights, capacity int, opt replay.Options) (Mamba2Cache, error) {
	c, err := replay.NewMamba2(shape, prm, conv, capacity, opt)
	if err != nil {
		return nil, err
	}
	return cpuSSM[replay.Mamba2Input, replay.Mamba2Batch[Tensor]]{Cache: c, in: func(b replay.Mamba2Batch[Tensor]) replay.Mamba2Input {
		return replay.Mamba2Input{X: host(b.X), B: host(b.B), C: host(b.C), Dt: host(b.Dt), DtMin: b.DtMin}
	}}, nil
}

func (cpuBackend) NewGDN(shape ssm.GDNShape, prm replay.GDNParams, conv replay.ConvWeights, capacity int, opt replay.Options) (GDNCache, error) {
	c, err := replay.NewGDN(shape, prm, conv, capacity, opt)
	if err != nil {
		return nil, err
	}
	return cpuSSM[replay.GDNInput, replay.GDNBatch[Tensor]]{Cache: c, in: func(b replay.GDNBatch[Tensor]) replay.GDNInput {
		return replay.GDNInput{Q: host(b.Q), K: host(b.K), V: host(b.V), A: host(b.A), B: host(b.B)}
	}}, nil
}

func (cpuBackend) NewKDA(shape ssm.GDNShape, conv replay.ConvWeights, capacity int, opt replay.Options) (KDACache, error) {
	c, err := replay.NewKDA(shape, conv, capacity, opt)
	if err != nil {
		return nil, err
	}
	return cpuSSM[replay.KDAInput, replay.KDABatch[Tensor]]{Cache: c, in: func(b replay.KDABatch[Tensor]) replay.KDAInput {
		return replay.KDAInput{Q: host(b.Q), K: host(b.K), V: host(b.V), G: host(b.G), B: host(b.B)}
	}}, nil
}

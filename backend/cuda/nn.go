package cuda

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/replayssm/replayssm/model/nn"
	"github.com/replayssm/replayssm/numeric"
	"github.com/replayssm/replayssm/replay"
	"github.com/replayssm/replayssm/ssm"
	"github.com/replayssm/replayssm/tensor"
)

// NNBackend runs package nn's blocks on the GPU: float32 activations,
// product weights in bfloat16 (or float32, NNOptions.Weights), products by
// cuBLAS or, for one row of bfloat16 weights, by a matrix-vector kernel of
// kernels/nn.cu, the other operations by that file's kernels, the SSM
// layers by this package's ReplaySSM caches, all on one deferred stream
// (a repeated pass runs as a CUDA graph; NNOptions.Eager). Host row lists
// go to the device through a ring of index memory in stream order.
// It is not safe for concurrent use.
type NNBackend struct {
	ctx  context.Context
	d    *Device
	s    *Stream
	blas *BLAS
	fn   nnKernels
	args Args
	opt  NNOptions
	err  error

	gemv *Function // the one-row bf16 product kernel; nil (only in the benchmark's baseline): cuBLAS

	ring    Buffer            // int32 row lists and float32 row weights, in stream order
	ringOff int               // next free byte
	lists   map[string]Buffer // the ring's lists by their contents

	weights     []Buffer
	weightBytes int64
	xb          Buffer // activations rounded to bfloat16 for cuBLAS
	ids         Buffer // Argmax's and Sample's results
	sampler     rowSampler
	clock       opClock
}

// NNOptions configure an NNBackend.
type NNOptions struct {
	// Weights is the format of product weights (nn.Backend.Matrix):
	// BFloat16 (the zero value picks it) or Float32. Norms, biases and
	// routers stay float32.
	Weights DataType
	// Eager queues every operation at once. By default the backend's
	// stream is deferred (Stream.Defer): a pass is recorded and played
	// when the host waits for it, a repeated pass (a decode step of the
	// same batch) as one CUDA graph.
	Eager bool
}

type nnKernels struct {
	embed, embedBF16, toBF16, gemvBF16, argmax, rmsnorm, rows, bias, gather, scatter, axpyRows, unary, binary,
	mulSigmoidRows, clampDelta, rope, kvAppend, attend, attendCombine, latentMove, kdaGate *Function
	attendTiles [len(attendKernels)]*Function
}

// nnRingBytes bounds the row lists one pass can hold before the ring wraps
// (4 MiB: a million rows).
const nnRingBytes = 4 << 20

// NewNNBackend builds the backend on d, with its own stream and cuBLAS
// handle; Close releases them and the weights placed on it.
func NewNNBackend(ctx context.Context, d *Device, opt NNOptions) (*NNBackend, error) {
	switch opt.Weights {
	case Float32, BFloat16:
	default:
		return nil, fmt.Errorf("cuda: product weights in %v are not supported (want bfloat16 or float32)", opt.Weights)
	}
	b := &NNBackend{ctx: ctx, d: d, opt: opt}
	var err error
	if b.s, err = d.NewStream(); err != nil {
		return nil, err
	}
	if b.blas, err = d.NewBLAS(); err != nil {
		b.Close()
		return nil, err
	}
	if err = b.blas.SetStream(b.s); err != nil {
		b.Close()
		return nil, err
	}
	if b.ring, err = d.Alloc(nnRingBytes); err != nil {
		b.Close()
		return nil, err
	}
	for _, k := range []struct {
		f    **Function
		name string
	}{
		{&b.fn.embed, "nn_embed"}, {&b.fn.embedBF16, "nn_embed_bf16"}, {&b.fn.toBF16, "nn_to_bf16"},
		{&b.fn.gemvBF16, "nn_gemv_bf16"}, {&b.fn.argmax, "nn_argmax"}, {&b.fn.rmsnorm, "nn_rmsnorm"}, {&b.fn.rows, "nn_rows"}, {&b.fn.bias, "nn_bias"},
		{&b.fn.gather, "nn_gather"}, {&b.fn.scatter, "nn_scatter"}, {&b.fn.axpyRows, "nn_axpy_rows"},
		{&b.fn.unary, "nn_unary"}, {&b.fn.binary, "nn_binary"}, {&b.fn.mulSigmoidRows, "nn_mul_sigmoid_rows"},
		{&b.fn.clampDelta, "nn_clamp_delta"}, {&b.fn.rope, "nn_rope"}, {&b.fn.kvAppend, "nn_kv_append"},
		{&b.fn.attend, "nn_attend"}, {&b.fn.attendCombine, "nn_attend_combine"}, {&b.fn.latentMove, "nn_latent_move"},
		{&b.fn.kdaGate, "nn_kda_gate"},
	} {
		if *k.f, err = d.Kernel(ctx, "nn.cu", k.name); err != nil {
			b.Close()
			return nil, err
		}
	}
	if b.fn.attendTiles, err = loadAttendKernels(func(name string) (*Function, error) { return d.Kernel(ctx, "nn.cu", name) }); err != nil {
		b.Close()
		return nil, err
	}
	if b.sampler, err = loadSampler(ctx, d); err != nil {
		b.Close()
		return nil, err
	}
	b.gemv = b.fn.gemvBF16
	if err = b.s.Defer(!opt.Eager); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Close waits for the stream and frees the backend's memory.
func (b *NNBackend) Close() error {
	var errs []error
	if b.s != nil {
		errs = append(errs, b.s.Synchronize())
	}
	for _, w := range b.weights {
		errs = append(errs, b.d.Free(w))
	}
	b.weights = nil
	for _, buf := range []*Buffer{&b.xb, &b.ids} {
		if buf.ptr != 0 {
			errs = append(errs, b.d.Free(*buf))
			*buf = Buffer{}
		}
	}
	errs = append(errs, b.clock.close())
	if b.ring.ptr != 0 {
		errs = append(errs, b.d.Free(b.ring))
		b.ring = Buffer{}
	}
	if b.blas != nil {
		errs = append(errs, b.blas.Close())
	}
	if b.s != nil {
		errs = append(errs, b.s.Close())
	}
	return errors.Join(errs...)
}

// Name names the device.
func (b *NNBackend) Name() string { return "cuda " + b.d.Name() }

// Err returns the first failure.
func (b *NNBackend) Err() error { return b.err }

// Device is the GPU the backend runs on.
func (b *NNBackend) Device() *Device { return b.d }

// Stream is the stream every operation is queued on.
func (b *NNBackend) Stream() *Stream { return b.s }

func (b *NNBackend) fail(err error) {
	if b.err == nil && err != nil {
		b.err = err
	}
}

// gpuBuf is the device storage behind a Tensor or Weight; a Weight's may
// hold bfloat16 (Matrix).
type gpuBuf struct {
	buf   Buffer
	dtype DataType
}

// dev is the device memory of t from its first element (its last row
// ends at its last column).
func dev(t nn.Tensor) Buffer {
	g := t.S.(*gpuBuf)
	n := 0
	if t.Rows > 0 {
		n = (t.Rows-1)*t.Stride + t.Cols
	}
	return Buffer{ptr: g.buf.ptr + uint64(4*t.Off), bytes: 4 * n}
}

func wdev(w nn.Weight) Buffer { return w.S.(*gpuBuf).buf }

func wtype(w nn.Weight) DataType { return w.S.(*gpuBuf).dtype }

// Weight copies w to the device in float32.
func (b *NNBackend) Weight(w []float32, rows, cols int) nn.Weight {
	return b.place(tensor.Weights{F32: w}, rows, cols, Float32)
}

// Matrix copies w to the device in the product format (NNOptions.Weights):
// weights already in it go as they are, float32 is rounded to bfloat16,
// bfloat16 widened to float32.
func (b *NNBackend) Matrix(w tensor.Weights, rows, cols int) nn.Weight {
	return b.place(w, rows, cols, b.weightType())
}

func (b *NNBackend) weightType() DataType {
	if b.opt.Weights == Float32 {
		return Float32
	}
	return BFloat16
}

// WeightBytes is the device memory the placed weights take.
func (b *NNBackend) WeightBytes() int64 { return b.weightBytes }

// placeChunk bounds the values converted on the host per copy (64 MiB of
// float32), so that placing a model needs no second host copy of it.
const placeChunk = 16 << 20

func (b *NNBackend) place(w tensor.Weights, rows, cols int, t DataType) nn.Weight {
	if w.Len() == 0 || b.err != nil {
		return nn.Weight{}
	}
	n := rows * cols
	buf, err := b.d.Alloc(t.Size() * n)
	if err != nil {
		b.fail(fmt.Errorf("weights of %d×%d: %w", rows, cols, err))
		return nn.Weight{}
	}
	b.weights = append(b.weights, buf)
	b.weightBytes += int64(buf.bytes)
	switch {
	case t == Float32 && w.BF16 == nil:
		b.fail(b.s.CopyToDevice(buf, f32Bytes(w.F32[:n])))
	case t == BFloat16 && w.BF16 != nil:
		b.fail(b.s.CopyToDevice(buf, u16Bytes(w.BF16[:n])))
	case t == Float32: // bfloat16 weights on a float32 backend
		h := make([]float32, min(n, placeChunk))
		for lo := 0; lo < n && b.err == nil; lo += placeChunk {
			hi := min(n, lo+placeChunk)
			tensor.WidenBF16(h[:hi-lo], w.BF16[lo:hi])
			dst := Buffer{ptr: buf.ptr + uint64(4*lo), bytes: 4 * (hi - lo)}
			b.fail(b.s.CopyToDevice(dst, f32Bytes(h[:hi-lo])))
		}
	default: // float32 weights rounded to bfloat16
		h := make([]uint16, min(n, placeChunk))
		for lo := 0; lo < n && b.err == nil; lo += placeChunk {
			hi := min(n, lo+placeChunk)
			encodeBF16(h[:hi-lo], w.F32[lo:hi])
			dst := Buffer{ptr: buf.ptr + uint64(2*lo), bytes: 2 * (hi - lo)}
			b.fail(b.s.CopyToDevice(dst, u16Bytes(h[:hi-lo])))
		}
	}
	return nn.Weight{S: &gpuBuf{buf: buf, dtype: t}, Rows: rows, Cols: cols}
}

// u16Bytes views v's memory as bytes.
func u16Bytes(v []uint16) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 2*len(v)) }

// encodeBF16 rounds src into dst on every core.
func encodeBF16(dst []uint16, src []float32) {
	const part = 1 << 18
	var wg sync.WaitGroup
	for lo := 0; lo < len(src); lo += part {
		hi := min(len(src), lo+part)
		wg.Go(func() { numeric.EncodeBF16(dst[lo:hi], src[lo:hi]) })
	}
	wg.Wait()
}

// list puts a host row list (or row weights) in the ring and returns its
// device copy, queued on the stream. A list with the same contents as one
// already uploaded since the arena's Reset (a pass's positions and
// sequences, read by every layer) is not uploaded again. The contents, not
// the host address, decide: an address the garbage collector reuses would
// otherwise change a pass's uploads from one decode step to the next, and
// with them the graph the step is replayed from.
func (b *NNBackend) list(p unsafe.Pointer, n int) Buffer {
	bytes := 4 * n
	src := unsafe.Slice((*byte)(p), bytes)
	if dev, ok := b.lists[string(src)]; ok {
		return dev
	}
	if bytes > nnRingBytes {
		b.fail(fmt.Errorf("a row list of %d entries exceeds the index ring", n))
		return b.ring
	}
	if b.ringOff+bytes > nnRingBytes {
		b.ringOff = 0 // later copies land after the earlier kernels read (one stream)
		clear(b.lists)
	}
	dst := Buffer{ptr: b.ring.ptr + uint64(b.ringOff), bytes: bytes}
	b.ringOff += (bytes + 255) &^ 255
	if n > 0 {
		b.fail(b.s.Upload(dst, src))
	}
	if b.lists == nil {
		b.lists = make(map[string]Buffer)
	}
	b.lists[string(src)] = dst
	return dst
}

// resetLists starts a new pass of the ring.
func (b *NNBackend) resetLists() {
	b.ringOff = 0
	clear(b.lists)
}

func (b *NNBackend) i32(v []int32) Buffer {
	if len(v) == 0 {
		return b.ring
	}
	return b.list(unsafe.Pointer(&v[0]), len(v))
}

func (b *NNBackend) f32(v []float32) Buffer {
	if len(v) == 0 {
		return b.ring
	}
	return b.list(unsafe.Pointer(&v[0]), len(v))
}

// tensorArg appends t to the arguments as its kernels take a matrix: the
// address of its first element and its row stride in elements.
func (b *NNBackend) tensorArg(t nn.Tensor) {
	b.args.Ptr(dev(t))
	b.args.I32(int32(t.Stride))
}

// launch queues fn over grid blocks of threads with the arguments a holds.
func (b *NNBackend) launch(fn *Function, grid [3]uint32, threads uint32) {
	if b.err != nil {
		return
	}
	if grid[0] == 0 || grid[1] == 0 || grid[2] == 0 {
		return
	}
	b.fail(b.d.Launch(fn, grid, [3]uint32{threads, 1, 1}, 0, b.s, &b.args))
}

// launchShared is launch with smem bytes of dynamic shared memory.
func (b *NNBackend) launchShared(fn *Function, grid [3]uint32, threads uint32, smem int) {
	if b.err != nil || grid[0] == 0 || grid[1] == 0 || grid[2] == 0 {
		return
	}
	b.fail(b.d.Launch(fn, grid, [3]uint32{threads, 1, 1}, uint32(smem), b.s, &b.args))
}

// rowThreads is a block size for work over the columns of a row.
func rowThreads(cols int) uint32 {
	switch {
	case cols <= 64:
		return 64
	case cols <= 128:
		return 128
	default:
		return 256
	}
}

func (b *NNBackend) Embed(dst nn.Tensor, table nn.Weight, tokens []int32) {
	defer b.span(opEmbed)()
	a := &b.args
	a.Reset()
	b.tensorArg(dst)
	a.Ptr(wdev(table))
	a.I32(int32(table.Cols))
	a.Ptr(b.i32(tokens))
	fn := b.fn.embed
	if wtype(table) == BFloat16 {
		fn = b.fn.embedBF16
	}
	b.launch(fn, [3]uint32{uint32(len(tokens)), 1, 1}, rowThreads(dst.Cols))
}

// gemvWarps is the matrix-vector kernel's warps per block, each computing
// GEMV_ROWS (4) outputs, or a slice of them (gemvSplit).
const gemvWarps = 8

// gemvSplit is how many warps share each group of 4 outputs of an N-output
// matrix-vector product on a GPU of sms multiprocessors: the fewest (a
// power of two up to gemvWarps) that put 32 warps an SM in flight to hide
// the weights' loads behind. On an H100 with one warp a group, the
// products' weights streamed at 59% of the copy bandwidth with 6 warps an
// SM (Nemotron-3-Nano's MLP down, 3,136 outputs), 71% with 24 (MLP up),
// 83% with 33 (in_proj) and 97% with 248 (lm_head).
func gemvSplit(n, sms int) int {
	split := 1
	for split < gemvWarps && (n+3)/4*split < 32*sms {
		split *= 2
	}
	return split
}

func (b *NNBackend) MatMul(y, x nn.Tensor, w, bias nn.Weight) {
	if b.err != nil || x.Rows == 0 {
		return
	}
	switch {
	case wtype(w) == Float32:
		end := b.span(opGemm)
		b.fail(b.blas.Gemm(&Gemm{M: x.Rows, N: w.Rows, K: w.Cols, A: dev(x), B: wdev(w), TransB: true,
			LDA: x.Stride, LDC: y.Stride, C: dev(y), AB: Float32, CType: Float32, Alpha: 1}))
		end()
	case x.Rows == 1 && b.gemv != nil && w.Cols%8 == 0:
		end := b.span(opGemv)
		a := &b.args
		a.Reset()
		a.Ptr(dev(y))
		a.I32(int32(y.Stride))
		a.Ptr(dev(x))
		a.I32(int32(x.Stride))
		a.Ptr(wdev(w))
		a.I32(int32(w.Cols))
		a.I32(int32(w.Rows))
		a.I32(1) // rows
		split := gemvSplit(w.Rows, b.d.Multiprocessors())
		a.I32(int32(split))
		per := 4 * gemvWarps / split
		b.launch(b.gemv, [3]uint32{uint32((w.Rows + per - 1) / per), 1, 1}, 32*gemvWarps)
		end()
	default:
		end := b.span(opGemm)
		xb := b.scratch(&b.xb, 2*x.Rows*x.Cols)
		a := &b.args
		a.Reset()
		a.Ptr(xb)
		a.Ptr(dev(x))
		a.I32(int32(x.Stride))
		a.I32(int32(x.Cols))
		b.launch(b.fn.toBF16, [3]uint32{uint32(x.Rows), 1, 1}, rowThreads(x.Cols))
		if b.err == nil {
			b.fail(b.blas.Gemm(&Gemm{M: x.Rows, N: w.Rows, K: w.Cols, A: xb, B: wdev(w), TransB: true,
				LDC: y.Stride, C: dev(y), AB: BFloat16, CType: Float32, Alpha: 1}))
		}
		end()
	}
	if bias.Present() {
		defer b.span(opBias)()
		a := &b.args
		a.Reset()
		a.Ptr(dev(y))
		a.I32(int32(y.Stride))
		a.Ptr(wdev(bias))
		a.I32(int32(y.Cols))
		b.launch(b.fn.bias, [3]uint32{uint32(y.Rows), 1, 1}, rowThreads(y.Cols))
	}
}

func (b *NNBackend) RMSNorm(dst, x nn.Tensor, w nn.Weight, eps float32, group int) {
	defer b.span(opRMSNorm)()
	if group <= 0 {
		group = x.Cols
	}
	a := &b.args
	a.Reset()
	b.tensorArg(dst)
	b.tensorArg(x)
	a.Ptr(wdev(w))
	a.I32(int32(group))
	a.F32(eps)
	b.launch(b.fn.rmsnorm, [3]uint32{uint32(x.Rows), uint32(x.Cols / group), 1}, rowThreads(group))
}

func (b *NNBackend) rowsOp(dst, src nn.Tensor, op int32) {
	defer b.span(opRows)()
	a := &b.args
	a.Reset()
	b.tensorArg(dst)
	b.tensorArg(src)
	a.I32(int32(dst.Cols))
	a.I32(op)
	b.launch(b.fn.rows, [3]uint32{uint32(dst.Rows), 1, 1}, rowThreads(dst.Cols))
}

func (b *NNBackend) Add(dst, src nn.Tensor)  { b.rowsOp(dst, src, 1) }
func (b *NNBackend) Copy(dst, src nn.Tensor) { b.rowsOp(dst, src, 0) }

func (b *NNBackend) moveRows(fn *Function, dst, src nn.Tensor, rows []int32, cols int) {
	defer b.span(opMoveRows)()
	a := &b.args
	a.Reset()
	b.tensorArg(dst)
	b.tensorArg(src)
	a.Ptr(b.i32(rows))
	a.I32(int32(cols))
	b.launch(fn, [3]uint32{uint32(len(rows)), 1, 1}, rowThreads(cols))
}

func (b *NNBackend) Gather(dst, src nn.Tensor, rows []int32) {
	b.moveRows(b.fn.gather, dst, src, rows, dst.Cols)
}

func (b *NNBackend) Scatter(dst, src nn.Tensor, rows []int32) {
	b.moveRows(b.fn.scatter, dst, src, rows, src.Cols)
}

func (b *NNBackend) AxpyRows(dst, src nn.Tensor, rows []int32, w []float32) {
	defer b.span(opMoveRows)()
	if len(rows) == 0 {
		return
	}
	a := &b.args
	a.Reset()
	b.tensorArg(dst)
	b.tensorArg(src)
	a.Ptr(b.i32(rows))
	a.Ptr(b.f32(w))
	a.I32(int32(len(rows)))
	a.I32(int32(src.Cols))
	b.launch(b.fn.axpyRows, [3]uint32{uint32((src.Cols + 127) / 128), 1, 1}, 128)
}

func (b *NNBackend) unary(x nn.Tensor, op int32) {
	defer b.span(opElementwis)()
	a := &b.args
	a.Reset()
	b.tensorArg(x)
	a.I32(int32(x.Cols))
	a.I32(op)
	b.launch(b.fn.unary, [3]uint32{uint32(x.Rows), 1, 1}, rowThreads(x.Cols))
}

func (b *NNBackend) binary(d, z nn.Tensor, op int32) {
	defer b.span(opElementwis)()
	a := &b.args
	a.Reset()
	b.tensorArg(d)
	b.tensorArg(z)
	a.I32(int32(d.Cols))
	a.I32(op)
	b.launch(b.fn.binary, [3]uint32{uint32(d.Rows), 1, 1}, rowThreads(d.Cols))
}

func (b *NNBackend) SiLU(x nn.Tensor)                { b.unary(x, 0) }
func (b *NNBackend) ReLU2(x nn.Tensor)               { b.unary(x, 1) }
func (b *NNBackend) MulSiLU(dst, z nn.Tensor)        { b.binary(dst, z, 0) }
func (b *NNBackend) SwiGLU(up, gate nn.Tensor)       { b.binary(up, gate, 0) }
func (b *NNBackend) MulSigmoid(dst, g nn.Tensor)     { b.binary(dst, g, 1) }
func (b *NNBackend) MulSigmoidRows(dst, g nn.Tensor) { b.mulSigmoidRows(dst, g) }

func (b *NNBackend) mulSigmoidRows(dst, g nn.Tensor) {
	defer b.span(opElementwis)()
	a := &b.args
	a.Reset()
	b.tensorArg(dst)
	b.tensorArg(g)
	a.I32(int32(dst.Cols))
	b.launch(b.fn.mulSigmoidRows, [3]uint32{uint32(dst.Rows), 1, 1}, rowThreads(dst.Cols))
}

func (b *NNBackend) ClampDelta(dt nn.Tensor, dtBias nn.Weight, lo, hi float64) {
	defer b.span(opElementwis)()
	a := &b.args
	a.Reset()
	b.tensorArg(dt)
	a.Ptr(wdev(dtBias))
	a.I32(int32(dt.Rows))
	a.I32(int32(dt.Cols))
	a.F64(lo)
	a.F64(hi)
	n := dt.Rows * dt.Cols
	b.launch(b.fn.clampDelta, [3]uint32{uint32((n + 255) / 256), 1, 1}, 256)
}

func (b *NNBackend) KDAGate(f nn.Tensor, aLog, dtBias nn.Weight) {
	defer b.span(opElementwis)()
	if aLog.Rows*aLog.Cols == 0 || f.Cols%(aLog.Rows*aLog.Cols) != 0 {
		b.fail(fmt.Errorf("kda gate: %d columns for %d heads", f.Cols, aLog.Rows*aLog.Cols))
		return
	}
	a := &b.args
	a.Reset()
	b.tensorArg(f)
	a.Ptr(wdev(aLog))
	a.Ptr(wdev(dtBias))
	a.I32(int32(f.Rows))
	a.I32(int32(f.Cols))
	a.I32(int32(f.Cols / (aLog.Rows * aLog.Cols)))
	n := f.Rows * f.Cols
	b.launch(b.fn.kdaGate, [3]uint32{uint32((n + 255) / 256), 1, 1}, 256)
}

func (b *NNBackend) Rope(x nn.Tensor, r *tensor.Rope, pos []int32, heads int) {
	defer b.span(opRope)()
	a := &b.args
	a.Reset()
	b.tensorArg(x)
	a.Ptr(b.f32(r.InvFreq()))
	a.Ptr(b.i32(pos))
	a.I32(int32(heads))
	a.I32(int32(r.RotaryDim))
	b.launch(b.fn.rope, [3]uint32{uint32(x.Rows), 1, 1}, 64)
}

// scratch returns *buf with at least bytes, growing it (after the stream's
// earlier work, which may still read it).
func (b *NNBackend) scratch(buf *Buffer, bytes int) Buffer {
	if buf.bytes >= bytes || b.err != nil {
		return *buf
	}
	if buf.ptr != 0 {
		b.fail(b.s.Synchronize())
		b.fail(b.d.Free(*buf))
		*buf = Buffer{}
	}
	nb, err := b.d.Alloc(max(bytes+bytes/4, 1<<16))
	if err != nil {
		b.fail(fmt.Errorf("product scratch of %d bytes: %w", bytes, err))
		return b.ring
	}
	*buf = nb
	return nb
}

func (b *NNBackend) Argmax(dst []int32, x nn.Tensor) {
	if b.err != nil || x.Rows == 0 {
		return
	}
	defer b.span(opArgmax)()
	ids := b.scratch(&b.ids, 4*x.Rows)
	a := &b.args
	a.Reset()
	a.Ptr(ids)
	b.tensorArg(x)
	a.I32(int32(x.Cols))
	b.launch(b.fn.argmax, [3]uint32{uint32(x.Rows), 1, 1}, 1024)
	if b.err == nil {
		b.fail(b.s.CopyFromDevice(unsafe.Slice((*byte)(unsafe.Pointer(&dst[0])), 4*x.Rows), ids))
	}
}

func (b *NNBackend) Upload(dst nn.Tensor, src []float32) {
	defer b.span(opTransfer)()
	if b.err == nil && len(src) > 0 {
		b.fail(b.s.Upload(dev(dst), f32Bytes(src)))
	}
}

func (b *NNBackend) Download(dst []float32, src nn.Tensor) {
	defer b.span(opTransfer)()
	if b.err != nil || src.Rows == 0 {
		return
	}
	if src.Contiguous() {
		b.fail(b.s.CopyFromDevice(f32Bytes(dst[:src.Rows*src.Cols]), dev(src)))
		return
	}
	for r := range src.Rows {
		b.fail(b.s.CopyFromDevice(f32Bytes(dst[r*src.Cols:(r+1)*src.Cols]), dev(src.Slice(r, r+1))))
	}
}

// NewArena returns scratch memory on the device.
func (b *NNBackend) NewArena() nn.Arena { return &gpuArena{b: b} }

// gpuArena is a State's scratch: a stack of floats in one device buffer
// sized by the largest pass so far. A tensor that does not fit takes a
// temporary; rewinding the stack below it makes it a spare, which a later
// tensor of the pass that does not fit reuses (stream order keeps its
// readers before the next writer, as for the stack). The next Reset waits
// for the stream once, frees them all and grows the buffer to the pass's
// high-water mark: a pass that outgrows the scratch still records as one
// tape, not in pieces cut by waits.
type gpuArena struct {
	b     *NNBackend
	buf   *gpuBuf
	size  int // floats
	used  int // the stack's top, in floats
	peak  int // its high-water mark this pass
	tmp   []arenaTemp
	spare []Buffer
}

// arenaTemp is a temporary and the stack position it stands for.
type arenaTemp struct {
	buf Buffer
	at  int
}

func (a *gpuArena) Alloc(rows, cols int) nn.Tensor {
	n := rows * cols
	at := a.used
	a.used += (n + 63) &^ 63 // 256-byte aligned
	a.peak = max(a.peak, a.used)
	if a.buf != nil && at+n <= a.size {
		return nn.Tensor{S: a.buf, Off: at, Rows: rows, Cols: cols, Stride: cols}
	}
	b := a.b
	buf, err := a.temp(4 * max(n, 1))
	if err != nil {
		b.fail(fmt.Errorf("scratch of %d×%d: %w", rows, cols, err))
		buf = b.ring // keeps later calls from crashing; the pass fails
	} else {
		a.tmp = append(a.tmp, arenaTemp{buf: buf, at: at})
	}
	return nn.Tensor{S: &gpuBuf{buf: buf}, Rows: rows, Cols: cols, Stride: cols}
}

// temp returns the smallest spare of at least bytes, or a new buffer.
func (a *gpuArena) temp(bytes int) (Buffer, error) {
	best := -1
	for i, s := range a.spare {
		if s.bytes >= bytes && (best < 0 || s.bytes < a.spare[best].bytes) {
			best = i
		}
	}
	if best < 0 {
		return a.b.d.Alloc(bytes)
	}
	buf := a.spare[best]
	a.spare[best] = a.spare[len(a.spare)-1]
	a.spare = a.spare[:len(a.spare)-1]
	return buf, nil
}

func (a *gpuArena) Zeros(rows, cols int) nn.Tensor {
	t := a.Alloc(rows, cols)
	if rows*cols > 0 && a.b.err == nil {
		a.b.fail(a.b.s.Memset32(dev(t), 0))
	}
	return t
}

// Rewound tensors are reused by later operations on the same stream, so
// stream order keeps every reader before the next writer; temporaries above
// the mark are freed once the stream has drained.
func (a *gpuArena) Mark() int { return a.used }

func (a *gpuArena) Rewind(mark int) {
	a.used = min(a.used, mark)
	k := len(a.tmp)
	for k > 0 && a.tmp[k-1].at >= mark {
		k--
		a.spare = append(a.spare, a.tmp[k].buf)
	}
	a.tmp = a.tmp[:k]
}

// freeTemps waits for the stream and frees every temporary and spare.
func (a *gpuArena) freeTemps() {
	if len(a.tmp) == 0 && len(a.spare) == 0 {
		return
	}
	b := a.b
	b.fail(b.s.Synchronize())
	for _, t := range a.tmp {
		b.fail(b.d.Free(t.buf))
	}
	for _, buf := range a.spare {
		b.fail(b.d.Free(buf))
	}
	a.tmp, a.spare = a.tmp[:0], a.spare[:0]
}

func (a *gpuArena) Reset() {
	b := a.b
	a.freeTemps()
	if a.peak > a.size {
		b.fail(b.s.Synchronize())
		a.free()
		size := a.peak + a.peak/4
		buf, err := b.d.Alloc(4 * size)
		if err != nil {
			b.fail(fmt.Errorf("scratch of %d MiB: %w", 4*size>>20, err))
		} else {
			a.buf, a.size = &gpuBuf{buf: buf}, size
		}
	}
	a.used, a.peak = 0, 0
	b.resetLists()
}

func (a *gpuArena) free() {
	if a.buf != nil {
		a.b.fail(a.b.d.Free(a.buf.buf))
		a.buf, a.size = nil, 0
	}
}

// Close waits for the stream (the last pass may still read the buffer) and
// frees the arena's memory.
func (a *gpuArena) Close() {
	a.freeTemps()
	a.b.fail(a.b.s.Synchronize())
	a.free()
}

// gpuSSM is one of this package's caches over the backend's tensors,
// its calls timed by the backend's clock.
type gpuSSM[In, TIn any] struct {
	replay.Cache[Buffer, In]
	b  *NNBackend
	in func(TIn) In
}

func (c gpuSSM[In, TIn]) Conv(slots []replay.Slot, in, out nn.Tensor) error {
	defer c.b.span(opSSMConv)()
	return c.Cache.Conv(slots, dev(in), dev(out))
}

func (c gpuSSM[In, TIn]) ConvVerify(slots []replay.Slot, T int, in, out nn.Tensor) error {
	defer c.b.span(opSSMConv)()
	return c.Cache.ConvVerify(slots, T, dev(in), dev(out))
}

func (c gpuSSM[In, TIn]) Step(slots []replay.Slot, in TIn, y nn.Tensor) error {
	defer c.b.span(opSSMStep)()
	return c.Cache.Step(slots, c.in(in), dev(y))
}

func (c gpuSSM[In, TIn]) Verify(slots []replay.Slot, T int, counts []int, in TIn, y nn.Tensor) error {
	defer c.b.span(opSSMStep)()
	return c.Cache.Verify(slots, T, counts, c.in(in), dev(y))
}

func (c gpuSSM[In, TIn]) ConvPrefill(slots []replay.Slot, T int, counts []int, in, out nn.Tensor) error {
	defer c.b.span(opSSMConv)()
	return c.Cache.ConvPrefill(slots, T, counts, dev(in), dev(out))
}

func (c gpuSSM[In, TIn]) Prefill(slots []replay.Slot, T int, counts []int, in TIn, y nn.Tensor) error {
	defer c.b.span(opSSMStep)()
	return c.Cache.Prefill(slots, T, counts, c.in(in), dev(y))
}

func (b *NNBackend) NewMamba2(shape ssm.Mamba2Shape, prm replay.Mamba2Params, conv replay.ConvWeights, capacity int, opt replay.Options) (nn.Mamba2Cache, error) {
	c, err := NewMamba2Cache(b.ctx, b.s, shape, prm, conv, capacity, opt)
	if err != nil {
		return nil, err
	}
	return gpuSSM[Mamba2Input, replay.Mamba2Batch[nn.Tensor]]{Cache: c, b: b, in: func(x replay.Mamba2Batch[nn.Tensor]) Mamba2Input {
		return Mamba2Input{X: dev(x.X), B: dev(x.B), C: dev(x.C), Dt: dev(x.Dt), DtMin: x.DtMin}
	}}, nil
}

func (b *NNBackend) NewGDN(shape ssm.GDNShape, prm replay.GDNParams, conv replay.ConvWeights, capacity int, opt replay.Options) (nn.GDNCache, error) {
	c, err := NewGDNCache(b.ctx, b.s, shape, prm, conv, capacity, opt)
	if err != nil {
		return nil, err
	}
	return gpuSSM[GDNInput, replay.GDNBatch[nn.Tensor]]{Cache: c, b: b, in: func(x replay.GDNBatch[nn.Tensor]) GDNInput {
		return GDNInput{Q: dev(x.Q), K: dev(x.K), V: dev(x.V), A: dev(x.A), B: dev(x.B)}
	}}, nil
}

// NewKDA reports that this package has no Kimi Delta Attention cache yet
// (the CPU's is replay.NewKDA).
func (b *NNBackend) NewKDA(ssm.GDNShape, replay.ConvWeights, int, replay.Options) (nn.KDACache, error) {
	return nil, ErrNoKDA
}

// ErrNoKDA is NewKDA's error: the backend has no Kimi Delta Attention
// cache yet, so kimi_linear models run on the CPU only.
var ErrNoKDA = errors.New("cuda: no KDA cache yet (kimi_linear runs on the CPU)")

var _ nn.Backend = (*NNBackend)(nil)

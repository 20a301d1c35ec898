package cuda

import (
	"cmp"
	"fmt"
	"math"
	"unsafe"
)

// DataType is an element type of matrices handed to cuBLAS and fill kernels.
type DataType int

// Element types. The zero value is Float32.
const (
	Float32  DataType = iota // IEEE binary32
	BFloat16                 // bfloat16: 8 exponent bits, 7 mantissa bits
	Float16                  // IEEE binary16
)

// Size is the element size in bytes.
func (t DataType) Size() int {
	if t == Float32 {
		return 4
	}
	return 2
}

// String names the type.
func (t DataType) String() string {
	switch t {
	case Float32:
		return "float32"
	case BFloat16:
		return "bfloat16"
	case Float16:
		return "float16"
	}
	return fmt.Sprintf("DataType(%d)", int(t))
}

// cudaDataType is the library enum value of t (CUDA_R_32F, CUDA_R_16BF,
// CUDA_R_16F).
func (t DataType) cudaDataType() (uintptr, bool) {
	switch t {
	case Float32:
		return 0, true
	case Float16:
		return 2, true
	case BFloat16:
		return 14, true
	}
	return 0, false
}

// blasAPI holds cuBLAS's entry points.
type blasAPI struct {
	path                               string
	create, destroy, setStream, gemmEx uintptr
	setWorkspace, getVersion           uintptr
	statusName                         uintptr // cublasGetStatusName, absent before cuBLAS 11.4
}

func (d *Device) blasLib() (*blasAPI, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.blas != nil || d.blasErr != nil {
		return d.blas, d.blasErr
	}
	d.blas, d.blasErr = loadBLAS(d.plan)
	return d.blas, d.blasErr
}

func loadBLAS(plan searchPlan) (*blasAPI, error) {
	lib, err := openLib(specCUBLAS, plan)
	if err != nil {
		return nil, err
	}
	b := &blasAPI{path: lib.path}
	for _, e := range []struct {
		dst   *uintptr
		names []string
	}{
		{&b.create, []string{"cublasCreate_v2"}}, {&b.destroy, []string{"cublasDestroy_v2"}},
		{&b.setStream, []string{"cublasSetStream_v2"}}, {&b.gemmEx, []string{"cublasGemmEx"}},
		{&b.setWorkspace, []string{"cublasSetWorkspace_v2"}}, {&b.getVersion, []string{"cublasGetVersion_v2"}},
	} {
		p, err := symbol(lib, e.names...)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNoCUBLAS, err)
		}
		*e.dst = p
	}
	b.statusName, _ = symbol(lib, "cublasGetStatusName")
	return b, nil
}

// blasStatusNames names cublasStatus_t values for libraries without
// cublasGetStatusName.
var blasStatusNames = map[uint32]string{
	0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
	7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED",
	16: "CUBLAS_STATUS_LICENSE_ERROR",
}

func (b *blasAPI) check(r uintptr, op string, args ...any) error {
	code := uint32(r)
	if code == 0 {
		return nil
	}
	if len(args) > 0 {
		op = fmt.Sprintf(op, args...)
	}
	name := blasStatusNames[code]
	if b.statusName != 0 {
		if s := goString(call(b.statusName, uintptr(code))); s != "" {
			name = s
		}
	}
	if name == "" {
		name = fmt.Sprintf("cublasStatus_t(%d)", code)
	}
	return &Error{Op: op, Code: int(code), Name: name}
}

// blasWorkspaceBytes is the workspace handed to cuBLAS: NVIDIA recommends
// 32 MiB on Hopper, and a workspace we own keeps GEMMs graph-capturable
// (cuBLAS does not allocate while a stream is being captured).
const blasWorkspaceBytes = 32 << 20

// BLAS is a cuBLAS handle bound to one Device and one stream.
type BLAS struct {
	d         *Device
	api       *blasAPI
	h         uintptr
	workspace Buffer
	stream    *Stream
}

// NewBLAS creates a cuBLAS handle on the device's primary context, with its
// own workspace, queuing on the legacy default stream until SetStream.
func (d *Device) NewBLAS() (*BLAS, error) {
	api, err := d.blasLib()
	if err != nil {
		return nil, err
	}
	ws, err := d.Alloc(blasWorkspaceBytes)
	if err != nil {
		return nil, err
	}
	b := &BLAS{d: d, api: api, workspace: ws}
	err = d.cold(func() error {
		if err := api.check(call(api.create, uintptr(unsafe.Pointer(&b.h))), "cublasCreate_v2"); err != nil {
			return err
		}
		return api.check(call(api.setWorkspace, b.h, uintptr(ws.ptr), uintptr(ws.bytes)), "cublasSetWorkspace_v2(%d bytes)", ws.bytes)
	})
	if err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Version is cuBLAS's version number (e.g. 130001 for 13.0.1).
func (b *BLAS) Version() (int, error) {
	var v int32
	err := b.d.cold(func() error {
		return b.api.check(call(b.api.getVersion, b.h, uintptr(unsafe.Pointer(&v))), "cublasGetVersion_v2")
	})
	return int(v), err
}

// SetStream makes later GEMMs queue on s (nil: the legacy default stream).
func (b *BLAS) SetStream(s *Stream) error {
	err := b.d.cold(func() error {
		if err := b.api.check(call(b.api.setStream, b.h, s.handle()), "cublasSetStream_v2"); err != nil {
			return err
		}
		// cublasSetStream resets the workspace to cuBLAS's own pool.
		return b.api.check(call(b.api.setWorkspace, b.h, uintptr(b.workspace.ptr), uintptr(b.workspace.bytes)), "cublasSetWorkspace_v2")
	})
	if err == nil {
		b.stream = s
	}
	return err
}

// Close destroys the handle and frees its workspace.
func (b *BLAS) Close() error {
	var err error
	if b.h != 0 {
		err = b.d.cold(func() error { return b.api.check(call(b.api.destroy, b.h), "cublasDestroy_v2") })
		b.h = 0
	}
	if b.workspace.ptr != 0 {
		if ferr := b.d.Free(b.workspace); err == nil {
			err = ferr
		}
		b.workspace = Buffer{}
	}
	return err
}

// Gemm describes C = Alpha·op(A)·op(B) + Beta·C over ROW-MAJOR matrices, the
// layout of safetensors weights and of activations [tokens, features]:
//
//	op(A) is M×K: A is stored M×K (LDA ≥ K), or K×M when TransA (LDA ≥ M);
//	op(B) is K×N: B is stored K×N (LDB ≥ N), or N×K when TransB (LDB ≥ K);
//	C is M×N (LDC ≥ N).
//
// A linear layer y = x·Wᵀ with x [T, in] and a PyTorch weight W [out, in] is
// {M: T, N: out, K: in, A: x, B: W, TransB: true}. A zero leading dimension
// means tightly packed. cuBLAS is column-major; a row-major matrix is the
// column-major matrix of its transpose, so Gemm computes Cᵀ = op(B)ᵀ·op(A)ᵀ
// by handing cuBLAS B as its first operand and A as its second.
//
// Supported types (accumulation is always float32, CUBLAS_COMPUTE_32F):
// A, B Float32 with C Float32; A, B BFloat16 or Float16 with C of the same
// type or Float32. Float32 inputs use exact fp32 arithmetic unless TF32.
type Gemm struct {
	M, N, K        int
	A, B, C        Buffer
	TransA, TransB bool
	LDA, LDB, LDC  int
	AB             DataType // type of A and B
	CType          DataType // type of C
	Alpha, Beta    float32
	TF32           bool // allow tensor-float-32 for Float32 inputs (~1e-3 relative error)
}

// gemmCall is a cublasGemmEx call in cuBLAS's column-major terms.
type gemmCall struct {
	transa, transb uintptr
	m, n, k        int
	a, b, c        uint64
	lda, ldb, ldc  int
	abType, cType  uintptr
	computeType    uintptr
}

// columnMajor validates g and maps it to cublasGemmEx's arguments.
func (g *Gemm) columnMajor() (gemmCall, error) {
	var c gemmCall
	if g.M <= 0 || g.N <= 0 || g.K <= 0 {
		return c, fmt.Errorf("cuda: gemm %d×%d×%d: dimensions must be positive", g.M, g.N, g.K)
	}
	if g.M > math.MaxInt32 || g.N > math.MaxInt32 || g.K > math.MaxInt32 {
		return c, fmt.Errorf("cuda: gemm %d×%d×%d: dimension exceeds int32", g.M, g.N, g.K)
	}
	abType, ok1 := g.AB.cudaDataType()
	cType, ok2 := g.CType.cudaDataType()
	if !ok1 || !ok2 || (g.AB == Float32 && g.CType != Float32) || (g.AB != Float32 && g.CType != Float32 && g.CType != g.AB) {
		return c, fmt.Errorf("cuda: gemm with %v inputs and %v output is not supported", g.AB, g.CType)
	}
	// Stored shapes (rows × cols, row-major) of A and B.
	aRows, aCols := g.M, g.K
	if g.TransA {
		aRows, aCols = g.K, g.M
	}
	bRows, bCols := g.K, g.N
	if g.TransB {
		bRows, bCols = g.N, g.K
	}
	lda, ldb, ldc := cmp.Or(g.LDA, aCols), cmp.Or(g.LDB, bCols), cmp.Or(g.LDC, g.N)
	if lda < aCols || ldb < bCols || ldc < g.N {
		return c, fmt.Errorf("cuda: gemm leading dimensions %d, %d, %d below row lengths %d, %d, %d", lda, ldb, ldc, aCols, bCols, g.N)
	}
	need := func(name string, buf Buffer, rows, cols, ld int, t DataType) error {
		n := ((rows-1)*ld + cols) * t.Size()
		if buf.bytes < n {
			return fmt.Errorf("cuda: gemm: %s needs %d bytes, buffer has %d", name, n, buf.bytes)
		}
		return nil
	}
	if err := need("A", g.A, aRows, aCols, lda, g.AB); err != nil {
		return c, err
	}
	if err := need("B", g.B, bRows, bCols, ldb, g.AB); err != nil {
		return c, err
	}
	if err := need("C", g.C, g.M, g.N, ldc, g.CType); err != nil {
		return c, err
	}
	const opN, opT = 0, 1
	c = gemmCall{
		transa: opN, transb: opN,
		m: g.N, n: g.M, k: g.K,
		a: g.B.ptr, lda: ldb,
		b: g.A.ptr, ldb: lda,
		c: g.C.ptr, ldc: ldc,
		abType: abType, cType: cType,
		computeType: 68, // CUBLAS_COMPUTE_32F
	}
	if g.TransB {
		c.transa = opT
	}
	if g.TransA {
		c.transb = opT
	}
	if g.TF32 && g.AB == Float32 {
		c.computeType = 77 // CUBLAS_COMPUTE_32F_FAST_TF32
	}
	return c, nil
}

// Gemm queues the product described by g on the handle's stream. It does
// not allocate: the scalars go through the Device's pinned buffer.
func (b *BLAS) Gemm(g *Gemm) error {
	c, err := g.columnMajor()
	if err != nil {
		return err
	}
	call := gemmQueued{alpha: g.Alpha, beta: g.Beta}
	call.args = [19]uintptr{b.h, c.transa, c.transb, uintptr(c.m), uintptr(c.n), uintptr(c.k),
		0, uintptr(c.a), c.abType, uintptr(c.lda), uintptr(c.b), c.abType, uintptr(c.ldb),
		0, uintptr(c.c), c.cType, uintptr(c.ldc), c.computeType, ^uintptr(0)} // CUBLAS_GEMM_DEFAULT = -1
	if t := b.stream.recorder(); t != nil {
		t.add(tapeOp{kind: tapeGemm, s: b.stream, blas: b, gemm: call})
		return nil
	}
	return b.gemmNow(&call)
}

// gemmNow queues a GemmEx call on the handle's stream.
func (b *BLAS) gemmNow(c *gemmQueued) error {
	d := b.d
	if !d.enterHot() {
		return d.hotError()
	}
	pinned := d.pinnedView()
	sc := &d.scratch
	copy(sc[:19], c.args[:])
	sc[6] = d.pinned + pinnedScalarsOff
	sc[13] = sc[6] + 8
	putU32(pinned[pinnedScalarsOff:], math.Float32bits(c.alpha))
	putU32(pinned[pinnedScalarsOff+8:], math.Float32bits(c.beta))
	r := d.callHot(b.api.gemmEx, 19)
	d.leaveHot()
	if r != 0 {
		return b.gemmError(r, c)
	}
	return nil
}

//go:noinline
func (b *BLAS) gemmError(r uint32, c *gemmQueued) error {
	// The call is column-major: m and n are the row-major N and M.
	return b.api.check(uintptr(r), "cublasGemmEx(M %d, N %d, K %d, types %d→%d)", c.args[4], c.args[3], c.args[5], c.args[8], c.args[15])
}

// putU32 stores v little-endian.
func putU32(b []byte, v uint32) {
	_ = b[3]
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}

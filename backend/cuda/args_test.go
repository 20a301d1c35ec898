package cuda

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

func TestArgsLayout(t *testing.T) {
	var a Args
	a.I32(-7)                            // 0
	a.Ptr(Buffer{ptr: 0x1234_5678_9abc}) // 8 (aligned up from 4)
	a.F32(1.5)                           // 16
	a.F64(-2.25)                         // 24
	a.U32(9)                             // 32
	a.Bytes([]byte{1, 2, 3}, 16)         // 48
	a.U64(1 << 60)                       // 56 (aligned up from 51)
	wantOff := []uint16{0, 8, 16, 24, 32, 48, 56}
	if a.Len() != len(wantOff) || a.err != nil {
		t.Fatalf("len %d err %v", a.Len(), a.err)
	}
	for i, w := range wantOff {
		if a.off[i] != w {
			t.Errorf("arg %d at %d, want %d", i, a.off[i], w)
		}
	}
	le := binary.LittleEndian
	if v := int32(le.Uint32(a.data[0:])); v != -7 {
		t.Errorf("I32 = %d", v)
	}
	if v := le.Uint64(a.data[8:]); v != 0x1234_5678_9abc {
		t.Errorf("Ptr = %#x", v)
	}
	if v := math.Float32frombits(le.Uint32(a.data[16:])); v != 1.5 {
		t.Errorf("F32 = %v", v)
	}
	if v := math.Float64frombits(le.Uint64(a.data[24:])); v != -2.25 {
		t.Errorf("F64 = %v", v)
	}
	if a.data[48] != 1 || a.data[50] != 3 {
		t.Errorf("Bytes = %v", a.data[48:51])
	}
	if v := le.Uint64(a.data[56:]); v != 1<<60 {
		t.Errorf("U64 = %#x", v)
	}
	a.Reset()
	if a.Len() != 0 || a.size != 0 {
		t.Errorf("Reset left %d args, %d bytes", a.Len(), a.size)
	}
}

func TestArgsOverflow(t *testing.T) {
	tests := []struct {
		name string
		fill func(a *Args)
	}{
		{"too many values", func(a *Args) {
			for range maxArgs + 1 {
				a.I32(1)
			}
		}},
		{"too many bytes", func(a *Args) { a.Bytes(make([]byte, maxArgBytes+1), 8) }},
		{"bad alignment", func(a *Args) { a.Bytes([]byte{1}, 3) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a Args
			tt.fill(&a)
			if a.err == nil {
				t.Fatal("no error recorded")
			}
			// Launch reports it before touching the device.
			var d Device
			if err := d.Launch(&Function{}, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, nil, &a); err == nil {
				t.Error("Launch accepted overflowing args")
			}
		})
	}
	var a Args
	a.Bytes(make([]byte, maxArgBytes+1), 8)
	if !errors.Is(a.err, errArgsFull) {
		t.Errorf("err = %v", a.err)
	}
}

func TestArgsNoAlloc(t *testing.T) {
	buf := Buffer{ptr: 1 << 40}
	blob := make([]byte, 24)
	n := testing.AllocsPerRun(100, func() {
		var a Args
		a.Ptr(buf)
		a.I32(1)
		a.U32(2)
		a.I64(3)
		a.U64(4)
		a.F32(5)
		a.F64(6)
		a.Bytes(blob, 8)
		if a.Len() != 8 {
			panic("lost an argument")
		}
	})
	if n != 0 {
		t.Errorf("building Args allocates %v times", n)
	}
}

func BenchmarkArgs(b *testing.B) {
	buf := Buffer{ptr: 1 << 40}
	var a Args
	for b.Loop() {
		a.Reset()
		a.Ptr(buf)
		a.Ptr(buf)
		a.F32(2)
		a.U64(1 << 20)
	}
}

// colMajorGemm is cublasGemmEx's definition on column-major float64 data:
// C[i + j·ldc] = alpha·Σ_l opA(i,l)·opB(l,j) + beta·C, with A, B, C given as
// flat arrays.
func colMajorGemm(c gemmCall, alpha, beta float64, A, B, C []float64) {
	at := func(i, l int) float64 {
		if c.transa == 1 {
			return A[l+i*c.lda]
		}
		return A[i+l*c.lda]
	}
	bt := func(l, j int) float64 {
		if c.transb == 1 {
			return B[j+l*c.ldb]
		}
		return B[l+j*c.ldb]
	}
	for j := range c.n {
		for i := range c.m {
			var s float64
			for l := range c.k {
				s += at(i, l) * bt(l, j)
			}
			C[i+j*c.ldc] = alpha*s + beta*C[i+j*c.ldc]
		}
	}
}

// TestGemmRowMajorMapping checks, without a GPU, that the column-major call
// Gemm makes computes the row-major product it documents.
func TestGemmRowMajorMapping(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		m, n, k        int
		transA, transB bool
		lda, ldb, ldc  int
	}{
		{3, 5, 4, false, false, 0, 0, 0},
		{3, 5, 4, true, false, 0, 0, 0},
		{3, 5, 4, false, true, 0, 0, 0},
		{3, 5, 4, true, true, 0, 0, 0},
		{2, 7, 3, false, true, 5, 4, 9}, // padded rows
		{1, 6, 8, false, true, 0, 0, 0}, // one token through a linear layer
	}
	for _, tt := range tests {
		aRows, aCols := tt.m, tt.k
		if tt.transA {
			aRows, aCols = tt.k, tt.m
		}
		bRows, bCols := tt.k, tt.n
		if tt.transB {
			bRows, bCols = tt.n, tt.k
		}
		lda, ldb, ldc := max(tt.lda, aCols), max(tt.ldb, bCols), max(tt.ldc, tt.n)
		A := randSlice(rng, aRows*lda)
		B := randSlice(rng, bRows*ldb)
		C := randSlice(rng, tt.m*ldc)
		g := Gemm{M: tt.m, N: tt.n, K: tt.k, TransA: tt.transA, TransB: tt.transB,
			LDA: tt.lda, LDB: tt.ldb, LDC: tt.ldc,
			A: Buffer{ptr: 1, bytes: 4 * len(A)}, B: Buffer{ptr: 2, bytes: 4 * len(B)}, C: Buffer{ptr: 3, bytes: 4 * len(C)}}
		call, err := g.columnMajor()
		if err != nil {
			t.Fatal(err)
		}
		if call.a != 2 || call.b != 1 || call.c != 3 {
			t.Fatalf("operands not swapped: %+v", call)
		}
		const alpha, beta = 1.5, -0.5
		want := append([]float64(nil), C...)
		for i := range tt.m {
			for j := range tt.n {
				var s float64
				for l := range tt.k {
					var a, b float64
					if tt.transA {
						a = A[l*lda+i]
					} else {
						a = A[i*lda+l]
					}
					if tt.transB {
						b = B[j*ldb+l]
					} else {
						b = B[l*ldb+j]
					}
					s += a * b
				}
				want[i*ldc+j] = alpha*s + beta*C[i*ldc+j]
			}
		}
		got := append([]float64(nil), C...)
		colMajorGemm(call, alpha, beta, B, A, got) // cuBLAS sees B first
		for i := range want {
			if math.Abs(got[i]-want[i]) > 1e-12 {
				t.Fatalf("%+v: element %d = %v, want %v", tt, i, got[i], want[i])
			}
		}
	}
}

func TestGemmValidation(t *testing.T) {
	big := Buffer{ptr: 1, bytes: 1 << 20}
	tests := []struct {
		name string
		g    Gemm
	}{
		{"zero dim", Gemm{M: 0, N: 4, K: 4, A: big, B: big, C: big}},
		{"short A", Gemm{M: 64, N: 4, K: 64, A: Buffer{ptr: 1, bytes: 64*64*4 - 1}, B: big, C: big}},
		{"short C", Gemm{M: 4, N: 4, K: 4, A: big, B: big, C: Buffer{ptr: 1, bytes: 60}}},
		{"ld below row", Gemm{M: 4, N: 4, K: 8, LDA: 7, A: big, B: big, C: big}},
		{"fp32 in, bf16 out", Gemm{M: 4, N: 4, K: 4, A: big, B: big, C: big, CType: BFloat16}},
		{"bf16 in, fp16 out", Gemm{M: 4, N: 4, K: 4, A: big, B: big, C: big, AB: BFloat16, CType: Float16}},
		{"unknown type", Gemm{M: 4, N: 4, K: 4, A: big, B: big, C: big, AB: DataType(9)}},
	}
	for _, tt := range tests {
		if _, err := tt.g.columnMajor(); err == nil {
			t.Errorf("%s: accepted", tt.name)
		}
	}
	ok := Gemm{M: 4, N: 4, K: 4, A: big, B: big, C: big, AB: BFloat16, CType: Float32}
	if _, err := ok.columnMajor(); err != nil {
		t.Errorf("valid bf16→fp32 rejected: %v", err)
	}
}

func TestUniformAt(t *testing.T) {
	tests := []struct {
		seed   uint32
		lo, hi float32
	}{{1, -1, 1}, {0x5eed, 0, 1}, {7, -3, 0.5}}
	for _, tt := range tests {
		var sum float64
		seen := map[float32]bool{}
		const n = 1 << 14
		for i := range uint64(n) {
			v := UniformAt(tt.seed, i, tt.lo, tt.hi)
			if v < tt.lo || v >= tt.hi || math.IsNaN(float64(v)) {
				t.Fatalf("UniformAt(%d, %d) = %v outside [%v, %v)", tt.seed, i, v, tt.lo, tt.hi)
			}
			if v != UniformAt(tt.seed, i, tt.lo, tt.hi) {
				t.Fatal("not deterministic")
			}
			sum += float64(v)
			seen[v] = true
		}
		mean, mid := sum/n, float64(tt.lo+tt.hi)/2
		if math.Abs(mean-mid) > 0.02*float64(tt.hi-tt.lo) {
			t.Errorf("seed %d: mean %v, want about %v", tt.seed, mean, mid)
		}
		if len(seen) < n*99/100 {
			t.Errorf("seed %d: only %d distinct values of %d", tt.seed, len(seen), n)
		}
	}
	if UniformAt(1, 5, 0, 1) == UniformAt(2, 5, 0, 1) || UniformAt(1, 5, 0, 1) == UniformAt(1, 5+1<<32, 0, 1) {
		t.Error("seed or high index bits ignored")
	}
}

func randSlice(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.Float64()*2 - 1
	}
	return v
}

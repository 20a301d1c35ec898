package replay

import "github.com/replayssm/replayssm/numeric"

// Lookup tables of the read kernels, computed once from package numeric's
// exact decoders and never written again.
var (
	e4m3LUT = func() (t [256]float32) {
		for i := range t {
			t[i] = numeric.F32FromE4M3(uint8(i))
		}
		return t
	}()
	e2m1LUT = func() (t [16]float32) {
		for i := range t {
			t[i] = numeric.F32FromE2M1(uint8(i))
		}
		return t
	}()
)

// readBuffers is the scratch a read needs: a decoded matrix for formats
// without a direct kernel, and v split into even and odd elements for nvfp4.
type readBuffers struct {
	mat         []float32
	even, odd   []float32
	even2, odd2 []float32
}

func newReadBuffers(elems, n int) readBuffers {
	h := n/2 + 1
	return readBuffers{mat: make([]float32, elems), even: make([]float32, h), odd: make([]float32, h),
		even2: make([]float32, h), odd2: make([]float32, h)}
}

// readDots writes out[a·rows+p] = S_p·V_a for each row p of matrix mat of m
// (rows of n elements) and each of nv vectors V_a = V[a·vstride:][:n],
// reading the matrix in its stored format: the output path of a non-flush
// step. Every format is read directly (decoded in registers) where the SIMD
// kernels run; elsewhere, or for row lengths they do not take, the matrix is
// decoded into the scratch first.
func readDots(m *matrices, mat, rows, n int, V []float32, vstride, nv int, out []float32, rb *readBuffers) {
	e := m.elems
	switch m.format {
	case numeric.F32:
		S := m.raw(mat)
		if vstride == n && nv > 1 {
			dotRowsMulti(S, n, V[:nv*n], nv, out[:nv*rows])
			return
		}
		for a := 0; a < nv; a++ {
			dotRows(S, n, V[a*vstride:a*vstride+n], out[a*rows:(a+1)*rows])
		}
		return
	case numeric.BF16:
		S := m.u16[mat*e : (mat+1)*e]
		done := true
		for a := 0; a < nv && done; a++ {
			done = dotRowsBF16SIMD(S, n, V[a*vstride:a*vstride+n], out[a*rows:(a+1)*rows])
		}
		if done {
			return
		}
	case numeric.F16:
		S := m.u16[mat*e : (mat+1)*e]
		done := true
		a := 0
		for ; a+1 < nv && done; a += 2 { // two vectors per read of the matrix
			done = dotRowsF16PairSIMD(S, n, V[a*vstride:a*vstride+n], V[(a+1)*vstride:(a+1)*vstride+n],
				out[a*rows:(a+1)*rows], out[(a+1)*rows:(a+2)*rows])
		}
		for ; a < nv && done; a++ {
			done = dotRowsF16SIMD(S, n, V[a*vstride:a*vstride+n], out[a*rows:(a+1)*rows])
		}
		if done {
			return
		}
	case numeric.E4M3:
		S := m.u8[mat*e : (mat+1)*e]
		done := true
		a := 0
		for ; a+1 < nv && done; a += 2 {
			done = dotRowsE4M3PairSIMD(S, m.scale[mat], n, V[a*vstride:a*vstride+n], V[(a+1)*vstride:(a+1)*vstride+n],
				out[a*rows:(a+1)*rows], out[(a+1)*rows:(a+2)*rows])
		}
		for ; a < nv && done; a++ {
			done = dotRowsE4M3SIMD(S, m.scale[mat], n, V[a*vstride:a*vstride+n], out[a*rows:(a+1)*rows])
		}
		if done {
			return
		}
	case numeric.NVFP4:
		codes := m.u8[mat*e/2 : (mat+1)*e/2]
		scales := m.scales[mat*e/16 : (mat+1)*e/16]
		done := true
		a := 0
		// Two vectors at a time: each row is decoded once for both.
		for ; a+1 < nv && done; a += 2 {
			done = dotRowsNVFP4PairSIMD(codes, scales, m.scale[mat], n,
				V[a*vstride:a*vstride+n], V[(a+1)*vstride:(a+1)*vstride+n], rb,
				out[a*rows:(a+1)*rows], out[(a+1)*rows:(a+2)*rows])
		}
		for ; a < nv && done; a++ {
			done = dotRowsNVFP4SIMD(codes, scales, m.scale[mat], n, V[a*vstride:a*vstride+n], rb, out[a*rows:(a+1)*rows])
		}
		if done {
			return
		}
	}
	S := rb.mat[:e]
	m.load(mat, S)
	for a := 0; a < nv; a++ {
		dotRows(S, n, V[a*vstride:a*vstride+n], out[a*rows:(a+1)*rows])
	}
}

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
	vec := func(a int) []float32 { return V[a*vstride : a*vstride+n] }
	dst := func(a int) []float32 { return out[a*rows : (a+1)*rows] }
	// direct runs a format's SIMD read over the vectors, two at a time where
	// it has a pair kernel (each row decoded once for both); it reports
	// false, before writing anything, where the kernels cannot run.
	direct := func(pair func(v, w, o, o2 []float32) bool, one func(v, o []float32) bool) bool {
		a := 0
		if pair != nil {
			for ; a+1 < nv; a += 2 {
				if !pair(vec(a), vec(a+1), dst(a), dst(a+1)) {
					return false
				}
			}
		}
		for ; a < nv; a++ {
			if !one(vec(a), dst(a)) {
				return false
			}
		}
		return true
	}
	switch m.format {
	case numeric.F32:
		S := m.raw(mat)
		if vstride == n && nv > 1 {
			dotRowsMulti(S, n, V[:nv*n], nv, out[:nv*rows])
			return
		}
		for a := 0; a < nv; a++ {
			dotRows(S, n, vec(a), dst(a))
		}
		return
	case numeric.BF16:
		S := m.u16[mat*e : (mat+1)*e]
		if direct(nil, func(v, o []float32) bool { return dotRowsBF16SIMD(S, n, v, o) }) {
			return
		}
	case numeric.F16:
		S := m.u16[mat*e : (mat+1)*e]
		if direct(func(v, w, o, o2 []float32) bool { return dotRowsF16PairSIMD(S, n, v, w, o, o2) },
			func(v, o []float32) bool { return dotRowsF16SIMD(S, n, v, o) }) {
			return
		}
	case numeric.E4M3:
		S, sc := m.u8[mat*e:(mat+1)*e], m.scale[mat]
		if direct(func(v, w, o, o2 []float32) bool { return dotRowsE4M3PairSIMD(S, sc, n, v, w, o, o2) },
			func(v, o []float32) bool { return dotRowsE4M3SIMD(S, sc, n, v, o) }) {
			return
		}
	case numeric.NVFP4:
		codes := m.u8[mat*e/2 : (mat+1)*e/2]
		scales := m.scales[mat*e/16 : (mat+1)*e/16]
		g := m.scale[mat]
		if direct(func(v, w, o, o2 []float32) bool { return dotRowsNVFP4PairSIMD(codes, scales, g, n, v, w, rb, o, o2) },
			func(v, o []float32) bool { return dotRowsNVFP4SIMD(codes, scales, g, n, v, rb, o) }) {
			return
		}
	}
	S := rb.mat[:e]
	m.load(mat, S)
	for a := 0; a < nv; a++ {
		dotRows(S, n, vec(a), dst(a))
	}
}

package replay

import vec "github.com/replayssm/replayssm/internal/simd"

// The inner loops of the CPU kernels. Each is the plain scalar loop its doc
// comment states (the ...Go function); the SIMD versions (kernels_amd64.s,
// AVX2+FMA) compute the same function up to the order of float32 additions,
// and are chosen at start-up where the processor has them.

// dot returns Σ a[i]·b[i] over len(a) elements.
func dot(a, b []float32) float32 {
	if simd {
		return dotSIMD(a, b)
	}
	return dotGo(a, b)
}

// axpy does y[i] += a·x[i].
func axpy(y []float32, a float32, x []float32) {
	if simd {
		axpySIMD(y, a, x)
		return
	}
	axpyGo(y, a, x)
}

func dotGo(a, b []float32) float32 { return vec.DotGo(a, b) }

func axpyGo(y []float32, a float32, x []float32) { vec.AxpyGo(y, a, x) }

// scaleRow does y[i] *= a.
func scaleRow(y []float32, a float32) {
	for i := range y {
		y[i] *= a
	}
}

func updateRowDotGo(row []float32, a, c float32, B, C []float32) float32 {
	B = B[:len(row)]
	C = C[:len(row)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(row); i += 4 {
		r0 := a*row[i] + c*B[i]
		r1 := a*row[i+1] + c*B[i+1]
		r2 := a*row[i+2] + c*B[i+2]
		r3 := a*row[i+3] + c*B[i+3]
		row[i], row[i+1], row[i+2], row[i+3] = r0, r1, r2, r3
		s0 += r0 * C[i]
		s1 += r1 * C[i+1]
		s2 += r2 * C[i+2]
		s3 += r3 * C[i+3]
	}
	for ; i < len(row); i++ {
		r := a*row[i] + c*B[i]
		row[i] = r
		s0 += r * C[i]
	}
	return (s0 + s1) + (s2 + s3)
}

func rankUpdateGo(row []float32, decay float32, coef []float32, V []float32, stride int) {
	for i := range row {
		r := decay * row[i]
		for j, c := range coef {
			r += c * V[j*stride+i]
		}
		row[i] = r
	}
}

// dotRows writes out[p] = Σ_i S[p·n+i]·v[i] for p < len(out): a state matrix
// of len(out) rows of n times a vector (the output read S·C, or Sᵀk in the
// transposed GDN layout).
func dotRows(S []float32, n int, v []float32, out []float32) {
	if simd {
		dotRowsSIMD(S, n, v, out)
		return
	}
	dotRowsGo(S, n, v, out)
}

func dotRowsGo(S []float32, n int, v []float32, out []float32) {
	for p := range out {
		out[p] = dotGo(S[p*n:(p+1)*n], v)
	}
}

// rankUpdateRows does, for each row p < len(coef)/t,
// S[p·n+i] = decay·S[p·n+i] + Σ_{j<t} coef[p·t+j]·V[j·vstride+i]: the flush's
// rank-t update of a whole state matrix, S ← decay·S + coef·V.
func rankUpdateRows(S []float32, n int, decay float32, coef []float32, t int, V []float32, vstride int) {
	if t == 0 {
		scaleRow(S[:len(coef)/max(t, 1)*n], decay)
		return
	}
	if simd {
		rankUpdateRowsSIMD(S, n, decay, coef, t, V, vstride)
		return
	}
	rankUpdateRowsGo(S, n, decay, coef, t, V, vstride)
}

func rankUpdateRowsGo(S []float32, n int, decay float32, coef []float32, t int, V []float32, vstride int) {
	for p := 0; p < len(coef)/t; p++ {
		rankUpdateGo(S[p*n:(p+1)*n], decay, coef[p*t:(p+1)*t], V, vstride)
	}
}

// updateRows does, for each row p < len(out), S[p·n+i] = a·S[p·n+i] + c[p]·B[i]
// and out[p] = Σ_i S[p·n+i]·C[i] over the updated row: the in-place
// recurrence of a whole state matrix and its output read.
func updateRows(S []float32, n int, a float32, c, B, C, out []float32) {
	if simd {
		updateRowsSIMD(S, n, a, c, B, C, out)
		return
	}
	updateRowsGo(S, n, a, c, B, C, out)
}

func updateRowsGo(S []float32, n int, a float32, c, B, C, out []float32) {
	for p := range out {
		out[p] = updateRowDotGo(S[p*n:(p+1)*n], a, c[p], B, C)
	}
}

// combine does y[i] += Σ_j coef[j]·V[j·stride+i]: the ring terms of an
// output, one pass over y instead of one per ring entry.
func combine(y []float32, coef []float32, V []float32, stride int) {
	if len(coef) == 0 {
		return
	}
	if simd {
		rankUpdateSIMD(y, 1, coef, V, stride)
		return
	}
	rankUpdateGo(y, 1, coef, V, stride)
}

// dotRowsMulti writes out[a·rows+p] = Σ_i S[p·n+i]·V[a·n+i] for rows =
// len(out)/nv rows and nv vectors stored one after another: a state matrix
// read once for several vectors (Sᵀk for every key of a window).
func dotRowsMulti(S []float32, n int, V []float32, nv int, out []float32) {
	if simd && dotRowsMultiSIMD(S, n, V, nv, out) {
		return
	}
	rows := len(out) / nv
	for a := 0; a < nv; a++ {
		dotRows(S, n, V[a*n:(a+1)*n], out[a*rows:(a+1)*rows])
	}
}

// gdnOut computes one GDN output of a non-flush step from its projections
// and the ring's cached updates U (rows of len(o), t = len(ck) of them):
//
//	a = vt − gt·sk + Σ_i ck[i]·U_i,  b = gt·sq + Σ_i cq[i]·U_i
//	ut = beta·a,  o = b + cqt·ut
//
// both sums in one pass over U.
func gdnOut(vt, sk, sq, U, ck, cq []float32, gt, beta, cqt float32, ut, o []float32) {
	if simd && gdnOutSIMD(vt, sk, sq, U, ck, cq, gt, beta, cqt, ut, o) {
		return
	}
	gdnOutGo(vt, sk, sq, U, ck, cq, gt, beta, cqt, ut, o)
}

// gdnFoldU computes a fold's corrected updates, rows U_0..U_{t-1} of n, in
// order of i:
//
//	U_i = beta[i]·(V_i − g[i]·P_i + Σ_{l<i} coef[i·t+l]·U_l)
//
// (gdnOut with no output for each i, in one call).
func gdnFoldU(V, P, coef, g, beta []float32, t, n int, U []float32) {
	if simd && gdnFoldUSIMD(V, P, coef, g, beta, t, n, U) {
		return
	}
	gdnFoldUGo(V, P, coef, g, beta, t, n, U)
}

func gdnFoldUGo(V, P, coef, g, beta []float32, t, n int, U []float32) {
	gdnFoldUFrom(0, V, P, coef, g, beta, t, n, U)
}

// gdnFoldUFrom is gdnFoldU for rows i0..t-1 only, rows 0..i0-1 of U given
// (the fold from cached u recomputes the flush's own token).
func gdnFoldUFrom(i0 int, V, P, coef, g, beta []float32, t, n int, U []float32) {
	for i := i0; i < t; i++ {
		v, p, u, c := V[i*n:(i+1)*n], P[i*n:(i+1)*n], U[i*n:(i+1)*n], coef[i*t:i*t+i]
		for m := range u {
			a := v[m] - g[i]*p[m]
			for l, cl := range c {
				a += cl * U[l*n+m]
			}
			u[m] = beta[i] * a
		}
	}
}

func gdnOutGo(vt, sk, sq, U, ck, cq []float32, gt, beta, cqt float32, ut, o []float32) {
	n := len(o)
	vt, sk, sq, ut = vt[:n], sk[:n], sq[:n], ut[:n]
	cq = cq[:len(ck)]
	for m := 0; m < n; m++ {
		a := vt[m] - gt*sk[m]
		b := gt * sq[m]
		for i, c := range ck {
			u := U[i*n+m]
			a += c * u
			b += cq[i] * u
		}
		u := beta * a
		ut[m] = u
		o[m] = b + cqt*u
	}
}

func sumSquaresGo(x []float32) float64 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	return ss
}

func scaleToGo(dst, x []float32, r float32) {
	dst = dst[:len(x)]
	for i, v := range x {
		dst[i] = v * r
	}
}

// scaleAdd2Go does dst[i] = a·x[i] + b·y[i] (two products, then their sum).
func scaleAdd2Go(dst, x, y []float32, a, b float32) {
	dst, y = dst[:len(x)], y[:len(x)]
	for i, v := range x {
		dst[i] = a*v + b*y[i]
	}
}

// rankUpdateDotRows does, for each row p < rows,
// S[p·n+i] = decay·S[p·n+i] + Σ_{j<t} coefT[j·cs+p]·V[j·vstride+i] and, when
// out is not nil, out[p] = Σ_i S[p·n+i]·C[i] over the updated row: the
// flush's rank-t update S ← decay·S + coefᵀ·V (coefficients stored one
// entry's column after another, cs apart) with its output read, each row
// read and written once.
func rankUpdateDotRows(S []float32, rows, n int, decay float32, coefT []float32, cs, t int, V []float32, vstride int, C, out []float32) {
	if simd && rankUpdateDotRowsSIMD(S, rows, n, decay, coefT, cs, t, V, vstride, C, out) {
		return
	}
	rankUpdateDotRowsGo(S, rows, n, decay, coefT, cs, t, V, vstride, C, out)
}

func rankUpdateDotRowsGo(S []float32, rows, n int, decay float32, coefT []float32, cs, t int, V []float32, vstride int, C, out []float32) {
	for p := 0; p < rows; p++ {
		row := S[p*n : (p+1)*n]
		for i := range row {
			r := decay * row[i]
			for j := 0; j < t; j++ {
				r += coefT[j*cs+p] * V[j*vstride+i]
			}
			row[i] = r
		}
		if out != nil {
			out[p] = dotGo(row, C[:n])
		}
	}
}

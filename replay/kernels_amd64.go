//go:build !noasm

package replay

import (
	"golang.org/x/sys/cpu"

	vec "github.com/replayssm/replayssm/internal/simd"
	"github.com/replayssm/replayssm/numeric"
)

// The rows-of-128 AVX-512 kernels are generated: edit the generators.
//go:generate python3 ../tools/gen_dot128_asm.py write dot128_amd64.s
//go:generate python3 ../tools/gen_nvfp4_asm.py write nvfp4_128_amd64.s

// simd reports whether the AVX2+FMA kernels run on this machine. It is fixed
// at start-up; the plain-Go kernels are used where it is false.
var simd = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func updateRowDotAVX2(row *float32, a, c float32, b, cv *float32, n int) float32

//go:noescape
func rankUpdateAVX2(row *float32, decay float32, coef *float32, t int, v *float32, stride int, n int)

func dotSIMD(a, b []float32) float32 { return vec.Dot(a, b) }

func axpySIMD(y []float32, a float32, x []float32) { vec.Axpy(y, a, x) }

func updateRowDotSIMD(row []float32, a, c float32, B, C []float32) float32 {
	n := len(row) &^ 7
	B = B[:len(row)]
	C = C[:len(row)]
	var s float32
	if n > 0 {
		s = updateRowDotAVX2(&row[0], a, c, &B[0], &C[0], n)
	}
	for i := n; i < len(row); i++ {
		r := a*row[i] + c*B[i]
		row[i] = r
		s += r * C[i]
	}
	return s
}

func rankUpdateSIMD(row []float32, decay float32, coef []float32, V []float32, stride int) {
	n := len(row) &^ 7
	t := len(coef)
	if t > 0 {
		_ = V[(t-1)*stride+len(row)-1] // bounds: every row of V the kernel reads
	}
	if n > 0 {
		var cp, vp *float32
		if t > 0 {
			cp, vp = &coef[0], &V[0]
		} else {
			vp = &row[0] // not read
		}
		rankUpdateAVX2(&row[0], decay, cp, t, vp, stride, n)
	}
	for i := n; i < len(row); i++ {
		r := decay * row[i]
		for j, c := range coef {
			r += c * V[j*stride+i]
		}
		row[i] = r
	}
}

//go:noescape
func dotRowsAVX512(s *float32, rows, n int, v *float32, out *float32)

//go:noescape
func dotRows128AVX512(s *float32, rows int, v *float32, out *float32)

//go:noescape
func dotRowsAVX2(s *float32, rows, n int, v *float32, out *float32)

//go:noescape
func rankUpdateRowsAVX2(s *float32, rows, n int, decay float32, coef *float32, t int, v *float32, vstride int)

//go:noescape
func rankUpdateRowsAVX512(s *float32, rows, n int, decay float32, coef *float32, t int, v *float32, vstride int)

//go:noescape
func updateRowsAVX2(s *float32, rows, n int, a float32, c *float32, b, cv *float32, out *float32)

func dotRowsSIMD(S []float32, n int, v []float32, out []float32) {
	rows := len(out)
	_ = S[rows*n-1]
	v = v[:n]
	r4 := rows &^ 3
	if simd512 && n == 128 && r4 >= 32 {
		// Whole state matrices (not a group's few ring B rows, where the
		// kernel's prefetch 4 KiB ahead would fetch lines nobody reads).
		dotRows128AVX512(&S[0], r4, &v[0], &out[0])
	} else if simd512 && n%16 == 0 && r4 > 0 {
		dotRowsAVX512(&S[0], r4, n, &v[0], &out[0])
	} else if n%8 == 0 && r4 > 0 {
		dotRowsAVX2(&S[0], r4, n, &v[0], &out[0])
	} else {
		r4 = 0
	}
	for p := r4; p < rows; p++ {
		out[p] = dotSIMD(S[p*n:(p+1)*n], v)
	}
}

func rankUpdateRowsSIMD(S []float32, n int, decay float32, coef []float32, t int, V []float32, vstride int) {
	rows := len(coef) / t
	_ = S[rows*n-1]
	_ = V[(t-1)*vstride+n-1]
	r2 := rows &^ 1
	if simd512 && n%16 == 0 && r2 > 0 {
		rankUpdateRowsAVX512(&S[0], r2, n, decay, &coef[0], t, &V[0], vstride)
	} else if n%8 == 0 && r2 > 0 {
		rankUpdateRowsAVX2(&S[0], r2, n, decay, &coef[0], t, &V[0], vstride)
	} else {
		r2 = 0
	}
	for p := r2; p < rows; p++ {
		rankUpdateSIMD(S[p*n:(p+1)*n], decay, coef[p*t:(p+1)*t], V, vstride)
	}
}

func updateRowsSIMD(S []float32, n int, a float32, c, B, C, out []float32) {
	rows := len(out)
	_ = S[rows*n-1]
	c = c[:rows]
	B, C = B[:n], C[:n]
	r2 := rows &^ 1
	if n%8 == 0 && r2 > 0 {
		updateRowsAVX2(&S[0], r2, n, a, &c[0], &B[0], &C[0], &out[0])
	} else {
		r2 = 0
	}
	for p := r2; p < rows; p++ {
		out[p] = updateRowDotSIMD(S[p*n:(p+1)*n], a, c[p], B, C)
	}
}

//go:noescape
func dotRowsNVFP4AVX512(codes, scales *byte, rows, n int, vEven, vOdd *float32, lut *float32, e2m1 *float32, global float32, out *float32)

//go:noescape
func dotRowsNVFP4PairAVX512(codes, scales *byte, rows, n int, vEven, vOdd *float32, lut *float32, e2m1 *float32, global float32, out *float32, wEven, wOdd *float32, out2 *float32)

//go:noescape
func dotRowsNVFP4Pair128AVX512(codes, scales *byte, blocks int, v, w *float32, e2m1 *float32, global float32, out, out2 *float32)

//go:noescape
func dotRowsNVFP4One128AVX512(codes, scales *byte, blocks int, v *float32, e2m1 *float32, global float32, out *float32)

//go:noescape
func dotRowsBF16AVX2(s *uint16, rows, n int, v *float32, out *float32)

//go:noescape
func dotRowsBF16128AVX512(s *uint16, rows int, v *float32, out *float32)

// simd512 reports whether the AVX-512 kernels (the nvfp4 read) run here.
var simd512 = simd && cpu.X86.HasAVX512F && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL

//go:noescape
func splitEvenOddAVX512(v, even, odd *float32, n int)

// dotRowsNVFP4SIMD writes out[p] = S_p·v for the nvfp4 matrix (codes,
// scales, global) of len(out) rows of n, splitting v into rb's even and odd
// halves first; it reports false where it cannot run.
func dotRowsNVFP4SIMD(codes, scales []byte, global float32, n int, v []float32, rb *readBuffers, out []float32) bool {
	if !simd512 || n%32 != 0 || len(out) == 0 {
		return false
	}
	rows := len(out)
	_ = codes[rows*n/2-1]
	_ = scales[rows*n/16-1]
	if n == 128 && rows%16 == 0 {
		dotRowsNVFP4One128AVX512(&codes[0], &scales[0], rows/16, &v[:n][0], &e2m1LUT[0], global, &out[0])
		return true
	}
	even, odd := rb.even[:n/2], rb.odd[:n/2]
	splitEvenOddAVX512(&v[:n][0], &even[0], &odd[0], n)
	dotRowsNVFP4AVX512(&codes[0], &scales[0], rows, n, &even[0], &odd[0], &e4m3LUT[0], &e2m1LUT[0], global, &out[0])
	return true
}

// dotRowsNVFP4PairSIMD is dotRowsNVFP4SIMD for two vectors v and w at once
// (out = S·v, out2 = S·w), each row decoded once.
func dotRowsNVFP4PairSIMD(codes, scales []byte, global float32, n int, v, w []float32, rb *readBuffers, out, out2 []float32) bool {
	if !simd512 || n%32 != 0 || len(out) == 0 {
		return false
	}
	rows := len(out)
	_ = codes[rows*n/2-1]
	_ = scales[rows*n/16-1]
	_ = out2[rows-1]
	if n == 128 && rows%16 == 0 {
		dotRowsNVFP4Pair128AVX512(&codes[0], &scales[0], rows/16, &v[:n][0], &w[:n][0], &e2m1LUT[0], global, &out[0], &out2[0])
		return true
	}
	even, odd, even2, odd2 := rb.even[:n/2], rb.odd[:n/2], rb.even2[:n/2], rb.odd2[:n/2]
	splitEvenOddAVX512(&v[:n][0], &even[0], &odd[0], n)
	splitEvenOddAVX512(&w[:n][0], &even2[0], &odd2[0], n)
	dotRowsNVFP4PairAVX512(&codes[0], &scales[0], rows, n, &even[0], &odd[0], &e4m3LUT[0], &e2m1LUT[0], global, &out[0], &even2[0], &odd2[0], &out2[0])
	return true
}

func dotRowsBF16SIMD(S []uint16, n int, v []float32, out []float32) bool {
	if !simd || n%16 != 0 || len(out) == 0 {
		return false
	}
	rows := len(out)
	_ = S[rows*n-1]
	_ = v[n-1]
	if r4 := rows &^ 3; simd512 && n == 128 && r4 >= 32 {
		dotRowsBF16128AVX512(&S[0], r4, &v[0], &out[0])
		if r4 < rows {
			dotRowsBF16AVX2(&S[r4*n], rows-r4, n, &v[0], &out[r4])
		}
		return true
	}
	dotRowsBF16AVX2(&S[0], rows, n, &v[0], &out[0])
	return true
}

//go:noescape
func decodeBF16AVX2(dst *float32, src *uint16, n int)

//go:noescape
func encodeBF16AVX2(dst *uint16, src *float32, n int)

func decodeBF16(dst []float32, src []uint16) {
	n := len(src) &^ 15
	if simd && n > 0 {
		_ = dst[len(src)-1]
		decodeBF16AVX2(&dst[0], &src[0], n)
	} else {
		n = 0
	}
	numeric.DecodeBF16(dst[n:len(src)], src[n:])
}

func encodeBF16(dst []uint16, src []float32) {
	n := len(src) &^ 15
	if simd && n > 0 {
		_ = dst[len(src)-1]
		encodeBF16AVX2(&dst[0], &src[0], n)
	} else {
		n = 0
	}
	numeric.EncodeBF16(dst[n:len(src)], src[n:])
}

//go:noescape
func absMaxAVX512(src *float32, n int) float32

//go:noescape
func quantizeNVFP4x16AVX512(src *float32, groups int, sixGlobal, global float32, packed, scales *byte)

//go:noescape
func quantizeNVFP4AVX512(src *float32, blocks int, sixGlobal, global float32, lut *float32, packed, scales *byte)

// quantizeNVFP4 is numeric.QuantizeNVFP4 for finite src whose length is a
// multiple of 16, bit for bit, with AVX-512 where the machine has it.
func quantizeNVFP4(packed []byte, scales []uint8, src []float32) float32 {
	n := len(src)
	if !simd512 || n == 0 || n%16 != 0 {
		return numeric.QuantizeNVFP4(packed, scales, src)
	}
	_ = packed[n/2-1]
	_ = scales[n/16-1]
	global := absMaxAVX512(&src[0], n) / (6 * 448)
	if global == 0 {
		clear(packed[:n/2])
		clear(scales[:n/16])
		return 0
	}
	blocks, b16 := n/16, n/16&^15
	if b16 > 0 {
		quantizeNVFP4x16AVX512(&src[0], b16/16, 6*global, global, &packed[0], &scales[0])
	}
	if b16 < blocks {
		quantizeNVFP4AVX512(&src[b16*16], blocks-b16, 6*global, global, &e4m3LUT[0], &packed[b16*8], &scales[b16])
	}
	return global
}

//go:noescape
func dotRowsMultiAVX512(s *float32, rows, n int, v *float32, nv int, out *float32, outRows int)

//go:noescape
func dotRowsPairAVX512(s *float32, rows, n int, v0, v1 *float32, out0, out1 *float32)

//go:noescape
func dotRowsPair128AVX512(s *float32, rows int, v0, v1 *float32, out0, out1 *float32)

// dotRowsMultiSIMD writes out[a·rows+p] = S_p·V_a for nv vectors stored
// contiguously (V_a = V[a·n:(a+1)·n]); it reports false where it cannot run.
func dotRowsMultiSIMD(S []float32, n int, V []float32, nv int, out []float32) bool {
	rows := len(out) / nv
	if simd512 && nv == 2 && n%16 == 0 && rows >= 4 {
		_ = S[rows*n-1]
		_ = V[2*n-1]
		r4 := rows &^ 3
		// Whole state matrices (not a key head's few ring keys, where the
		// kernel's prefetch 4 KiB ahead would fetch lines nobody reads).
		if n == 128 && r4 >= 32 {
			dotRowsPair128AVX512(&S[0], r4, &V[0], &V[n], &out[0], &out[rows])
		} else {
			dotRowsPairAVX512(&S[0], r4, n, &V[0], &V[n], &out[0], &out[rows])
		}
		for p := r4; p < rows; p++ {
			out[p] = dotSIMD(S[p*n:(p+1)*n], V[:n])
			out[rows+p] = dotSIMD(S[p*n:(p+1)*n], V[n:2*n])
		}
		return true
	}
	if !simd512 || n%16 != 0 || rows < 2 || nv < 4 {
		return false
	}
	_ = S[rows*n-1]
	_ = V[nv*n-1]
	r2, v4 := rows&^1, nv&^3
	dotRowsMultiAVX512(&S[0], r2, n, &V[0], v4, &out[0], rows)
	// The last row and vectors the blocks did not cover.
	if r2 < rows {
		for a := 0; a < v4; a++ {
			out[a*rows+rows-1] = dotSIMD(S[(rows-1)*n:rows*n], V[a*n:(a+1)*n])
		}
	}
	for a := v4; a < nv; a++ {
		dotRowsSIMD(S, n, V[a*n:(a+1)*n], out[a*rows:(a+1)*rows])
	}
	return true
}

//go:noescape
func updateRowsBF16AVX2(s *uint16, rows, n int, a float32, c *float32, b, cv *float32, out *float32)

// updateRowsBF16 is decodeBF16, updateRows and encodeBF16 fused over a bf16
// state, with the same result; it reports false where it cannot run.
func updateRowsBF16(S []uint16, n int, a float32, c, B, C, out []float32) bool {
	rows := len(out)
	if !simd || n%16 != 0 || rows == 0 {
		return false
	}
	_ = S[rows*n-1]
	c = c[:rows]
	B, C = B[:n], C[:n]
	if simd512 && n%32 == 0 {
		updateRowsBF16AVX512(&S[0], rows, n, a, &c[0], &B[0], &C[0], &out[0])
		return true
	}
	updateRowsBF16AVX2(&S[0], rows, n, a, &c[0], &B[0], &C[0], &out[0])
	return true
}

//go:noescape
func prefetchLinesAsm(p *float32, n int)

// prefetch asks for every cache line of v ahead of its use: the ring rows a
// head will read next, which start a new short run (a DRAM latency and a TLB
// miss that no hardware prefetcher sees coming).
func prefetch(v []float32) {
	if len(v) > 0 {
		prefetchLinesAsm(&v[0], len(v))
	}
}

//go:noescape
func gdnOutAVX512(vt, sk, sq, u, ck, cq *float32, t, n int, gt, beta, cqt float32, ut, o *float32)

// gdnOutSIMD is gdnOutGo with AVX-512; it reports false where it cannot run.
func gdnOutSIMD(vt, sk, sq, U, ck, cq []float32, gt, beta, cqt float32, ut, o []float32) bool {
	n, t := len(o), len(ck)
	if !simd512 || n%64 != 0 || n == 0 {
		return false
	}
	vt, sk, sq, ut = vt[:n], sk[:n], sq[:n], ut[:n]
	cq = cq[:t]
	up := &vt[0] // not read when t = 0
	if t > 0 {
		_ = U[t*n-1]
		up = &U[0]
		gdnOutAVX512(&vt[0], &sk[0], &sq[0], up, &ck[0], &cq[0], t, n, gt, beta, cqt, &ut[0], &o[0])
		return true
	}
	gdnOutAVX512(&vt[0], &sk[0], &sq[0], up, up, up, 0, n, gt, beta, cqt, &ut[0], &o[0])
	return true
}

//go:noescape
func gdnFoldUAVX512(v, p, coef, gs, beta *float32, t, n int, u *float32)

// gdnFoldUSIMD is gdnFoldUGo with AVX-512; it reports false where it cannot
// run.
func gdnFoldUSIMD(V, P, coef, g, beta []float32, t, n int, U []float32) bool {
	if !simd512 || n%128 != 0 || n == 0 || t == 0 {
		return false
	}
	_ = V[t*n-1]
	_ = P[t*n-1]
	_ = U[t*n-1]
	_ = coef[t*t-1]
	_ = g[t-1]
	_ = beta[t-1]
	gdnFoldUAVX512(&V[0], &P[0], &coef[0], &g[0], &beta[0], t, n, &U[0])
	return true
}

//go:noescape
func sumSquaresAVX512(x *float32, n int) float64

//go:noescape
func scaleToAVX512(dst, x *float32, n int, r float32)

// sumSquares returns Σ x[i]² accumulated in float64.
func sumSquares(x []float32) float64 {
	if simd512 && len(x) > 0 && len(x)%16 == 0 {
		return sumSquaresAVX512(&x[0], len(x))
	}
	return sumSquaresGo(x)
}

//go:noescape
func scaleAdd2AVX512(dst, x, y *float32, n int, a, b float32)

// scaleAdd2 does dst[i] = a·x[i] + b·y[i], rounded as scaleAdd2Go rounds it.
func scaleAdd2(dst, x, y []float32, a, b float32) {
	if simd512 && len(x) > 0 && len(x)%16 == 0 {
		_ = dst[len(x)-1]
		_ = y[len(x)-1]
		scaleAdd2AVX512(&dst[0], &x[0], &y[0], len(x), a, b)
		return
	}
	scaleAdd2Go(dst, x, y, a, b)
}

// scaleTo does dst[i] = r·x[i].
func scaleTo(dst, x []float32, r float32) {
	if simd512 && len(x) > 0 && len(x)%16 == 0 {
		_ = dst[len(x)-1]
		scaleToAVX512(&dst[0], &x[0], len(x), r)
		return
	}
	scaleToGo(dst, x, r)
}

//go:noescape
func rankUpdateDotRowsAVX512(s *float32, rows, n int, decay float32, coefT *float32, cstride, t int, v *float32, vstride int, c, out *float32)

// rankUpdateDotRowsSIMD is rankUpdateDotRowsGo with AVX-512 for even row
// pairs, or AVX2 (rankUpdateDotRowsAVX2); it reports false where it cannot
// run.
func rankUpdateDotRowsSIMD(S []float32, rows, n int, decay float32, coefT []float32, cs, t int, V []float32, vstride int, C, out []float32) bool {
	if !simd512 {
		return rankUpdateDotRowsAVX2(S, rows, n, decay, coefT, cs, t, V, vstride, C, out)
	}
	if n%16 != 0 || n == 0 || t < 1 || rows < 2 {
		return false
	}
	_ = S[rows*n-1]
	_ = coefT[(t-1)*cs+rows-1]
	_ = V[(t-1)*vstride+n-1]
	r2 := rows &^ 1
	var cp, op *float32
	if out != nil {
		_ = C[n-1]
		_ = out[rows-1]
		cp, op = &C[0], &out[0]
	}
	rankUpdateDotRowsAVX512(&S[0], r2, n, decay, &coefT[0], cs, t, &V[0], vstride, cp, op)
	if r2 < rows {
		p := r2
		row := S[p*n : (p+1)*n]
		scaleRow(row, decay)
		for j := 0; j < t; j++ {
			axpy(row, coefT[j*cs+p], V[j*vstride:j*vstride+n])
		}
		if out != nil {
			out[p] = dot(row, C[:n])
		}
	}
	return true
}

// rankUpdateBlock is the rows rankUpdateDotRowsAVX2 hands rankUpdateRowsAVX2
// at a time, its coefficients transposed into a stack buffer.
const rankUpdateBlock = 8

// rankUpdateDotRowsAVX2 is rankUpdateDotRowsGo for CPUs with AVX2 and FMA
// but not AVX-512 (without it the Gated DeltaNet flush, whose rank-t update
// this is, ran in plain Go: on a 2-core AVX2 EPYC, Qwen3.5-4B fp32 at batch
// 64, a flush step took 660-780 ms against a 15 ms baseline step; 37-48
// ms with it, and a verify of 4 drafts 180-200 -> 36-39 ms). The
// coefficient columns coefT[j·cs+p] are transposed a block of rows at a
// time into rankUpdateRowsAVX2's row-major layout, and the output dots
// read each block right after its update, while it is in L1. It reports
// false where it cannot run (no AVX2, n not a multiple of 8, t beyond
// MaxDraftLimit plus the largest window).
func rankUpdateDotRowsAVX2(S []float32, rows, n int, decay float32, coefT []float32, cs, t int, V []float32, vstride int, C, out []float32) bool {
	const maxT = 256 + MaxDraftLimit
	if !simd || n%8 != 0 || n == 0 || t < 1 || t > maxT || rows < 2 {
		return false
	}
	_ = S[rows*n-1]
	_ = coefT[(t-1)*cs+rows-1]
	_ = V[(t-1)*vstride+n-1]
	if out != nil {
		_ = C[n-1]
		_ = out[rows-1]
	}
	var coef [rankUpdateBlock * maxT]float32
	for p0 := 0; p0 < rows; p0 += rankUpdateBlock {
		nr := min(rankUpdateBlock, rows-p0)
		for p := 0; p < nr; p++ {
			for j := 0; j < t; j++ {
				coef[p*t+j] = coefT[j*cs+p0+p]
			}
		}
		blk := S[p0*n : (p0+nr)*n]
		if r2 := nr &^ 1; r2 > 0 {
			rankUpdateRowsAVX2(&blk[0], r2, n, decay, &coef[0], t, &V[0], vstride)
		}
		if nr&1 == 1 {
			p := nr - 1
			rankUpdateSIMD(blk[p*n:(p+1)*n], decay, coef[p*t:(p+1)*t], V, vstride)
		}
		if out != nil {
			dotRowsSIMD(blk, n, C[:n], out[p0:p0+nr])
		}
	}
	return true
}

package replay

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/replayssm/replayssm/numeric"
)

// TestKernels checks every row kernel, SIMD and plain Go, against float64
// sums on random vectors of lengths around the SIMD block sizes (so the
// assembly loops and the Go tails both run). Tolerance: a float32 sum of n
// products has error ≲ n·2^-24·Σ|terms|; we allow 1e-5 relative to Σ|terms|.
func TestKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	vec := func(n int) []float32 { return normals(rng, n) }
	type impl struct {
		name       string
		dot        func(a, b []float32) float32
		axpy       func(y []float32, a float32, x []float32)
		update     func(row []float32, a, c float32, B, C []float32) float32
		rankUpdate func(row []float32, decay float32, coef, V []float32, stride int)
	}
	impls := []impl{{"go", dotGo, axpyGo, updateRowDotGo, rankUpdateGo}}
	if simd {
		impls = append(impls, impl{"simd", dotSIMD, axpySIMD, updateRowDotSIMD, rankUpdateSIMD})
	} else {
		t.Log("no SIMD kernels on this machine: testing the plain-Go kernels only")
	}
	close := func(what string, got float32, want, scale float64) {
		t.Helper()
		if math.Abs(float64(got)-want) > 1e-5*scale+1e-30 {
			t.Fatalf("%s: got %v want %v (scale %v)", what, got, want, scale)
		}
	}
	for _, im := range impls {
		for _, n := range []int{1, 7, 8, 9, 31, 32, 33, 64, 80, 127, 128, 129, 300} {
			a, b, c := vec(n), vec(n), vec(n)
			want, scale := 0.0, 0.0
			for i := range a {
				want += float64(a[i]) * float64(b[i])
				scale += math.Abs(float64(a[i]) * float64(b[i]))
			}
			close(im.name+" dot", im.dot(a, b), want, scale)

			y := append([]float32(nil), a...)
			im.axpy(y, 0.7, b)
			for i := range y {
				close(im.name+" axpy", y[i], float64(a[i])+0.7*float64(b[i]), 1+math.Abs(float64(a[i])))
			}

			row := append([]float32(nil), a...)
			got := im.update(row, 0.9, -0.3, b, c)
			want, scale = 0, 0
			for i := range row {
				r := 0.9*float64(a[i]) - 0.3*float64(b[i])
				close(im.name+" update row", row[i], r, 1+math.Abs(r))
				want += r * float64(c[i])
				scale += math.Abs(r * float64(c[i]))
			}
			close(im.name+" update dot", got, want, scale)

			for _, tt := range []int{0, 1, 5, 17} {
				stride := n + 3
				V := vec(tt*stride + n)
				coef := vec(tt)
				row := append([]float32(nil), a...)
				im.rankUpdate(row, 0.8, coef, V, stride)
				for i := range row {
					r, s := 0.8*float64(a[i]), math.Abs(0.8*float64(a[i]))
					for j := 0; j < tt; j++ {
						r += float64(coef[j]) * float64(V[j*stride+i])
						s += math.Abs(float64(coef[j]) * float64(V[j*stride+i]))
					}
					close(im.name+" rank update", row[i], r, s)
				}
			}
		}
	}
}

func BenchmarkDot128(b *testing.B) {
	x, y := make([]float32, 128), make([]float32, 128)
	for i := range x {
		x[i], y[i] = float32(i), float32(128-i)
	}
	b.SetBytes(2 * 4 * 128)
	var s float32
	for b.Loop() {
		s += dot(x, y)
	}
	_ = s
}

// TestMatrixKernels checks the whole-matrix kernels (SIMD where present,
// else plain Go) against float64 on shapes that exercise the 4-row and 2-row
// blocks, their remainders and column tails, and the rows-of-128 read (32
// rows or more: 37 leaves a tail row, 31 takes the general kernel). Same
// tolerance as TestKernels.
func TestMatrixKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	vec := func(n int) []float32 { return normals(rng, n) }
	for _, rows := range []int{1, 2, 3, 4, 5, 7, 8, 31, 37, 64, 80} {
		for _, n := range []int{8, 13, 16, 40, 64, 128} {
			S, v := vec(rows*n), vec(n)
			out := make([]float32, rows)
			poison(out)
			dotRows(S, n, v, out)
			for p := 0; p < rows; p++ {
				want, scale := 0.0, 0.0
				for i := 0; i < n; i++ {
					want += float64(S[p*n+i]) * float64(v[i])
					scale += math.Abs(float64(S[p*n+i]) * float64(v[i]))
				}
				if math.Abs(float64(out[p])-want) > 1e-5*scale {
					t.Fatalf("dotRows rows %d n %d: out[%d] = %v, want %v", rows, n, p, out[p], want)
				}
			}
			for _, tt := range []int{1, 3, 16} {
				vs := n + 5
				V, coef := vec(tt*vs), vec(rows*tt)
				got := append([]float32(nil), S...)
				rankUpdateRows(got, n, 0.75, coef, tt, V, vs)
				for p := 0; p < rows; p++ {
					for i := 0; i < n; i++ {
						want, scale := 0.75*float64(S[p*n+i]), math.Abs(0.75*float64(S[p*n+i]))
						for j := 0; j < tt; j++ {
							want += float64(coef[p*tt+j]) * float64(V[j*vs+i])
							scale += math.Abs(float64(coef[p*tt+j]) * float64(V[j*vs+i]))
						}
						if math.Abs(float64(got[p*n+i])-want) > 1e-5*scale {
							t.Fatalf("rankUpdateRows rows %d n %d t %d: [%d][%d] = %v, want %v", rows, n, tt, p, i, got[p*n+i], want)
						}
					}
				}
			}
			c, B, C := vec(rows), vec(n), vec(n)
			got := append([]float32(nil), S...)
			poison(out)
			updateRows(got, n, 0.9, c, B, C, out)
			for p := 0; p < rows; p++ {
				want, scale := 0.0, 0.0
				for i := 0; i < n; i++ {
					r := 0.9*float64(S[p*n+i]) + float64(c[p])*float64(B[i])
					if math.Abs(float64(got[p*n+i])-r) > 1e-5*(math.Abs(r)+1) {
						t.Fatalf("updateRows row %d col %d: %v want %v", p, i, got[p*n+i], r)
					}
					want += r * float64(C[i])
					scale += math.Abs(r * float64(C[i]))
				}
				if math.Abs(float64(out[p])-want) > 1e-5*scale {
					t.Fatalf("updateRows rows %d n %d: out[%d] = %v, want %v", rows, n, p, out[p], want)
				}
			}
		}
	}
}

// TestReadDots checks the output read in every stored format against a
// float64 dot of the decoded matrix (the decode is numeric's exact one, so
// the only differences are float32 summation order): 1e-5 of Σ|terms|.
func TestReadDots(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	for _, f := range []numeric.Format{numeric.F32, numeric.F16, numeric.BF16, numeric.E4M3, numeric.NVFP4} {
		for _, dims := range [][2]int{{80, 128}, {64, 128}, {37, 128}, {35, 128}, {7, 64}, {5, 32}, {3, 48}, {6, 96}, {2, 192}} {
			rows, n := dims[0], dims[1]
			m, err := newMatrices(f, rows*n, 2)
			if err != nil {
				t.Fatal(err)
			}
			src := make([]float32, rows*n)
			for i := range src {
				src[i] = float32(rng.NormFloat64() * math.Exp(rng.NormFloat64()))
			}
			m.store(1, src, nil)
			dec := make([]float32, rows*n)
			m.load(1, dec)
			const nv, vstride = 3, 200
			V := make([]float32, nv*vstride)
			for i := range V {
				V[i] = float32(rng.NormFloat64())
			}
			out := make([]float32, nv*rows)
			poison(out)
			rb := newReadBuffers(rows*n, n)
			readDots(m, 1, rows, n, V, vstride, nv, out, &rb)
			checkDots(t, fmt.Sprintf("%v %dx%d", f, rows, n), dec, rows, n, V, vstride, nv, out)
		}
	}
}

// checkDots requires out[a·rows+p] = dec_p · V_a (rows of n elements of
// the decoded matrix dec, vectors vstride apart) within 1e-5 of Σ|terms|,
// computed in float64: the accumulation-order error of float32 sums.
func checkDots(t *testing.T, what string, dec []float32, rows, n int, V []float32, vstride, nv int, out []float32) {
	t.Helper()
	for a := 0; a < nv; a++ {
		for p := 0; p < rows; p++ {
			want, scale := 0.0, 0.0
			for i := 0; i < n; i++ {
				x := float64(dec[p*n+i]) * float64(V[a*vstride+i])
				want += x
				scale += math.Abs(x)
			}
			if got := float64(out[a*rows+p]); math.Abs(got-want) > 1e-5*scale+1e-30 || math.IsNaN(got) {
				t.Fatalf("%s: vector %d row %d: got %v want %v", what, a, p, got, want)
			}
		}
	}
}

// TestBF16Codec checks the SIMD bf16 conversions against package numeric's
// exact ones, bit for bit, on random bit patterns (ties, subnormals, NaN and
// infinities included) and lengths with tails.
func TestBF16Codec(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, n := range []int{1, 15, 16, 17, 64, 1000} {
		src := make([]float32, n)
		for i := range src {
			bits := rng.Uint32()
			if i%7 == 0 {
				bits = bits&0xffff0000 | 0x8000 // a tie
			}
			src[i] = math.Float32frombits(bits)
		}
		got := make([]uint16, n)
		encodeBF16(got, src)
		for i, v := range src {
			if want := numeric.BF16FromF32(v); got[i] != want {
				t.Fatalf("encode %08x: got %04x want %04x", math.Float32bits(v), got[i], want)
			}
		}
		dec := make([]float32, n)
		decodeBF16(dec, got)
		for i, h := range got {
			if want := numeric.F32FromBF16(h); math.Float32bits(dec[i]) != math.Float32bits(want) {
				t.Fatalf("decode %04x: got %v want %v", h, dec[i], want)
			}
		}
	}
}

// TestQuantizeNVFP4 checks the read copy's NVFP4 quantiser against package
// numeric's, bit for bit: codes, block scales and the global scale, on
// finite data with zero blocks, tiny blocks (subnormal e4m3 scales) and
// values spread over many binades.
func TestQuantizeNVFP4(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for trial := 0; trial < 200; trial++ {
		n := 16 * (1 + rng.IntN(64))
		src := make([]float32, n)
		for i := range src {
			src[i] = float32(rng.NormFloat64() * math.Exp(3*rng.NormFloat64()))
		}
		for b := 0; b < n/16; b++ {
			switch rng.IntN(6) {
			case 0:
				clear(src[b*16 : (b+1)*16])
			case 1:
				for i := b * 16; i < (b+1)*16; i++ {
					src[i] *= 1e-7
				}
			}
		}
		checkQuantizeNVFP4(t, trial, src)
	}
}

// TestDotRowsMulti checks the multi-vector read against float64 on shapes
// that leave row and vector remainders.
func TestDotRowsMulti(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	for _, rows := range []int{1, 2, 3, 8, 128} {
		for _, nv := range []int{1, 2, 4, 5, 17} {
			for _, n := range []int{16, 24, 128} {
				S, V := make([]float32, rows*n), make([]float32, nv*n)
				for i := range S {
					S[i] = float32(rng.NormFloat64())
				}
				for i := range V {
					V[i] = float32(rng.NormFloat64())
				}
				out := make([]float32, nv*rows)
				poison(out)
				dotRowsMulti(S, n, V, nv, out)
				for a := 0; a < nv; a++ {
					for p := 0; p < rows; p++ {
						want, scale := 0.0, 0.0
						for i := 0; i < n; i++ {
							want += float64(S[p*n+i]) * float64(V[a*n+i])
							scale += math.Abs(float64(S[p*n+i]) * float64(V[a*n+i]))
						}
						if got := float64(out[a*rows+p]); !(math.Abs(got-want) <= 1e-5*scale) {
							t.Fatalf("rows %d nv %d n %d: out[%d][%d] = %v, want %v", rows, nv, n, a, p, got, want)
						}
					}
				}
			}
		}
	}
}

// TestUpdateRowsHalf checks the fused bf16 and fp16 updates against the
// unfused path (decode, updateRows, encode) bit for bit in the state and
// within float32 summation order in the outputs.
func TestUpdateRowsHalf(t *testing.T) {
	formats := []struct {
		name   string
		enc    func([]uint16, []float32)
		dec    func([]float32, []uint16)
		update func(S []uint16, n int, a float32, c, B, C, out []float32) bool
	}{
		{"bf16", numeric.EncodeBF16, numeric.DecodeBF16, updateRowsBF16},
		{"fp16", numeric.EncodeF16, numeric.DecodeF16, updateRowsF16},
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for _, f := range formats {
		for _, dims := range [][2]int{{80, 128}, {3, 16}, {5, 64}} {
			rows, n := dims[0], dims[1]
			src := make([]float32, rows*n)
			for i := range src {
				src[i] = float32(rng.NormFloat64() * 3)
			}
			S := make([]uint16, rows*n)
			f.enc(S, src)
			c, B, C := make([]float32, rows), make([]float32, n), make([]float32, n)
			for i := range c {
				c[i] = float32(rng.NormFloat64())
			}
			for i := range B {
				B[i], C[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
			}
			// NaNs with payloads in two columns, in both halves of the
			// kernels' blocks: the rounding must canonicalise them as
			// numeric does.
			B[5], B[n-3] = math.Float32frombits(0x7f812345), math.Float32frombits(0xff834567)
			want := make([]float32, rows*n)
			f.dec(want, S)
			wantOut := make([]float32, rows)
			updateRows(want, n, 0.93, c, B, C, wantOut) // the path the fused kernel replaces
			wantS := make([]uint16, rows*n)
			f.enc(wantS, want)
			out := make([]float32, rows)
			poison(out)
			if !f.update(S, n, 0.93, c, B, C, out) {
				t.Logf("%s: no fused kernel on this machine", f.name)
				continue
			}
			for i := range S {
				if S[i] != wantS[i] {
					t.Fatalf("%s %dx%d: state[%d] = %#04x, want %#04x", f.name, rows, n, i, S[i], wantS[i])
				}
			}
			for p := range out {
				if !math.IsNaN(float64(out[p])) {
					t.Fatalf("%s %dx%d: out[%d] = %v, want NaN (the row holds NaNs)", f.name, rows, n, p, out[p])
				}
			}
			// The outputs once more without the NaNs.
			B[5], B[n-3] = 1, -1
			f.enc(S, src)
			f.dec(want, S)
			updateRows(want, n, 0.93, c, B, C, wantOut)
			f.update(S, n, 0.93, c, B, C, out)
			for p := range out {
				if math.Abs(float64(out[p]-wantOut[p])) > 1e-4*(1+math.Abs(float64(wantOut[p]))) {
					t.Fatalf("%s %dx%d: out[%d] = %v, want %v", f.name, rows, n, p, out[p], wantOut[p])
				}
			}
		}
	}
}

// TestCombine checks combine (y += Σ_j coef[j]·V_j) against float64 on
// lengths that cover whole and partial 128-column blocks of the AVX-512
// kernel, a row stride longer than y, and the plain-Go tails.
func TestCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, n := range []int{8, 16, 24, 64, 80, 128, 144, 256, 272, 400} {
		for _, tt := range []int{1, 2, 5, 16, 17} {
			stride := n + 16*rng.IntN(3)
			y, V, coef := make([]float32, n), make([]float32, (tt-1)*stride+n), make([]float32, tt)
			for i := range y {
				y[i] = float32(rng.NormFloat64())
			}
			for i := range V {
				V[i] = float32(rng.NormFloat64())
			}
			for i := range coef {
				coef[i] = float32(rng.NormFloat64())
			}
			want, scale := make([]float64, n), make([]float64, n)
			for i := range y {
				want[i], scale[i] = float64(y[i]), math.Abs(float64(y[i]))
				for j, c := range coef {
					x := float64(c) * float64(V[j*stride+i])
					want[i] += x
					scale[i] += math.Abs(x)
				}
			}
			combine(y, coef, V, stride)
			for i := range y {
				if math.Abs(float64(y[i])-want[i]) > 1e-5*scale[i] {
					t.Fatalf("n %d t %d stride %d: y[%d] = %v, want %v", n, tt, stride, i, y[i], want[i])
				}
			}
		}
	}
}

// TestGDNOut checks the fused GDN output kernel, SIMD and plain Go, against
// float64 on random rows (widths the AVX-512 blocks take and one they do not).
func TestGDNOut(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 1))
	vec := func(n int) []float32 { return normals(rng, n) }
	for _, f := range []struct {
		name string
		fn   func(vt, sk, sq, U, ck, cq []float32, gt, beta, cqt float32, ut, o []float32)
	}{{"go", gdnOutGo}, {"dispatch", gdnOut}} {
		for _, n := range []int{64, 80, 128, 192} {
			for _, tt := range []int{0, 1, 5, 17} {
				vt, sk, sq, U, ck, cq := vec(n), vec(n), vec(n), vec(tt*n), vec(tt), vec(tt)
				const gt, beta, cqt = 0.7, 0.4, -0.3
				ut, o := make([]float32, n), make([]float32, n)
				f.fn(vt, sk, sq, U, ck, cq, gt, beta, cqt, ut, o)
				for m := 0; m < n; m++ {
					a := float64(vt[m]) - gt*float64(sk[m])
					b := gt * float64(sq[m])
					sa, sb := math.Abs(float64(vt[m]))+math.Abs(gt*float64(sk[m])), math.Abs(gt*float64(sq[m]))
					for i := 0; i < tt; i++ {
						a += float64(ck[i]) * float64(U[i*n+m])
						b += float64(cq[i]) * float64(U[i*n+m])
						sa += math.Abs(float64(ck[i]) * float64(U[i*n+m]))
						sb += math.Abs(float64(cq[i]) * float64(U[i*n+m]))
					}
					u := float64(float32(beta)) * a
					ob := b + float64(float32(cqt))*u
					if math.Abs(float64(ut[m])-u) > 1e-5*sa || math.Abs(float64(o[m])-ob) > 1e-5*(sb+sa) {
						t.Fatalf("%s n=%d t=%d m=%d: u %v want %v, o %v want %v", f.name, n, tt, m, ut[m], u, o[m], ob)
					}
				}
			}
		}
	}
}

// TestGDNFoldU checks the fold's u' recurrence, SIMD and plain Go, against
// float64 run on the kernel's own earlier rows (so each row is checked for
// its own rounding only).
func TestGDNFoldU(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 2))
	vec := func(n int) []float32 { return normals(rng, n) }
	for _, f := range []struct {
		name string
		fn   func(V, P, coef, g, beta []float32, tt, n int, U []float32)
	}{{"go", gdnFoldUGo}, {"dispatch", gdnFoldU}} {
		for _, n := range []int{64, 128, 256} {
			for _, tt := range []int{1, 2, 5, 16, 17} {
				V, P, coef, g, beta := vec(tt*n), vec(tt*n), vec(tt*tt), vec(tt), vec(tt)
				U := make([]float32, tt*n)
				poison(U)
				f.fn(V, P, coef, g, beta, tt, n, U)
				for i := 0; i < tt; i++ {
					for m := 0; m < n; m++ {
						a := float64(V[i*n+m]) - float64(g[i])*float64(P[i*n+m])
						sa := math.Abs(float64(V[i*n+m])) + math.Abs(float64(g[i])*float64(P[i*n+m]))
						for l := 0; l < i; l++ {
							a += float64(coef[i*tt+l]) * float64(U[l*n+m])
							sa += math.Abs(float64(coef[i*tt+l]) * float64(U[l*n+m]))
						}
						u := float64(beta[i]) * a
						if math.Abs(float64(U[i*n+m])-u) > 1e-5*math.Abs(float64(beta[i]))*sa {
							t.Fatalf("%s n=%d t=%d i=%d m=%d: u %v want %v", f.name, n, tt, i, m, U[i*n+m], u)
						}
					}
				}
			}
		}
	}
}

// TestSumSquaresScaleTo checks the l2norm kernels against float64 and the
// plain-Go loops.
func TestSumSquaresScaleTo(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 1))
	for _, n := range []int{1, 15, 16, 64, 100, 128, 256} {
		x := make([]float32, n)
		want := 0.0
		for i := range x {
			x[i] = float32(rng.NormFloat64())
			want += float64(x[i]) * float64(x[i])
		}
		if got := sumSquares(x); math.Abs(got-want) > 1e-12*want {
			t.Fatalf("n=%d: sumSquares %v want %v", n, got, want)
		}
		dst, ref := make([]float32, n), make([]float32, n)
		scaleTo(dst, x, 0.37)
		scaleToGo(ref, x, 0.37)
		for i := range dst {
			if dst[i] != ref[i] {
				t.Fatalf("n=%d: scaleTo[%d] %v want %v", n, i, dst[i], ref[i])
			}
		}
		y := make([]float32, n)
		for i := range y {
			y[i] = float32(rng.NormFloat64())
		}
		scaleAdd2(dst, x, y, 0.37, -1.9)
		scaleAdd2Go(ref, x, y, 0.37, -1.9)
		for i := range dst {
			if dst[i] != ref[i] {
				t.Fatalf("n=%d: scaleAdd2[%d] %v want %v", n, i, dst[i], ref[i])
			}
		}
	}
}

// TestReadDotsNVFP4Codes checks the nvfp4 output read on raw codes and
// scale codes drawn at random (subnormal, zero and negative scales included,
// NaN scale codes excluded) against a float64 dot of numeric's decode, for
// one and two vectors and row counts that take every kernel's row loops.
// TestReadDotsNVFP4Codes checks the nvfp4 row dots (the 128-wide kernels and
// the general ones) on random raw codes and block scales (subnormal and zero
// scales included) against float64, for one, two and three vectors.
func TestReadDotsNVFP4Codes(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, dims := range [][2]int{{128, 128}, {80, 128}, {16, 128}, {17, 128}, {6, 96}, {3, 32}} {
		rows, n := dims[0], dims[1]
		m, err := newMatrices(numeric.NVFP4, rows*n, 3)
		if err != nil {
			t.Fatal(err)
		}
		for i := range m.u8 {
			m.u8[i] = uint8(rng.Uint32())
		}
		for i := range m.scales {
			c := uint8(rng.Uint32())
			if i%5 == 0 {
				c &= 0x87 // subnormal (or zero) scales
			}
			if c&0x7f == 0x7f {
				c = 0x7e
			}
			m.scales[i] = c
		}
		for i := range m.scale {
			m.scale[i] = float32(rng.Float64()) / 448
		}
		dec := make([]float32, rows*n)
		m.load(1, dec)
		for _, nv := range []int{1, 2, 3} {
			V := make([]float32, nv*n)
			for i := range V {
				V[i] = float32(rng.NormFloat64())
			}
			out := make([]float32, nv*rows)
			poison(out)
			rb := newReadBuffers(rows*n, n)
			readDots(m, 1, rows, n, V, n, nv, out, &rb)
			checkDots(t, fmt.Sprintf("%dx%d, %d vectors", rows, n, nv), dec, rows, n, V, n, nv, out)
		}
	}
}

// TestRankUpdateDotRows checks the fused flush kernel (rank-t update with
// column-major coefficients and the output read), dispatched and plain Go,
// against float64: 1e-5 of Σ|terms| for each element and each output.
func TestRankUpdateDotRows(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	vec := func(n int) []float32 { return normals(rng, n) }
	impls := []struct {
		name string
		f    func(S []float32, rows, n int, decay float32, coefT []float32, cs, t int, V []float32, vstride int, C, out []float32)
	}{{"dispatch", rankUpdateDotRows}, {"go", rankUpdateDotRowsGo}}
	if avx2 := rankUpdateDotRowsAVX2Test; avx2 != nil {
		impls = append(impls, struct {
			name string
			f    func(S []float32, rows, n int, decay float32, coefT []float32, cs, t int, V []float32, vstride int, C, out []float32)
		}{"avx2", avx2})
	}
	for _, im := range impls {
		for _, rows := range []int{1, 2, 3, 5, 8, 64, 80} {
			for _, n := range []int{8, 16, 48, 64, 80, 128, 144} {
				for _, tt := range []int{1, 3, 16, 17} {
					for _, withOut := range []bool{false, true} {
						S := vec(rows * n)
						cs, vs := rows+3, n+5
						coefT, V, C := vec(tt*cs), vec(tt*vs), vec(n)
						got := append([]float32(nil), S...)
						var out []float32
						if withOut {
							out = make([]float32, rows)
							poison(out)
						}
						im.f(got, rows, n, 0.75, coefT, cs, tt, V, vs, C, out)
						for p := 0; p < rows; p++ {
							dw, ds := 0.0, 0.0
							for i := 0; i < n; i++ {
								want, scale := 0.75*float64(S[p*n+i]), math.Abs(0.75*float64(S[p*n+i]))
								for j := 0; j < tt; j++ {
									want += float64(coefT[j*cs+p]) * float64(V[j*vs+i])
									scale += math.Abs(float64(coefT[j*cs+p]) * float64(V[j*vs+i]))
								}
								if math.Abs(float64(got[p*n+i])-want) > 1e-5*scale {
									t.Fatalf("%s rows %d n %d t %d: [%d][%d] = %v, want %v", im.name, rows, n, tt, p, i, got[p*n+i], want)
								}
								dw += want * float64(C[i])
								ds += scale * math.Abs(float64(C[i]))
							}
							if withOut && math.Abs(float64(out[p])-dw) > 1e-5*ds {
								t.Fatalf("%s rows %d n %d t %d: out[%d] = %v, want %v", im.name, rows, n, tt, p, out[p], dw)
							}
						}
					}
				}
			}
		}
	}
}

// TestQuantizeNVFP4Groups runs the 16-block quantiser (with the per-block
// one for the rest) on matrices of up to 200 blocks whose blocks span six
// decades below the matrix maximum, so every subnormal e4m3 scale code and
// zero-scale blocks occur; bit-identical to numeric.
func TestQuantizeNVFP4Groups(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	for trial := 0; trial < 300; trial++ {
		n := 16 * (1 + rng.IntN(200))
		src := make([]float32, n)
		for b := 0; b < n/16; b++ {
			sc := math.Pow(10, -6*rng.Float64())
			if rng.IntN(10) == 0 {
				sc = 0
			}
			for i := b * 16; i < (b+1)*16; i++ {
				src[i] = float32(rng.NormFloat64() * sc)
			}
		}
		checkQuantizeNVFP4(t, trial, src)
	}
}

func poisonBytes(b []byte) {
	for i := range b {
		b[i] = 0xa5
	}
}

// checkQuantizeNVFP4 requires the cache's nvfp4 quantiser to give package
// numeric's global scale, block scales and codes for src, bit for bit, into
// poisoned outputs.
func checkQuantizeNVFP4(t *testing.T, trial int, src []float32) {
	t.Helper()
	n := len(src)
	gotP, wantP := make([]byte, n/2), make([]byte, n/2)
	gotS, wantS := make([]uint8, n/16), make([]uint8, n/16)
	poisonBytes(gotP)
	poisonBytes(gotS)
	g := quantizeNVFP4(gotP, gotS, src)
	w := numeric.QuantizeNVFP4(wantP, wantS, src)
	if math.Float32bits(g) != math.Float32bits(w) {
		t.Fatalf("trial %d: global %v, want %v", trial, g, w)
	}
	for i := range wantS {
		if gotS[i] != wantS[i] {
			t.Fatalf("trial %d block %d: scale %#x, want %#x", trial, i, gotS[i], wantS[i])
		}
	}
	for i := range wantP {
		if gotP[i] != wantP[i] {
			t.Fatalf("trial %d byte %d: codes %#x, want %#x (x=%v %v)", trial, i, gotP[i], wantP[i], src[2*i], src[2*i+1])
		}
	}
}

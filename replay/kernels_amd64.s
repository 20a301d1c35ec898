//go:build !noasm

#include "textflag.h"

// func dotAVX2(a, b *float32, n int) float32
// n must be a multiple of 8.
TEXT ·dotAVX2(SB), NOSPLIT, $0-28
	MOVQ a+0(FP), SI
	MOVQ b+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

dot32:
	CMPQ CX, $32
	JL   dot8
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS 32(DI), Y5, Y1
	VFMADD231PS 64(DI), Y6, Y2
	VFMADD231PS 96(DI), Y7, Y3
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  dot32

dot8:
	CMPQ CX, $8
	JL   dotdone
	VMOVUPS (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  dot8

dotdone:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func axpyAVX2(y *float32, a float32, x *float32, n int)
// y[i] += a*x[i]; n must be a multiple of 8.
TEXT ·axpyAVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	VBROADCASTSS a+8(FP), Y0
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX

axpy32:
	CMPQ CX, $32
	JL   axpy8
	VMOVUPS (DI), Y1
	VMOVUPS 32(DI), Y2
	VMOVUPS 64(DI), Y3
	VMOVUPS 96(DI), Y4
	VFMADD231PS (SI), Y0, Y1
	VFMADD231PS 32(SI), Y0, Y2
	VFMADD231PS 64(SI), Y0, Y3
	VFMADD231PS 96(SI), Y0, Y4
	VMOVUPS Y1, (DI)
	VMOVUPS Y2, 32(DI)
	VMOVUPS Y3, 64(DI)
	VMOVUPS Y4, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, CX
	JMP  axpy32

axpy8:
	CMPQ CX, $8
	JL   axpydone
	VMOVUPS (DI), Y1
	VFMADD231PS (SI), Y0, Y1
	VMOVUPS Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, CX
	JMP  axpy8

axpydone:
	VZEROUPPER
	RET

// func updateRowDotAVX2(row *float32, a, c float32, b, cv *float32, n int) float32
// row[i] = a*row[i] + c*b[i]; returns Σ row[i]*cv[i]. n must be a multiple of 8.
TEXT ·updateRowDotAVX2(SB), NOSPLIT, $0-44
	MOVQ row+0(FP), DI
	VBROADCASTSS a+8(FP), Y8
	VBROADCASTSS c+12(FP), Y9
	MOVQ b+16(FP), SI
	MOVQ cv+24(FP), DX
	MOVQ n+32(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

upd32:
	CMPQ CX, $32
	JL   upd8
	VMULPS (DI), Y8, Y4
	VMULPS 32(DI), Y8, Y5
	VMULPS 64(DI), Y8, Y6
	VMULPS 96(DI), Y8, Y7
	VFMADD231PS (SI), Y9, Y4
	VFMADD231PS 32(SI), Y9, Y5
	VFMADD231PS 64(SI), Y9, Y6
	VFMADD231PS 96(SI), Y9, Y7
	VMOVUPS Y4, (DI)
	VMOVUPS Y5, 32(DI)
	VMOVUPS Y6, 64(DI)
	VMOVUPS Y7, 96(DI)
	VFMADD231PS (DX), Y4, Y0
	VFMADD231PS 32(DX), Y5, Y1
	VFMADD231PS 64(DX), Y6, Y2
	VFMADD231PS 96(DX), Y7, Y3
	ADDQ $128, DI
	ADDQ $128, SI
	ADDQ $128, DX
	SUBQ $32, CX
	JMP  upd32

upd8:
	CMPQ CX, $8
	JL   upddone
	VMULPS (DI), Y8, Y4
	VFMADD231PS (SI), Y9, Y4
	VMOVUPS Y4, (DI)
	VFMADD231PS (DX), Y4, Y0
	ADDQ $32, DI
	ADDQ $32, SI
	ADDQ $32, DX
	SUBQ $8, CX
	JMP  upd8

upddone:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+40(FP)
	RET

// func rankUpdateAVX2(row *float32, decay float32, coef *float32, t int, v *float32, stride int, n int)
// row[i] = decay*row[i] + Σ_j coef[j]*v[j*stride+i] (stride in elements).
// n must be a multiple of 8; t may be 0.
TEXT ·rankUpdateAVX2(SB), NOSPLIT, $0-56
	MOVQ row+0(FP), DI
	VBROADCASTSS decay+8(FP), Y8
	MOVQ coef+16(FP), R11
	MOVQ t+24(FP), R12
	MOVQ v+32(FP), SI
	MOVQ stride+40(FP), R13
	SHLQ $2, R13
	MOVQ n+48(FP), CX

rk32:
	CMPQ CX, $32
	JL   rk8
	VMULPS (DI), Y8, Y0
	VMULPS 32(DI), Y8, Y1
	VMULPS 64(DI), Y8, Y2
	VMULPS 96(DI), Y8, Y3
	MOVQ SI, R8
	MOVQ R11, R9
	MOVQ R12, R10
	TESTQ R10, R10
	JZ   rk32store

rk32j:
	VBROADCASTSS (R9), Y4
	VFMADD231PS (R8), Y4, Y0
	VFMADD231PS 32(R8), Y4, Y1
	VFMADD231PS 64(R8), Y4, Y2
	VFMADD231PS 96(R8), Y4, Y3
	ADDQ R13, R8
	ADDQ $4, R9
	DECQ R10
	JNZ  rk32j

rk32store:
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ $128, DI
	ADDQ $128, SI
	SUBQ $32, CX
	JMP  rk32

rk8:
	CMPQ CX, $8
	JL   rkdone
	VMULPS (DI), Y8, Y0
	MOVQ SI, R8
	MOVQ R11, R9
	MOVQ R12, R10
	TESTQ R10, R10
	JZ   rk8store

rk8j:
	VBROADCASTSS (R9), Y4
	VFMADD231PS (R8), Y4, Y0
	ADDQ R13, R8
	ADDQ $4, R9
	DECQ R10
	JNZ  rk8j

rk8store:
	VMOVUPS Y0, (DI)
	ADDQ $32, DI
	ADDQ $32, SI
	SUBQ $8, CX
	JMP  rk8

rkdone:
	VZEROUPPER
	RET

// func dotRowsAVX2(s *float32, rows, n int, v *float32, out *float32)
// out[p] = Σ_i s[p*n+i]*v[i] for p < rows. n must be a multiple of 8 and
// rows a multiple of 4.
TEXT ·dotRowsAVX2(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), SI
	MOVQ rows+8(FP), R8
	MOVQ n+16(FP), R9
	MOVQ v+24(FP), DX
	MOVQ out+32(FP), DI
	MOVQ R9, R10
	SHLQ $2, R10              // row stride in bytes

dr4:
	CMPQ R8, $4
	JL   drdone
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	MOVQ SI, R11              // row 0
	LEAQ (SI)(R10*1), R12     // row 1
	LEAQ (R12)(R10*1), R13    // row 2
	LEAQ (R13)(R10*1), R14    // row 3
	MOVQ DX, BX
	MOVQ R9, CX

drcol:
	PREFETCHT0 2048(R11)
	PREFETCHT0 2048(R14)
	VMOVUPS (BX), Y8
	VFMADD231PS (R11), Y8, Y0
	VFMADD231PS (R12), Y8, Y1
	VFMADD231PS (R13), Y8, Y2
	VFMADD231PS (R14), Y8, Y3
	ADDQ $32, BX
	ADDQ $32, R11
	ADDQ $32, R12
	ADDQ $32, R13
	ADDQ $32, R14
	SUBQ $8, CX
	JNZ  drcol

	// Reduce four accumulators to four sums.
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, (DI)
	ADDQ $16, DI
	LEAQ (R14), SI            // R14 ended at the start of row 4
	SUBQ $4, R8
	JMP  dr4

drdone:
	VZEROUPPER
	RET

// func rankUpdateRowsAVX2(s *float32, rows, n int, decay float32, coef *float32, t int, v *float32, vstride int)
// For p < rows: s[p*n+i] = decay*s[p*n+i] + Σ_j coef[p*t+j]*v[j*vstride+i].
// n must be a multiple of 8, rows a multiple of 2, t >= 1.
TEXT ·rankUpdateRowsAVX2(SB), NOSPLIT, $0-64
	MOVQ s+0(FP), DI
	MOVQ rows+8(FP), R8
	MOVQ n+16(FP), R9
	VBROADCASTSS decay+24(FP), Y15
	MOVQ coef+32(FP), R11
	MOVQ t+40(FP), R12
	MOVQ v+48(FP), SI
	MOVQ vstride+56(FP), R13
	SHLQ $2, R13              // V row stride in bytes
	MOVQ R12, R14
	SHLQ $2, R14              // coef row stride in bytes

ru2:
	CMPQ R8, $2
	JL   rudone
	LEAQ (DI)(R9*4), DX       // row 1
	XORQ CX, CX               // column offset in bytes
	MOVQ R9, AX               // columns left

ru32:
	CMPQ AX, $32
	JL   ru8
	PREFETCHT0 1024(DI)(CX*1)
	PREFETCHT0 1088(DI)(CX*1)
	PREFETCHT0 1024(DX)(CX*1)
	PREFETCHT0 1088(DX)(CX*1)
	VMULPS (DI)(CX*1), Y15, Y0
	VMULPS 32(DI)(CX*1), Y15, Y1
	VMULPS 64(DI)(CX*1), Y15, Y2
	VMULPS 96(DI)(CX*1), Y15, Y3
	VMULPS (DX)(CX*1), Y15, Y4
	VMULPS 32(DX)(CX*1), Y15, Y5
	VMULPS 64(DX)(CX*1), Y15, Y6
	VMULPS 96(DX)(CX*1), Y15, Y7
	LEAQ (SI)(CX*1), BX       // V column block
	MOVQ R11, R15             // coef row 0
	MOVQ R12, R10             // j counter

ru32j:
	VBROADCASTSS (R15), Y12
	VBROADCASTSS (R15)(R14*1), Y13
	VMOVUPS (BX), Y8
	VMOVUPS 32(BX), Y9
	VMOVUPS 64(BX), Y10
	VMOVUPS 96(BX), Y11
	VFMADD231PS Y8, Y12, Y0
	VFMADD231PS Y9, Y12, Y1
	VFMADD231PS Y10, Y12, Y2
	VFMADD231PS Y11, Y12, Y3
	VFMADD231PS Y8, Y13, Y4
	VFMADD231PS Y9, Y13, Y5
	VFMADD231PS Y10, Y13, Y6
	VFMADD231PS Y11, Y13, Y7
	ADDQ R13, BX
	ADDQ $4, R15
	DECQ R10
	JNZ  ru32j

	VMOVUPS Y0, (DI)(CX*1)
	VMOVUPS Y1, 32(DI)(CX*1)
	VMOVUPS Y2, 64(DI)(CX*1)
	VMOVUPS Y3, 96(DI)(CX*1)
	VMOVUPS Y4, (DX)(CX*1)
	VMOVUPS Y5, 32(DX)(CX*1)
	VMOVUPS Y6, 64(DX)(CX*1)
	VMOVUPS Y7, 96(DX)(CX*1)
	ADDQ $128, CX
	SUBQ $32, AX
	JMP  ru32

ru8:
	CMPQ AX, $8
	JL   runext
	VMULPS (DI)(CX*1), Y15, Y0
	VMULPS (DX)(CX*1), Y15, Y4
	LEAQ (SI)(CX*1), BX
	MOVQ R11, R15
	MOVQ R12, R10

ru8j:
	VBROADCASTSS (R15), Y12
	VBROADCASTSS (R15)(R14*1), Y13
	VMOVUPS (BX), Y8
	VFMADD231PS Y8, Y12, Y0
	VFMADD231PS Y8, Y13, Y4
	ADDQ R13, BX
	ADDQ $4, R15
	DECQ R10
	JNZ  ru8j

	VMOVUPS Y0, (DI)(CX*1)
	VMOVUPS Y4, (DX)(CX*1)
	ADDQ $32, CX
	SUBQ $8, AX
	JMP  ru8

runext:
	LEAQ (DX)(R9*4), DI       // two rows on
	LEAQ (R11)(R14*2), R11    // two coefficient rows on
	SUBQ $2, R8
	JMP  ru2

rudone:
	VZEROUPPER
	RET

// func updateRowsAVX2(s *float32, rows, n int, a float32, c *float32, b, cv *float32, out *float32)
// For p < rows: s[p*n+i] = a*s[p*n+i] + c[p]*b[i]; out[p] = Σ_i s[p*n+i]*cv[i].
// n must be a multiple of 8 and rows a multiple of 2.
TEXT ·updateRowsAVX2(SB), NOSPLIT, $0-64
	MOVQ s+0(FP), DI
	MOVQ rows+8(FP), R8
	MOVQ n+16(FP), R9
	VBROADCASTSS a+24(FP), Y15
	MOVQ c+32(FP), R11
	MOVQ b+40(FP), SI
	MOVQ cv+48(FP), DX
	MOVQ out+56(FP), R12
	MOVQ R9, R10
	SHLQ $2, R10

up2:
	CMPQ R8, $2
	JL   updone2
	LEAQ (DI)(R10*1), R13     // row 1
	VBROADCASTSS (R11), Y12
	VBROADCASTSS 4(R11), Y13
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ CX, CX
	MOVQ R9, AX

upcol:
	PREFETCHT0 1024(DI)(CX*1)
	PREFETCHT0 1024(R13)(CX*1)
	VMOVUPS (SI)(CX*1), Y8    // b
	VMOVUPS (DX)(CX*1), Y9    // cv
	VMULPS (DI)(CX*1), Y15, Y4
	VFMADD231PS Y8, Y12, Y4
	VMOVUPS Y4, (DI)(CX*1)
	VFMADD231PS Y4, Y9, Y0
	VMULPS (R13)(CX*1), Y15, Y5
	VFMADD231PS Y8, Y13, Y5
	VMOVUPS Y5, (R13)(CX*1)
	VFMADD231PS Y5, Y9, Y1
	ADDQ $32, CX
	SUBQ $8, AX
	JNZ  upcol

	VHADDPS Y1, Y0, Y0        // [a01 a23 b01 b23 | a45 a67 b45 b67]
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0         // [a0123+a4567.. split]
	VHADDPS X0, X0, X0        // [a, b, a, b]
	VMOVLPS X0, (R12)
	ADDQ $8, R12
	ADDQ $8, R11
	LEAQ (R13)(R10*1), DI
	SUBQ $2, R8
	JMP  up2

updone2:
	VZEROUPPER
	RET

// func dotRowsNVFP4AVX512(codes, scales *byte, rows, n int, vEven, vOdd *float32, lut *float32, e2m1 *float32, global float32, out *float32)
// For p < rows: out[p] = global * Σ_i lut[scale code of i's block] * e2m1[code_i] * v[i],
// where codes hold two elements per byte (element 2i in the low nibble),
// scales one e4m3 code per 16 elements, and vEven/vOdd the even and odd
// elements of v. n must be a multiple of 32.
TEXT ·dotRowsNVFP4AVX512(SB), NOSPLIT, $0-80
	MOVQ codes+0(FP), SI
	MOVQ scales+8(FP), R8
	MOVQ rows+16(FP), R9
	MOVQ n+24(FP), R10
	MOVQ vEven+32(FP), R11
	MOVQ vOdd+40(FP), R12
	MOVQ lut+48(FP), R13
	MOVQ e2m1+56(FP), AX
	VMOVUPS (AX), Z15          // the 16 E2M1 values, by code
	VBROADCASTSS global+64(FP), X14
	MOVQ out+72(FP), DI
	SHRQ $5, R10               // chunks of 32 elements per row

nvrow:
	TESTQ R9, R9
	JZ   nvdone
	VXORPS Z0, Z0, Z0
	XORQ CX, CX                // chunk index

nvchunk:
	PREFETCHT0 512(SI)
	VPMOVZXBD (SI), Z1         // 16 bytes -> 16 dwords
	VPERMPS Z15, Z1, Z2        // even elements
	VPSRLD $4, Z1, Z1
	VPERMPS Z15, Z1, Z3        // odd elements
	MOVBLZX (R8), AX
	MOVBLZX 1(R8), BX
	VBROADCASTSS (R13)(AX*4), Y4
	VBROADCASTSS (R13)(BX*4), Y5
	VINSERTF32X8 $1, Y5, Z4, Z4 // lanes 0-7: block 2c, lanes 8-15: block 2c+1
	VMULPS Z4, Z2, Z2
	VMULPS Z4, Z3, Z3
	MOVQ CX, DX
	SHLQ $6, DX                // 16 floats per chunk of each half
	VFMADD231PS (R11)(DX*1), Z2, Z0
	VFMADD231PS (R12)(DX*1), Z3, Z0
	ADDQ $16, SI
	ADDQ $2, R8
	INCQ CX
	CMPQ CX, R10
	JL   nvchunk

	VEXTRACTF32X8 $1, Z0, Y1
	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMULSS X14, X0, X0
	MOVSS X0, (DI)
	ADDQ $4, DI
	DECQ R9
	JMP  nvrow

nvdone:
	VZEROUPPER
	RET

// func dotRowsBF16AVX2(s *uint16, rows, n int, v *float32, out *float32)
// out[p] = Σ_i f32(s[p*n+i])*v[i]; n must be a multiple of 16.
TEXT ·dotRowsBF16AVX2(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), SI
	MOVQ rows+8(FP), R8
	MOVQ n+16(FP), R9
	MOVQ v+24(FP), DX
	MOVQ out+32(FP), DI

bfrow:
	TESTQ R8, R8
	JZ   bfdone
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	MOVQ DX, BX
	MOVQ R9, CX

bfcol:
	PREFETCHT0 1024(SI)
	VPMOVZXWD (SI), Y2
	VPMOVZXWD 16(SI), Y3
	VPSLLD $16, Y2, Y2
	VPSLLD $16, Y3, Y3
	VFMADD231PS (BX), Y2, Y0
	VFMADD231PS 32(BX), Y3, Y1
	ADDQ $32, SI
	ADDQ $64, BX
	SUBQ $16, CX
	JNZ  bfcol

	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	MOVSS X0, (DI)
	ADDQ $4, DI
	DECQ R8
	JMP  bfrow

bfdone:
	VZEROUPPER
	RET

// func decodeBF16AVX2(dst *float32, src *uint16, n int)
// dst[i] = f32(src[i]); n must be a multiple of 16.
TEXT ·decodeBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

debf:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPSLLD $16, Y0, Y0
	VPSLLD $16, Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ  debf
	VZEROUPPER
	RET

// func encodeBF16AVX2(dst *uint16, src *float32, n int)
// dst[i] = bf16(src[i]) rounded to nearest even; NaN -> 0x7fc0 with the
// sign kept. n must be a multiple of 16.
TEXT ·encodeBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	MOVL $0x7fff, AX
	MOVL AX, X10
	VPBROADCASTD X10, Y10      // rounding bias
	MOVL $1, AX
	MOVL AX, X11
	VPBROADCASTD X11, Y11      // lsb mask
	MOVL $0x7fc00000, AX
	MOVL AX, X12
	VPBROADCASTD X12, Y12      // quiet NaN
	MOVL $0x80000000, AX
	MOVL AX, X13
	VPBROADCASTD X13, Y13      // sign

enbf:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	// rounded = (bits + 0x7fff + ((bits >> 16) & 1)) >> 16
	VPSRLD $16, Y0, Y2
	VPAND Y11, Y2, Y2
	VPADDD Y10, Y2, Y2
	VPADDD Y0, Y2, Y2
	VPSRLD $16, Y1, Y3
	VPAND Y11, Y3, Y3
	VPADDD Y10, Y3, Y3
	VPADDD Y1, Y3, Y3
	// NaN lanes: canonical quiet NaN with the input's sign.
	VCMPPS $3, Y0, Y0, Y4      // unordered
	VPAND Y13, Y0, Y6
	VPOR Y12, Y6, Y6
	VBLENDVPS Y4, Y6, Y2, Y2
	VCMPPS $3, Y1, Y1, Y5
	VPAND Y13, Y1, Y7
	VPOR Y12, Y7, Y7
	VBLENDVPS Y5, Y7, Y3, Y3
	VPSRLD $16, Y2, Y2
	VPSRLD $16, Y3, Y3
	VPACKUSDW Y3, Y2, Y2       // per 128-bit lane: [a0-3 b0-3 | a4-7 b4-7]
	VPERMQ $0xd8, Y2, Y2       // -> a0-7 b0-7
	VMOVDQU Y2, (DI)
	ADDQ $64, SI
	ADDQ $32, DI
	SUBQ $16, CX
	JNZ  enbf
	VZEROUPPER
	RET

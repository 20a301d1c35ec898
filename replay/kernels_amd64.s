//go:build !noasm

#include "textflag.h"

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

	// The four rows one after the other, in address order (see
	// updateRowsAVX2); each row's chain is what it was column by column.
drrow0:
	PREFETCHNTA 4096(R11)
	VMOVUPS (BX), Y8
	VFMADD231PS (R11), Y8, Y0
	ADDQ $32, BX
	ADDQ $32, R11
	SUBQ $8, CX
	JNZ  drrow0
	MOVQ DX, BX
	MOVQ R9, CX

drrow1:
	PREFETCHNTA 4096(R12)
	VMOVUPS (BX), Y8
	VFMADD231PS (R12), Y8, Y1
	ADDQ $32, BX
	ADDQ $32, R12
	SUBQ $8, CX
	JNZ  drrow1
	MOVQ DX, BX
	MOVQ R9, CX

drrow2:
	PREFETCHNTA 4096(R13)
	VMOVUPS (BX), Y8
	VFMADD231PS (R13), Y8, Y2
	ADDQ $32, BX
	ADDQ $32, R13
	SUBQ $8, CX
	JNZ  drrow2
	MOVQ DX, BX
	MOVQ R9, CX

drrow3:
	PREFETCHNTA 4096(R14)
	VMOVUPS (BX), Y8
	VFMADD231PS (R14), Y8, Y3
	ADDQ $32, BX
	ADDQ $32, R14
	SUBQ $8, CX
	JNZ  drrow3

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
// n must be a multiple of 8 and rows a multiple of 2. Two rows a block, one
// after the other in address order, not column by column (32 bytes of each
// row in turn: on a Zen 4 EPYC VM that streamed at 15 GB/s where row after
// row reaches 22-26, the copy's rate); the out-of-order core still overlaps
// the two rows' chains.
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

uprow0:
	PREFETCHT0 1024(DI)(CX*1)
	VMULPS (DI)(CX*1), Y15, Y4
	VFMADD231PS (SI)(CX*1), Y12, Y4
	VMOVUPS Y4, (DI)(CX*1)
	VFMADD231PS (DX)(CX*1), Y4, Y0
	ADDQ $32, CX
	SUBQ $8, AX
	JNZ  uprow0

	XORQ CX, CX
	MOVQ R9, AX

uprow1:
	PREFETCHT0 1024(R13)(CX*1)
	VMULPS (R13)(CX*1), Y15, Y5
	VFMADD231PS (SI)(CX*1), Y13, Y5
	VMOVUPS Y5, (R13)(CX*1)
	VFMADD231PS (DX)(CX*1), Y5, Y1
	ADDQ $32, CX
	SUBQ $8, AX
	JNZ  uprow1

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
// elements of v. n must be a multiple of 32. Rows go four at a time (then
// two, then one) so that each v load serves several rows and the rows'
// accumulator chains overlap; codes are prefetched 8 KiB ahead and scale
// codes 1 KiB ahead (the same point of the stream): the hardware
// prefetchers alone leave the decode waiting on memory.
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
	MOVQ R10, BX
	SHLQ $4, BX                // bytes of codes per row
	MOVQ R10, DX
	SHLQ $1, DX                // scale codes per row
	MOVQ R10, R15
	SHLQ $6, R15               // bytes of vEven (and vOdd)
	LEAQ (DX)(DX*2), R14       // 3 rows of scale codes; ×8: 3 rows of codes

	// Four rows at a time: v is loaded once for all, and the four
	// accumulator chains are independent.
nv4row:
	CMPQ R9, $4
	JL   nv2row
	VXORPS Z0, Z0, Z0
	VXORPS Z6, Z6, Z6
	VXORPS Z16, Z16, Z16
	VXORPS Z17, Z17, Z17
	XORQ CX, CX                // byte offset into vEven, vOdd

nv4chunk:
	PREFETCHT0 8192(SI)
	PREFETCHT0 8192(SI)(BX*1)
	PREFETCHT0 8192(SI)(BX*2)
	PREFETCHT0 8192(SI)(R14*8)
	PREFETCHT0 1024(R8)
	VMOVUPS (R11)(CX*1), Z8
	VMOVUPS (R12)(CX*1), Z9
	VPMOVZXBD (SI), Z1
	VPERMPS Z15, Z1, Z2
	VPSRLD $4, Z1, Z1
	VPERMPS Z15, Z1, Z3
	MOVBLZX (R8), AX
	VBROADCASTSS (R13)(AX*4), Y4
	MOVBLZX 1(R8), AX
	VBROADCASTSS (R13)(AX*4), Y7
	VINSERTF32X8 $1, Y7, Z4, Z4
	VMULPS Z8, Z2, Z2
	VFMADD231PS Z9, Z3, Z2
	VFMADD231PS Z4, Z2, Z0
	VPMOVZXBD (SI)(BX*1), Z5
	VPERMPS Z15, Z5, Z10
	VPSRLD $4, Z5, Z5
	VPERMPS Z15, Z5, Z11
	MOVBLZX (R8)(DX*1), AX
	VBROADCASTSS (R13)(AX*4), Y12
	MOVBLZX 1(R8)(DX*1), AX
	VBROADCASTSS (R13)(AX*4), Y13
	VINSERTF32X8 $1, Y13, Z12, Z12
	VMULPS Z8, Z10, Z10
	VFMADD231PS Z9, Z11, Z10
	VFMADD231PS Z12, Z10, Z6
	VPMOVZXBD (SI)(BX*2), Z18
	VPERMPS Z15, Z18, Z19
	VPSRLD $4, Z18, Z18
	VPERMPS Z15, Z18, Z20
	MOVBLZX (R8)(DX*2), AX
	VBROADCASTSS (R13)(AX*4), Y24
	MOVBLZX 1(R8)(DX*2), AX
	VBROADCASTSS (R13)(AX*4), Y26
	VINSERTF32X8 $1, Y26, Z24, Z24
	VMULPS Z8, Z19, Z19
	VFMADD231PS Z9, Z20, Z19
	VFMADD231PS Z24, Z19, Z16
	VPMOVZXBD (SI)(R14*8), Z21
	VPERMPS Z15, Z21, Z22
	VPSRLD $4, Z21, Z21
	VPERMPS Z15, Z21, Z23
	MOVBLZX (R8)(R14*1), AX
	VBROADCASTSS (R13)(AX*4), Y25
	MOVBLZX 1(R8)(R14*1), AX
	VBROADCASTSS (R13)(AX*4), Y27
	VINSERTF32X8 $1, Y27, Z25, Z25
	VMULPS Z8, Z22, Z22
	VFMADD231PS Z9, Z23, Z22
	VFMADD231PS Z25, Z22, Z17
	ADDQ $16, SI
	ADDQ $2, R8
	ADDQ $64, CX
	CMPQ CX, R15
	JL   nv4chunk

	// [a b c d] = rows p..p+3 from Z0, Z6, Z16, Z17.
	VEXTRACTF32X8 $1, Z0, Y1
	VADDPS Y1, Y0, Y0
	VEXTRACTF32X8 $1, Z6, Y1
	VADDPS Y1, Y6, Y6
	VEXTRACTF32X8 $1, Z16, Y1
	VADDPS Y1, Y16, Y2
	VEXTRACTF32X8 $1, Z17, Y1
	VADDPS Y1, Y17, Y3
	VHADDPS Y6, Y0, Y0         // [a01 a23 b01 b23 | a45 a67 b45 b67]
	VHADDPS Y3, Y2, Y2         // [c01 c23 d01 d23 | ...]
	VHADDPS Y2, Y0, Y0         // [a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7]
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMULPS X14, X0, X0
	VMOVUPS X0, (DI)
	ADDQ $16, DI
	ADDQ BX, SI                // skip rows p+1..p+3
	ADDQ BX, SI
	ADDQ BX, SI
	ADDQ R14, R8
	SUBQ $4, R9
	JMP  nv4row

	// Two rows at a time: v is loaded once for both, and the two
	// accumulator chains are independent.
nv2row:
	CMPQ R9, $2
	JL   nvrow
	VXORPS Z0, Z0, Z0
	VXORPS Z6, Z6, Z6
	XORQ CX, CX                // byte offset into vEven, vOdd

nv2chunk:
	PREFETCHT0 8192(SI)
	PREFETCHT0 8192(SI)(BX*1)
	PREFETCHT0 1024(R8)
	VMOVUPS (R11)(CX*1), Z8
	VMOVUPS (R12)(CX*1), Z9
	VPMOVZXBD (SI), Z1         // row p: 16 bytes -> 16 dwords
	VPMOVZXBD (SI)(BX*1), Z5   // row p+1
	VPERMPS Z15, Z1, Z2        // even elements
	VPSRLD $4, Z1, Z1
	VPERMPS Z15, Z1, Z3        // odd elements
	VPERMPS Z15, Z5, Z10
	VPSRLD $4, Z5, Z5
	VPERMPS Z15, Z5, Z11
	MOVBLZX (R8), AX
	MOVBLZX 1(R8), R14
	VBROADCASTSS (R13)(AX*4), Y4
	VBROADCASTSS (R13)(R14*4), Y7
	VINSERTF32X8 $1, Y7, Z4, Z4
	MOVBLZX (R8)(DX*1), AX
	MOVBLZX 1(R8)(DX*1), R14
	VBROADCASTSS (R13)(AX*4), Y12
	VBROADCASTSS (R13)(R14*4), Y7
	VINSERTF32X8 $1, Y7, Z12, Z12
	VMULPS Z8, Z2, Z2
	VFMADD231PS Z9, Z3, Z2
	VFMADD231PS Z4, Z2, Z0
	VMULPS Z8, Z10, Z10
	VFMADD231PS Z9, Z11, Z10
	VFMADD231PS Z12, Z10, Z6
	ADDQ $16, SI
	ADDQ $2, R8
	ADDQ $64, CX
	CMPQ CX, R15
	JL   nv2chunk

	VEXTRACTF32X8 $1, Z0, Y1
	VADDPS Y1, Y0, Y0
	VEXTRACTF32X8 $1, Z6, Y1
	VADDPS Y1, Y6, Y6
	VHADDPS Y6, Y0, Y0         // [a01 a23 b01 b23 | a45 a67 b45 b67]
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0         // [a, b, a, b]
	VMULPS X14, X0, X0
	VMOVLPS X0, (DI)
	ADDQ $8, DI
	ADDQ BX, SI                // skip row p+1
	ADDQ DX, R8
	SUBQ $2, R9
	JMP  nv2row

nvrow:
	TESTQ R9, R9
	JZ   nvdone
	VXORPS Z0, Z0, Z0
	XORQ CX, CX                // chunk index

nvchunk:
	PREFETCHT0 8192(SI)
	PREFETCHT0 1024(R8)
	VPMOVZXBD (SI), Z1         // 16 bytes -> 16 dwords
	VPERMPS Z15, Z1, Z2        // even elements
	VPSRLD $4, Z1, Z1
	VPERMPS Z15, Z1, Z3        // odd elements
	MOVBLZX (R8), AX
	MOVBLZX 1(R8), BX
	VBROADCASTSS (R13)(AX*4), Y4
	VBROADCASTSS (R13)(BX*4), Y5
	VINSERTF32X8 $1, Y5, Z4, Z4 // lanes 0-7: block 2c, lanes 8-15: block 2c+1
	MOVQ CX, DX
	SHLQ $6, DX                // 16 floats per chunk of each half
	// s·(q_even·v_even + q_odd·v_odd): the block scales multiply once.
	VMULPS (R11)(DX*1), Z2, Z2
	VFMADD231PS (R12)(DX*1), Z3, Z2
	VFMADD231PS Z4, Z2, Z0
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

// func dotRowsNVFP4PairAVX512(codes, scales *byte, rows, n int, vEven, vOdd *float32, lut *float32, e2m1 *float32, global float32, out *float32, wEven, wOdd *float32, out2 *float32)
// dotRowsNVFP4AVX512 for two vectors v and w at once: each row is decoded
// once, two rows at a time (then one). n must be a multiple of 32.
TEXT ·dotRowsNVFP4PairAVX512(SB), NOSPLIT, $0-104
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
	MOVQ wEven+80(FP), R14
	MOVQ wOdd+88(FP), R15
	MOVQ out2+96(FP), BX
	SHRQ $5, R10               // chunks of 32 elements per row

	// Two rows at a time, as dotRowsNVFP4AVX512. R10 holds the bytes of
	// codes per row, DX the scale codes per row; the vector pointers point
	// past their ends and CX runs from -(bytes of vEven) up to 0.
	SHLQ $4, R10
	MOVQ R10, DX
	SHRQ $3, DX
	MOVQ R10, AX
	SHLQ $2, AX
	ADDQ AX, R11
	ADDQ AX, R12
	ADDQ AX, R14
	ADDQ AX, R15

np2row:
	CMPQ R9, $2
	JL   np1
	VXORPS Z0, Z0, Z0
	VXORPS Z6, Z6, Z6
	VXORPS Z16, Z16, Z16
	VXORPS Z17, Z17, Z17
	MOVQ R10, CX
	SHLQ $2, CX
	NEGQ CX

np2chunk:
	PREFETCHT0 8192(SI)
	PREFETCHT0 8192(SI)(R10*1)
	PREFETCHT0 1024(R8)
	VPMOVZXBD (SI), Z1         // row p: 16 bytes -> 16 dwords
	VPMOVZXBD (SI)(R10*1), Z5  // row p+1
	VPERMPS Z15, Z1, Z2        // row p, even elements
	VPSRLD $4, Z1, Z1
	VPERMPS Z15, Z1, Z3        // row p, odd elements
	VPERMPS Z15, Z5, Z10       // row p+1, even
	VPSRLD $4, Z5, Z5
	VPERMPS Z15, Z5, Z11       // row p+1, odd
	MOVBLZX (R8), AX
	VBROADCASTSS (R13)(AX*4), Y4
	MOVBLZX 1(R8), AX
	VBROADCASTSS (R13)(AX*4), Y7
	VINSERTF32X8 $1, Y7, Z4, Z4 // row p: lanes 0-7 block 2c, 8-15 block 2c+1
	MOVBLZX (R8)(DX*1), AX
	VBROADCASTSS (R13)(AX*4), Y12
	MOVBLZX 1(R8)(DX*1), AX
	VBROADCASTSS (R13)(AX*4), Y7
	VINSERTF32X8 $1, Y7, Z12, Z12 // row p+1
	VMOVUPS (R11)(CX*1), Z8    // v even
	VMOVUPS (R12)(CX*1), Z9    // v odd
	VMULPS Z8, Z2, Z7
	VFMADD231PS Z9, Z3, Z7
	VFMADD231PS Z4, Z7, Z0
	VMULPS Z8, Z10, Z7
	VFMADD231PS Z9, Z11, Z7
	VFMADD231PS Z12, Z7, Z16
	VMOVUPS (R14)(CX*1), Z8    // w even
	VMOVUPS (R15)(CX*1), Z9    // w odd
	VMULPS Z8, Z2, Z7
	VFMADD231PS Z9, Z3, Z7
	VFMADD231PS Z4, Z7, Z6
	VMULPS Z8, Z10, Z7
	VFMADD231PS Z9, Z11, Z7
	VFMADD231PS Z12, Z7, Z17
	ADDQ $16, SI
	ADDQ $2, R8
	ADDQ $64, CX
	JNZ  np2chunk

	// out[p], out[p+1] from Z0, Z16; out2[p], out2[p+1] from Z6, Z17.
	VEXTRACTF32X8 $1, Z0, Y1
	VADDPS Y1, Y0, Y0
	VEXTRACTF32X8 $1, Z16, Y1
	VADDPS Y1, Y16, Y13
	VHADDPS Y13, Y0, Y0        // [a01 a23 b01 b23 | a45 a67 b45 b67]
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0         // [a, b, a, b]
	VMULPS X14, X0, X0
	VMOVLPS X0, (DI)
	VEXTRACTF32X8 $1, Z6, Y1
	VADDPS Y1, Y6, Y6
	VEXTRACTF32X8 $1, Z17, Y1
	VADDPS Y1, Y17, Y13
	VHADDPS Y13, Y6, Y6
	VEXTRACTF128 $1, Y6, X1
	VADDPS X1, X6, X6
	VHADDPS X6, X6, X6
	VMULPS X14, X6, X6
	VMOVLPS X6, (BX)
	ADDQ $8, DI
	ADDQ $8, BX
	ADDQ R10, SI               // skip row p+1
	ADDQ DX, R8
	SUBQ $2, R9
	JMP  np2row

np1:
	// The last row of an odd count: restore the vector pointers and the
	// chunk count for the one-row loop.
	TESTQ R9, R9
	JZ   npdone
	MOVQ R10, AX
	SHLQ $2, AX
	SUBQ AX, R11
	SUBQ AX, R12
	SUBQ AX, R14
	SUBQ AX, R15
	SHRQ $4, R10

nprow:
	TESTQ R9, R9
	JZ   npdone
	VXORPS Z0, Z0, Z0
	VXORPS Z6, Z6, Z6
	XORQ CX, CX                // chunk index

npchunk:
	PREFETCHT0 8192(SI)
	PREFETCHT0 1024(R8)
	VPMOVZXBD (SI), Z1         // 16 bytes -> 16 dwords
	VPERMPS Z15, Z1, Z2        // even elements
	VPSRLD $4, Z1, Z1
	VPERMPS Z15, Z1, Z3        // odd elements
	MOVBLZX (R8), AX
	VBROADCASTSS (R13)(AX*4), Y4
	MOVBLZX 1(R8), AX
	VBROADCASTSS (R13)(AX*4), Y5
	VINSERTF32X8 $1, Y5, Z4, Z4 // lanes 0-7: block 2c, lanes 8-15: block 2c+1
	MOVQ CX, DX
	SHLQ $6, DX                // 16 floats per chunk of each half
	VMULPS (R11)(DX*1), Z2, Z5
	VFMADD231PS (R12)(DX*1), Z3, Z5
	VFMADD231PS Z4, Z5, Z0
	VMULPS (R14)(DX*1), Z2, Z5
	VFMADD231PS (R15)(DX*1), Z3, Z5
	VFMADD231PS Z4, Z5, Z6
	ADDQ $16, SI
	ADDQ $2, R8
	INCQ CX
	CMPQ CX, R10
	JL   npchunk

	VEXTRACTF32X8 $1, Z0, Y1
	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMULSS X14, X0, X0
	MOVSS X0, (DI)
	ADDQ $4, DI
	VEXTRACTF32X8 $1, Z6, Y1
	VADDPS Y1, Y6, Y6
	VEXTRACTF128 $1, Y6, X1
	VADDPS X1, X6, X6
	VHADDPS X6, X6, X6
	VHADDPS X6, X6, X6
	VMULSS X14, X6, X6
	MOVSS X6, (BX)
	ADDQ $4, BX
	DECQ R9
	JMP  nprow

npdone:
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

// func rankUpdateRowsAVX512(s *float32, rows, n int, decay float32, coef *float32, t int, v *float32, vstride int)
// The AVX-512 form of rankUpdateRowsAVX2: 2 rows × 64 columns per block.
// n must be a multiple of 16, rows a multiple of 2, t >= 1.
TEXT ·rankUpdateRowsAVX512(SB), NOSPLIT, $0-64
	MOVQ s+0(FP), DI
	MOVQ rows+8(FP), R8
	MOVQ n+16(FP), R9
	VBROADCASTSS decay+24(FP), Z15
	MOVQ coef+32(FP), R11
	MOVQ t+40(FP), R12
	MOVQ v+48(FP), SI
	MOVQ vstride+56(FP), R13
	SHLQ $2, R13
	MOVQ R12, R14
	SHLQ $2, R14

zru2:
	CMPQ R8, $2
	JL   zrudone
	LEAQ (DI)(R9*4), DX
	XORQ CX, CX
	MOVQ R9, AX

zru64:
	CMPQ AX, $64
	JL   zru16
	PREFETCHT0 8192(DI)(CX*1)
	PREFETCHT0 8256(DI)(CX*1)
	PREFETCHT0 8320(DI)(CX*1)
	PREFETCHT0 8384(DI)(CX*1)
	PREFETCHT0 8192(DX)(CX*1)
	PREFETCHT0 8256(DX)(CX*1)
	PREFETCHT0 8320(DX)(CX*1)
	PREFETCHT0 8384(DX)(CX*1)
	VMULPS (DI)(CX*1), Z15, Z0
	VMULPS 64(DI)(CX*1), Z15, Z1
	VMULPS 128(DI)(CX*1), Z15, Z2
	VMULPS 192(DI)(CX*1), Z15, Z3
	VMULPS (DX)(CX*1), Z15, Z4
	VMULPS 64(DX)(CX*1), Z15, Z5
	VMULPS 128(DX)(CX*1), Z15, Z6
	VMULPS 192(DX)(CX*1), Z15, Z7
	LEAQ (SI)(CX*1), BX
	MOVQ R11, R15
	MOVQ R12, R10

zru64j:
	VBROADCASTSS (R15), Z12
	VBROADCASTSS (R15)(R14*1), Z13
	VMOVUPS (BX), Z8
	VMOVUPS 64(BX), Z9
	VMOVUPS 128(BX), Z10
	VMOVUPS 192(BX), Z11
	VFMADD231PS Z8, Z12, Z0
	VFMADD231PS Z9, Z12, Z1
	VFMADD231PS Z10, Z12, Z2
	VFMADD231PS Z11, Z12, Z3
	VFMADD231PS Z8, Z13, Z4
	VFMADD231PS Z9, Z13, Z5
	VFMADD231PS Z10, Z13, Z6
	VFMADD231PS Z11, Z13, Z7
	ADDQ R13, BX
	ADDQ $4, R15
	DECQ R10
	JNZ  zru64j

	VMOVUPS Z0, (DI)(CX*1)
	VMOVUPS Z1, 64(DI)(CX*1)
	VMOVUPS Z2, 128(DI)(CX*1)
	VMOVUPS Z3, 192(DI)(CX*1)
	VMOVUPS Z4, (DX)(CX*1)
	VMOVUPS Z5, 64(DX)(CX*1)
	VMOVUPS Z6, 128(DX)(CX*1)
	VMOVUPS Z7, 192(DX)(CX*1)
	ADDQ $256, CX
	SUBQ $64, AX
	JMP  zru64

zru16:
	CMPQ AX, $16
	JL   zrunext
	VMULPS (DI)(CX*1), Z15, Z0
	VMULPS (DX)(CX*1), Z15, Z4
	LEAQ (SI)(CX*1), BX
	MOVQ R11, R15
	MOVQ R12, R10

zru16j:
	VBROADCASTSS (R15), Z12
	VBROADCASTSS (R15)(R14*1), Z13
	VMOVUPS (BX), Z8
	VFMADD231PS Z8, Z12, Z0
	VFMADD231PS Z8, Z13, Z4
	ADDQ R13, BX
	ADDQ $4, R15
	DECQ R10
	JNZ  zru16j

	VMOVUPS Z0, (DI)(CX*1)
	VMOVUPS Z4, (DX)(CX*1)
	ADDQ $64, CX
	SUBQ $16, AX
	JMP  zru16

zrunext:
	LEAQ (DX)(R9*4), DI
	LEAQ (R11)(R14*2), R11
	SUBQ $2, R8
	JMP  zru2

zrudone:
	VZEROUPPER
	RET

DATA absmask<>+0(SB)/4, $0x7fffffff
GLOBL absmask<>(SB), RODATA|NOPTR, $4

// func absMaxAVX512(src *float32, n int) float32
// max |src[i]|; n must be a multiple of 16 and the values finite.
TEXT ·absMaxAVX512(SB), NOSPLIT, $0-20
	MOVQ src+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS absmask<>(SB), Z15
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1

am32:
	CMPQ CX, $32
	JL   am16
	VANDPS (SI), Z15, Z2
	VANDPS 64(SI), Z15, Z3
	VMAXPS Z2, Z0, Z0
	VMAXPS Z3, Z1, Z1
	ADDQ $128, SI
	SUBQ $32, CX
	JMP  am32

am16:
	CMPQ CX, $16
	JL   amdone
	VANDPS (SI), Z15, Z2
	VMAXPS Z2, Z0, Z0

amdone:
	VMAXPS Z1, Z0, Z0
	VEXTRACTF32X8 $1, Z0, Y1
	VMAXPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS X1, X0, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS X1, X0, X0
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

DATA nvconst<>+0(SB)/4, $0xc11fffff  // e2m1 normal rounding bias
DATA nvconst<>+4(SB)/4, $0x00000000  // (free slot)
DATA nvconst<>+8(SB)/4, $0x4a800000  // bits of 2^22
DATA nvconst<>+12(SB)/4, $0x3f800000 // 1.0
DATA nvconst<>+16(SB)/4, $0x40c00000 // 6.0
DATA nvconst<>+20(SB)/4, $7
DATA nvconst<>+24(SB)/4, $1
DATA nvconst<>+28(SB)/4, $8
DATA nvconst<>+32(SB)/2, $0x00ff
GLOBL nvconst<>(SB), RODATA|NOPTR, $36

// func quantizeNVFP4AVX512(src *float32, blocks int, sixGlobal, global float32, lut *float32, packed, scales *byte)
// NVFP4 quantisation of blocks·16 finite values with a given global scale,
// bit-identical to numeric.QuantizeNVFP4: per block, scale code
// s = e4m3(amax_block / (6·global)), d = f32(s)·global, codes e2m1(x/d).
TEXT ·quantizeNVFP4AVX512(SB), NOSPLIT, $0-48
	MOVQ src+0(FP), SI
	MOVQ blocks+8(FP), CX
	MOVSS sixGlobal+16(FP), X14
	MOVSS global+20(FP), X13
	MOVQ lut+24(FP), R13
	MOVQ packed+32(FP), DI
	MOVQ scales+40(FP), R8
	VBROADCASTSS absmask<>(SB), Z15
	VPBROADCASTD nvconst<>+0(SB), Z12   // bias
	VBROADCASTSS nvconst<>+8(SB), Z11   // 2^22
	VPBROADCASTD nvconst<>+8(SB), Z10   // bits(2^22)
	VPBROADCASTD nvconst<>+12(SB), Z9   // bits(1.0)
	VPBROADCASTD nvconst<>+16(SB), Z8   // bits(6.0)
	VPBROADCASTD nvconst<>+20(SB), Z7   // 7
	VPBROADCASTD nvconst<>+24(SB), Z6   // 1
	VPBROADCASTD nvconst<>+28(SB), Z5   // 8
	VPBROADCASTW nvconst<>+32(SB), X4   // 0x00ff words

qblock:
	TESTQ CX, CX
	JZ   qdone
	VMOVUPS (SI), Z0
	VANDPS Z15, Z0, Z1
	VEXTRACTF32X8 $1, Z1, Y2
	VMAXPS Y2, Y1, Y2
	VEXTRACTF128 $1, Y2, X3
	VMAXPS X3, X2, X2
	VPERMILPS $0x4e, X2, X3
	VMAXPS X3, X2, X2
	VPERMILPS $0xb1, X2, X3
	VMAXPS X3, X2, X2            // block amax in lane 0
	VDIVSS X14, X2, X2           // q = amax / (6·global)
	MOVL X2, AX                  // bits of q (q >= 0)
	// e4m3, round to nearest even, saturating at 448 (0x7e).
	CMPL AX, $0x3c800000         // q < 2^-6: subnormal
	JB   qsub

qnormal:
	MOVL AX, BX
	SHRL $20, BX
	ANDL $1, BX
	LEAL 0x7ffff(AX)(BX*1), BX
	SUBL $0x3c000000, BX
	SHRL $20, BX
	CMPL BX, $0x7e
	JBE  qscale
	MOVL $0x7e, BX
	JMP  qscale

qsub:
	MOVL $0x46800000, DX         // 16384.0: its ulp is 2^-9
	MOVL DX, X3
	VADDSS X3, X2, X3
	MOVL X3, BX
	SUBL $0x46800000, BX

qscale:
	MOVB BX, (R8)
	TESTL BX, BX
	JNZ  qcodes
	MOVQ $0, (DI)                // zero block: +0 codes
	JMP  qnext

qcodes:
	MOVSS (R13)(BX*4), X3
	VMULSS X13, X3, X3           // d = f32(s)·global
	VBROADCASTSS X3, Z3
	VDIVPS Z3, Z0, Z0            // x / d
	// e2m1 codes, as numeric.E2M1FromF32.
	VPANDD Z15, Z0, Z1           // a = |bits|
	VPSRLD $22, Z1, Z2
	VPANDD Z6, Z2, Z2
	VPADDD Z12, Z2, Z2
	VPADDD Z1, Z2, Z2
	VPSRLD $22, Z2, Z2           // normal code
	VADDPS Z11, Z1, Z3           // |f| + 2^22 (a as a float)
	VPSUBD Z10, Z3, Z3           // subnormal code
	VPCMPUD $1, Z9, Z1, K1       // a < 1.0
	VMOVDQA32 Z3, K1, Z2
	VPCMPUD $5, Z8, Z1, K2       // a >= 6.0
	VMOVDQA32 Z7, K2, Z2
	VPSRLD $28, Z0, Z3
	VPANDD Z5, Z3, Z3            // sign -> bit 3
	VPORD Z3, Z2, Z2
	VPMOVDB Z2, X2               // 16 codes, one per byte
	VPSRLW $4, X2, X3
	VPOR X3, X2, X2
	VPAND X4, X2, X2
	VPACKUSWB X2, X2, X2
	MOVQ X2, (DI)

qnext:
	ADDQ $64, SI
	ADDQ $8, DI
	INCQ R8
	DECQ CX
	JMP  qblock

qdone:
	VZEROUPPER
	RET

// func dotRowsMultiAVX512(s *float32, rows, n int, v *float32, nv int, out *float32, outRows int)
// out[a*outRows+p] = Σ_i s[p*n+i]*v[a*n+i] for p < rows, a < nv: a state
// matrix against several vectors, 2 rows × 4 vectors per block so each row
// chunk is loaded once per 4 vectors. rows must be even, nv a multiple of 4
// and n a multiple of 16.
TEXT ·dotRowsMultiAVX512(SB), NOSPLIT, $0-56
	MOVQ s+0(FP), SI
	MOVQ rows+8(FP), R8
	MOVQ n+16(FP), R9
	MOVQ v+24(FP), DX
	MOVQ nv+32(FP), R10
	MOVQ out+40(FP), DI
	MOVQ outRows+48(FP), R15
	SHLQ $2, R15               // bytes between vectors in out
	MOVQ R9, R14
	SHLQ $2, R14               // bytes per row
	XORQ R11, R11              // p

mrow:
	CMPQ R11, R8
	JGE  mdone
	LEAQ (SI)(R14*1), R12      // row p+1
	XORQ R13, R13              // a
	// Prefetch the row pair 8 KiB ahead (into the next matrix at the end
	// of one): this is the fold's first read of a matrix.
	LEAQ (R14)(R14*1), AX
	XORQ CX, CX

mpf:
	PREFETCHT0 8192(SI)(CX*1)
	ADDQ $64, CX
	CMPQ CX, AX
	JL   mpf

mvec:
	CMPQ R13, R10
	JGE  mrownext
	MOVQ R13, BX
	IMULQ R14, BX
	ADDQ DX, BX                // &v[a*n]
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	VXORPS Z4, Z4, Z4
	VXORPS Z5, Z5, Z5
	VXORPS Z6, Z6, Z6
	VXORPS Z7, Z7, Z7
	XORQ CX, CX

mcol:
	VMOVUPS (SI)(CX*1), Z8
	VMOVUPS (R12)(CX*1), Z9
	LEAQ (BX)(CX*1), AX
	VMOVUPS (AX), Z10
	VMOVUPS (AX)(R14*1), Z11
	VMOVUPS (AX)(R14*2), Z12
	LEAQ (AX)(R14*2), AX
	VMOVUPS (AX)(R14*1), Z13
	VFMADD231PS Z10, Z8, Z0
	VFMADD231PS Z11, Z8, Z1
	VFMADD231PS Z12, Z8, Z2
	VFMADD231PS Z13, Z8, Z3
	VFMADD231PS Z10, Z9, Z4
	VFMADD231PS Z11, Z9, Z5
	VFMADD231PS Z12, Z9, Z6
	VFMADD231PS Z13, Z9, Z7
	ADDQ $64, CX
	CMPQ CX, R14
	JL   mcol

	VEXTRACTF32X8 $1, Z0, Y14
	VADDPS Y14, Y0, Y0
	VEXTRACTF32X8 $1, Z1, Y14
	VADDPS Y14, Y1, Y1
	VEXTRACTF32X8 $1, Z2, Y14
	VADDPS Y14, Y2, Y2
	VEXTRACTF32X8 $1, Z3, Y14
	VADDPS Y14, Y3, Y3
	VEXTRACTF32X8 $1, Z4, Y14
	VADDPS Y14, Y4, Y4
	VEXTRACTF32X8 $1, Z5, Y14
	VADDPS Y14, Y5, Y5
	VEXTRACTF32X8 $1, Z6, Y14
	VADDPS Y14, Y6, Y6
	VEXTRACTF32X8 $1, Z7, Y14
	VADDPS Y14, Y7, Y7
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X14
	VADDPS X14, X0, X0         // row p against vectors a..a+3
	VHADDPS Y5, Y4, Y4
	VHADDPS Y7, Y6, Y6
	VHADDPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X14
	VADDPS X14, X4, X4         // row p+1 against vectors a..a+3

	MOVQ R13, AX
	IMULQ R15, AX
	ADDQ DI, AX
	LEAQ (AX)(R11*4), AX       // &out[a*rows+p]
	VMOVSS X0, (AX)
	VMOVSS X4, 4(AX)
	ADDQ R15, AX
	VEXTRACTPS $1, X0, (AX)
	VEXTRACTPS $1, X4, 4(AX)
	ADDQ R15, AX
	VEXTRACTPS $2, X0, (AX)
	VEXTRACTPS $2, X4, 4(AX)
	ADDQ R15, AX
	VEXTRACTPS $3, X0, (AX)
	VEXTRACTPS $3, X4, 4(AX)
	ADDQ $4, R13
	JMP  mvec

mrownext:
	LEAQ (R12)(R14*1), SI
	ADDQ $2, R11
	JMP  mrow

mdone:
	VZEROUPPER
	RET

// func updateRowsBF16AVX2(s *uint16, rows, n int, a float32, c *float32, b, cv *float32, out *float32)
// The in-place update of a bf16 state: for p < rows, r = a*f32(s_p) + c[p]*b,
// out[p] = Σ r·cv (over the unrounded r), s_p = bf16(r) rounded to nearest
// even (NaN -> 0x7fc0 with the sign), exactly as decode, updateRows, encode.
// n must be a multiple of 16.
TEXT ·updateRowsBF16AVX2(SB), NOSPLIT, $0-64
	MOVQ s+0(FP), DI
	MOVQ rows+8(FP), R8
	MOVQ n+16(FP), R9
	VBROADCASTSS a+24(FP), Y15
	MOVQ c+32(FP), R11
	MOVQ b+40(FP), SI
	MOVQ cv+48(FP), DX
	MOVQ out+56(FP), R12
	MOVL $0x7fff, AX
	MOVL AX, X10
	VPBROADCASTD X10, Y10
	MOVL $1, AX
	MOVL AX, X11
	VPBROADCASTD X11, Y11
	MOVL $0x7fc00000, AX
	MOVL AX, X12
	VPBROADCASTD X12, Y12
	MOVL $0x80000000, AX
	MOVL AX, X13
	VPBROADCASTD X13, Y13

ubrow:
	TESTQ R8, R8
	JZ   ubdone
	VBROADCASTSS (R11), Y14
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	XORQ CX, CX                // element offset *4 for b and cv
	MOVQ R9, R10

ubcol:
	PREFETCHT0 512(DI)
	VPMOVZXWD (DI), Y2
	VPMOVZXWD 16(DI), Y3
	VPSLLD $16, Y2, Y2
	VPSLLD $16, Y3, Y3
	VMULPS Y15, Y2, Y2
	VMULPS Y15, Y3, Y3
	VFMADD231PS (SI)(CX*1), Y14, Y2
	VFMADD231PS 32(SI)(CX*1), Y14, Y3
	VFMADD231PS (DX)(CX*1), Y2, Y0
	VFMADD231PS 32(DX)(CX*1), Y3, Y1
	VPSRLD $16, Y2, Y4
	VPAND Y11, Y4, Y4
	VPADDD Y10, Y4, Y4
	VPADDD Y2, Y4, Y4
	VPSRLD $16, Y3, Y5
	VPAND Y11, Y5, Y5
	VPADDD Y10, Y5, Y5
	VPADDD Y3, Y5, Y5
	VCMPPS $3, Y2, Y2, Y6
	VPAND Y13, Y2, Y7
	VPOR Y12, Y7, Y7
	VBLENDVPS Y6, Y7, Y4, Y4
	VCMPPS $3, Y3, Y3, Y6
	VPAND Y13, Y3, Y7
	VPOR Y12, Y7, Y7
	VBLENDVPS Y6, Y7, Y5, Y5
	VPSRLD $16, Y4, Y4
	VPSRLD $16, Y5, Y5
	VPACKUSDW Y5, Y4, Y4
	VPERMQ $0xd8, Y4, Y4
	VMOVDQU Y4, (DI)
	ADDQ $32, DI
	ADDQ $64, CX
	SUBQ $16, R10
	JNZ  ubcol

	VADDPS Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	MOVSS X0, (R12)
	ADDQ $4, R12
	ADDQ $4, R11
	DECQ R8
	JMP  ubrow

ubdone:
	VZEROUPPER
	RET

// func dotRowsPairAVX512(s *float32, rows, n int, v0, v1 *float32, out0, out1 *float32)
// out0[p] = s_p·v0 and out1[p] = s_p·v1 for p < rows, 4 rows per block so
// the state is read once for both vectors. rows must be a multiple of 4
// and n of 16.
TEXT ·dotRowsPairAVX512(SB), NOSPLIT, $0-56
	MOVQ s+0(FP), SI
	MOVQ rows+8(FP), R8
	MOVQ n+16(FP), R9
	MOVQ v0+24(FP), DX
	MOVQ v1+32(FP), BX
	MOVQ out0+40(FP), DI
	MOVQ out1+48(FP), R15
	MOVQ R9, R14
	SHLQ $2, R14               // bytes per row

prow:
	CMPQ R8, $4
	JL   pdone
	LEAQ (SI)(R14*1), R11
	LEAQ (R11)(R14*1), R12
	LEAQ (R12)(R14*1), R13
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	VXORPS Z4, Z4, Z4
	VXORPS Z5, Z5, Z5
	VXORPS Z6, Z6, Z6
	VXORPS Z7, Z7, Z7
	XORQ CX, CX

pcol:
	PREFETCHT0 2048(SI)(CX*1)
	PREFETCHT0 2048(R13)(CX*1)
	VMOVUPS (DX)(CX*1), Z8
	VMOVUPS (BX)(CX*1), Z9
	VMOVUPS (SI)(CX*1), Z10
	VMOVUPS (R11)(CX*1), Z11
	VMOVUPS (R12)(CX*1), Z12
	VMOVUPS (R13)(CX*1), Z13
	VFMADD231PS Z10, Z8, Z0
	VFMADD231PS Z11, Z8, Z1
	VFMADD231PS Z12, Z8, Z2
	VFMADD231PS Z13, Z8, Z3
	VFMADD231PS Z10, Z9, Z4
	VFMADD231PS Z11, Z9, Z5
	VFMADD231PS Z12, Z9, Z6
	VFMADD231PS Z13, Z9, Z7
	ADDQ $64, CX
	CMPQ CX, R14
	JL   pcol

	VEXTRACTF32X8 $1, Z0, Y14
	VADDPS Y14, Y0, Y0
	VEXTRACTF32X8 $1, Z1, Y14
	VADDPS Y14, Y1, Y1
	VEXTRACTF32X8 $1, Z2, Y14
	VADDPS Y14, Y2, Y2
	VEXTRACTF32X8 $1, Z3, Y14
	VADDPS Y14, Y3, Y3
	VEXTRACTF32X8 $1, Z4, Y14
	VADDPS Y14, Y4, Y4
	VEXTRACTF32X8 $1, Z5, Y14
	VADDPS Y14, Y5, Y5
	VEXTRACTF32X8 $1, Z6, Y14
	VADDPS Y14, Y6, Y6
	VEXTRACTF32X8 $1, Z7, Y14
	VADDPS Y14, Y7, Y7
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X14
	VADDPS X14, X0, X0
	VHADDPS Y5, Y4, Y4
	VHADDPS Y7, Y6, Y6
	VHADDPS Y6, Y4, Y4
	VEXTRACTF128 $1, Y4, X14
	VADDPS X14, X4, X4
	VMOVUPS X0, (DI)
	VMOVUPS X4, (R15)
	ADDQ $16, DI
	ADDQ $16, R15
	LEAQ (R13)(R14*1), SI
	SUBQ $4, R8
	JMP  prow

pdone:
	VZEROUPPER
	RET


// func splitEvenOddAVX512(v, even, odd *float32, n int)
// even[i] = v[2i], odd[i] = v[2i+1] for i < n/2; n must be a multiple of 32.
TEXT ·splitEvenOddAVX512(SB), NOSPLIT, $0-32
	MOVQ v+0(FP), SI
	MOVQ even+8(FP), DI
	MOVQ odd+16(FP), DX
	MOVQ n+24(FP), CX
	VMOVDQU32 evenodd<>+0(SB), Z6
	VMOVDQU32 evenodd<>+64(SB), Z7

eosplit:
	VMOVUPS (SI), Z0
	VMOVUPS 64(SI), Z1
	VMOVAPS Z0, Z2
	VPERMT2PS Z1, Z6, Z2       // v[0], v[2], ..., v[30]
	VPERMT2PS Z1, Z7, Z0       // v[1], v[3], ..., v[31]
	VMOVUPS Z2, (DI)
	VMOVUPS Z0, (DX)
	ADDQ $128, SI
	ADDQ $64, DI
	ADDQ $64, DX
	SUBQ $32, CX
	JNZ  eosplit
	VZEROUPPER
	RET

// The indexes of the even elements of 32 (two zmm), then of the odd ones.
DATA evenodd<>+0(SB)/4, $0
DATA evenodd<>+4(SB)/4, $2
DATA evenodd<>+8(SB)/4, $4
DATA evenodd<>+12(SB)/4, $6
DATA evenodd<>+16(SB)/4, $8
DATA evenodd<>+20(SB)/4, $10
DATA evenodd<>+24(SB)/4, $12
DATA evenodd<>+28(SB)/4, $14
DATA evenodd<>+32(SB)/4, $16
DATA evenodd<>+36(SB)/4, $18
DATA evenodd<>+40(SB)/4, $20
DATA evenodd<>+44(SB)/4, $22
DATA evenodd<>+48(SB)/4, $24
DATA evenodd<>+52(SB)/4, $26
DATA evenodd<>+56(SB)/4, $28
DATA evenodd<>+60(SB)/4, $30
DATA evenodd<>+64(SB)/4, $1
DATA evenodd<>+68(SB)/4, $3
DATA evenodd<>+72(SB)/4, $5
DATA evenodd<>+76(SB)/4, $7
DATA evenodd<>+80(SB)/4, $9
DATA evenodd<>+84(SB)/4, $11
DATA evenodd<>+88(SB)/4, $13
DATA evenodd<>+92(SB)/4, $15
DATA evenodd<>+96(SB)/4, $17
DATA evenodd<>+100(SB)/4, $19
DATA evenodd<>+104(SB)/4, $21
DATA evenodd<>+108(SB)/4, $23
DATA evenodd<>+112(SB)/4, $25
DATA evenodd<>+116(SB)/4, $27
DATA evenodd<>+120(SB)/4, $29
DATA evenodd<>+124(SB)/4, $31
GLOBL evenodd<>(SB), RODATA|NOPTR, $128

// func prefetchLinesAsm(p *float32, n int)
// PREFETCHT0 on every 64-byte line of p[0:n] (n > 0 floats).
TEXT ·prefetchLinesAsm(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), SI
	MOVQ n+8(FP), CX
	LEAQ (SI)(CX*4), CX
	ANDQ $-64, SI

pfloop:
	PREFETCHT0 (SI)
	ADDQ $64, SI
	CMPQ SI, CX
	JB   pfloop
	RET

// func gdnOutAVX512(vt, sk, sq, u, ck, cq *float32, t, n int, gt, beta, cqt float32, ut, o *float32)
// For each column m < n (a multiple of 64):
//	a = vt[m] − gt·sk[m] + Σ_{i<t} ck[i]·u[i·n+m]
//	b = gt·sq[m] + Σ_{i<t} cq[i]·u[i·n+m]
//	ut[m] = beta·a;  o[m] = b + cqt·ut[m]
// 64 columns at a time: both sums share each load of u.
TEXT ·gdnOutAVX512(SB), NOSPLIT, $0-96
	MOVQ vt+0(FP), AX
	MOVQ sk+8(FP), BX
	MOVQ sq+16(FP), CX
	MOVQ u+24(FP), DX
	MOVQ ck+32(FP), SI
	MOVQ cq+40(FP), DI
	MOVQ t+48(FP), R8
	MOVQ n+56(FP), R9
	VBROADCASTSS gt+64(FP), Z14
	VBROADCASTSS beta+68(FP), Z15
	VBROADCASTSS cqt+72(FP), Z16
	MOVQ ut+80(FP), R10
	MOVQ o+88(FP), R11
	SHLQ $2, R9                // bytes per row of u
	XORQ R13, R13              // byte offset of the column block

gblock:
	VMOVUPS (AX)(R13*1), Z0
	VMOVUPS 64(AX)(R13*1), Z1
	VMOVUPS 128(AX)(R13*1), Z2
	VMOVUPS 192(AX)(R13*1), Z3
	VMOVUPS (BX)(R13*1), Z10
	VMOVUPS 64(BX)(R13*1), Z11
	VMOVUPS 128(BX)(R13*1), Z12
	VMOVUPS 192(BX)(R13*1), Z13
	VFNMADD231PS Z10, Z14, Z0  // a = vt − gt·sk
	VFNMADD231PS Z11, Z14, Z1
	VFNMADD231PS Z12, Z14, Z2
	VFNMADD231PS Z13, Z14, Z3
	VMULPS (CX)(R13*1), Z14, Z4 // b = gt·sq
	VMULPS 64(CX)(R13*1), Z14, Z5
	VMULPS 128(CX)(R13*1), Z14, Z6
	VMULPS 192(CX)(R13*1), Z14, Z7
	LEAQ (DX)(R13*1), R14      // row i of u at this block
	XORQ R12, R12              // i
	TESTQ R8, R8
	JZ   gstore

gloop:
	VBROADCASTSS (SI)(R12*4), Z8
	VBROADCASTSS (DI)(R12*4), Z9
	VMOVUPS (R14), Z10
	VMOVUPS 64(R14), Z11
	VMOVUPS 128(R14), Z12
	VMOVUPS 192(R14), Z13
	VFMADD231PS Z10, Z8, Z0
	VFMADD231PS Z11, Z8, Z1
	VFMADD231PS Z12, Z8, Z2
	VFMADD231PS Z13, Z8, Z3
	VFMADD231PS Z10, Z9, Z4
	VFMADD231PS Z11, Z9, Z5
	VFMADD231PS Z12, Z9, Z6
	VFMADD231PS Z13, Z9, Z7
	ADDQ R9, R14
	INCQ R12
	CMPQ R12, R8
	JL   gloop

gstore:
	VMULPS Z15, Z0, Z0         // u_t = beta·a
	VMULPS Z15, Z1, Z1
	VMULPS Z15, Z2, Z2
	VMULPS Z15, Z3, Z3
	VMOVUPS Z0, (R10)(R13*1)
	VMOVUPS Z1, 64(R10)(R13*1)
	VMOVUPS Z2, 128(R10)(R13*1)
	VMOVUPS Z3, 192(R10)(R13*1)
	VFMADD231PS Z0, Z16, Z4    // o = b + cqt·u_t
	VFMADD231PS Z1, Z16, Z5
	VFMADD231PS Z2, Z16, Z6
	VFMADD231PS Z3, Z16, Z7
	VMOVUPS Z4, (R11)(R13*1)
	VMOVUPS Z5, 64(R11)(R13*1)
	VMOVUPS Z6, 128(R11)(R13*1)
	VMOVUPS Z7, 192(R11)(R13*1)
	ADDQ $256, R13
	CMPQ R13, R9
	JL   gblock
	VZEROUPPER
	RET

// func gdnFoldUAVX512(v, p, coef, gs, beta *float32, t, n int, u *float32)
// The fold's corrected updates, all t rows: for i < t and m < n (a
// multiple of 128), in order of i,
//	u[i·n+m] = beta[i]·(v[i·n+m] − gs[i]·p[i·n+m] + Σ_{l<i} coef[i·t+l]·u[l·n+m])
// 128 columns at a time, the sum split over even and odd l (16
// accumulators), so each row costs its dependent chain over half its terms.
TEXT ·gdnFoldUAVX512(SB), NOSPLIT, $0-64
	MOVQ v+0(FP), SI
	MOVQ p+8(FP), DI
	MOVQ gs+24(FP), R11
	MOVQ beta+32(FP), CX
	MOVQ n+48(FP), R9
	MOVQ u+56(FP), R8
	SHLQ $2, R9                // bytes per row
	XORQ R13, R13              // byte offset of the column block

fucol:
	XORQ R12, R12              // i
	MOVQ coef+16(FP), R10      // row i of coef
	XORQ AX, AX                // i·n·4 + column offset: row i here
	ADDQ R13, AX

furow:
	VBROADCASTSS (R11)(R12*4), Z26
	VBROADCASTSS (CX)(R12*4), Z27
	VMOVUPS 0(SI)(AX*1), Z0
	VMOVUPS 64(SI)(AX*1), Z1
	VMOVUPS 128(SI)(AX*1), Z2
	VMOVUPS 192(SI)(AX*1), Z3
	VMOVUPS 256(SI)(AX*1), Z4
	VMOVUPS 320(SI)(AX*1), Z5
	VMOVUPS 384(SI)(AX*1), Z6
	VMOVUPS 448(SI)(AX*1), Z7
	VFNMADD231PS 0(DI)(AX*1), Z26, Z0
	VFNMADD231PS 64(DI)(AX*1), Z26, Z1
	VFNMADD231PS 128(DI)(AX*1), Z26, Z2
	VFNMADD231PS 192(DI)(AX*1), Z26, Z3
	VFNMADD231PS 256(DI)(AX*1), Z26, Z4
	VFNMADD231PS 320(DI)(AX*1), Z26, Z5
	VFNMADD231PS 384(DI)(AX*1), Z26, Z6
	VFNMADD231PS 448(DI)(AX*1), Z26, Z7
	VXORPS Z8, Z8, Z8
	VXORPS Z9, Z9, Z9
	VXORPS Z10, Z10, Z10
	VXORPS Z11, Z11, Z11
	VXORPS Z12, Z12, Z12
	VXORPS Z13, Z13, Z13
	VXORPS Z14, Z14, Z14
	VXORPS Z15, Z15, Z15
	LEAQ (R8)(R13*1), R15      // row l = 0 of u at this block
	XORQ BX, BX                // l
	MOVQ R12, DX
	ANDQ $-2, DX

fupair:
	CMPQ BX, DX
	JGE  fuodd
	VBROADCASTSS (R10)(BX*4), Z24
	VBROADCASTSS 4(R10)(BX*4), Z25
	VFMADD231PS 0(R15), Z24, Z0
	VFMADD231PS 64(R15), Z24, Z1
	VFMADD231PS 128(R15), Z24, Z2
	VFMADD231PS 192(R15), Z24, Z3
	VFMADD231PS 256(R15), Z24, Z4
	VFMADD231PS 320(R15), Z24, Z5
	VFMADD231PS 384(R15), Z24, Z6
	VFMADD231PS 448(R15), Z24, Z7
	VFMADD231PS 0(R15)(R9*1), Z25, Z8
	VFMADD231PS 64(R15)(R9*1), Z25, Z9
	VFMADD231PS 128(R15)(R9*1), Z25, Z10
	VFMADD231PS 192(R15)(R9*1), Z25, Z11
	VFMADD231PS 256(R15)(R9*1), Z25, Z12
	VFMADD231PS 320(R15)(R9*1), Z25, Z13
	VFMADD231PS 384(R15)(R9*1), Z25, Z14
	VFMADD231PS 448(R15)(R9*1), Z25, Z15
	LEAQ (R15)(R9*2), R15
	ADDQ $2, BX
	JMP  fupair

fuodd:
	CMPQ BX, R12
	JGE  fustore
	VBROADCASTSS (R10)(BX*4), Z24
	VFMADD231PS 0(R15), Z24, Z0
	VFMADD231PS 64(R15), Z24, Z1
	VFMADD231PS 128(R15), Z24, Z2
	VFMADD231PS 192(R15), Z24, Z3
	VFMADD231PS 256(R15), Z24, Z4
	VFMADD231PS 320(R15), Z24, Z5
	VFMADD231PS 384(R15), Z24, Z6
	VFMADD231PS 448(R15), Z24, Z7

fustore:
	VADDPS Z8, Z0, Z0
	VADDPS Z9, Z1, Z1
	VADDPS Z10, Z2, Z2
	VADDPS Z11, Z3, Z3
	VADDPS Z12, Z4, Z4
	VADDPS Z13, Z5, Z5
	VADDPS Z14, Z6, Z6
	VADDPS Z15, Z7, Z7
	VMULPS Z27, Z0, Z0
	VMULPS Z27, Z1, Z1
	VMULPS Z27, Z2, Z2
	VMULPS Z27, Z3, Z3
	VMULPS Z27, Z4, Z4
	VMULPS Z27, Z5, Z5
	VMULPS Z27, Z6, Z6
	VMULPS Z27, Z7, Z7
	VMOVUPS Z0, 0(R8)(AX*1)
	VMOVUPS Z1, 64(R8)(AX*1)
	VMOVUPS Z2, 128(R8)(AX*1)
	VMOVUPS Z3, 192(R8)(AX*1)
	VMOVUPS Z4, 256(R8)(AX*1)
	VMOVUPS Z5, 320(R8)(AX*1)
	VMOVUPS Z6, 384(R8)(AX*1)
	VMOVUPS Z7, 448(R8)(AX*1)
	ADDQ R9, AX
	MOVQ t+40(FP), DX
	LEAQ (R10)(DX*4), R10
	INCQ R12
	CMPQ R12, DX
	JL   furow
	ADDQ $512, R13
	CMPQ R13, R9
	JL   fucol
	VZEROUPPER
	RET


// func sumSquaresAVX512(x *float32, n int) float64
// Σ x[i]² in float64 (each square exact); n must be a multiple of 16.
TEXT ·sumSquaresAVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPD Z0, Z0, Z0
	VXORPD Z1, Z1, Z1

ssloop:
	VCVTPS2PD (SI), Z2
	VCVTPS2PD 32(SI), Z3
	VFMADD231PD Z2, Z2, Z0
	VFMADD231PD Z3, Z3, Z1
	ADDQ $64, SI
	SUBQ $16, CX
	JNZ  ssloop
	VADDPD Z1, Z0, Z0
	VEXTRACTF64X4 $1, Z0, Y1
	VADDPD Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	VZEROUPPER
	MOVSD X0, ret+16(FP)
	RET

// func scaleToAVX512(dst, x *float32, n int, r float32)
// dst[i] = r·x[i]; n must be a multiple of 16.
TEXT ·scaleToAVX512(SB), NOSPLIT, $0-28
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS r+24(FP), Z1

scloop:
	VMULPS (SI), Z1, Z0
	VMOVUPS Z0, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ  scloop
	VZEROUPPER
	RET

// func scaleAdd2AVX512(dst, x, y *float32, n int, a, b float32)
// dst[i] = a·x[i] + b·y[i] for n a multiple of 16: two products rounded, then
// their sum (no FMA), as the Go loop rounds them.
TEXT ·scaleAdd2AVX512(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ y+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS a+32(FP), Z2
	VBROADCASTSS b+36(FP), Z3

sa2loop:
	VMULPS (SI), Z2, Z0
	VMULPS (DX), Z3, Z1
	VADDPS Z1, Z0, Z0
	VMOVUPS Z0, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	SUBQ $16, CX
	JNZ  sa2loop
	VZEROUPPER
	RET

// func rankUpdateDotRowsAVX512(s *float32, rows, n int, decay float32, coefT *float32, cstride, t int, v *float32, vstride int, c, out *float32)
// For p < rows: S_p ← decay·S_p + Σ_{j<t} coefT[j·cstride+p]·V_j (V_j =
// v[j·vstride:]) and, when c is not nil, out[p] = S_p·c over the new row:
// the flush's rank-t update with its output read, the row pair still in
// registers. 2 rows × 64 columns per block; the state is prefetched 8 KiB
// ahead (into the next matrix: a head's DRAM latency is hidden behind the
// previous head's arithmetic). rows even, n a multiple of 16, t >= 1.
TEXT ·rankUpdateDotRowsAVX512(SB), NOSPLIT, $0-88
	MOVQ s+0(FP), DI
	MOVQ rows+8(FP), R8
	MOVQ n+16(FP), R9
	SHLQ $2, R9                // bytes per row
	VBROADCASTSS decay+24(FP), Z15
	MOVQ coefT+32(FP), R11
	MOVQ cstride+40(FP), R14
	SHLQ $2, R14
	MOVQ v+56(FP), SI
	MOVQ vstride+64(FP), R13
	SHLQ $2, R13
	MOVQ c+72(FP), R12

rdu2:
	CMPQ R8, $2
	JL   rdudone
	LEAQ (DI)(R9*1), DX
	XORQ CX, CX
	VXORPS Z14, Z14, Z14
	VXORPS Z16, Z16, Z16

rdu64:
	MOVQ R9, AX
	SUBQ CX, AX
	CMPQ AX, $256
	JL   rdu16
	PREFETCHT0 8192(DI)(CX*1)
	PREFETCHT0 8256(DI)(CX*1)
	PREFETCHT0 8320(DI)(CX*1)
	PREFETCHT0 8384(DI)(CX*1)
	PREFETCHT0 8192(DX)(CX*1)
	PREFETCHT0 8256(DX)(CX*1)
	PREFETCHT0 8320(DX)(CX*1)
	PREFETCHT0 8384(DX)(CX*1)
	VMULPS (DI)(CX*1), Z15, Z0
	VMULPS 64(DI)(CX*1), Z15, Z1
	VMULPS 128(DI)(CX*1), Z15, Z2
	VMULPS 192(DI)(CX*1), Z15, Z3
	VMULPS (DX)(CX*1), Z15, Z4
	VMULPS 64(DX)(CX*1), Z15, Z5
	VMULPS 128(DX)(CX*1), Z15, Z6
	VMULPS 192(DX)(CX*1), Z15, Z7
	LEAQ (SI)(CX*1), BX
	MOVQ R11, R15
	MOVQ t+48(FP), R10

rdu64j:
	VBROADCASTSS (R15), Z12
	VBROADCASTSS 4(R15), Z13
	VMOVUPS (BX), Z8
	VMOVUPS 64(BX), Z9
	VMOVUPS 128(BX), Z10
	VMOVUPS 192(BX), Z11
	VFMADD231PS Z8, Z12, Z0
	VFMADD231PS Z9, Z12, Z1
	VFMADD231PS Z10, Z12, Z2
	VFMADD231PS Z11, Z12, Z3
	VFMADD231PS Z8, Z13, Z4
	VFMADD231PS Z9, Z13, Z5
	VFMADD231PS Z10, Z13, Z6
	VFMADD231PS Z11, Z13, Z7
	ADDQ R13, BX
	ADDQ R14, R15
	DECQ R10
	JNZ  rdu64j

	VMOVUPS Z0, (DI)(CX*1)
	VMOVUPS Z1, 64(DI)(CX*1)
	VMOVUPS Z2, 128(DI)(CX*1)
	VMOVUPS Z3, 192(DI)(CX*1)
	VMOVUPS Z4, (DX)(CX*1)
	VMOVUPS Z5, 64(DX)(CX*1)
	VMOVUPS Z6, 128(DX)(CX*1)
	VMOVUPS Z7, 192(DX)(CX*1)
	TESTQ R12, R12
	JZ   rdu64next
	VMOVUPS (R12)(CX*1), Z8
	VMOVUPS 64(R12)(CX*1), Z9
	VMOVUPS 128(R12)(CX*1), Z10
	VMOVUPS 192(R12)(CX*1), Z11
	VFMADD231PS Z8, Z0, Z14
	VFMADD231PS Z8, Z4, Z16
	VFMADD231PS Z9, Z1, Z14
	VFMADD231PS Z9, Z5, Z16
	VFMADD231PS Z10, Z2, Z14
	VFMADD231PS Z10, Z6, Z16
	VFMADD231PS Z11, Z3, Z14
	VFMADD231PS Z11, Z7, Z16

rdu64next:
	ADDQ $256, CX
	JMP  rdu64

rdu16:
	CMPQ AX, $64
	JL   rdupair
	VMULPS (DI)(CX*1), Z15, Z0
	VMULPS (DX)(CX*1), Z15, Z4
	LEAQ (SI)(CX*1), BX
	MOVQ R11, R15
	MOVQ t+48(FP), R10

rdu16j:
	VBROADCASTSS (R15), Z12
	VBROADCASTSS 4(R15), Z13
	VMOVUPS (BX), Z8
	VFMADD231PS Z8, Z12, Z0
	VFMADD231PS Z8, Z13, Z4
	ADDQ R13, BX
	ADDQ R14, R15
	DECQ R10
	JNZ  rdu16j

	VMOVUPS Z0, (DI)(CX*1)
	VMOVUPS Z4, (DX)(CX*1)
	TESTQ R12, R12
	JZ   rdu16next
	VMOVUPS (R12)(CX*1), Z8
	VFMADD231PS Z8, Z0, Z14
	VFMADD231PS Z8, Z4, Z16

rdu16next:
	ADDQ $64, CX
	MOVQ R9, AX
	SUBQ CX, AX
	JMP  rdu16

rdupair:
	TESTQ R12, R12
	JZ   rdunext
	VMOVAPS Z16, Z4
	VEXTRACTF32X8 $1, Z14, Y1
	VADDPS Y1, Y14, Y0
	VEXTRACTF32X8 $1, Z4, Y5
	VADDPS Y5, Y4, Y4
	VHADDPS Y4, Y0, Y0         // p: 0+1, 2+3 | p+1: 0+1, 2+3 (per lane)
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0         // p, p+1, p, p+1
	MOVQ out+80(FP), BX        // &out[p] = out + (R11 − coefT)
	ADDQ R11, BX
	SUBQ coefT+32(FP), BX
	VMOVLPS X0, (BX)

rdunext:
	LEAQ (DX)(R9*1), DI
	ADDQ $8, R11
	SUBQ $2, R8
	JMP  rdu2

rdudone:
	VZEROUPPER
	RET

// func dotRowsAVX512(s *float32, rows, n int, v *float32, out *float32)
// out[p] = Σ_i s[p*n+i]*v[i] for p < rows, 4 rows per block, each cache
// line of the state prefetched once, 4 KiB ahead (into the next matrix at
// the end of one). n must be a multiple of 16 and rows of 4.
TEXT ·dotRowsAVX512(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), SI
	MOVQ rows+8(FP), R8
	MOVQ n+16(FP), R9
	MOVQ v+24(FP), DX
	MOVQ out+32(FP), DI
	MOVQ R9, R14
	SHLQ $2, R14               // bytes per row

zdr4:
	CMPQ R8, $4
	JL   zdrdone
	LEAQ (SI)(R14*1), R11
	LEAQ (R11)(R14*1), R12
	LEAQ (R12)(R14*1), R13
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z2, Z2, Z2
	VXORPS Z3, Z3, Z3
	XORQ CX, CX

zdrcol:
	PREFETCHT0 4096(SI)(CX*1)
	PREFETCHT0 4096(R11)(CX*1)
	PREFETCHT0 4096(R12)(CX*1)
	PREFETCHT0 4096(R13)(CX*1)
	VMOVUPS (DX)(CX*1), Z8
	VFMADD231PS (SI)(CX*1), Z8, Z0
	VFMADD231PS (R11)(CX*1), Z8, Z1
	VFMADD231PS (R12)(CX*1), Z8, Z2
	VFMADD231PS (R13)(CX*1), Z8, Z3
	ADDQ $64, CX
	CMPQ CX, R14
	JL   zdrcol

	VEXTRACTF32X8 $1, Z0, Y14
	VADDPS Y14, Y0, Y0
	VEXTRACTF32X8 $1, Z1, Y14
	VADDPS Y14, Y1, Y1
	VEXTRACTF32X8 $1, Z2, Y14
	VADDPS Y14, Y2, Y2
	VEXTRACTF32X8 $1, Z3, Y14
	VADDPS Y14, Y3, Y3
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X14
	VADDPS X14, X0, X0
	VMOVUPS X0, (DI)
	ADDQ $16, DI
	LEAQ (R13)(R14*1), SI
	SUBQ $4, R8
	JMP  zdr4

zdrdone:
	VZEROUPPER
	RET

DATA nvq16<>+0(SB)/4, $0x3c800000  // 2^-6, smallest normal e4m3
DATA nvq16<>+4(SB)/4, $0xc407ffff  // e4m3 rebias and rounding, as numeric
DATA nvq16<>+8(SB)/4, $0x7e        // e4m3 448
DATA nvq16<>+12(SB)/4, $0x46800000 // 2^14: its ulp is e4m3's subnormal step
DATA nvq16<>+16(SB)/4, $0x3c000000 // 120<<23: e4m3 -> f32 exponent
DATA nvq16<>+20(SB)/4, $0x3b000000 // 2^-9
DATA nvq16<>+24(SB)/4, $8
DATA nvq16<>+32(SB)/4, $0
DATA nvq16<>+36(SB)/4, $4
DATA nvq16<>+40(SB)/4, $8
DATA nvq16<>+44(SB)/4, $12
DATA nvq16<>+48(SB)/4, $1
DATA nvq16<>+52(SB)/4, $5
DATA nvq16<>+56(SB)/4, $9
DATA nvq16<>+60(SB)/4, $13
DATA nvq16<>+64(SB)/4, $2
DATA nvq16<>+68(SB)/4, $6
DATA nvq16<>+72(SB)/4, $10
DATA nvq16<>+76(SB)/4, $14
DATA nvq16<>+80(SB)/4, $3
DATA nvq16<>+84(SB)/4, $7
DATA nvq16<>+88(SB)/4, $11
DATA nvq16<>+92(SB)/4, $15
GLOBL nvq16<>(SB), RODATA|NOPTR, $96

// func quantizeNVFP4x16AVX512(src *float32, groups int, sixGlobal, global float32, packed, scales *byte)
// quantizeNVFP4AVX512 for groups·16 blocks, 16 blocks (256 values) at a
// time: the 16 block maxima by a shuffle tree (one vector, one lane per
// block), their e4m3 scale codes and f32(s)·global as one vector each,
// then each block's codes as in quantizeNVFP4AVX512. Bit-identical to
// numeric.QuantizeNVFP4.
TEXT ·quantizeNVFP4x16AVX512(SB), NOSPLIT, $0-40
	MOVQ src+0(FP), SI
	MOVQ groups+8(FP), CX
	VBROADCASTSS sixGlobal+16(FP), Z13
	VBROADCASTSS global+20(FP), Z14
	MOVQ packed+24(FP), DI
	MOVQ scales+32(FP), R8
	VBROADCASTSS absmask<>(SB), Z15
	VPBROADCASTD nvconst<>+0(SB), Z12   // bias
	VBROADCASTSS nvconst<>+8(SB), Z11   // 2^22
	VPBROADCASTD nvconst<>+8(SB), Z10   // bits(2^22)
	VPBROADCASTD nvconst<>+12(SB), Z9   // bits(1.0)
	VPBROADCASTD nvconst<>+16(SB), Z8   // bits(6.0)
	VPBROADCASTD nvconst<>+20(SB), Z7   // 7
	VPBROADCASTD nvconst<>+24(SB), Z6   // 1
	VPBROADCASTD nvconst<>+28(SB), Z5   // 8
	VPBROADCASTW nvconst<>+32(SB), X4   // 0x00ff words

q16group:
	TESTQ CX, CX
	JZ   q16done
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	PREFETCHT0 1152(SI)
	PREFETCHT0 1216(SI)
	VPANDD 0(SI), Z15, Z16
	VPANDD 64(SI), Z15, Z17
	VPANDD 128(SI), Z15, Z18
	VPANDD 192(SI), Z15, Z19
	VPANDD 256(SI), Z15, Z20
	VPANDD 320(SI), Z15, Z21
	VPANDD 384(SI), Z15, Z22
	VPANDD 448(SI), Z15, Z23
	VPANDD 512(SI), Z15, Z24
	VPANDD 576(SI), Z15, Z25
	VPANDD 640(SI), Z15, Z26
	VPANDD 704(SI), Z15, Z27
	VPANDD 768(SI), Z15, Z28
	VPANDD 832(SI), Z15, Z29
	VPANDD 896(SI), Z15, Z30
	VPANDD 960(SI), Z15, Z31
	// Block maxima: pairs of registers merged by halves, quarters, pairs
	// and single lanes; the last register holds one block per lane.
	VSHUFF32X4 $0x44, Z17, Z16, Z0
	VSHUFF32X4 $0xEE, Z17, Z16, Z1
	VMAXPS Z1, Z0, Z16
	VSHUFF32X4 $0x44, Z19, Z18, Z0
	VSHUFF32X4 $0xEE, Z19, Z18, Z1
	VMAXPS Z1, Z0, Z17
	VSHUFF32X4 $0x44, Z21, Z20, Z0
	VSHUFF32X4 $0xEE, Z21, Z20, Z1
	VMAXPS Z1, Z0, Z18
	VSHUFF32X4 $0x44, Z23, Z22, Z0
	VSHUFF32X4 $0xEE, Z23, Z22, Z1
	VMAXPS Z1, Z0, Z19
	VSHUFF32X4 $0x44, Z25, Z24, Z0
	VSHUFF32X4 $0xEE, Z25, Z24, Z1
	VMAXPS Z1, Z0, Z20
	VSHUFF32X4 $0x44, Z27, Z26, Z0
	VSHUFF32X4 $0xEE, Z27, Z26, Z1
	VMAXPS Z1, Z0, Z21
	VSHUFF32X4 $0x44, Z29, Z28, Z0
	VSHUFF32X4 $0xEE, Z29, Z28, Z1
	VMAXPS Z1, Z0, Z22
	VSHUFF32X4 $0x44, Z31, Z30, Z0
	VSHUFF32X4 $0xEE, Z31, Z30, Z1
	VMAXPS Z1, Z0, Z23
	VSHUFF32X4 $0x88, Z17, Z16, Z0
	VSHUFF32X4 $0xDD, Z17, Z16, Z1
	VMAXPS Z1, Z0, Z16
	VSHUFF32X4 $0x88, Z19, Z18, Z0
	VSHUFF32X4 $0xDD, Z19, Z18, Z1
	VMAXPS Z1, Z0, Z17
	VSHUFF32X4 $0x88, Z21, Z20, Z0
	VSHUFF32X4 $0xDD, Z21, Z20, Z1
	VMAXPS Z1, Z0, Z18
	VSHUFF32X4 $0x88, Z23, Z22, Z0
	VSHUFF32X4 $0xDD, Z23, Z22, Z1
	VMAXPS Z1, Z0, Z19
	VSHUFPS $0x44, Z17, Z16, Z0
	VSHUFPS $0xEE, Z17, Z16, Z1
	VMAXPS Z1, Z0, Z16
	VSHUFPS $0x44, Z19, Z18, Z0
	VSHUFPS $0xEE, Z19, Z18, Z1
	VMAXPS Z1, Z0, Z17
	VSHUFPS $0x88, Z17, Z16, Z0
	VSHUFPS $0xDD, Z17, Z16, Z1
	VMAXPS Z1, Z0, Z16
	VMOVDQU32 nvq16<>+32(SB), Z17
	VPERMPS Z16, Z17, Z16        // amax of block b in lane b
	VDIVPS Z13, Z16, Z16         // q = amax / (6·global)
	// e4m3(q), q >= 0: normal, rounded to nearest even and saturated at
	// 0x7e, or subnormal through the FPU's rounding of q + 2^14.
	VPSRLD $20, Z16, Z0
	VPANDD Z6, Z0, Z0
	VPBROADCASTD nvq16<>+4(SB), Z1
	VPADDD Z1, Z16, Z1
	VPADDD Z0, Z1, Z1
	VPSRLD $20, Z1, Z1
	VPBROADCASTD nvq16<>+8(SB), Z0
	VPMINUD Z0, Z1, Z1
	VBROADCASTSS nvq16<>+12(SB), Z2
	VADDPS Z2, Z16, Z3
	VPSUBD Z2, Z3, Z3
	VPBROADCASTD nvq16<>+0(SB), Z0
	VPCMPUD $1, Z0, Z16, K1      // q < 2^-6
	VMOVDQA32 Z3, K1, Z1         // scale codes
	VPMOVDB Z1, X0
	VMOVDQU X0, (R8)
	// d = f32(s)·global: s<<20 + 120<<23 for normal codes, s·2^-9 below.
	VPSLLD $20, Z1, Z2
	VPBROADCASTD nvq16<>+16(SB), Z0
	VPADDD Z0, Z2, Z2
	VCVTDQ2PS Z1, Z3
	VBROADCASTSS nvq16<>+20(SB), Z0
	VMULPS Z0, Z3, Z3
	VPBROADCASTD nvq16<>+24(SB), Z0
	VPCMPUD $1, Z0, Z1, K2       // s < 8: subnormal
	VMOVDQA32 Z3, K2, Z2
	VMULPS Z14, Z2, Z20          // d per block
	VPTESTNMD Z1, Z1, K3         // zero scale codes
	KMOVW K3, AX
	VPXORD Z21, Z21, Z21         // block index
	MOVQ $16, R9

q16block:
	VPERMPS Z20, Z21, Z3         // d of this block in every lane
	VMOVUPS (SI), Z0
	VDIVPS Z3, Z0, Z0            // x / d
	// e2m1 codes, as numeric.E2M1FromF32.
	VPANDD Z15, Z0, Z1           // a = |bits|
	VPSRLD $22, Z1, Z2
	VPANDD Z6, Z2, Z2
	VPADDD Z12, Z2, Z2
	VPADDD Z1, Z2, Z2
	VPSRLD $22, Z2, Z2           // normal code
	VADDPS Z11, Z1, Z3           // |f| + 2^22 (a as a float)
	VPSUBD Z10, Z3, Z3           // subnormal code
	VPCMPUD $1, Z9, Z1, K1       // a < 1.0
	VMOVDQA32 Z3, K1, Z2
	VPCMPUD $5, Z8, Z1, K2       // a >= 6.0
	VMOVDQA32 Z7, K2, Z2
	VPSRLD $28, Z0, Z3
	VPANDD Z5, Z3, Z3            // sign -> bit 3
	VPORD Z3, Z2, Z2
	VPMOVDB Z2, X2               // 16 codes, one per byte
	VPSRLW $4, X2, X3
	VPOR X3, X2, X2
	VPAND X4, X2, X2
	VPACKUSWB X2, X2, X2
	MOVQ X2, (DI)
	ADDQ $64, SI
	ADDQ $8, DI
	VPADDD Z6, Z21, Z21
	DECQ R9
	JNZ  q16block

	// Zero blocks (x/0 above): +0 codes, as numeric writes them.
	TESTL AX, AX
	JZ   q16next

q16zero:
	BSFL AX, BX
	MOVQ $0, -128(DI)(BX*8)
	LEAL -1(AX), DX
	ANDL DX, AX
	JNZ  q16zero

q16next:
	ADDQ $16, R8
	DECQ CX
	JMP  q16group

q16done:
	VZEROUPPER
	RET

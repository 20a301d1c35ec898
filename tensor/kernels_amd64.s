//go:build !noasm

#include "textflag.h"

// func dot4AVX2(x, w *float32, stride, n int, acc *[4]float32)
// Two accumulators per weight row (Y0-Y3 and Y8-Y11) hide the FMA latency.
// The four rows are four short streams that restart every call, which the
// hardware prefetcher follows poorly: prefetch the same offsets eight rows
// ahead (two calls later), where the next blocks' rows start.
TEXT ·dot4AVX2(SB), NOSPLIT, $0-40
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ stride+16(FP), R11
	SHLQ $2, R11
	MOVQ n+24(FP), CX
	MOVQ acc+32(FP), DX
	LEAQ (DI)(R11*1), R8
	LEAQ (R8)(R11*1), R9
	LEAQ (R9)(R11*1), R10
	MOVQ R11, R12
	SHLQ $3, R12
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

d4x16:
	CMPQ CX, $16
	JL   d4x8
	PREFETCHT0 (DI)(R12*1)
	PREFETCHT0 (R8)(R12*1)
	PREFETCHT0 (R9)(R12*1)
	PREFETCHT0 (R10)(R12*1)
	VMOVUPS (SI), Y4
	VMOVUPS 32(SI), Y5
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS (R8), Y4, Y1
	VFMADD231PS (R9), Y4, Y2
	VFMADD231PS (R10), Y4, Y3
	VFMADD231PS 32(DI), Y5, Y8
	VFMADD231PS 32(R8), Y5, Y9
	VFMADD231PS 32(R9), Y5, Y10
	VFMADD231PS 32(R10), Y5, Y11
	ADDQ $64, SI
	ADDQ $64, DI
	ADDQ $64, R8
	ADDQ $64, R9
	ADDQ $64, R10
	SUBQ $16, CX
	JMP  d4x16

d4x8:
	CMPQ CX, $8
	JL   d4done
	VMOVUPS (SI), Y4
	VFMADD231PS (DI), Y4, Y0
	VFMADD231PS (R8), Y4, Y1
	VFMADD231PS (R9), Y4, Y2
	VFMADD231PS (R10), Y4, Y3

d4done:
	VADDPS Y8, Y0, Y0
	VADDPS Y9, Y1, Y1
	VADDPS Y10, Y2, Y2
	VADDPS Y11, Y3, Y3
	VHADDPS Y1, Y0, Y0
	VHADDPS Y3, Y2, Y2
	VHADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVUPS X0, (DX)
	VZEROUPPER
	RET


// func dotBF16AVX2(x *float32, w *uint16, n int) float32
// Widens eight bfloat16 weights at a time in registers (zero-extend to 32
// bits, shift into the top half) and multiplies them into four
// accumulators, so that a product reads 2 bytes a weight from memory.
TEXT ·dotBF16AVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ w+8(FP), DI
	MOVQ n+16(FP), CX
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3

db32:
	CMPQ CX, $32
	JL   db8
	VPMOVZXWD (DI), Y4
	VPMOVZXWD 16(DI), Y5
	VPMOVZXWD 32(DI), Y6
	VPMOVZXWD 48(DI), Y7
	VPSLLD $16, Y4, Y4
	VPSLLD $16, Y5, Y5
	VPSLLD $16, Y6, Y6
	VPSLLD $16, Y7, Y7
	VFMADD231PS (SI), Y4, Y0
	VFMADD231PS 32(SI), Y5, Y1
	VFMADD231PS 64(SI), Y6, Y2
	VFMADD231PS 96(SI), Y7, Y3
	ADDQ $128, SI
	ADDQ $64, DI
	SUBQ $32, CX
	JMP  db32

db8:
	CMPQ CX, $8
	JL   dbdone
	VPMOVZXWD (DI), Y4
	VPSLLD $16, Y4, Y4
	VFMADD231PS (SI), Y4, Y0
	ADDQ $32, SI
	ADDQ $16, DI
	SUBQ $8, CX
	JMP  db8

dbdone:
	VADDPS Y1, Y0, Y0
	VADDPS Y3, Y2, Y2
	VADDPS Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VMOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func widenBF16AVX2(dst *float32, src *uint16, n int)
TEXT ·widenBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

wb16:
	CMPQ CX, $16
	JL   wb8
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPSLLD $16, Y0, Y0
	VPSLLD $16, Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	SUBQ $16, CX
	JMP  wb16

wb8:
	CMPQ CX, $8
	JL   wbdone
	VPMOVZXWD (SI), Y0
	VPSLLD $16, Y0, Y0
	VMOVUPS Y0, (DI)

wbdone:
	VZEROUPPER
	RET

//go:build !noasm

#include "textflag.h"

// func decayDotsAVX2(yk, yq *float64, a, x *float32, n int) (float64, float64)
// yk[c] *= a[c], yq[c] *= a[c]; returns Σ yk[c]·x[c] and Σ yq[c]·x[c], in
// float64 with FMA, two accumulators each. n must be a multiple of 8.
TEXT ·decayDotsAVX2(SB), NOSPLIT, $0-56
	MOVQ yk+0(FP), DI
	MOVQ yq+8(FP), SI
	MOVQ a+16(FP), AX
	MOVQ x+24(FP), BX
	MOVQ n+32(FP), CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1
	VXORPD Y2, Y2, Y2
	VXORPD Y3, Y3, Y3

ddloop:
	VCVTPS2PD (AX), Y4
	VCVTPS2PD 16(AX), Y5
	VCVTPS2PD (BX), Y6
	VCVTPS2PD 16(BX), Y7
	VMULPD (DI), Y4, Y8
	VMULPD 32(DI), Y5, Y9
	VMULPD (SI), Y4, Y10
	VMULPD 32(SI), Y5, Y11
	VMOVUPD Y8, (DI)
	VMOVUPD Y9, 32(DI)
	VMOVUPD Y10, (SI)
	VMOVUPD Y11, 32(SI)
	VFMADD231PD Y8, Y6, Y0
	VFMADD231PD Y9, Y7, Y1
	VFMADD231PD Y10, Y6, Y2
	VFMADD231PD Y11, Y7, Y3
	ADDQ $32, AX
	ADDQ $32, BX
	ADDQ $64, DI
	ADDQ $64, SI
	SUBQ $8, CX
	JNZ  ddloop
	VADDPD Y1, Y0, Y0
	VADDPD Y3, Y2, Y2
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	VEXTRACTF128 $1, Y2, X3
	VADDPD X3, X2, X2
	VHADDPD X2, X2, X2
	VZEROUPPER
	MOVSD X0, ret+40(FP)
	MOVSD X2, ret1+48(FP)
	RET

// func decayDotAVX2(y *float64, a, x *float32, n int) float64
// y[c] *= a[c]; returns Σ y[c]·x[c], in float64 with FMA, two
// accumulators. n must be a multiple of 8.
TEXT ·decayDotAVX2(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ a+8(FP), AX
	MOVQ x+16(FP), BX
	MOVQ n+24(FP), CX
	VXORPD Y0, Y0, Y0
	VXORPD Y1, Y1, Y1

d1loop:
	VCVTPS2PD (AX), Y4
	VCVTPS2PD 16(AX), Y5
	VCVTPS2PD (BX), Y6
	VCVTPS2PD 16(BX), Y7
	VMULPD (DI), Y4, Y8
	VMULPD 32(DI), Y5, Y9
	VMOVUPD Y8, (DI)
	VMOVUPD Y9, 32(DI)
	VFMADD231PD Y8, Y6, Y0
	VFMADD231PD Y9, Y7, Y1
	ADDQ $32, AX
	ADDQ $32, BX
	ADDQ $64, DI
	SUBQ $8, CX
	JNZ  d1loop
	VADDPD Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPD X1, X0, X0
	VHADDPD X0, X0, X0
	VZEROUPPER
	MOVSD X0, ret+32(FP)
	RET

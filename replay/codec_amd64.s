//go:build !noasm

#include "textflag.h"

// SUM32 leaves in the low lane of xa the sum of the 32 floats of za and zb
// (ya, xa: za's lower halves; zb, yb, xb are clobbered): a row dot's end.
#define SUM32(za, zb, ya, yb, xa, xb) \
	VADDPS        zb, za, za \
	VEXTRACTF32X8 $1, za, yb \
	VADDPS        yb, ya, ya \
	VEXTRACTF128  $1, ya, xb \
	VADDPS        xb, xa, xa \
	VPERMILPS     $0x4e, xa, xb \
	VADDPS        xb, xa, xa \
	VPERMILPS     $0xb1, xa, xb \
	VADDSS        xb, xa, xa

// SIMD codecs of the state formats without a fused kernel (fp16, fp8 e4m3),
// bit for bit those of package numeric. AVX2 + F16C; n is a multiple of 16.

// func decodeF16AVX2(dst *float32, src *uint16, n int)
TEXT ·decodeF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX

def16:
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VMOVUPS   Y0, (DI)
	VMOVUPS   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	SUBQ      $16, CX
	JNZ       def16
	VZEROUPPER
	RET

// func encodeF16AVX2(dst *uint16, src *float32, n int)
// Round to nearest even; NaN becomes the quiet NaN 0x7e00 with its sign
// (numeric.F16FromF32): a NaN input is replaced by the float32 NaN that
// converts to it.
TEXT ·encodeF16AVX2(SB), NOSPLIT, $0-24
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS codecc<>+0(SB), Y12 // 0x7fc00000
	VBROADCASTSS codecc<>+4(SB), Y13 // sign

enf16:
	VMOVUPS   (SI), Y0
	VMOVUPS   32(SI), Y1
	VCMPPS    $3, Y0, Y0, Y4
	VANDPS    Y13, Y0, Y6
	VORPS     Y12, Y6, Y6
	VBLENDVPS Y4, Y6, Y0, Y0
	VCMPPS    $3, Y1, Y1, Y5
	VANDPS    Y13, Y1, Y7
	VORPS     Y12, Y7, Y7
	VBLENDVPS Y5, Y7, Y1, Y1
	VCVTPS2PH $0, Y0, (DI)
	VCVTPS2PH $0, Y1, 16(DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	SUBQ      $16, CX
	JNZ       enf16
	VZEROUPPER
	RET

// func decodeE4M3AVX2(dst *float32, src *uint8, n int, scale float32)
// dst[i] = value(src[i]) * scale. An e4m3 code c is the fp16 number with bits
// (c&0x80)<<8 | (c&0x7f)<<7 divided by 2^8 (subnormals included), so the
// decode is a conversion and one multiply by 256*scale (exact: a power of
// two); the NaN codes 0x7f, 0xff give the NaN of numeric's table.
TEXT ·decodeE4M3AVX2(SB), NOSPLIT, $0-28
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y15
	VBROADCASTSS codecc<>+8(SB), Y14 // 256.0
	VMULPS       Y14, Y15, Y15
	VPBROADCASTW codecc<>+12(SB), X14 // 0x3f80: magnitude bits
	VPBROADCASTW codecc<>+14(SB), X13 // 0x8000: sign bit
	VBROADCASTSS codecc<>+0(SB), Y12  // 0x7fc00000
	VBROADCASTSS codecc<>+4(SB), Y11  // sign

de8:
	VPMOVZXBW (SI), X0
	VPSLLW    $7, X0, X1
	VPAND     X14, X1, X1
	VPSLLW    $8, X0, X2
	VPAND     X13, X2, X2
	VPCMPEQW  X14, X1, X3       // NaN codes
	VPOR      X2, X1, X1
	VCVTPH2PS X1, Y1
	VMULPS    Y15, Y1, Y1
	VPMOVSXWD X3, Y3
	VANDPS    Y11, Y1, Y4
	VORPS     Y12, Y4, Y4
	VBLENDVPS Y3, Y4, Y1, Y1
	VMOVUPS   Y1, (DI)
	ADDQ      $8, SI
	ADDQ      $32, DI
	SUBQ      $8, CX
	JNZ       de8
	VZEROUPPER
	RET

// func encodeE4M3AVX2(dst *uint8, src *float32, n int, inv float32)
// dst[i] = numeric.E4M3FromF32(src[i]*inv), eight lanes at a time: the
// normal and subnormal codes are both computed and the lane's case picked.
TEXT ·encodeE4M3AVX2(SB), NOSPLIT, $0-28
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS inv+24(FP), Y15
	VBROADCASTSS codecc<>+16(SB), Y14
	VMOVDQU      e4m3c<>+0(SB), Y13   // 0x3c800000: smallest normal
	VMOVDQU      e4m3c<>+32(SB), Y12  // 0xc407ffff: rebias + round
	VMOVDQU      e4m3c<>+64(SB), Y11  // 1
	VMOVDQU      e4m3c<>+96(SB), Y10  // 0xff
	VMOVDQU      e4m3c<>+128(SB), Y9  // 16384.0
	VMOVDQU      e4m3c<>+160(SB), Y8  // 0x46800000
	VMOVDQU      e4m3c<>+192(SB), Y7  // byte gather (per 128-bit lane)
	VMOVDQU      e4m3c<>+224(SB), Y6  // dword permutation

en8:
	VMULPS    (SI), Y15, Y0      // x = f*inv
	VANDPS    Y14, Y0, Y1        // a = |x| bits
	VPSRLD    $24, Y0, Y2
	VPAND     e4m3c<>+256(SB), Y2, Y2 // sign: 0x80
	// normal: ((a + 0xc407ffff + ((a>>20)&1)) >> 20) & 0xff
	VPSRLD    $20, Y1, Y3
	VPAND     Y11, Y3, Y3
	VPADDD    Y12, Y3, Y3
	VPADDD    Y1, Y3, Y3
	VPSRLD    $20, Y3, Y3
	VPAND     Y10, Y3, Y3
	// subnormal: (bits(a + 2^14) - 0x46800000) & 0xff
	VADDPS    Y9, Y1, Y4
	VPSUBD    Y8, Y4, Y4
	VPAND     Y10, Y4, Y4
	VPCMPGTD  Y1, Y13, Y5        // a < smallest normal
	VPBLENDVB Y5, Y4, Y3, Y3
	VPCMPGTD  e4m3c<>+288(SB), Y1, Y5 // a > 0x43dfffff: saturate
	VPBLENDVB Y5, e4m3c<>+320(SB), Y3, Y3
	VPCMPGTD  e4m3c<>+352(SB), Y1, Y5 // a > Inf: NaN
	VPBLENDVB Y5, e4m3c<>+384(SB), Y3, Y3
	VPOR      Y2, Y3, Y3
	VPSHUFB   Y7, Y3, Y3
	VPERMD    Y3, Y6, Y3
	MOVQ      X3, (DI)
	ADDQ      $32, SI
	ADDQ      $8, DI
	SUBQ      $8, CX
	JNZ       en8
	VZEROUPPER
	RET

// func absMaxAVX2(src *float32, n int) float32
// The largest |src[i]|, NaN left out (as replay's absMax), Inf counted; n is
// a multiple of 16. VMAXPS returns its second source when either is NaN, so
// the accumulator goes second.
TEXT ·absMaxAVX2(SB), NOSPLIT, $0-20
	MOVQ         src+0(FP), SI
	MOVQ         n+8(FP), CX
	VBROADCASTSS codecc<>+16(SB), Y15
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1

am2:
	VANDPS  (SI), Y15, Y2
	VANDPS  32(SI), Y15, Y3
	VMAXPS  Y0, Y2, Y0
	VMAXPS  Y1, Y3, Y1
	ADDQ    $64, SI
	SUBQ    $16, CX
	JNZ     am2
	VMAXPS  Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS  X1, X0, X0
	VPERMILPS $0x4e, X0, X1
	VMAXPS  X1, X0, X0
	VPERMILPS $0xb1, X0, X1
	VMAXPS  X1, X0, X0
	VZEROUPPER
	MOVSS   X0, ret+16(FP)
	RET

DATA codecc<>+0(SB)/4, $0x7fc00000
DATA codecc<>+4(SB)/4, $0x80000000
DATA codecc<>+8(SB)/4, $0x43800000  // 256.0
DATA codecc<>+12(SB)/2, $0x3f80
DATA codecc<>+14(SB)/2, $0x8000
DATA codecc<>+16(SB)/4, $0x7fffffff
DATA codecc<>+20(SB)/4, $0x7fff
DATA codecc<>+24(SB)/4, $1
GLOBL codecc<>(SB), RODATA|NOPTR, $28

DATA e4m3c<>+0(SB)/4, $0x3c800000
DATA e4m3c<>+4(SB)/4, $0x3c800000
DATA e4m3c<>+8(SB)/4, $0x3c800000
DATA e4m3c<>+12(SB)/4, $0x3c800000
DATA e4m3c<>+16(SB)/4, $0x3c800000
DATA e4m3c<>+20(SB)/4, $0x3c800000
DATA e4m3c<>+24(SB)/4, $0x3c800000
DATA e4m3c<>+28(SB)/4, $0x3c800000
DATA e4m3c<>+32(SB)/4, $0xc407ffff
DATA e4m3c<>+36(SB)/4, $0xc407ffff
DATA e4m3c<>+40(SB)/4, $0xc407ffff
DATA e4m3c<>+44(SB)/4, $0xc407ffff
DATA e4m3c<>+48(SB)/4, $0xc407ffff
DATA e4m3c<>+52(SB)/4, $0xc407ffff
DATA e4m3c<>+56(SB)/4, $0xc407ffff
DATA e4m3c<>+60(SB)/4, $0xc407ffff
DATA e4m3c<>+64(SB)/4, $0x00000001
DATA e4m3c<>+68(SB)/4, $0x00000001
DATA e4m3c<>+72(SB)/4, $0x00000001
DATA e4m3c<>+76(SB)/4, $0x00000001
DATA e4m3c<>+80(SB)/4, $0x00000001
DATA e4m3c<>+84(SB)/4, $0x00000001
DATA e4m3c<>+88(SB)/4, $0x00000001
DATA e4m3c<>+92(SB)/4, $0x00000001
DATA e4m3c<>+96(SB)/4, $0x000000ff
DATA e4m3c<>+100(SB)/4, $0x000000ff
DATA e4m3c<>+104(SB)/4, $0x000000ff
DATA e4m3c<>+108(SB)/4, $0x000000ff
DATA e4m3c<>+112(SB)/4, $0x000000ff
DATA e4m3c<>+116(SB)/4, $0x000000ff
DATA e4m3c<>+120(SB)/4, $0x000000ff
DATA e4m3c<>+124(SB)/4, $0x000000ff
DATA e4m3c<>+128(SB)/4, $0x46800000
DATA e4m3c<>+132(SB)/4, $0x46800000
DATA e4m3c<>+136(SB)/4, $0x46800000
DATA e4m3c<>+140(SB)/4, $0x46800000
DATA e4m3c<>+144(SB)/4, $0x46800000
DATA e4m3c<>+148(SB)/4, $0x46800000
DATA e4m3c<>+152(SB)/4, $0x46800000
DATA e4m3c<>+156(SB)/4, $0x46800000
DATA e4m3c<>+160(SB)/4, $0x46800000
DATA e4m3c<>+164(SB)/4, $0x46800000
DATA e4m3c<>+168(SB)/4, $0x46800000
DATA e4m3c<>+172(SB)/4, $0x46800000
DATA e4m3c<>+176(SB)/4, $0x46800000
DATA e4m3c<>+180(SB)/4, $0x46800000
DATA e4m3c<>+184(SB)/4, $0x46800000
DATA e4m3c<>+188(SB)/4, $0x46800000
DATA e4m3c<>+192(SB)/4, $0x0c080400
DATA e4m3c<>+196(SB)/4, $0x80808080
DATA e4m3c<>+200(SB)/4, $0x80808080
DATA e4m3c<>+204(SB)/4, $0x80808080
DATA e4m3c<>+208(SB)/4, $0x0c080400
DATA e4m3c<>+212(SB)/4, $0x80808080
DATA e4m3c<>+216(SB)/4, $0x80808080
DATA e4m3c<>+220(SB)/4, $0x80808080
DATA e4m3c<>+224(SB)/4, $0x00000000
DATA e4m3c<>+228(SB)/4, $0x00000004
DATA e4m3c<>+232(SB)/4, $0x00000001
DATA e4m3c<>+236(SB)/4, $0x00000001
DATA e4m3c<>+240(SB)/4, $0x00000001
DATA e4m3c<>+244(SB)/4, $0x00000001
DATA e4m3c<>+248(SB)/4, $0x00000001
DATA e4m3c<>+252(SB)/4, $0x00000001
DATA e4m3c<>+256(SB)/4, $0x00000080
DATA e4m3c<>+260(SB)/4, $0x00000080
DATA e4m3c<>+264(SB)/4, $0x00000080
DATA e4m3c<>+268(SB)/4, $0x00000080
DATA e4m3c<>+272(SB)/4, $0x00000080
DATA e4m3c<>+276(SB)/4, $0x00000080
DATA e4m3c<>+280(SB)/4, $0x00000080
DATA e4m3c<>+284(SB)/4, $0x00000080
DATA e4m3c<>+288(SB)/4, $0x43dfffff
DATA e4m3c<>+292(SB)/4, $0x43dfffff
DATA e4m3c<>+296(SB)/4, $0x43dfffff
DATA e4m3c<>+300(SB)/4, $0x43dfffff
DATA e4m3c<>+304(SB)/4, $0x43dfffff
DATA e4m3c<>+308(SB)/4, $0x43dfffff
DATA e4m3c<>+312(SB)/4, $0x43dfffff
DATA e4m3c<>+316(SB)/4, $0x43dfffff
DATA e4m3c<>+320(SB)/4, $0x0000007e
DATA e4m3c<>+324(SB)/4, $0x0000007e
DATA e4m3c<>+328(SB)/4, $0x0000007e
DATA e4m3c<>+332(SB)/4, $0x0000007e
DATA e4m3c<>+336(SB)/4, $0x0000007e
DATA e4m3c<>+340(SB)/4, $0x0000007e
DATA e4m3c<>+344(SB)/4, $0x0000007e
DATA e4m3c<>+348(SB)/4, $0x0000007e
DATA e4m3c<>+352(SB)/4, $0x7f800000
DATA e4m3c<>+356(SB)/4, $0x7f800000
DATA e4m3c<>+360(SB)/4, $0x7f800000
DATA e4m3c<>+364(SB)/4, $0x7f800000
DATA e4m3c<>+368(SB)/4, $0x7f800000
DATA e4m3c<>+372(SB)/4, $0x7f800000
DATA e4m3c<>+376(SB)/4, $0x7f800000
DATA e4m3c<>+380(SB)/4, $0x7f800000
DATA e4m3c<>+384(SB)/4, $0x0000007f
DATA e4m3c<>+388(SB)/4, $0x0000007f
DATA e4m3c<>+392(SB)/4, $0x0000007f
DATA e4m3c<>+396(SB)/4, $0x0000007f
DATA e4m3c<>+400(SB)/4, $0x0000007f
DATA e4m3c<>+404(SB)/4, $0x0000007f
DATA e4m3c<>+408(SB)/4, $0x0000007f
DATA e4m3c<>+412(SB)/4, $0x0000007f
GLOBL e4m3c<>(SB), RODATA|NOPTR, $416

// func dotRowsF16AVX512(s *uint16, rows, n int, v *float32, out *float32)
// out[r] = sum_k f32(s[r*n+k]) * v[k]: the fp16 matrix read with the decode
// fused into the dot (VCVTPH2PS), so the state is read once. n is a
// multiple of 32.
TEXT ·dotRowsF16AVX512(SB), NOSPLIT, $0-40
	MOVQ s+0(FP), SI
	MOVQ rows+8(FP), R8
	MOVQ n+16(FP), R9
	MOVQ v+24(FP), DX
	MOVQ out+32(FP), DI

f16row:
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	MOVQ   DX, BX
	MOVQ   R9, CX

f16k:
	PREFETCHT0  1024(SI)
	VCVTPH2PS   (SI), Z2
	VCVTPH2PS   32(SI), Z3
	VFMADD231PS (BX), Z2, Z0
	VFMADD231PS 64(BX), Z3, Z1
	ADDQ        $64, SI
	ADDQ        $128, BX
	SUBQ        $32, CX
	JNZ         f16k
	SUM32(Z0, Z1, Y0, Y1, X0, X1)
	MOVSS         X0, (DI)
	ADDQ          $4, DI
	DECQ          R8
	JNZ           f16row
	VZEROUPPER
	RET

// func dotRowsE4M3AVX512(s *uint8, rows, n int, v *float32, scale float32, out *float32)
// out[r] = scale * sum_k value(s[r*n+k]) * v[k] for an fp8 matrix: codes
// become fp16 numbers 2^-8 times their value (decodeE4M3AVX2's trick), the
// 2^8 and the scale are applied once per row; the NaN codes decode to NaN.
// n is a multiple of 32.
TEXT ·dotRowsE4M3AVX512(SB), NOSPLIT, $0-48
	MOVQ         s+0(FP), SI
	MOVQ         rows+8(FP), R8
	MOVQ         n+16(FP), R9
	MOVQ         v+24(FP), DX
	MOVSS        scale+32(FP), X15
	MULSS        codecc<>+8(SB), X15 // 256*scale
	MOVQ         out+40(FP), DI
	VPBROADCASTW codecc<>+12(SB), Y14 // 0x3f80
	VPBROADCASTW codecc<>+14(SB), Y13 // 0x8000
	VBROADCASTSS codecc<>+0(SB), Z12  // NaN

e8row:
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	MOVQ   DX, BX
	MOVQ   R9, CX

e8k:
	PREFETCHT0  512(SI)
	VPMOVZXBW   (SI), Y2
	VPSLLW      $7, Y2, Y3
	VPAND       Y14, Y3, Y3
	VPSLLW      $8, Y2, Y4
	VPAND       Y13, Y4, Y4
	VPCMPEQW    Y14, Y3, K1
	VPOR        Y4, Y3, Y3
	VCVTPH2PS   Y3, Z3
	VMOVAPS     Z12, K1, Z3
	VFMADD231PS (BX), Z3, Z0
	VPMOVZXBW   16(SI), Y5
	VPSLLW      $7, Y5, Y6
	VPAND       Y14, Y6, Y6
	VPSLLW      $8, Y5, Y7
	VPAND       Y13, Y7, Y7
	VPCMPEQW    Y14, Y6, K2
	VPOR        Y7, Y6, Y6
	VCVTPH2PS   Y6, Z6
	VMOVAPS     Z12, K2, Z6
	VFMADD231PS 64(BX), Z6, Z1
	ADDQ        $32, SI
	ADDQ        $128, BX
	SUBQ        $32, CX
	JNZ         e8k
	SUM32(Z0, Z1, Y0, Y1, X0, X1)
	MULSS         X15, X0
	MOVSS         X0, (DI)
	ADDQ          $4, DI
	DECQ          R8
	JNZ           e8row
	VZEROUPPER
	RET

// func dotRowsE4M3PairAVX512(s *uint8, rows, n int, v, w *float32, scale float32, out, out2 *float32)
// dotRowsE4M3AVX512 for two vectors at once (out = S·v, out2 = S·w), each
// code decoded once: the GDN read (S^T k and S^T q).
TEXT ·dotRowsE4M3PairAVX512(SB), NOSPLIT, $0-64
	MOVQ         s+0(FP), SI
	MOVQ         rows+8(FP), R8
	MOVQ         n+16(FP), R9
	MOVQ         v+24(FP), DX
	MOVQ         w+32(FP), R12
	MOVSS        scale+40(FP), X15
	MULSS        codecc<>+8(SB), X15 // 256*scale
	MOVQ         out+48(FP), DI
	MOVQ         out2+56(FP), R11
	VPBROADCASTW codecc<>+12(SB), Y14 // 0x3f80
	VPBROADCASTW codecc<>+14(SB), Y13 // 0x8000
	VBROADCASTSS codecc<>+0(SB), Z12  // NaN

p8row:
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z8, Z8, Z8
	VXORPS Z9, Z9, Z9
	MOVQ   DX, BX
	MOVQ   R12, R10
	MOVQ   R9, CX

p8k:
	PREFETCHT0  512(SI)
	VPMOVZXBW   (SI), Y2
	VPSLLW      $7, Y2, Y3
	VPAND       Y14, Y3, Y3
	VPSLLW      $8, Y2, Y4
	VPAND       Y13, Y4, Y4
	VPCMPEQW    Y14, Y3, K1
	VPOR        Y4, Y3, Y3
	VCVTPH2PS   Y3, Z3
	VMOVAPS     Z12, K1, Z3
	VFMADD231PS (BX), Z3, Z0
	VFMADD231PS (R10), Z3, Z8
	VPMOVZXBW   16(SI), Y5
	VPSLLW      $7, Y5, Y6
	VPAND       Y14, Y6, Y6
	VPSLLW      $8, Y5, Y7
	VPAND       Y13, Y7, Y7
	VPCMPEQW    Y14, Y6, K2
	VPOR        Y7, Y6, Y6
	VCVTPH2PS   Y6, Z6
	VMOVAPS     Z12, K2, Z6
	VFMADD231PS 64(BX), Z6, Z1
	VFMADD231PS 64(R10), Z6, Z9
	ADDQ        $32, SI
	ADDQ        $128, BX
	ADDQ        $128, R10
	SUBQ        $32, CX
	JNZ         p8k
	SUM32(Z0, Z1, Y0, Y1, X0, X1)
	SUM32(Z8, Z9, Y8, Y9, X8, X9)
	MULSS         X15, X0
	MULSS         X15, X8
	MOVSS         X0, (DI)
	MOVSS         X8, (R11)
	ADDQ          $4, DI
	ADDQ          $4, R11
	DECQ          R8
	JNZ           p8row
	VZEROUPPER
	RET

// func dotRowsF16PairAVX512(s *uint16, rows, n int, v, w *float32, out, out2 *float32)
// dotRowsF16AVX512 for two vectors at once, each element converted once.
TEXT ·dotRowsF16PairAVX512(SB), NOSPLIT, $0-56
	MOVQ s+0(FP), SI
	MOVQ rows+8(FP), R8
	MOVQ n+16(FP), R9
	MOVQ v+24(FP), DX
	MOVQ w+32(FP), R12
	MOVQ out+40(FP), DI
	MOVQ out2+48(FP), R11

h2row:
	VXORPS Z0, Z0, Z0
	VXORPS Z1, Z1, Z1
	VXORPS Z8, Z8, Z8
	VXORPS Z9, Z9, Z9
	MOVQ   DX, BX
	MOVQ   R12, R10
	MOVQ   R9, CX

h2k:
	PREFETCHT0  1024(SI)
	VCVTPH2PS   (SI), Z2
	VCVTPH2PS   32(SI), Z3
	VFMADD231PS (BX), Z2, Z0
	VFMADD231PS (R10), Z2, Z8
	VFMADD231PS 64(BX), Z3, Z1
	VFMADD231PS 64(R10), Z3, Z9
	ADDQ        $64, SI
	ADDQ        $128, BX
	ADDQ        $128, R10
	SUBQ        $32, CX
	JNZ         h2k
	SUM32(Z0, Z1, Y0, Y1, X0, X1)
	SUM32(Z8, Z9, Y8, Y9, X8, X9)
	MOVSS         X0, (DI)
	MOVSS         X8, (R11)
	ADDQ          $4, DI
	ADDQ          $4, R11
	DECQ          R8
	JNZ           h2row
	VZEROUPPER
	RET

// func updateRowsF16AVX2(s *uint16, rows, n int, a float32, c *float32, b, cv *float32, out *float32)
// updateRowsBF16AVX2 for an fp16 state: for p < rows, r = a*f32(s_p) +
// c[p]*b, out[p] = Σ r·cv (over the unrounded r), s_p = fp16(r) rounded to
// nearest even (NaN -> 0x7e00 with the sign), exactly as decode, updateRows,
// encode. n must be a multiple of 16.
TEXT ·updateRowsF16AVX2(SB), NOSPLIT, $0-64
	MOVQ         s+0(FP), DI
	MOVQ         rows+8(FP), R8
	MOVQ         n+16(FP), R9
	VBROADCASTSS a+24(FP), Y15
	MOVQ         c+32(FP), R11
	MOVQ         b+40(FP), SI
	MOVQ         cv+48(FP), DX
	MOVQ         out+56(FP), R12
	VBROADCASTSS codecc<>+0(SB), Y12 // 0x7fc00000
	VBROADCASTSS codecc<>+4(SB), Y13 // sign

uhrow:
	TESTQ        R8, R8
	JZ           uhdone
	VBROADCASTSS (R11), Y14
	VXORPS       Y0, Y0, Y0
	VXORPS       Y1, Y1, Y1
	XORQ         CX, CX
	MOVQ         R9, R10

uhcol:
	PREFETCHT0  512(DI)
	VCVTPH2PS   (DI), Y2
	VCVTPH2PS   16(DI), Y3
	VMULPS      Y15, Y2, Y2
	VMULPS      Y15, Y3, Y3
	VFMADD231PS (SI)(CX*1), Y14, Y2
	VFMADD231PS 32(SI)(CX*1), Y14, Y3
	VFMADD231PS (DX)(CX*1), Y2, Y0
	VFMADD231PS 32(DX)(CX*1), Y3, Y1
	VCMPPS      $3, Y2, Y2, Y6
	VANDPS      Y13, Y2, Y7
	VORPS       Y12, Y7, Y7
	VBLENDVPS   Y6, Y7, Y2, Y2
	VCMPPS      $3, Y3, Y3, Y6
	VANDPS      Y13, Y3, Y7
	VORPS       Y12, Y7, Y7
	VBLENDVPS   Y6, Y7, Y3, Y3
	VCVTPS2PH   $0, Y2, (DI)
	VCVTPS2PH   $0, Y3, 16(DI)
	ADDQ        $32, DI
	ADDQ        $64, CX
	SUBQ        $16, R10
	JNZ         uhcol
	VADDPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS       X1, X0, X0
	VHADDPS      X0, X0, X0
	VHADDPS      X0, X0, X0
	MOVSS        X0, (R12)
	ADDQ         $4, R12
	ADDQ         $4, R11
	DECQ         R8
	JMP          uhrow

uhdone:
	VZEROUPPER
	RET

// func updateRowsBF16AVX512(s *uint16, rows, n int, a float32, c *float32, b, cv *float32, out *float32)
// updateRowsBF16AVX2 with 16 lanes per instruction and VPMOVDW for the
// pack: the same state bits (element by element), the output dot summed in
// another order. n must be a multiple of 32.
TEXT ·updateRowsBF16AVX512(SB), NOSPLIT, $0-64
	MOVQ         s+0(FP), DI
	MOVQ         rows+8(FP), R8
	MOVQ         n+16(FP), R9
	VBROADCASTSS a+24(FP), Z15
	MOVQ         c+32(FP), R11
	MOVQ         b+40(FP), SI
	MOVQ         cv+48(FP), DX
	MOVQ         out+56(FP), R12
	VPBROADCASTD codecc<>+20(SB), Z10 // 0x7fff: rounding bias
	VPBROADCASTD codecc<>+24(SB), Z11 // 1
	VPBROADCASTD codecc<>+0(SB), Z12  // 0x7fc00000
	VPBROADCASTD codecc<>+4(SB), Z13  // sign

uzrow:
	TESTQ        R8, R8
	JZ           uzdone
	VBROADCASTSS (R11), Z14
	VXORPS       Z0, Z0, Z0
	VXORPS       Z1, Z1, Z1
	XORQ         CX, CX
	MOVQ         R9, R10

uzcol:
	PREFETCHT0  1024(DI)
	VPMOVZXWD   (DI), Z2
	VPMOVZXWD   32(DI), Z3
	VPSLLD      $16, Z2, Z2
	VPSLLD      $16, Z3, Z3
	VMULPS      Z15, Z2, Z2
	VMULPS      Z15, Z3, Z3
	VFMADD231PS (SI)(CX*1), Z14, Z2
	VFMADD231PS 64(SI)(CX*1), Z14, Z3
	VFMADD231PS (DX)(CX*1), Z2, Z0
	VFMADD231PS 64(DX)(CX*1), Z3, Z1
	VPSRLD      $16, Z2, Z4
	VPANDD      Z11, Z4, Z4
	VPADDD      Z10, Z4, Z4
	VPADDD      Z2, Z4, Z4
	VPSRLD      $16, Z3, Z5
	VPANDD      Z11, Z5, Z5
	VPADDD      Z10, Z5, Z5
	VPADDD      Z3, Z5, Z5
	VCMPPS      $3, Z2, Z2, K1
	VPANDD      Z13, Z2, Z6
	VPORD       Z12, Z6, Z6
	VMOVDQA32   Z6, K1, Z4
	VCMPPS      $3, Z3, Z3, K2
	VPANDD      Z13, Z3, Z7
	VPORD       Z12, Z7, Z7
	VMOVDQA32   Z7, K2, Z5
	VPSRLD      $16, Z4, Z4
	VPSRLD      $16, Z5, Z5
	VPMOVDW     Z4, (DI)
	VPMOVDW     Z5, 32(DI)
	ADDQ        $64, DI
	ADDQ        $128, CX
	SUBQ        $32, R10
	JNZ         uzcol
	SUM32(Z0, Z1, Y0, Y1, X0, X1)
	MOVSS         X0, (R12)
	ADDQ          $4, R12
	ADDQ          $4, R11
	DECQ          R8
	JMP           uzrow

uzdone:
	VZEROUPPER
	RET

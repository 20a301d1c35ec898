#!/usr/bin/env python3
"""Generates replay/nvfp4_128_amd64.s, the NVFP4 row-dot kernels for rows
of 128 elements (Go assembly, AVX-512) and their DATA tables:

    python3 tools/gen_nvfp4_asm.py write replay/nvfp4_128_amd64.s  # what `go generate ./replay` runs
    python3 tools/gen_nvfp4_asm.py          # print dotRowsNVFP4Pair128AVX512 and its DATA tables
    python3 tools/gen_nvfp4_asm.py single   # print dotRowsNVFP4One128AVX512 (uses the same tables)

The kernels are unrolled over 16 rows with a fixed register allocation and a
shuffle-tree reduction, which is easier to get right generated than by hand.
Edit this generator, not the .s file, then run `go generate ./replay`;
TestReadDots and TestReadDotsNVFP4Codes (replay/kernels_test.go) check the
kernels against float64.
"""
import sys
SPLIT = True


def generate(SINGLE):
    """dotRowsNVFP4One128AVX512 (SINGLE) or dotRowsNVFP4Pair128AVX512 and
    the tables, as lines."""
    P = 'no' if SINGLE else 'np'  # label prefix
    L = []
    def e(s=""): L.append(s)

    if SINGLE:
        e("// func dotRowsNVFP4One128AVX512(codes, scales *byte, blocks int, v *float32, e2m1 *float32, global float32, out *float32)")
        e("// dotRowsNVFP4Pair128AVX512 for one vector: out[p] = S_p·v for p < 16·blocks.")
        e("TEXT ·dotRowsNVFP4One128AVX512(SB), NOSPLIT, $0-56")
    else:
      e("// func dotRowsNVFP4Pair128AVX512(codes, scales *byte, blocks int, v, w *float32, e2m1 *float32, global float32, out, out2 *float32)")
      e("// dotRowsNVFP4PairAVX512 for rows of n = 128 elements, 16 rows per block:")
      e("// out[p] = S_p·v and out2[p] = S_p·w for p < 16·blocks. A row's 64 bytes of")
      e("// codes are one zmm of 16 dwords; VPERMPS reads the low nibble of each")
      e("// dword, so shifting the row right by 4k and looking it up decodes elements")
      e("// 8i+k into lane i (no byte widening). v and w are rearranged once into")
      e("// these eight phases and stay in Z16-Z31; lane i's eight elements share one")
      e("// block scale (block i/2), applied once per row after the eight products.")
      e("// Each row's 16 lanes are summed in a shuffle tree over 16 rows, taken in")
      e("// the order that leaves row p in lane p.")
      e("TEXT ·dotRowsNVFP4Pair128AVX512(SB), NOSPLIT, $0-72")
    e("\tMOVQ codes+0(FP), SI")
    e("\tMOVQ scales+8(FP), R8")
    e("\tMOVQ blocks+16(FP), R9")
    e("\tMOVQ out+%d(FP), DI" % (48 if SINGLE else 56))
    if not SINGLE: e("\tMOVQ out2+64(FP), BX")

    def transpose(ptr, base):
        e("\t// %s -> phases Z%d-Z%d: phase k lane i = element 8i+k." % (ptr, base, base+7))
        e("\tMOVQ %s+%d(FP), AX" % (ptr, {"v":24,"w":32}[ptr]))
        for j in range(8):
            e("\tVMOVUPS %d(AX), Z%d" % (64*j, j))
        for a in range(4):
            for h in range(2):
                d = 8+2*a+h
                e("\tVMOVDQU32 nvph<>+%d(SB), Z%d" % (64*h, d))
                e("\tVPERMI2PS Z%d, Z%d, Z%d" % (2*a+1, 2*a, d))
        for b in range(2):
            for h in range(2):
                for g in range(2):
                    d = 4*b+2*h+g
                    e("\tVMOVDQU32 nvph<>+%d(SB), Z%d" % (128+64*g, d))
                    e("\tVPERMI2PS Z%d, Z%d, Z%d" % (10+4*b+h, 8+4*b+h, d))
        for h in range(2):
            for g in range(2):
                for k in range(2):
                    d = base+4*h+2*g+k
                    e("\tVMOVDQU32 nvph<>+%d(SB), Z%d" % (256+64*k, d))
                    e("\tVPERMI2PS Z%d, Z%d, Z%d" % (4+2*h+g, 2*h+g, d))

    transpose("v", 16)
    if not SINGLE: transpose("w", 24)
    e("\tMOVQ e2m1+%d(FP), AX" % (32 if SINGLE else 40))
    e("\tVMOVUPS (AX), Z15          // the 16 E2M1 values, by code")
    e("\tVBROADCASTSS global+48(FP), Z13") if not SPLIT else None
    e("\tVMOVDQU32 nvph<>+384(SB), Z14 // scale byte i/2 to byte 4i+3, zeros elsewhere")
    e("\tTESTQ R9, R9")
    e("\tJZ   %s128done" % P)
    e()
    e("%s128block:" % P)
    # slot order: slot s -> physical row 4(s%4)+s/4
    def row(s, dv, dw):
        p = 4*(s%4) + s//4
        e("\t// slot %d: row %d" % (s, p))
        e("\tPREFETCHT0 %d(SI)" % (8192+64*s))
        if s < 2:
            e("\tPREFETCHT0 %d(R8)" % (1024+64*s))
        e("\tVMOVDQU32 %d(SI), Z0" % (64*p))
        e("\tVPERMPS Z15, Z0, Z1")
        e("\tVMULPS Z16, Z1, Z%d" % dv)
        if not SINGLE: e("\tVMULPS Z24, Z1, Z%d" % dw)
        for k in range(1, 8):
            e("\tVPSRLD $%d, Z0, Z1" % (4*k))
            e("\tVPERMPS Z15, Z1, Z1")
            if k == 1 and SPLIT:
                e("\tVMULPS Z%d, Z1, Z12" % (16+k))
                if not SINGLE: e("\tVMULPS Z%d, Z1, Z13" % (24+k))
            elif k % 2 == 1 and SPLIT:
                e("\tVFMADD231PS Z%d, Z1, Z12" % (16+k))
                if not SINGLE: e("\tVFMADD231PS Z%d, Z1, Z13" % (24+k))
            else:
                e("\tVFMADD231PS Z%d, Z1, Z%d" % (16+k, dv))
                if not SINGLE: e("\tVFMADD231PS Z%d, Z1, Z%d" % (24+k, dw))
        if SPLIT:
            e("\tVADDPS Z12, Z%d, Z%d" % (dv, dv))
            if not SINGLE: e("\tVADDPS Z13, Z%d, Z%d" % (dw, dw))
        # scales: byte j of the row's 8 -> lanes 2j, 2j+1 as float32
        e("\tVMOVQ %d(R8), X0" % (8*p))
        e("\tVPERMB Z0, Z14, Z0          // scale code c << 24 in each lane")
        e("\tVPSRAD $4, Z0, Z1")
        e("\tVPANDD.BCST nvsc<>+0(SB), Z1, Z1 // sign, (c & 0x7f) << 20")
        e("\tVMULPS.BCST nvsc<>+4(SB), Z1, Z1 // × 2^120: e4m3(c)")
        e("\tVMULPS Z1, Z%d, Z%d" % (dv, dv))
        if not SINGLE: e("\tVMULPS Z1, Z%d, Z%d" % (dw, dw))

    def red(op, imm1, imm2, a, b):
        e("\t%s $0x%02X, Z%d, Z%d, Z12" % (op, imm1, b, a))
        e("\t%s $0x%02X, Z%d, Z%d, Z%d" % (op, imm2, b, a, a))
        e("\tVADDPS Z12, Z%d, Z%d" % (a, a))
    def L1(a, b):
        if SINGLE and a in (7, 9, 11, 5): return
        red("VSHUFF32X4", 0x44, 0xEE, a, b)
    def L2(a, b):
        if SINGLE and a in (7, 9, 11, 5): return
        red("VSHUFF32X4", 0x88, 0xDD, a, b)
    def L3(a, b):
        if SINGLE and a in (7, 9, 11, 5): return
        red("VSHUFPS", 0x44, 0xEE, a, b)
    def L4(a, b):
        if SINGLE and a in (7, 9, 11, 5): return
        red("VSHUFPS", 0x88, 0xDD, a, b)

    row(0, 6, 7); row(1, 3, 4); L1(6, 3); L1(7, 4)
    row(2, 8, 9); row(3, 3, 4); L1(8, 3); L1(9, 4)
    L2(6, 8); L2(7, 9)
    row(4, 8, 9); row(5, 3, 4); L1(8, 3); L1(9, 4)
    row(6, 10, 11); row(7, 3, 4); L1(10, 3); L1(11, 4)
    L2(8, 10); L2(9, 11)
    L3(6, 8); L3(7, 9)
    row(8, 8, 9); row(9, 3, 4); L1(8, 3); L1(9, 4)
    row(10, 10, 11); row(11, 3, 4); L1(10, 3); L1(11, 4)
    L2(8, 10); L2(9, 11)
    row(12, 10, 11); row(13, 3, 4); L1(10, 3); L1(11, 4)
    row(14, 2, 5); row(15, 3, 4); L1(2, 3); L1(5, 4)
    L2(10, 2); L2(11, 5)
    L3(8, 10); L3(9, 11)
    L4(6, 8); L4(7, 9)
    e("\tVMULPS Z13, Z6, Z6") if not SPLIT else e("\tVMULPS.BCST global+%d(FP), Z6, Z6" % (40 if SINGLE else 48))
    (e("\tVMULPS Z13, Z7, Z7") if not SPLIT else e("\tVMULPS.BCST global+48(FP), Z7, Z7")) if not SINGLE else None
    e("\tVMOVUPS Z6, (DI)")
    if not SINGLE: e("\tVMOVUPS Z7, (BX)")
    e("\tADDQ $1024, SI")
    e("\tADDQ $128, R8")
    e("\tADDQ $64, DI")
    if not SINGLE: e("\tADDQ $64, BX")
    e("\tDECQ R9")
    e("\tJNZ  %s128block" % P)
    e()
    e("%s128done:" % P)
    e("\tVZEROUPPER")
    e("\tRET")
    e()
    if SINGLE:
        return "\n".join(L).rstrip("\n").split("\n")
    e("// Indexes of dotRowsNVFP4Pair128AVX512's in-register rearrangement of v")
    e("// (three rounds of VPERMI2PS, two index vectors each), then the VPERMB")
    e("// index that spreads a row's eight scale codes over the lanes.")
    idx = []
    for h in range(2):
        idx.append([ (p%4)*8 + 4*h + p//4 for p in range(16)])
    for g in range(2):
        idx.append([ (0 if p%8 < 4 else 16) + (2*g + p//8)*4 + (p%8)%4 for p in range(16)])
    for k in range(2):
        idx.append([ (0 if p < 8 else 16) + k*8 + p%8 for p in range(16)])
    off = 0
    for v in idx:
        for x in v:
            e("DATA nvph<>+%d(SB)/4, $%d" % (off, x)); off += 4
    # VPERMB index: byte 4i+3 = i/2, others = 8 (a zero byte of the xmm)
    for i in range(16):
        word = 8 | 8 << 8 | 8 << 16 | (i//2) << 24
        e("DATA nvph<>+%d(SB)/4, $0x%08x" % (off, word)); off += 4
    e("GLOBL nvph<>(SB), RODATA|NOPTR, $%d" % off)
    e()
    e("DATA nvsc<>+0(SB)/4, $0x87f00000 // sign, then e4m3 exponent and mantissa")
    e("DATA nvsc<>+4(SB)/4, $0x7b800000 // 2^120")
    e("GLOBL nvsc<>(SB), RODATA|NOPTR, $8")
    return L


HEADER = ["// Code generated by tools/gen_nvfp4_asm.py; DO NOT EDIT.", "",
          "//go:build !noasm", "", '#include "textflag.h"', ""]


def main(args):
    if len(args) == 2 and args[0] == "write":
        with open(args[1], "w") as f:
            f.write("\n".join(HEADER + generate(False) + [""] + generate(True)) + "\n")
        return
    if args not in ([], ["single"]):
        sys.exit(__doc__)
    print("\n".join(generate(args == ["single"])))


if __name__ == "__main__":
    main(sys.argv[1:])

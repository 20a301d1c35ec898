#!/usr/bin/env python3
"""Generates replay/dot128_amd64.s, the fp32 and bf16 row-dot kernels for
rows of 128 elements (Go assembly, AVX-512), and the even/odd index table
the bf16 kernel reads:

    python3 tools/gen_dot128_asm.py write replay/dot128_amd64.s  # what `go generate ./replay` runs
    python3 tools/gen_dot128_asm.py fp32    # print dotRows128AVX512
    python3 tools/gen_dot128_asm.py pair    # print dotRowsPair128AVX512
    python3 tools/gen_dot128_asm.py bf16    # print dotRowsBF16128AVX512

Each kernel keeps its vector(s) in Z16-Z31, takes 4 rows per unrolled block,
walks them row by row (a row's lines in address order, each row's sums in
their own registers) and prefetches every cache line of the block once,
4 KiB ahead. Row by row, not column by column (one line of each of the 4
rows per step): on a Zen 4 EPYC VM the column walk streamed at 8.2-9.7 GB/s
on one core where the row walk reads 20-23 (a plain dot over the same
bytes: 22-27), the four interleaved 512-byte streams a block defeating the
hardware prefetchers there. Each row's chain of multiply-adds is the same
in both orders, so the sums are bit for bit the same. Edit this generator,
not the .s file, then run `go generate ./replay`; TestMatrixKernels and
TestReadDots (replay/kernels_test.go) check the kernels against float64.
"""
import sys

AHEAD = 4096  # prefetch distance in bytes
ROWS = 4      # rows per unrolled block


def reduce4(acc, lines):
    """Folds the upper halves of Z{acc}..Z{acc+3} onto Y{acc}..Y{acc+3}."""
    for r in range(acc, acc + ROWS):
        lines += [f"\tVEXTRACTF32X8 $1, Z{r}, Y14", f"\tVADDPS Y14, Y{r}, Y{r}"]


def hadd4(acc, lines):
    """Horizontal sums of Y{acc}..Y{acc+3}, one row per lane of X{acc}."""
    a = acc
    lines += [f"\tVHADDPS Y{a+1}, Y{a}, Y{a}", f"\tVHADDPS Y{a+3}, Y{a+2}, Y{a+2}",
              f"\tVHADDPS Y{a+2}, Y{a}, Y{a}", f"\tVEXTRACTF128 $1, Y{a}, X14", f"\tVADDPS X14, X{a}, X{a}"]


def epilogue(store, loop, row, lines):
    """The one-output block end: sums of Z0-Z3 stored by `store`, next block, exit."""
    reduce4(0, lines)
    hadd4(0, lines)
    lines += [store, "\tADDQ $16, DI", f"\tADDQ ${ROWS*row}, SI", "\tSUBQ $4, R8", f"\tJMP  {loop}",
              "", f"{loop[:4]}done:", "\tVZEROUPPER", "\tRET"]


def load_vector(reg0, base, lines):
    for c in range(8):
        lines.append(f"\tVMOVUPS {64*c}({base}), Z{reg0+c}")


def fp32():
    row = 512  # bytes per row
    L = ["// func dotRows128AVX512(s *float32, rows int, v *float32, out *float32)",
         "// dotRowsAVX512 for rows of 128: v stays in Z16-Z23, each block of 4 rows",
         "// (2 KiB) is one unrolled pass, row by row, and each cache line is",
         "// prefetched once, 4 KiB ahead (into the next matrix at the end of one).",
         "// rows must be a multiple of 4.",
         "TEXT ·dotRows128AVX512(SB), NOSPLIT, $0-32",
         "\tMOVQ s+0(FP), SI", "\tMOVQ rows+8(FP), R8", "\tMOVQ v+16(FP), DX", "\tMOVQ out+24(FP), DI"]
    load_vector(16, "DX", L)
    L += ["", "d128r4:", "\tCMPQ R8, $4", "\tJL   d128done"]
    for r in range(ROWS):
        for c in range(8):
            off = r * row + 64 * c
            L.append(f"\tPREFETCHT0 {AHEAD + off}(SI)")
            op = "VMULPS" if c == 0 else "VFMADD231PS"
            L.append(f"\t{op} {off}(SI), Z{16+c}, Z{r}")
    epilogue("\tVMOVUPS X0, 0(DI)", "d128r4", row, L)
    return L


def pair():
    row = 512
    L = ["// func dotRowsPair128AVX512(s *float32, rows int, v0, v1 *float32, out0, out1 *float32)",
         "// dotRowsPairAVX512 for rows of 128: v0 and v1 stay in Z16-Z31, each block",
         "// of 4 rows (2 KiB) is one unrolled pass, row by row, and each cache",
         "// line is prefetched once, 4 KiB ahead (into the next matrix at the end of",
         "// one, so the stream keeps going over the ring work between matrices).",
         "// rows must be a multiple of 4.",
         "TEXT ·dotRowsPair128AVX512(SB), NOSPLIT, $0-48",
         "\tMOVQ s+0(FP), SI", "\tMOVQ rows+8(FP), R8", "\tMOVQ v0+16(FP), DX", "\tMOVQ v1+24(FP), BX",
         "\tMOVQ out0+32(FP), DI", "\tMOVQ out1+40(FP), R15"]
    load_vector(16, "DX", L)
    load_vector(24, "BX", L)
    L += ["", "q128row:", "\tCMPQ R8, $4", "\tJL   q128done"]
    for r in range(ROWS):
        for c in range(8):
            off = r * row + 64 * c
            t = 8 + c % 4  # four load registers in turn
            op = "VMULPS" if c == 0 else "VFMADD231PS"
            L += [f"\tPREFETCHT0 {AHEAD + off}(SI)", f"\tVMOVUPS {off}(SI), Z{t}",
                  f"\t{op} Z{t}, Z{16+c}, Z{r}", f"\t{op} Z{t}, Z{24+c}, Z{4+r}"]
    reduce4(0, L)
    reduce4(4, L)
    hadd4(0, L)
    hadd4(4, L)
    L += ["\tVMOVUPS X0, (DI)", "\tVMOVUPS X4, (R15)", "\tADDQ $16, DI", "\tADDQ $16, R15", f"\tADDQ ${ROWS*row}, SI",
          "\tSUBQ $4, R8", "\tJMP  q128row", "", "q128done:", "\tVZEROUPPER", "\tRET"]
    return L


def bf16():
    row = 256
    L = ["// func dotRowsBF16128AVX512(s *uint16, rows int, v *float32, out *float32)",
         "// dotRowsBF16AVX2 for rows of 128 bf16: each 64-byte line is one load, its",
         "// even elements the dwords shifted left by 16 and its odd ones the dwords",
         "// masked to their high halves, against v split into even and odd elements",
         "// once (Z16-Z23); 4 rows (1 KiB) per block, row by row, two accumulators",
         "// per row, each cache line prefetched once, 4 KiB ahead. rows must be a",
         "// multiple of 4.",
         "TEXT ·dotRowsBF16128AVX512(SB), NOSPLIT, $0-32",
         "\tMOVQ s+0(FP), SI", "\tMOVQ rows+8(FP), R8", "\tMOVQ v+16(FP), DX", "\tMOVQ out+24(FP), DI",
         "\tVMOVDQU32 evenodd<>+0(SB), Z6", "\tVMOVDQU32 evenodd<>+64(SB), Z7"]
    for c in range(4):
        L += [f"\tVMOVUPS {128*c}(DX), Z0", f"\tVMOVUPS {128*c+64}(DX), Z1", f"\tVMOVAPS Z0, Z{16+c}",
              f"\tVPERMT2PS Z1, Z6, Z{16+c}       // v[32i], v[32i+2], ...", "\tVPERMT2PS Z1, Z7, Z0",
              f"\tVMOVAPS Z0, Z{20+c}             // v[32i+1], v[32i+3], ..."]
    L += ["\tMOVL $0xffff0000, AX", "\tVPBROADCASTD AX, Z15", "", "b128row:", "\tCMPQ R8, $4", "\tJL   b128done"]
    for r in range(ROWS):
        for c in range(4):
            op = "VMULPS" if c == 0 else "VFMADD231PS"
            off = r * row + 64 * c
            w, e = (8, 9) if c % 2 == 0 else (10, 11)
            L += [f"\tPREFETCHT0 {AHEAD + off}(SI)", f"\tVMOVDQU32 {off}(SI), Z{w}", f"\tVPSLLD $16, Z{w}, Z{e}",
                  f"\tVPANDD Z15, Z{w}, Z{w}", f"\t{op} Z{e}, Z{16+c}, Z{r}", f"\t{op} Z{w}, Z{20+c}, Z{4+r}"]
    for r in range(ROWS):
        L.append(f"\tVADDPS Z{4+r}, Z{r}, Z{r}")
    epilogue("\tVMOVUPS X0, (DI)", "b128row", row, L)
    return L


KERNELS = {"fp32": ("dotRows128AVX512", fp32), "pair": ("dotRowsPair128AVX512", pair),
           "bf16": ("dotRowsBF16128AVX512", bf16)}


HEADER = ["// Code generated by tools/gen_dot128_asm.py; DO NOT EDIT.", "",
          "//go:build !noasm", "", '#include "textflag.h"']


def evenodd():
    """The table dotRowsBF16128AVX512 reads (a copy of the one beside
    splitEvenOddAVX512 in kernels_amd64.s: a <> symbol is its file's own)."""
    L = ["// The indexes of the even elements of 32 (two zmm), then of the odd ones."]
    for i, x in enumerate(list(range(0, 32, 2)) + list(range(1, 32, 2))):
        L.append(f"DATA evenodd<>+{4*i}(SB)/4, ${x}")
    L.append("GLOBL evenodd<>(SB), RODATA|NOPTR, $128")
    return L


def whole_file():
    L = list(HEADER)
    for _, gen in KERNELS.values():
        L += [""] + gen()
    L += [""] + evenodd()
    return "\n".join(L) + "\n"


def main(args):
    if len(args) == 2 and args[0] == "write":
        with open(args[1], "w") as f:
            f.write(whole_file())
        return
    if len(args) != 1 or args[0] not in KERNELS:
        sys.exit(__doc__)
    print("\n".join(KERNELS[args[0]][1]()))


if __name__ == "__main__":
    main(sys.argv[1:])

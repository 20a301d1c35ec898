#!/usr/bin/env python3
"""emulate_gt.py: the tensor-core streams of the group steps (gt_vectors
and gt_dots in backend/cuda/kernels/replay_common.cu, GT_NVFP4 and
GT_BF16), lane by lane, in plain Python: random codes and block scales (or
bf16 values) for one strip of 16 rows of 128 columns, NV vectors at scales
from 1e-36 to 1e30, the A and B fragments as each lane forms them,
mma.sync m16n8k16's D (PTX ISA's fragment layout) in float64, and each
row's dot back through the lanes' post factors or shuffles, against the
float64 dots of the rows; the group verify's streams (gtw_vectors,
gtw_dots: up to eight vectors, their terms into the same accumulators;
nvfp4, bf16 and e4m3) too, and the e4m3 step. A kernel
change to the pairing of columns, the e2m1-to-e4m3 rewrite or the vectors'
power-of-two scaling should keep the printed errors near 1e-7; a wrong
factor shows as O(1). No GPU and no numpy needed:

    python3 tools/emulate_gt.py
"""
import math
import random
import struct

COLS, NW = 128, 128 // 32
E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def e2m1(c):
    v = E2M1[c & 7]
    return -v if c & 8 else v


def e4m3(c):
    s = -1 if c & 0x80 else 1
    e, m = (c >> 3) & 15, c & 7
    if e == 15 and m == 7:
        return float("nan")
    return s * (m / 8 * 2**-6 if e == 0 else (1 + m / 8) * 2 ** (e - 7))


def f16(x):
    return struct.unpack("<e", struct.pack("<e", x))[0]


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def from_bits(b):
    return struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0]


def code_at(codes, r, c):
    b = codes[r][c // 2]
    return b >> 4 if c & 1 else b & 15


def e4m3_codes(rng):
    """16 rows of COLS random e4m3 codes, no NaN."""
    return [[rng.choice([c for c in range(256) if c & 0x7F != 0x7F]) for _ in range(COLS)] for _ in range(16)]


def step_dots(d, gs, post, nv):
    """gt_write: lane (g, t < nv) sums D's columns 2t, 2t+1 (vector t's two
    terms) of rows g and g+8, times gs and the factor of lane (2t, 0)."""
    got = [[0.0] * nv for _ in range(16)]
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        if t < nv:
            p = f32(gs * post[8 * min(t, nv - 1)])
            got[g][t] = (d[g][2 * t] + d[g][2 * t + 1]) * p
            got[g + 8][t] = (d[g + 8][2 * t] + d[g + 8][2 * t + 1]) * p
    return got


def rel_error(got, want, nv):
    """The largest difference of a strip's dots from the float64 ones, over
    the largest dot."""
    top = max(abs(w) for row in want for w in row)
    return max(abs(got[r][a] - want[r][a]) for r in range(16) for a in range(nv)) / top


def step_breg(vecs, nv, fmt):
    """gt_vectors (shared by the nvfp4 and e4m3 steps): lane (g, t) holds
    vector g/2's hi (even g) or lo (odd g) f16 terms of 2^(13-e) times it
    at its quarter's column pairs, register k of 8 columns pairing columns
    GT_PC(k) and GT_PC(k) + GT_PS (nvfp4: 0 and 2, 1 and 3, 4 and 6, 5 and
    7; e4m3: 0 and 1, 2 and 3, ...); its factor back 2^(e-13+ashift)."""
    ashift = 6 if fmt == "nvfp4" else 0
    breg, post = {}, {}
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        vi = min(g >> 1, nv - 1)
        big = max(bits(x) & 0x7FFFFFFF for x in vecs[vi])
        e = min(max((big >> 23) - 127, max(-114, -113 - ashift)), 127)
        up = from_bits((127 + 13 - e) << 23)
        post[lane] = from_bits((127 - 13 + ashift + e) << 23)
        v = vecs[vi][t * (COLS // 4) : (t + 1) * (COLS // 4)]
        regs = []
        for j in range(COLS // 32):
            for k in range(4):
                c, ps = (4 * (k >> 1) + (k & 1), 2) if fmt == "nvfp4" else (2 * k, 1)
                lo, hi = f32(up * v[8 * j + c]), f32(up * v[8 * j + c + ps])
                h = (f16(lo), f16(hi))
                if g & 1:
                    h = (f16(f32(lo - h[0])), f16(f32(hi - h[1])))
                regs.append(h if g < 2 * nv else (0.0, 0.0))
        breg[lane] = regs
    return breg, post


def strip_error(rng, scale, nv):
    codes = [[rng.randrange(256) for _ in range(COLS // 2)] for _ in range(16)]
    scl = [[rng.randrange(0x7E) for _ in range(COLS // 16)] for _ in range(16)]
    gs = 0.37
    vecs = [[f32(rng.gauss(0, 1) * scale) for _ in range(COLS)] for _ in range(nv)]
    val = [[e2m1(code_at(codes, r, c)) * e4m3(scl[r][c // 16]) * gs for c in range(COLS)] for r in range(16)]
    want = [[math.fsum(val[r][c] * vecs[a][c] for c in range(COLS)) for a in range(nv)] for r in range(16)]
    breg, post = step_breg(vecs, nv, "nvfp4")
    # gt_dots: lane (g, t)'s A pairs of rows g and g+8, word j: codes (0, 2),
    # (4, 6), (1, 3), (5, 7), each 2^-6 times the value times its block scale.
    areg = {}
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        rows = []
        for h in range(2):
            r = g + 8 * h
            words = []
            for j in range(NW):
                c0 = t * (COLS // 4) + 8 * j
                cs = [code_at(codes, r, c0 + i) for i in range(8)]
                sc = f16(e4m3(scl[r][c0 // 16]))

                def pair(a, b):
                    return (f16(f16(e2m1(cs[a]) * 2**-6) * sc), f16(f16(e2m1(cs[b]) * 2**-6) * sc))

                words.append([pair(0, 2), pair(4, 6), pair(1, 3), pair(5, 7)])
            rows.append(words)
        areg[lane] = rows
    # mma m16n8k16: a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
    # a3 = A[g+8][2t+8..]; b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g].
    d = [[0.0] * 8 for _ in range(16)]
    for j in range(NW):
        for x in range(2):
            am = [[0.0] * 16 for _ in range(16)]
            bm = [[0.0] * 8 for _ in range(16)]
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                am[g][2 * t : 2 * t + 2] = areg[lane][0][j][x]
                am[g + 8][2 * t : 2 * t + 2] = areg[lane][1][j][x]
                am[g][2 * t + 8 : 2 * t + 10] = areg[lane][0][j][x + 2]
                am[g + 8][2 * t + 8 : 2 * t + 10] = areg[lane][1][j][x + 2]
                bm[2 * t][g], bm[2 * t + 1][g] = breg[lane][4 * j + 2 * x]
                bm[2 * t + 8][g], bm[2 * t + 9][g] = breg[lane][4 * j + 2 * x + 1]
            mma(am, bm, d)
    return rel_error(step_dots(d, gs, post, nv), want, nv)


def bf16(x):
    """x rounded to bf16 (to nearest, ties to even), as a float."""
    b = bits(f32(x))
    if (b & 0x7F800000) == 0x7F800000:
        return from_bits(b & 0xFFFF0000)
    b = (b + 0x7FFF + ((b >> 16) & 1)) & 0xFFFF0000
    return from_bits(b)


def mma(am, bm, d):
    for r in range(16):
        for n in range(8):
            d[r][n] += math.fsum(am[r][k] * bm[k][n] for k in range(16))


def bf16_strip_error(rng, scale, nv):
    """GT_BF16: two passes of half the lane's quarter each, B's columns
    4a..4a+2 vector a's three bf16 terms, D's pairs of lanes summed."""
    rows = [[bf16(rng.gauss(0, 1)) for _ in range(COLS)] for _ in range(16)]
    vecs = [[f32(rng.gauss(0, 1) * scale) for _ in range(COLS)] for _ in range(nv)]
    want = [[math.fsum(rows[r][c] * vecs[a][c] for c in range(COLS)) for a in range(nv)] for r in range(16)]
    hw = COLS // 16
    breg = {}
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        term, on = g & 3, (g >> 2) < nv and (g & 3) < 3
        v = vecs[min(g >> 2, nv - 1)][t * (COLS // 4) : (t + 1) * (COLS // 4)]
        regs = []
        for m in range(COLS // 16):
            x = list(v[4 * m : 4 * m + 4])
            for c in range(4):
                for k in range(2):
                    if k < term:
                        x[c] = f32(x[c] - bf16(x[c]))
            regs.append((bf16(x[0]), bf16(x[1])) if on else (0.0, 0.0))
            regs.append((bf16(x[2]), bf16(x[3])) if on else (0.0, 0.0))
        breg[lane] = regs
    d = [[0.0] * 8 for _ in range(16)]
    for half in range(2):
        for j in range(hw // 2):
            m = half * (hw // 2) + j
            am = [[0.0] * 16 for _ in range(16)]
            bm = [[0.0] * 8 for _ in range(16)]
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                c0 = t * (COLS // 4) + half * (COLS // 8) + 4 * j  # words 2j, 2j+1 of the pass
                for h in range(2):
                    r = g + 8 * h
                    am[r][2 * t : 2 * t + 2] = rows[r][c0 : c0 + 2]
                    am[r][2 * t + 8 : 2 * t + 10] = rows[r][c0 + 2 : c0 + 4]
                bm[2 * t][g], bm[2 * t + 1][g] = breg[lane][2 * m]
                bm[2 * t + 8][g], bm[2 * t + 9][g] = breg[lane][2 * m + 1]
            mma(am, bm, d)
    got = [[0.0] * nv for _ in range(16)]
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        if t % 2 == 0 and t // 2 < nv:
            for h in range(2):
                r = g + 8 * h
                # x = d0 + d1 of this lane and of lane t+1 (the shuffle)
                x = (d[r][2 * t] + d[r][2 * t + 1]) + (d[r][2 * t + 2] + d[r][2 * t + 3])
                got[r][t // 2] = x
    return rel_error(got, want, nv)


def wide_strip_error(rng, scale, nv, fmt):
    """gtw_vectors and gtw_dots (the group verify's stream): B's eight
    columns are nv <= 8 vectors, each vector's terms (nvfp4: two f16 terms
    of 2^(13-e) times it; bf16: three bf16 terms) one mma each into the
    same accumulators, the operands written to shared memory by a warp a
    vector (lane l: quarter l & 3, tile l >> 2) and read by lane (g, t) at
    [(term * MS + m) * 32 + 4g + t]."""
    ms, terms = COLS // 16, 3 if fmt == "bf16" else 2
    if fmt == "e4m3":
        codes8 = e4m3_codes(rng)
        gs = 0.37
        val = [[e4m3(codes8[r][c]) * gs for c in range(COLS)] for r in range(16)]
    elif fmt == "nvfp4":
        codes = [[rng.randrange(256) for _ in range(COLS // 2)] for _ in range(16)]
        scl = [[rng.randrange(0x7E) for _ in range(COLS // 16)] for _ in range(16)]
        gs = 0.37
        val = [[e2m1(code_at(codes, r, c)) * e4m3(scl[r][c // 16]) * gs for c in range(COLS)] for r in range(16)]
    else:
        gs = 1.0
        val = [[bf16(rng.gauss(0, 1)) for _ in range(COLS)] for _ in range(16)]
    vecs = [[f32(rng.gauss(0, 1) * scale) for _ in range(COLS)] for _ in range(nv)]
    want = [[math.fsum(val[r][c] * vecs[a][c] for c in range(COLS)) for a in range(nv)] for r in range(16)]
    # gtw_vectors: sB[(term*MS + m)*32 + 4a + t] = (pair0, pair1) of term
    sb, post = {}, [1.0] * 8
    for a in range(8):
        x4s = {}
        for lane in range(32):
            t, m = lane & 3, lane >> 2
            c = t * (COLS // 4) + 4 * m
            x4s[lane] = vecs[a][c : c + 4] if a < nv and m < ms else [0.0] * 4
        for lane in range(32):
            t, m = lane & 3, lane >> 2
            x = x4s[lane]
            if fmt in ("nvfp4", "e4m3"):
                ashift = 6 if fmt == "nvfp4" else 0
                big = max(bits(v) & 0x7FFFFFFF for l2 in range(32) for v in x4s[l2])
                e = min(max((big >> 23) - 127, max(-114, -113 - ashift)), 127)
                up = from_bits((127 + 13 - e) << 23)
                post[a] = from_bits((127 - 13 + ashift + e) << 23)
                y = [f32(up * v) for v in x]
                # b0, b1: nvfp4 pairs (0, 2), (1, 3); e4m3 (0, 1), (2, 3)
                p0, p1 = ((0, 2), (1, 3)) if fmt == "nvfp4" else ((0, 1), (2, 3))
                h0, h1 = (f16(y[p0[0]]), f16(y[p0[1]])), (f16(y[p1[0]]), f16(y[p1[1]]))
                l0 = (f16(f32(y[p0[0]] - h0[0])), f16(f32(y[p0[1]] - h0[1])))
                l1 = (f16(f32(y[p1[0]] - h1[0])), f16(f32(y[p1[1]] - h1[1])))
                b = [(h0, h1), (l0, l1)]
            else:
                y, b = list(x), []
                for _ in range(terms):
                    p0, p1 = (bf16(y[0]), bf16(y[1])), (bf16(y[2]), bf16(y[3]))
                    b.append((p0, p1))
                    y = [f32(y[0] - p0[0]), f32(y[1] - p0[1]), f32(y[2] - p1[0]), f32(y[3] - p1[1])]
            if m < ms:
                for term in range(terms):
                    sb[(term * ms + m) * 32 + 4 * a + t] = b[term]
    # gtw_dots: tile m = the lane's quarter's columns 4m..4m+3 (nvfp4: the
    # half word's codes 0 and 2, 1 and 3; bf16: the stored pairs)
    d = [[0.0] * 8 for _ in range(16)]
    for m in range(ms):
        for term in range(terms):
            am = [[0.0] * 16 for _ in range(16)]
            bm = [[0.0] * 8 for _ in range(16)]
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                c0 = t * (COLS // 4) + 4 * m
                for h in range(2):
                    r = g + 8 * h
                    if fmt == "e4m3":
                        # word m's codes 0, 1 at k 2t, 2t+1; 2, 3 at 2t+8, 2t+9
                        am[r][2 * t : 2 * t + 2] = [f16(e4m3(codes8[r][c0 + i])) for i in (0, 1)]
                        am[r][2 * t + 8 : 2 * t + 10] = [f16(e4m3(codes8[r][c0 + i])) for i in (2, 3)]
                    elif fmt == "nvfp4":
                        sc = f16(e4m3(scl[r][c0 // 16]))

                        def av(c):
                            return f16(f16(e2m1(code_at(codes, r, c)) * 2**-6) * sc)

                        am[r][2 * t : 2 * t + 2] = (av(c0), av(c0 + 2))
                        am[r][2 * t + 8 : 2 * t + 10] = (av(c0 + 1), av(c0 + 3))
                    else:
                        am[r][2 * t : 2 * t + 2] = val[r][c0 : c0 + 2]
                        am[r][2 * t + 8 : 2 * t + 10] = val[r][c0 + 2 : c0 + 4]
                b0, b1 = sb[(term * ms + m) * 32 + lane]
                bm[2 * t][g], bm[2 * t + 1][g] = b0
                bm[2 * t + 8][g], bm[2 * t + 9][g] = b1
            mma(am, bm, d)
    # gtw_write: lane (g, t) writes vectors 2t, 2t+1 of rows g, g+8
    got = [[0.0] * nv for _ in range(16)]
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for a in (2 * t, 2 * t + 1):
            if a < nv:
                p = f32(gs * post[a])
                got[g][a] = d[g][a] * p
                got[g + 8][a] = d[g + 8][a] * p
    return rel_error(got, want, nv)


def e4m3_strip_error(rng, scale, nv):
    """GT_E4M3's step (gt_vectors, gt_dots): lane (g, t) holds its
    quarter's words of four codes of rows g and g+8, word j one mma (codes
    0 and 1 at k 2t, 2t+1; 2 and 3 at 2t+8, 2t+9); B's columns 2a and 2a+1
    vector a's hi and lo f16 terms of 2^(13-e) times it, register k of 8
    columns pairing columns 2k and 2k+1; D back by 2^(e-13)."""
    codes8 = e4m3_codes(rng)
    gs = 0.37
    val = [[e4m3(codes8[r][c]) * gs for c in range(COLS)] for r in range(16)]
    vecs = [[f32(rng.gauss(0, 1) * scale) for _ in range(COLS)] for _ in range(nv)]
    want = [[math.fsum(val[r][c] * vecs[a][c] for c in range(COLS)) for a in range(nv)] for r in range(16)]
    breg, post = step_breg(vecs, nv, "e4m3")
    d = [[0.0] * 8 for _ in range(16)]
    for j in range(COLS // 16):
        am = [[0.0] * 16 for _ in range(16)]
        bm = [[0.0] * 8 for _ in range(16)]
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            c0 = t * (COLS // 4) + 4 * j
            for h in range(2):
                r = g + 8 * h
                am[r][2 * t : 2 * t + 2] = [f16(e4m3(codes8[r][c0 + i])) for i in (0, 1)]
                am[r][2 * t + 8 : 2 * t + 10] = [f16(e4m3(codes8[r][c0 + i])) for i in (2, 3)]
            bm[2 * t][g], bm[2 * t + 1][g] = breg[lane][2 * j]
            bm[2 * t + 8][g], bm[2 * t + 9][g] = breg[lane][2 * j + 1]
        mma(am, bm, d)
    return rel_error(step_dots(d, gs, post, nv), want, nv)


def main():
    rng = random.Random(1)
    for nv in (1, 2):
        for scale in (1e-36, 1e-6, 0.01, 1, 300, 1e5, 1e30):
            print(f"nvfp4, vectors {nv}, scale {scale:g}: largest error {strip_error(rng, scale, nv):.3g} of the largest dot")
    for nv in (1, 2):
        for scale in (1e-30, 1, 1e30):
            print(f"bf16, vectors {nv}, scale {scale:g}: largest error {bf16_strip_error(rng, scale, nv):.3g} of the largest dot")
    for nv in (1, 2):
        for scale in (1e-36, 1, 1e30):
            print(f"e4m3, vectors {nv}, scale {scale:g}: largest error {e4m3_strip_error(rng, scale, nv):.3g} of the largest dot")
    for fmt in ("nvfp4", "bf16", "e4m3"):
        for nv in (3, 8):
            for scale in (1e-30, 1, 1e30):
                err = wide_strip_error(rng, scale, nv, fmt)
                print(f"verify {fmt}, vectors {nv}, scale {scale:g}: largest error {err:.3g} of the largest dot")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""emulate_tc_fold.py: mamba2_fold_tc's (replay_mamba2.cu) operand indices,
lane by lane, against the direct rank update.

Each lane (g = lane/4, t = lane%4) of a warp holds TCMap's registers (rows
g and g+8 at columns 16c + 4t .. +3); one m16n8k8 tile takes A and B from
the lanes as PTX lays its fragments out (mma_tf32 in replay_common.cu) and
gives D back the same way. The script builds A (w_j x_j[r] as coef) and B
(the B_j rows as the producer stores them, swizzled by 16-byte units with
mask QSW) from each lane's indices as the kernel computes them, multiplies
exactly, and compares the registers with S + coef B, for one and two
column parts (M2TCMap: Super's rows split over two warps). Pure Python,
no GPU: `python3 tools/emulate_tc_fold.py` prints the worst difference
for each case (rounding only, ~1e-15).
"""
import random

random.seed(1)
P, N, t, R = 16, 128, 13, 20


def mat(r, c):
    return [[random.gauss(0, 1) for _ in range(c)] for _ in range(r)]


def bsw(f, swz):
    return f ^ ((f >> 3) & swz)


S, B, coef = mat(P, N), mat(R, N), mat(P, R)
KS = (R + 7) // 8
for QSW, PARTS in ((0, 1), (1, 1), (0, 2), (1, 2)):
    # The producer's stage: logical 16-byte unit f of a B row at bsw(f).
    sB = [[0.0] * N for _ in range(R)]
    for j in range(R):
        for f in range(N // 4):
            for k in range(4):
                sB[j][4 * bsw(f, QSW) + k] = B[j][4 * f + k]
    CPL = N // PARTS // 16
    worst = 0.0
    for part in range(PARTS):  # one warp a part, the same 16 rows
        base, u0 = N // PARTS * part, N // PARTS // 4 * part
        e = [[[[S[(l >> 2) + 8 * pa][base + 16 * c + 4 * (l & 3) + k] for k in range(4)]
               for c in range(CPL)] for pa in range(2)] for l in range(32)]
        for ks in range(KS):
            if 8 * ks >= t:
                continue
            A = [[0.0] * 8 for _ in range(16)]
            for l in range(32):
                g, lt = l >> 2, l & 3
                i0, i1 = 8 * ks + lt, 8 * ks + lt + 4
                in0, in1 = i0 < t, i1 < t
                A[g][lt] = coef[g][i0] if in0 else 0.0
                A[g + 8][lt] = coef[g + 8][i0] if in0 else 0.0
                A[g][lt + 4] = coef[g][i1] if in1 else 0.0
                A[g + 8][lt + 4] = coef[g + 8][i1] if in1 else 0.0
            for c in range(CPL):
                for p in range(2):
                    Bt = [[0.0] * 8 for _ in range(8)]
                    for l in range(32):
                        g, lt = l >> 2, l & 3
                        i0, i1 = 8 * ks + lt, 8 * ks + lt + 4
                        in0, in1 = i0 < t, i1 < t
                        off = 4 * bsw(u0 + 4 * c + (g >> 1), QSW) + 2 * (g & 1)
                        x0 = sB[i0][off:off + 2] if in0 else [0.0, 0.0]
                        x1 = sB[i1][off:off + 2] if in1 else [0.0, 0.0]
                        Bt[lt][g], Bt[lt + 4][g] = x0[p], x1[p]
                    D = [[sum(A[i][k] * Bt[k][j] for k in range(8)) for j in range(8)] for i in range(16)]
                    for l in range(32):
                        g, lt = l >> 2, l & 3
                        e[l][0][c][p] += D[g][2 * lt]
                        e[l][0][c][p + 2] += D[g][2 * lt + 1]
                        e[l][1][c][p] += D[g + 8][2 * lt]
                        e[l][1][c][p + 2] += D[g + 8][2 * lt + 1]
        for l in range(32):
            g, lt = l >> 2, l & 3
            for pa in range(2):
                r = g + 8 * pa
                for c in range(CPL):
                    for k in range(4):
                        col = base + 16 * c + 4 * lt + k
                        ref = S[r][col] + sum(coef[r][j] * B[j][col] for j in range(t))
                        worst = max(worst, abs(ref - e[l][pa][c][k]))
    print(f"swizzle mask {QSW}, {PARTS} part(s): worst difference {worst:.3g}")

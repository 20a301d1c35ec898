#!/usr/bin/env python3
"""emulate_fold_dot: checks, lane by lane, that mamba2_fold_dot (replay_mamba2.cu)
chains each row's output dot through the chunks in the module map SM's order
under a wider fold map FM (M2_FOLD_LANES), so the pipelined flush keeps the
work_items flush's bits. For each shape (VEC elements a chunk, COLS, ROWS, NT
consumer threads) it replays Map's row/lane/col rules and the kernel's
shuffles and compares every (row, SM lane) chain with SM's own; the xor sum
over SM::LANES lanes that follows is the same code in both. Exits non-zero on a
mismatch. Session 30.
"""
import sys

import itertools
def mk(VEC, COLS, ROWS, NT, LMAX):
    CH = COLS//VEC; L = min(CH, LMAX); CPL = CH//L; RPW = 32//L; RPP = (NT//32)*RPW
    PASSES = (ROWS + RPP - 1)//RPP
    def row(tid, p): return p*RPP + (tid>>5)*RPW + (tid&31)//L
    def lane(tid): return (tid&31) % L
    def col(tid, c): return (c*L + lane(tid))*VEC
    return dict(L=L, CPL=CPL, PASSES=PASSES, row=row, lane=lane, col=col)
def check(VEC, COLS, ROWS, NT, LMAX):
    S = mk(VEC, COLS, ROWS, NT, 8); F = mk(VEC, COLS, ROWS, NT, LMAX)
    G = F['L']//S['L']
    assert S['CPL'] % G == 0
    # reference: per row, per SM lane l8: chain list of chunk start cols
    ref = {}
    for tid in range(NT):
        for p in range(S['PASSES']):
            r = S['row'](tid, p)
            if r >= ROWS: continue
            ref[(r, S['lane'](tid))] = [S['col'](tid, c) for c in range(S['CPL'])]
    got = {}
    for p in range(F['PASSES']):
        # each warp: simulate lanes
        for w in range(NT//32):
            acc = {l: [] for l in range(32)}
            for c8 in range(S['CPL']):
                c = c8 // G
                a = {l: acc[l] + [F['col'](w*32+l, c)] for l in range(32)}
                for l in range(32):
                    holder = (l & ~(F['L']-1)) | (l & (S['L']-1)) | ((c8 % G)*S['L'])
                    acc[l] = a[holder] if G > 1 else a[l]
            for l in range(32):
                tid = w*32+l
                r = F['row'](tid, p)
                if r >= ROWS: continue
                l8 = l & (S['L']-1)
                key = (r, l8)
                if key in got: assert got[key] == acc[l], (key, got[key], acc[l])
                got[key] = acc[l]
    assert got == ref, "mismatch"
    return F['PASSES'], F['CPL'], G
def main():
    for VEC, COLS, ROWS, NT in [(8,128,64,256),(4,128,64,256),(8,128,80,160),(4,128,80,160),(16,128,64,256),(8,32,16,128),(4,64,32,128)]:
        print(VEC, COLS, ROWS, NT, check(VEC, COLS, ROWS, NT, 16))


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print("mismatch:", e)
        sys.exit(1)

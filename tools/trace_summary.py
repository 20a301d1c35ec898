#!/usr/bin/env python3
"""trace_summary.py: what a `bench kernels --trace DIR` timeline says.

Each CSV (one graph of one bench row: kernel, block, sm, items, start_us,
end_us per block, from kernels built with -DTRACE=1) is cut into its steps:
the group kernel's blocks (the GDN or Mamba-2 group step, else the group
verify) are sorted
by start and split into equal runs, one a step, as every step launches the
same persistent grid and a step starts after the one before has ended; the
other kernel's blocks likewise. For each step it prints when each kernel's
first block started, its last ended and half of its blocks had ended (us
from the step's first block),
the gap to the next step, the blocks' median and longest lives and the
items they took, and how busy the SMs were: the mean number of the group
kernel's blocks resident while it ran, and while the other kernel's blocks
were resident beside it.

    python3 tools/trace_summary.py DIR_OR_CSV... [--steps N] [--profile K]

--steps gives the graph's step count where the file name does not (window:
16, nonflush: 15, flush: 1, verify: 4 rounds). --profile K also prints step
K's occupancy over time: each kernel's resident blocks, averaged over bins
of a twentieth of the step.
"""
import argparse
import csv
import os
import statistics
import sys

STEPS = {"window": 16, "nonflush": 15, "flush": 1, "verify": 4}


def read(path):
    recs = []
    with open(path) as f:
        rows = (l for l in f if not l.startswith("#"))
        for r in csv.DictReader(rows):
            recs.append((r["kernel"], int(r["block"]), int(r["sm"]), int(r["items"]),
                         float(r["start_us"]), float(r["end_us"])))
    return recs


def split_steps(recs, steps):
    """Cuts one kernel's records into steps of equal runs by start."""
    recs = sorted(recs, key=lambda r: r[4])
    if not recs or len(recs) % steps:
        return None
    n = len(recs) // steps
    return [recs[i * n:(i + 1) * n] for i in range(steps)]


def resident(recs, t0, t1):
    """The mean number of recs' blocks alive over [t0, t1)."""
    if t1 <= t0:
        return 0.0
    alive = sum(max(0.0, min(r[5], t1) - max(r[4], t0)) for r in recs)
    return alive / (t1 - t0)


def profile(here, kinds, bins=20):
    """Prints the step's resident blocks of each kernel in time bins."""
    t0 = min(r[4] for k in kinds for r in here[k])
    t1 = max(r[5] for k in kinds for r in here[k])
    w = (t1 - t0) / bins
    print("   profile (us from the step's start: mean resident blocks " + ", ".join(kinds) + ")")
    for i in range(bins):
        a, b = t0 + i * w, t0 + (i + 1) * w
        print(f"   {a - t0:7.1f}.." + f"{b - t0:<7.1f} " + "  ".join(f"{resident(here[k], a, b):6.0f}" for k in kinds))


def summarise(path, steps, show=-1):
    recs = read(path)
    if not recs:
        print(f"== {os.path.basename(path)}: no blocks recorded (the instrumented kernels: the group steps and verifies, "
              "the GDN stream kernels, the Mamba-2 pipelined folds)")
        return
    kinds = sorted({r[0] for r in recs})
    by = {k: [r for r in recs if r[0] == k] for k in kinds}
    main = next((k for k in ("group_step", "m2_group_step", "group_verify", "m2_group_verify") if k in by), kinds[0])
    side = [k for k in kinds if k != main]
    print(f"== {os.path.basename(path)}: {len(recs)} blocks, {steps} steps; kernels " +
          ", ".join(f"{k} {len(by[k])}" for k in kinds))
    cut = {k: split_steps(by[k], steps) for k in kinds}
    for k in kinds:
        if cut[k] is None:
            print(f"   {k}: {len(by[k])} blocks do not split into {steps} equal steps; per-step lines left out")
            return
    print("   step  span   " + "  ".join(f"{k}: first start..last end [half ended] (life med/max, items)" for k in [main] + side) +
          f"   {main} resident: mean / beside {'+'.join(side) or '-'}   gap")
    spans = []
    for i in range(steps):
        here = {k: cut[k][i] for k in kinds}
        t0 = min(r[4] for k in kinds for r in here[k])
        t1 = max(r[5] for k in kinds for r in here[k])
        spans.append(t1 - t0)
        parts = []
        for k in [main] + side:
            rs = here[k]
            life = [r[5] - r[4] for r in rs]
            parts.append(f"{min(r[4] for r in rs) - t0:6.1f}..{max(r[5] for r in rs) - t0:6.1f} "
                         f"[half ended {statistics.median(r[5] for r in rs) - t0:6.1f}] "
                         f"({statistics.median(life):5.1f}/{max(life):5.1f}, {sum(r[3] for r in rs)})")
        m = here[main]
        ms, me = min(r[4] for r in m), max(r[5] for r in m)
        occ = resident(m, ms, me)
        beside = "-"
        if side:
            s_rs = [r for k in side for r in here[k]]
            ss, se = min(r[4] for r in s_rs), max(r[5] for r in s_rs)
            beside = f"{resident(m, max(ss, ms), min(se, me)):.0f} over {max(0.0, min(se, me) - max(ss, ms)):.1f} us"
        gap = ""
        if i + 1 < steps:
            nxt = min(r[4] for k in kinds for r in cut[k][i + 1])
            gap = f"{nxt - t1:5.1f}"
        print(f"   {i:4d} {t1 - t0:6.1f}   " + "  ".join(parts) + f"   {occ:.0f} / {beside}   {gap}")
        if i == show:
            profile(here, [main] + side)
    all0 = min(r[4] for r in recs)
    all1 = max(r[5] for r in recs)
    print(f"   whole graph {all1 - all0:.1f} us, steps' spans sum {sum(spans):.1f}, mean {statistics.mean(spans):.1f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--profile", type=int, default=-1, help="print this step's occupancy over time")
    a = ap.parse_args()
    files = []
    for p in a.paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".csv"))
        else:
            files.append(p)
    for f in files:
        steps = a.steps
        if not steps:
            tail = os.path.basename(f)[:-4].rsplit("_", 1)[-1]
            steps = STEPS.get(tail, 1)
        try:
            summarise(f, steps, a.profile)
        except (OSError, ValueError, KeyError) as e:
            print(f"== {f}: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()

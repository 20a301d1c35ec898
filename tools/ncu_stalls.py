#!/usr/bin/env python3
"""Stall samples of an ncu profile by source line.

tools/gpu_check.sh's `profile` writes prof_NAME_src.csv (ncu's source page
with the CUDA lines beside their SASS, modules built with -lineinfo). This
prints the kernel's stall reasons in total and its source lines with the
most samples, each with its top three reasons and its instructions
executed. The line numbers are the module's: give the module source that
REPLAYSSM_DUMP_DIR writes (go test ./backend/cuda -run TestDumpReplayModule
with the profile's shape, state and defines) to see each line's text.

    python3 tools/ncu_stalls.py prof_fp8flush_src.csv [--module module.cu] [--top 30]
"""

import argparse
import csv
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="the profile's _src.csv")
    ap.add_argument("--module", help="the module source (module.cu) the line numbers refer to")
    ap.add_argument("--top", type=int, default=30, help="how many source lines to print")
    args = ap.parse_args()

    with open(args.csv, newline="") as f:
        rows = list(csv.reader(f))
    head = next((i for i, r in enumerate(rows) if r and r[0] == "Line No"), None)
    if head is None:
        sys.exit(f"{args.csv}: no 'Line No' header: not an ncu source page with CUDA lines")
    cols = {name: i for i, name in enumerate(rows[head])}
    total_col = cols.get("Warp Stall Sampling (All Samples)")
    if total_col is None:
        sys.exit(f"{args.csv}: no stall-sampling column (was SourceCounters collected?)")
    stalls = [n for n in rows[head] if n.startswith("stall_") and "Not Issued" not in n]
    executed = cols.get("Instructions Executed")

    src = []
    if args.module:
        with open(args.module) as f:
            src = f.read().split("\n")

    total, by_reason, lines = 0, {s: 0 for s in stalls}, []
    # The CUDA lines carry a line number and their SASS's sums; the SASS
    # rows under them have an empty first column.
    for r in rows[head + 1:]:
        if len(r) < len(rows[head]) or not r[0]:
            continue
        try:
            n = int(r[total_col] or 0)
        except ValueError:
            continue
        total += n
        reasons = {s: int(r[cols[s]] or 0) for s in stalls}
        for s, v in reasons.items():
            by_reason[s] += v
        lines.append((n, r[0], reasons, r[executed] if executed is not None else ""))
    if total == 0:
        sys.exit(f"{args.csv}: no stall samples")

    print(f"{total} samples")
    for s, v in sorted(by_reason.items(), key=lambda x: -x[1])[:10]:
        print(f"  {s[6:]:22s} {v:8d} {100 * v / total:5.1f}%")
    print()
    for n, line, reasons, ex in sorted(lines, key=lambda x: -x[0])[: args.top]:
        top = ", ".join(f"{s[6:]} {v}" for s, v in sorted(reasons.items(), key=lambda x: -x[1])[:3] if v)
        text = ""
        if src and line.isdigit() and 0 < int(line) <= len(src):
            text = src[int(line) - 1].strip()[:70]
        print(f"{n:7d} {100 * n / total:5.1f}%  L{line:<6s} {ex:>10s}  {top}")
        if text:
            print(f"{'':22s}{text}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Global loads whose values a kernel uses right after asking for them.

A load from global memory whose destination register an instruction reads
a few instructions later is a round trip the thread waits for where it
asks; in a kernel that streams, the stream stops meanwhile. This scans
cuobjdump's SASS (the module.sass that TestDumpReplayModule writes, built
without a GPU) and prints each such load of the functions named: its
index in the function, the load, and the first instruction that reads it.
Wide streaming loads (LDG.E.128, whose uses the kernels place passes
later by design) and cp.async (LDGSTS) are left out.

    python3 tools/sass_waits.py module.sass mamba2_group_step [--within 15]

It found the Mamba-2 group step's and group verify's per-token inputs
loaded so (the waits GROUP_EARLY's cp.async staging takes out). A
heuristic: the index
is a position in the listing, not in time, and a hit in a branch taken
rarely (the output loops' rows past the staged ring entries) waits only
when taken.
"""

import argparse
import re
import sys

from sass_listing import functions

LOAD = re.compile(r"^(@!?U?P\w+ )?(LDG\S*) (R\d+), \[")
REG = re.compile(r"\bR(\d+)\b(\.64)?")


def registers(text):
    """The general registers an operand list names (a .64 pair counts two)."""
    regs = set()
    for m in REG.finditer(text):
        r = int(m.group(1))
        regs.add(r)
        if m.group(2):
            regs.add(r + 1)
    return regs


def waits(insns, within):
    """(index, load, index of first use, use) for loads used within `within`."""
    found = []
    for i, ins in enumerate(insns):
        m = LOAD.match(ins)
        if not m or ".128" in m.group(2):
            continue
        first = int(m.group(3)[1:])
        width = 2 if ".64" in m.group(2) else 1
        dst = set(range(first, first + width))
        for j in range(i + 1, min(len(insns), i + 1 + within)):
            body = re.sub(r"^@!?U?P\w+ ", "", insns[j])
            op, _, rest = body.partition(" ")
            args = rest.split(",")
            # A store reads all its operands; other instructions write the first.
            reads = rest if op.startswith(("ST", "RED", "ATOM")) else ",".join(args[1:])
            if registers(reads) & dst:
                found.append((i, ins, j, insns[j]))
                break
            if not op.startswith("ST") and registers(args[0]) & dst:
                break  # overwritten before any use
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass", help="cuobjdump -sass output (module.sass)")
    ap.add_argument("function", nargs="*", help="functions to scan (default: every one)")
    ap.add_argument("--within", type=int, default=15, help="instructions between a load and its use that count as waiting")
    args = ap.parse_args()
    funcs = functions(args.sass)
    names = args.function or sorted(funcs)
    for name in names:
        if name not in funcs:
            sys.exit(f"{name}: not in {args.sass} (functions: {', '.join(sorted(funcs))})")
        hits = waits(funcs[name], args.within)
        print(f"== {name}: {len(funcs[name])} instructions, {len(hits)} loads used within {args.within}")
        for i, ins, j, use in hits:
            print(f"{i:6d} {ins:48s} used at {j} (+{j - i}): {use}")


if __name__ == "__main__":
    main()

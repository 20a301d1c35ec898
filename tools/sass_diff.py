#!/usr/bin/env python3
"""Compare two cuobjdump SASS listings function by function.

For kernel work without a GPU: dump a module before and after a change
(tools/dump_modules.sh, TestDumpReplayModule) and see which functions
changed, and how. Each function present in both is reported as

    same       identical instructions
    renamed    the same instructions but for register numbers and reuse flags
    moved      the same multiset of instructions (registers, immediates and
               branch targets aside), in another order
    changed    otherwise, with the instructions added and removed (counted,
               registers and immediates aside)

and functions present in one listing only are named. Identical functions
print nothing unless --all.

    python3 tools/sass_diff.py before/module.sass after/module.sass [--all] [--top 12]
"""

import argparse
import collections
import re

from sass_listing import functions


def renamed(ins):
    return re.sub(r"\bU?R\d+\b", "R", ins.replace(".reuse", ""))


def shape(ins):
    ins = renamed(ins)
    ins = re.sub(r"\bU?P\d\b", "P", ins)
    return re.sub(r"-?0x[0-9a-f]+|-?\b\d+(\.\d+)?(e[+-]\d+)?\b", "X", ins)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--all", action="store_true", help="also list identical functions")
    ap.add_argument("--top", type=int, default=12, help="instruction kinds to show a changed function")
    args = ap.parse_args()
    a, b = functions(args.before), functions(args.after)
    for name in sorted(set(a) | set(b)):
        if name not in b:
            print(f"only before: {name}")
            continue
        if name not in a:
            print(f"only after:  {name}")
            continue
        x, y = a[name], b[name]
        if x == y:
            if args.all:
                print(f"same       {name} ({len(x)})")
            continue
        if list(map(renamed, x)) == list(map(renamed, y)):
            print(f"renamed    {name} ({len(x)})")
            continue
        cx, cy = collections.Counter(map(shape, x)), collections.Counter(map(shape, y))
        if cx == cy:
            print(f"moved      {name} ({len(x)})")
            continue
        added, removed = cy - cx, cx - cy
        print(f"changed    {name} ({len(x)} -> {len(y)})")
        for ins, n in added.most_common(args.top):
            print(f"    + {n:4d} {ins}")
        for ins, n in removed.most_common(args.top):
            print(f"    - {n:4d} {ins}")


if __name__ == "__main__":
    main()

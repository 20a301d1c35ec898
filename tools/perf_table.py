#!/usr/bin/env python3
"""Turn `replayssm bench kernels --json` rows into the markdown table of docs/PERF.md.

    go run ./cmd/replayssm bench kernels --json > rows.jsonl
    python3 tools/perf_table.py rows.jsonl
"""
import json
import sys


def us(v):
    """Microseconds as `bench kernels` prints them: a decimal under 100."""
    return f"{v:.1f}" if v < 100 else f"{v:.0f}"


def pct(r):
    """% of copy on state bytes, and on state + ring where the row has a ring."""
    if r.get("pct_copy_with_ring"):
        return f"{r['pct_copy']:.0f}% ({r['pct_copy_with_ring']:.0f}% with the ring)"
    return f"{r['pct_copy']:.0f}%"


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip().startswith("{")]
    if not rows:
        sys.exit(f"{path}: no rows")
    r0 = rows[0]
    head = f"device {r0['device']}"
    if "threads" in r0:
        head += f", {r0['threads']} threads"
    head += f"; copy bandwidth {r0['copy_gbps']:.1f} GB/s (read+write)"
    if r0.get("read_gbps"):
        head += f", read-only {r0['read_gbps']:.1f} GB/s"
    window = max(r["window"] for r in rows)
    drafts = max(r.get("t", 0) for r in rows)
    print(f"{head}; window L={window}" + (f", verify T={drafts}" if drafts else "") + "\n")
    print("| shape | state | batch | mode | us/step | non-flush | flush | MB/step | GB/s | % copy | vs baseline |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        extra = ""
        if r.get("nonflush_vs_replay"):
            extra = f" (non-flush {r['nonflush_vs_replay']:.2f}x replay's)"
        print(f"| {r['shape']} | {r['state_dtype']} | {r['batch']} | {r['mode']} | {us(r['us_per_step'])} | "
              f"{us(r['us_nonflush'])} | {us(r['us_flush'])} | {r['bytes_per_step']/1e6:.1f} | {r['gbps']:.1f} | "
              f"{pct(r)} | {r['speedup_vs_baseline']:.2f}x{extra} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/dev/stdin")

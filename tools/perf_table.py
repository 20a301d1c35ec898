#!/usr/bin/env python3
"""Turn `replayssm bench kernels --json` rows into the markdown table of docs/PERF.md.

    go run ./cmd/replayssm bench kernels --json > rows.jsonl
    python3 tools/perf_table.py rows.jsonl
"""
import json
import sys


def main(path):
    rows = [json.loads(line) for line in open(path) if line.strip().startswith("{")]
    if not rows:
        sys.exit(f"{path}: no rows")
    r0 = rows[0]
    print(f"device {r0['device']}, {r0.get('threads', '?')} threads; copy bandwidth "
          f"{r0['copy_gbps']:.1f} GB/s (read+write), read-only {r0.get('read_gbps', 0):.1f} GB/s; "
          f"window L={max(r['window'] for r in rows)}, verify T={max(r.get('t', 0) for r in rows)}\n")
    print("| shape | state | batch | mode | us/step | non-flush | flush | MB/step | GB/s | % copy | vs baseline |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        extra = ""
        if r.get("nonflush_vs_replay"):
            extra = f" (non-flush {r['nonflush_vs_replay']:.2f}x replay's)"
        print(f"| {r['shape']} | {r['state_dtype']} | {r['batch']} | {r['mode']} | {r['us_per_step']:.0f} | "
              f"{r['us_nonflush']:.0f} | {r['us_flush']:.0f} | {r['bytes_per_step']/1e6:.1f} | {r['gbps']:.1f} | "
              f"{r['pct_copy']:.0f}% | {r['speedup_vs_baseline']:.2f}x{extra} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/dev/stdin")

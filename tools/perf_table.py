#!/usr/bin/env python3
"""Turn `replayssm bench kernels --json` rows into the markdown table of docs/PERF.md.

    go run ./cmd/replayssm bench kernels --json > rows.jsonl
    python3 tools/perf_table.py rows.jsonl          # a row per mode
    python3 tools/perf_table.py --wide rows.jsonl   # a row per shape and state (docs/PERF.md's GPU tables)
"""
import json
import sys


def us(v):
    """Microseconds as `bench kernels` prints them: a decimal under 100."""
    return f"{v:.1f}" if v < 100 else f"{v:.0f}"


def label(r):
    """A row's mode, with its ring format where that is not fp32
    (`bench kernels --ring-dtype bf16`: "replay+bf16-ring")."""
    return r["mode"] + (f"+{r['ring_dtype']}-ring" if r.get("ring_dtype") else "")


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
        print(f"| {r['shape']} | {r['state_dtype']} | {r['batch']} | {label(r)} | {us(r['us_per_step'])} | "
              f"{us(r['us_nonflush'])} | {us(r['us_flush'])} | {r['bytes_per_step']/1e6:.1f} | {r['gbps']:.1f} | "
              f"{pct(r)} | {r['speedup_vs_baseline']:.2f}x{extra} |")


def wide(path):
    """One row per (shape, state): the modes present side by side, each
    replay mode with its aligned non-flush and flush steps, the ratios to
    the baseline (and the read copies' non-flush steps to replay's)."""
    rows = [json.loads(line) for line in open(path) if line.strip().startswith("{")]
    if not rows:
        sys.exit(f"{path}: no rows")
    modes = []
    for r in rows:
        if label(r) not in modes:
            modes.append(label(r))
    by = {}
    for r in rows:
        by.setdefault((r["shape"], r["state_dtype"], r["batch"]), {})[label(r)] = r
    head = ["shape", "state"]
    if len({k[2] for k in by}) > 1:
        head.append("batch")
    for m in modes:
        base = m.split("+")[0]  # the mode without its ring format
        if base == "baseline":
            head.append("baseline")
        elif base == "verify-baseline":
            head.append("verify-baseline")
        elif base == "verify":
            head += [m.replace("verify", "verify T=%d" % max(r.get("t", 0) for r in rows), 1), f"{m} vs baseline"]
        elif base.startswith("verify-"):
            head += [m, f"{m} vs baseline"]
        elif base == "replay":
            head += [f"{m} (non-flush / flush)", f"{m} vs baseline"]
        else:
            head += [f"{m} (non-flush / flush)", f"{m} vs baseline (non-flush vs replay's)"]
    print("| " + " | ".join(head) + " |")
    print("|---|---|" + "---:|" * (len(head) - 2))
    for (shape, state, batch), ms in by.items():
        cells = [shape, state] + ([str(batch)] if "batch" in head else [])
        for m in modes:
            r = ms.get(m)
            base = m.split("+")[0]
            if r is None:
                cells += ["-"] * (2 if base not in ("baseline", "verify-baseline") else 1)
                continue
            if base in ("baseline", "verify-baseline"):
                cells.append(f"{us(r['us_per_step'])} ({r['pct_copy']:.0f}%)")
            elif base.startswith("verify"):
                cells += [us(r["us_per_step"]), f"{r['speedup_vs_baseline']:.2f}x"]
            else:
                cells.append(f"{us(r['us_per_step'])} ({us(r['us_nonflush'])} / {us(r['us_flush'])})")
                ratio = f"{r['speedup_vs_baseline']:.2f}x"
                if r.get("nonflush_vs_replay"):
                    ratio += f" ({r['nonflush_vs_replay']:.2f}x)"
                cells.append(ratio)
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] == "--wide":
        wide(args[1] if len(args) > 1 else "/dev/stdin")
    else:
        main(args[0] if args else "/dev/stdin")

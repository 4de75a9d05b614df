#!/usr/bin/env python3
"""Medians and ratios of crates/windrose-mpi/bench/testbed.sh's CSV (one line per call).

    python3 crates/windrose-mpi/bench/testbed_summary.py data/testbed/mpi-sweep.csv [--after N]

sweep: per size, each variant's median call time over every round (ms), the best native
algorithm, windrose's speed-up over it and over Open MPI's default, and below the shim's
threshold PMPI_Bcast timed in the same processes against its fallback.
series: per run, the total, the median call before and after the change, and how many calls
after the change a call first came back within 20 % of the median before it.
With FILE-wan.csv beside it: the WAN bytes each variant moved per byte it broadcast, per link.
"""
import csv
import os
import statistics
import sys
from collections import defaultdict

NATIVE = ["default", "chain", "pipeline", "binomial", "han"]


def fmt_ms(s):
    return "-" if s is None else f"{s * 1e3:.1f}" if s >= 0.1 else f"{s * 1e3:.2f}"


def sweep(rows):
    by = defaultdict(list)
    loads = []
    rounds = set()
    for r in rows:
        by[(r["label"], int(r["bytes"]))].append(float(r["seconds"]))
        loads.append(float(r["load1"]))
        rounds.add(r["round"])
    labels = []
    for r in rows:
        if r["label"] not in labels:
            labels.append(r["label"])
    variants = [v for v in labels if "/" not in v]
    sizes = sorted({b for (_, b) in by})
    med = {k: statistics.median(v) for k, v in by.items()}
    print(f"sweep: {len(rounds)} round(s), load average {min(loads):.1f}-{max(loads):.1f}; "
          "median ms per call (calls per cell in brackets)")
    head = ["bytes"] + variants + ["best native", "vs best", "vs default", "vs PMPI in process"]
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---:" for _ in head) + "|")
    for b in sizes:
        cells = [str(b)]
        for v in variants:
            m = med.get((v, b))
            cells.append("-" if m is None else f"{fmt_ms(m)} ({len(by[(v, b)])})")
        natives = [(med[(v, b)], v) for v in NATIVE if (v, b) in med]
        best = min(natives) if natives else None
        w = med.get(("windrose", b))
        cells.append("-" if best is None else f"{fmt_ms(best[0])} {best[1]}")
        cells.append("-" if best is None or w is None else f"{best[0] / w:.2f}x")
        d = med.get(("default", b))
        cells.append("-" if d is None or w is None else f"{d / w:.2f}x")
        p = med.get(("windrose/pmpi", b))
        cells.append("-" if p is None or w is None else f"{p / w:.2f}x")
        print("| " + " | ".join(cells) + " |")
    print("vs best, vs default, vs PMPI in process: the native median / windrose's (above 1: "
          "windrose faster); the last is PMPI_Bcast in windrose's own processes")


def series(rows):
    runs = defaultdict(list)
    loads = {}
    for r in rows:
        key = (r["round"], r["variant"])
        runs[key].append((int(r["call"]), float(r["seconds"])))
        loads[key] = r["load1"]
    after = int(sys.argv[sys.argv.index("--after") + 1]) if "--after" in sys.argv else 10
    totals = defaultdict(list)
    print(f"series: link changed after call {after}")
    print("| round | variant | calls | total s | median before ms | median after ms | back within 20 % after | load |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for (rnd, v), calls in sorted(runs.items()):
        calls.sort()
        t = [s for _, s in calls]
        pre = statistics.median(t[:after])
        post = t[after:]
        back = next((i + 1 for i, s in enumerate(post) if s <= 1.2 * pre), None)
        totals[v].append(sum(t))
        print(f"| {rnd} | {v} | {len(t)} | {sum(t):.1f} | {fmt_ms(pre)} | "
              f"{fmt_ms(statistics.median(post)) if post else '-'} | "
              f"{'never' if back is None else f'{back} call(s)'} | {loads[(rnd, v)]} |")
    if "windrose" in totals:
        w = statistics.median(totals["windrose"])
        for v in sorted(totals):
            if v != "windrose":
                n = statistics.median(totals[v])
                print(f"median total: {v} {n:.1f} s, windrose {w:.1f} s: {v}/windrose {n / w:.2f} "
                      "(above 1: windrose faster)")


def wan(rows, links):
    """WAN bytes per byte broadcast (every call, warm-ups included), per variant and link: a
    tree that reaches each other cluster once moves (clusters - 1) bytes per byte."""
    payload = defaultdict(int)
    warm = set()
    for r in rows:
        payload[r["variant"]] += int(r["bytes"])
        warm.add((r["round"], r["variant"], r["label"], int(r["bytes"])))
    for (_, v, _, b) in warm:
        payload[v] += b
    moved = defaultdict(lambda: defaultdict(int))
    for l in links:
        moved[l["variant"]][(int(l["from"]), int(l["to"]))] += int(l["bytes"])
    print("WAN bytes per byte broadcast (from the routers' counters; barriers and reductions included):")
    for v in moved:
        if not payload[v]:
            continue
        per = {k: b / payload[v] for k, b in sorted(moved[v].items()) if b / payload[v] >= 0.01}
        print(f"  {v}: {sum(moved[v].values()) / payload[v]:.2f} ("
              + ", ".join(f"{a}->{b} {x:.2f}" for (a, b), x in per.items()) + ")")


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: testbed_summary.py FILE.csv [--after N]")
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
    links = []
    wan_file = sys.argv[1][: -len(".csv")] + "-wan.csv" if sys.argv[1].endswith(".csv") else None
    if wan_file and os.path.exists(wan_file):
        with open(wan_file, newline="") as f:
            links = list(csv.DictReader(f))
    for mode in ("sweep", "series"):
        sel = [r for r in rows if r["mode"] == mode]
        if sel:
            (sweep if mode == "sweep" else series)(sel)
            sel_links = [l for l in links if l["mode"] == mode]
            if sel_links:
                wan(sel, sel_links)


if __name__ == "__main__":
    main()

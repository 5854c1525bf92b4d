#!/usr/bin/env python3
"""Builds against a base build over repeated `tools/device_attention.sh ab` runs.

The files of a folder named ab_<tag>_run<N>.json (the runs' ab_<tag>.json, renamed as they are
kept under bench/results/) are grouped by tag and run; for every other tag and each format the
ratio tag / base of the mean time over the runs, cell by cell (format, heads, batch, context):
its geometric mean and range, launched one by one ("us") and replayed from a graph
("us_graph"); then the int4 rows cell by cell with every run's ratio, the share of the copy
bandwidth and the speed-up over torch SDPA of each build.

    python3 tools/ab_compare.py --base main bench/results/cuda_h100/ab_turnadd_h100
"""
import argparse
import collections
import json
import math
import pathlib
import re
import sys


def load(folder):
    runs = collections.defaultdict(dict)  # tag -> run -> {cell: row}
    for path in sorted(pathlib.Path(folder).glob("ab_*_run*.json")):
        m = re.fullmatch(r"ab_(.+)_run(\d+)\.json", path.name)
        if not m:
            continue
        rows = json.loads(path.read_text())["rows"]
        runs[m.group(1)][int(m.group(2))] = {
            (r["format"], r["heads"], r["kv_heads"], r["batch"], r["context"]): r for r in rows
        }
    return runs


def mean(xs):
    return sum(xs) / len(xs)


def geomean(xs):
    return math.exp(mean([math.log(x) for x in xs]))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("--base", default="main", help="the tag the others are divided by")
    args = p.parse_args()
    runs = load(args.folder)
    if args.base not in runs:
        sys.exit(f"no ab_{args.base}_run<N>.json in {args.folder}")
    base = runs[args.base]
    ids = sorted(base)
    cells = sorted(set.intersection(*(set(base[i]) for i in ids)))
    others = [t for t in sorted(runs) if t != args.base]
    for tag in others:
        if sorted(runs[tag]) != ids:
            sys.exit(f"{tag} has runs {sorted(runs[tag])}, {args.base} {ids}")
        for i in ids:
            missing = [c for c in cells if c not in runs[tag][i]]
            if missing:
                sys.exit(f"{tag} run {i} lacks {len(missing)} of {args.base}'s cells, e.g. "
                         f"{missing[0]}")
    tags = [args.base] + others

    def avg(tag, cell, key):  # the mean over the runs
        return mean([runs[tag][i][cell][key] for i in ids])

    print(f"{len(ids)} runs ({', '.join(map(str, ids))}); ratios are tag / {args.base} of the "
          "mean time over the runs, cell by cell")
    for tag in others:
        for fmt in sorted({c[0] for c in cells}):
            line = f"{tag:>12} {fmt:>6}"
            for key in ("us", "us_graph"):
                r = [avg(tag, c, key) / avg(args.base, c, key) for c in cells if c[0] == fmt]
                line += f"  {key:>8} geomean {geomean(r):.3f} [{min(r):.3f} .. {max(r):.3f}]"
            print(line)
    print()
    print(f"int4 (us, mean of the runs; each run's ratio; % of the copy bandwidth; x SDPA), "
          f"builds {', '.join(tags)}")
    for c in (c for c in cells if c[0] == "int4"):
        line = f"{c[1]}/{c[2]} B {c[3]:>3} x {c[4]:>6}: {avg(args.base, c, 'us'):8.1f}"
        for t in others:
            per_run = ",".join(f"{runs[t][i][c]['us'] / base[i][c]['us']:.3f}" for i in ids)
            ratio = avg(t, c, "us") / avg(args.base, c, "us")
            line += f" | {t} {avg(t, c, 'us'):8.1f} ({ratio:.3f}; {per_run})"
        pct = " ".join(f"{avg(t, c, 'pct_copy'):.1f}" for t in tags)
        sdpa = " ".join(f"{avg(t, c, 'speedup_vs_sdpa'):.2f}" for t in tags)
        print(f"{line} | % {pct} | x {sdpa}")

if __name__ == "__main__":
    main()

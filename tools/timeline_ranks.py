#!/usr/bin/env python3
"""Where the int4_kivi kernel's thread blocks lose their common end, from the decode timeline's
CSV (`cuda_attention_bench --timeline-csv DIR`, a build with -DS4KV_DECODE_TIMELINE): each
block's loop time by its dispatch rank on its multiprocessor (the order in which the blocks that
share one were dispatched: grid index blockIdx.y * gridDim.x + blockIdx.x), and the kernel's end
against the multiprocessors' mean and last exits. Blocks of equal work that run slower the later
they were dispatched point at the warp schedulers' preference for older warps, not at the memory.

  python3 tools/timeline_ranks.py DIR/int4_28_4_b16_c8192_graph.csv [...]  (or .csv.gz)
"""
import argparse
import collections
import csv
import gzip
import statistics


def summarize(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["kernel"] == "0"]  # the int4 kernel's blocks
    if not rows:
        return f"{path}: no int4 blocks"
    grid_x = max(int(r["x"]) for r in rows) + 1
    by_sm = collections.defaultdict(list)
    for r in rows:
        by_sm[int(r["sm"])].append(
            (int(r["y"]) * grid_x + int(r["x"]), float(r["loop_end"]) - float(r["loop"]),
             float(r["exit"])))
    by_rank = collections.defaultdict(list)
    sm_mean_exit, sm_last_exit = [], []
    for blocks in by_sm.values():
        blocks.sort()
        for rank, (_, loop, _) in enumerate(blocks):
            by_rank[rank].append(loop)
        exits = [e for _, _, e in blocks]
        sm_mean_exit.append(statistics.mean(exits))
        sm_last_exit.append(max(exits))
    ranks = ", ".join(f"{k}: {statistics.median(v):.1f} ({len(v)})"
                      for k, v in sorted(by_rank.items()))
    return (f"{path}: {len(rows)} blocks on {len(by_sm)} multiprocessors\n"
            f"  loop us by dispatch rank (median, blocks): {ranks}\n"
            f"  end {max(sm_last_exit):.1f} us; multiprocessors' last exit median "
            f"{statistics.median(sm_last_exit):.1f}, mean exit {statistics.mean(sm_mean_exit):.1f} "
            f"(largest {max(sm_mean_exit):.1f})")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv", nargs="+", help="timeline CSV files of int4_kivi launches")
    for path in p.parse_args().csv:
        print(summarize(path))


if __name__ == "__main__":
    main()

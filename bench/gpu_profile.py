#!/usr/bin/env python3
"""Where a decode step's GPU time goes, per kernel, for each KV cache format: Nsight Compute
(`ncu --clock-control none`, kernel durations only) over `s4kv bench latency --enforce-eager` on
a full model config with dummy weights, a window of launches that falls in decode steps, summed
by kernel name. Eager, so that every kernel is its own launch (a graph replay runs the same
kernels). Run on the GPU machine (the device step `profile`).

  python3 bench/gpu_profile.py --bin s4kv --batch-size 1 --out profile.txt
"""
import argparse
import collections
import csv
import io
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_capacity import model_dir  # noqa: E402
from gpu_perf import FORMATS  # noqa: E402


def kernel_times(ncu_csv):
    """{kernel name: [durations in us]} from `ncu --csv` output (base units: ns)."""
    rows = csv.reader(io.StringIO(ncu_csv[ncu_csv.index('"ID"'):]))
    header = next(rows)
    name_at, metric_at, value_at = (header.index("Kernel Name"), header.index("Metric Name"),
                                    header.index("Metric Value"))
    times = collections.defaultdict(list)
    for r in rows:
        if len(r) > value_at and r[metric_at] == "gpu__time_duration.sum":
            times[r[name_at]].append(float(r[value_at].replace(",", "")) / 1000.0)
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", default="qwen2.5-7b-instruct")
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--input-len", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=24)
    ap.add_argument("--formats", default="16bit,fp8_e4m3,int4_kivi")
    ap.add_argument("--launch-skip", type=int, default=2000)
    ap.add_argument("--launch-count", type=int, default=1000)
    ap.add_argument("--top", type=int, default=16)
    ap.add_argument("--warm-caches", action="store_true",
                    help="ncu --cache-control none: each kernel finds the L2 as the kernel "
                         "before left it, as in a step (ncu flushes it before each by default)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        d = model_dir(tmp, a.model)
        for fmt in a.formats.split(","):
            cache = ["--cache-control", "none"] if a.warm_caches else []
            cmd = ["ncu", "--clock-control", "none", *cache, "--csv", "--print-units", "base",
                   "--metrics", "gpu__time_duration.sum", "--launch-skip", str(a.launch_skip),
                   "--launch-count", str(a.launch_count), a.bin, "bench", "latency", "--model", d,
                   "--load-format", "dummy", "--kv-cache-dtype", FORMATS[fmt],
                   "--batch-size", str(a.batch_size), "--input-len", str(a.input_len),
                   "--output-len", str(a.output_len), "--num-iters-warmup", "0",
                   "--num-iters", "1", "--enforce-eager"]
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=900)
            if r.returncode != 0 or '"ID"' not in r.stdout:
                lines.append(f"--kv-cache-dtype {fmt}: ncu rc {r.returncode}\n{r.stderr[-2000:]}")
                continue
            times = kernel_times(r.stdout)
            total = sum(sum(v) for v in times.values())
            n = sum(len(v) for v in times.values())
            lines.append(f"--kv-cache-dtype {fmt}: {n} kernels, {total:.1f} us")
            for name, v in sorted(times.items(), key=lambda kv: -sum(kv[1]))[:a.top]:
                lines.append(f"  {sum(v):10.1f} us {len(v):5d}x {sum(v) / len(v):8.1f} us each"
                             f"  {name[:110]}")
    warm = " --cache-control none" if a.warm_caches else ""
    head = (f"ncu --clock-control none{warm} --metrics gpu__time_duration.sum --launch-skip "
            f"{a.launch_skip} --launch-count {a.launch_count}, s4kv bench latency --model "
            f"{a.model} config --load-format dummy --batch-size {a.batch_size} --input-len "
            f"{a.input_len} --output-len {a.output_len} --enforce-eager; commit "
            f"{os.environ.get('S4KV_COMMIT', '?')}")
    text = head + "\n" + "\n".join(lines) + "\n"
    with open(a.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()

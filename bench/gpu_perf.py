#!/usr/bin/env python3
"""End-to-end GPU figures of issue 14 for each KV cache format, on a full model config with
random weights (--load-format dummy): `s4kv bench latency` (batch-1 decode step against the
weights-only floor) and `s4kv bench throughput` (short and KV-bound long workloads), with CUDA
graphs and, for comparison, with --enforce-eager. Each run is one `s4kv bench` process; its JSON
is kept whole, and the summary gives int4_kivi's ratios to 16-bit and fp8_e4m3 from the same run.

    python3 bench/gpu_perf.py --out bench/results/cuda_h200/perf_h200.json \
        --suites latency,short,long --long-prompts 512

Suites (each for every format in --formats):
  latency  batch 1, input 1024, output 128 (issue 14: step <= 1.25x the weights-only floor);
           also batch 64 and 256 at input 1024
  short    throughput, input 512, output 128, 256 prompts (int4_kivi >= 0.97x 16-bit)
  long     throughput, input 8192, output 512, --long-prompts prompts (int4_kivi >= 2x 16-bit,
           >= 1.5x fp8_e4m3), --max-num-seqs 1024 so that the KV cache, not the sequence limit,
           bounds the batch (vLLM's default on 80 GB+ GPUs)
  prefill  throughput, input 8192, output 1, 64 prompts (int4_kivi >= 0.95x 16-bit)
  prefill32k  throughput, input 32000, output 1, 16 prompts at --max-num-batched-tokens 8192
           (a server's default budget): each prompt is four chunks, the last three attending
           to the cached chunks before them (int4_kivi's pool blocks)
  prefill64k  throughput, input 64000, output 1, 8 prompts at --max-num-batched-tokens 8192 and
           --max-model-len 65536, for a model of a longer context (--model
           llama-3.1-8b-instruct): eight chunks, the last four reading pools past the 32,768
           positions that int4_kivi's pool rows hold
  prefill128k  the same with input 128000, 4 prompts, --max-model-len 131072 (Llama-3.1-8B's
           context): the last chunks' pools mostly past the rows' default cap; an A/B of the cap
           with S4KV_PREFILL_POOL_ROW_CAP=131072
  eager    the latency suite's batch-1 and short throughput again with --enforce-eager
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_capacity import model_dir  # noqa: E402

FORMATS = {"16bit": "auto", "fp8_e4m3": "fp8_e4m3", "int4_kivi": "int4_kivi"}


def runs(suites, long_prompts):
    """(suite, name, bench args) for every run, format-independent."""
    out = []
    if "latency" in suites or "latency1" in suites:  # latency1: batch 1 only
        for b in (1, 64, 256) if "latency" in suites else (1,):
            out.append(("latency", f"latency_b{b}_in1024_out128",
                        ["latency", "--batch-size", str(b), "--input-len", "1024", "--output-len",
                         "128", "--num-iters-warmup", "1", "--num-iters", "3"]))
    if "short" in suites:
        out.append(("short", "throughput_in512_out128_n256",
                    ["throughput", "--input-len", "512", "--output-len", "128", "--num-prompts",
                     "256"]))
    if "long" in suites:
        out.append(("long", f"throughput_in8192_out512_n{long_prompts}",
                    ["throughput", "--input-len", "8192", "--output-len", "512", "--num-prompts",
                     str(long_prompts), "--max-num-seqs", "1024"]))
    if "prefill" in suites:
        out.append(("prefill", "throughput_in8192_out1_n64",
                    ["throughput", "--input-len", "8192", "--output-len", "1", "--num-prompts",
                     "64"]))
    # Long prompts in chunks of 8192 (the last two on the Llama-3.1-8B config's longer context).
    for suite, n_in, prompts, max_len in (("prefill32k", 32000, 16, None),
                                          ("prefill64k", 64000, 8, 65536),
                                          ("prefill128k", 128000, 4, 131072)):
        if suite in suites:
            out.append((suite, f"throughput_in{n_in}_out1_n{prompts}_b8192",
                        ["throughput", "--input-len", str(n_in), "--output-len", "1",
                         "--num-prompts", str(prompts), "--max-num-batched-tokens", "8192"] +
                        (["--max-model-len", str(max_len)] if max_len else [])))
    if "eager" in suites:
        out.append(("eager", "latency_b1_in1024_out128_eager",
                    ["latency", "--batch-size", "1", "--input-len", "1024", "--output-len", "128",
                     "--num-iters-warmup", "1", "--num-iters", "3", "--enforce-eager"]))
        out.append(("eager", "throughput_in512_out128_n256_eager",
                    ["throughput", "--input-len", "512", "--output-len", "128", "--num-prompts",
                     "256", "--enforce-eager"]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("S4KV_BIN", "build/src/cli/s4kv"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="qwen2.5-7b-instruct")
    ap.add_argument("--suites", default="latency,short")
    ap.add_argument("--formats", default="16bit,fp8_e4m3,int4_kivi")
    ap.add_argument("--long-prompts", type=int, default=512)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per run")
    ap.add_argument("--extra-args", default="",
                    help="more s4kv bench flags for every run, e.g. --async-scheduling")
    a = ap.parse_args()
    suites = set(a.suites.split(","))
    formats = a.formats.split(",")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        d = model_dir(tmp, a.model)
        for suite, name, args in runs(suites, a.long_prompts):
            for fmt in formats:
                js = os.path.join(tmp, f"{name}_{fmt}.json")
                cmd = [a.bin, "bench"] + args[:1] + ["--model", d, "--load-format", "dummy",
                                                     "--device", "cuda", "--kv-cache-dtype",
                                                     FORMATS[fmt], "--output-json", js] + args[1:]
                cmd += a.extra_args.split()
                t0 = time.time()
                try:
                    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True, timeout=a.timeout)
                    rc, stdout, stderr = r.returncode, r.stdout, r.stderr
                except subprocess.TimeoutExpired as e:
                    rc, stdout, stderr = "timeout", e.stdout or "", e.stderr or ""
                row = {"suite": suite, "run": name, "format": fmt, "rc": rc,
                       "seconds": round(time.time() - t0, 1),
                       "command": " ".join(cmd).replace(d, "MODEL/" + a.model)}
                if rc == 0 and os.path.exists(js):
                    with open(js) as f:
                        row["result"] = json.load(f)
                else:
                    row["stderr_tail"] = (stderr if isinstance(stderr, str) else "")[-2000:]
                row["stdout"] = (stdout if isinstance(stdout, str) else "")[-1500:]
                graphs = [l for l in (stderr if isinstance(stderr, str) else "").splitlines()
                          if "CUDA graphs" in l]
                if graphs:
                    row["cuda_graphs"] = graphs[0]
                results.append(row)
                print(f"{name} {fmt}: rc {rc} in {row['seconds']} s", flush=True)
                print(row["stdout"].strip()[-600:], flush=True)
                with open(a.out, "w") as f:  # after every run: a later timeout loses only itself
                    json.dump({"benchmark": "gpu_perf", "model": a.model,
                               "summary": summarize(results), "runs": results,
                               "provenance": provenance()}, f, indent=1)


def provenance():
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    return {"command": "python3 bench/gpu_perf.py " + " ".join(sys.argv[1:]),
            "commit": os.environ.get("S4KV_COMMIT", "unknown"), "gpu": gpu,
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def summarize(results):
    """int4_kivi's ratios to the other formats per run (tokens/s, or step time for latency)."""
    by = {}
    for r in results:
        if "result" in r:
            by.setdefault(r["run"], {})[r["format"]] = r["result"]
    out = {}
    for run, fmts in by.items():
        s = {}
        for fmt, res in fmts.items():
            if "output_tokens_per_second" in res:
                s[fmt] = {"output_tokens_per_second": res["output_tokens_per_second"],
                          "tokens_per_second": res.get("tokens_per_second"),
                          "elapsed_time": res.get("elapsed_time")}
            else:
                s[fmt] = {k: res.get(k) for k in ("avg_latency", "decode_step_ms_median",
                                                  "floor_ms", "decode_over_floor",
                                                  "prefill_seconds_median")}
        if "int4_kivi" in s:
            for other in ("16bit", "fp8_e4m3"):
                if other not in s:
                    continue
                a, b = s["int4_kivi"], s[other]
                if a.get("output_tokens_per_second") and b.get("output_tokens_per_second"):
                    s[f"int4_over_{other}"] = round(
                        a["output_tokens_per_second"] / b["output_tokens_per_second"], 3)
                elif a.get("decode_step_ms_median") and b.get("decode_step_ms_median"):
                    s[f"int4_speed_over_{other}"] = round(
                        b["decode_step_ms_median"] / a["decode_step_ms_median"], 3)
        out[run] = s
    return out


if __name__ == "__main__":
    main()

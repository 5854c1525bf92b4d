#!/usr/bin/env python3
"""KV capacity of each cache format on the GPU, vLLM's start-up arithmetic.

For each full model config (random weights: --load-format dummy) and each KV cache dtype, runs
`s4kv generate --device cuda` for one token at --gpu-memory-utilization 0.9 and reads its
capacity line: the KV blocks and tokens the budget holds after the weights and the profiling
step, and the maximum concurrency for max_model_len tokens per request. Writes one JSON with
the ratios int4_kivi / 16-bit and int4_kivi / fp8_e4m3.

    python3 bench/gpu_capacity.py --out bench/results/cuda_h200/capacity_h200.json
"""
import argparse
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {"qwen2.5-7b-instruct": "qwen2.5", "llama-3.1-8b-instruct": "llama3"}
FORMATS = ["auto", "fp8_e4m3", "int4_kivi"]
LINE = re.compile(r"KV cache: ([0-9.]+) GiB (\S+), (\d+) blocks of (\d+) tokens \((\d+) bytes each\) "
                  r"= (\d+) tokens .*max_model_len (\d+), max_num_seqs (\d+); maximum concurrency "
                  r"for \d+ tokens per request: ([0-9.]+)x")


def model_dir(tmp, name):
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    shutil.copy(os.path.join(ROOT, "tests/fixtures/configs", name + ".json"),
                os.path.join(d, "config.json"))
    tok = os.path.join(ROOT, "tests/fixtures/tokenizers", MODELS[name])
    with lzma.open(os.path.join(tok, "tokenizer.json.xz")) as f, \
            open(os.path.join(d, "tokenizer.json"), "wb") as g:
        g.write(f.read())
    shutil.copy(os.path.join(tok, "tokenizer_config.json"), d)
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.environ.get("S4KV_BIN", "build/src/cli/s4kv"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpu-memory-utilization", default="0.9")
    ap.add_argument("--models", default=",".join(MODELS),
                    help="comma-separated configs of " + ", ".join(MODELS))
    a = ap.parse_args()
    models = a.models.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        ap.error(f"unknown model {unknown[0]!r}: choose from {', '.join(MODELS)}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in models:
            d = model_dir(tmp, name)
            for fmt in FORMATS:
                cmd = [a.bin, "generate", "--model", d, "--load-format", "dummy", "--device",
                       "cuda", "--kv-cache-dtype", fmt, "--gpu-memory-utilization",
                       a.gpu_memory_utilization, "--prompt", "Hello", "--max-tokens", "1"]
                t0 = time.time()
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                m = LINE.search(r.stderr)
                if r.returncode != 0 or not m:
                    sys.exit(f"{name} {fmt}: rc {r.returncode}\n{r.stderr[-2000:]}")
                rows.append({"model": name, "kv_cache_dtype": m[2], "kv_gib": float(m[1]),
                             "blocks": int(m[3]), "block_size": int(m[4]),
                             "bytes_per_block": int(m[5]), "tokens": int(m[6]),
                             "max_model_len": int(m[7]), "max_num_seqs": int(m[8]),
                             "max_concurrency": float(m[9]), "seconds": round(time.time() - t0, 1),
                             "line": m[0]})
                print(f"{name:24} {m[2]:10} {int(m[6]):>10} tokens  {float(m[1]):7.2f} GiB  "
                      f"concurrency {float(m[9]):7.2f}x at {m[7]} tokens")
    ratios = {}
    for name in models:
        by = {r["kv_cache_dtype"]: r for r in rows if r["model"] == name}
        sixteen = next(v for k, v in by.items() if k not in ("fp8_e4m3", "int4_kivi"))
        ratios[name] = {"int4_vs_16bit": round(by["int4_kivi"]["tokens"] / sixteen["tokens"], 3),
                        "int4_vs_fp8": round(by["int4_kivi"]["tokens"] / by["fp8_e4m3"]["tokens"], 3)}
        print(f"{name}: int4_kivi / 16-bit {ratios[name]['int4_vs_16bit']}x, "
              f"int4_kivi / fp8_e4m3 {ratios[name]['int4_vs_fp8']}x")
    out = {"command": " ".join(["python3", "bench/gpu_capacity.py"] + sys.argv[1:]),
           "commit": os.environ.get("S4KV_COMMIT", ""), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                            time.gmtime()),
           "gpu_memory_utilization": float(a.gpu_memory_utilization), "rows": rows,
           "ratios": ratios}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

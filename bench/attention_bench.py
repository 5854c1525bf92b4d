#!/usr/bin/env python3
"""Decode attention on the GPU: S4 KV's kernels for every KV format beside torch SDPA.

Runs cuda_attention_bench (the B x context grid; bytes read and the copy bandwidth measured in
the same run), then times torch.nn.functional.scaled_dot_product_attention in fp16 on contiguous
K/V of the same shapes (q_len 1, grouped-query heads, the FlashAttention backend where torch
takes it) in the same process run, and writes one JSON with both and their ratios.

    python3 bench/attention_bench.py --bin build/bench/cuda_attention_bench \
        --out bench/results/attention_h200.json [--quick]
"""
import argparse
import json
import os
import subprocess
import sys
import time


def sdpa_times(rows, reps):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    out = {}
    shapes = sorted({(r["heads"], r["kv_heads"], r["batch"], r["context"]) for r in rows})
    for heads, kv_heads, batch, ctx in shapes:
        torch.manual_seed(0)
        q = torch.randn(batch, heads, 1, 128, device="cuda", dtype=torch.float16)
        k = torch.randn(batch, kv_heads, ctx, 128, device="cuda", dtype=torch.float16)
        v = torch.randn_like(k)
        backend = None
        for name, b in (("flash", SDPBackend.FLASH_ATTENTION),
                        ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                        ("math", SDPBackend.MATH)):
            try:
                with sdpa_kernel(b):
                    F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                torch.cuda.synchronize()
                backend = (name, b)
                break
            except RuntimeError:
                continue
        name, b = backend
        start = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        end = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        with sdpa_kernel(b):
            for _ in range(3):
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            torch.cuda.synchronize()
            for i in range(reps):
                start[i].record()
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                end[i].record()
        torch.cuda.synchronize()
        t = sorted(s.elapsed_time(e) * 1000.0 for s, e in zip(start, end))
        # The same call captured into a CUDA graph and replayed (torch.cuda.CUDAGraph), as the
        # S4 KV kernels' "us_graph": without the host's launch overhead.
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with sdpa_kernel(b):
            with torch.cuda.stream(side):
                for _ in range(3):
                    F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            torch.cuda.current_stream().wait_stream(side)
            with torch.cuda.graph(graph):
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
        tg = []
        for i in range(reps):
            start[i].record()
            graph.replay()
            end[i].record()
            end[i].synchronize()
            tg.append(start[i].elapsed_time(end[i]) * 1000.0)
        tg.sort()
        out[(heads, kv_heads, batch, ctx)] = (t[len(t) // 2], name, tg[len(tg) // 2])
        del graph
        del q, k, v
        torch.cuda.empty_cache()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="build/bench/cuda_attention_bench")
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="a small grid")
    ap.add_argument("extra", nargs="*", help="arguments for cuda_attention_bench")
    a = ap.parse_args()
    cmd = [a.bin, "--reps", str(a.reps)] + a.extra
    if a.quick:
        cmd += ["--batches", "1,16,64", "--contexts", "1024,8192,32768"]
    t0 = time.time()
    res = json.loads(subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout)
    sdpa = sdpa_times(res["rows"], a.reps)
    for r in res["rows"]:
        us, name, us_graph = sdpa[(r["heads"], r["kv_heads"], r["batch"], r["context"])]
        r["sdpa_fp16_us"] = round(us, 2)
        r["sdpa_fp16_graph_us"] = round(us_graph, 2)
        r["sdpa_backend"] = name
        r["speedup_vs_sdpa"] = round(us / r["us"], 3)
        if r.get("us_graph", 0) > 0:  # both replayed from CUDA graphs
            r["speedup_graph_vs_sdpa_graph"] = round(us_graph / r["us_graph"], 3)
        if r.get("us_fused", 0) > 0:  # --fused-merge
            r["speedup_fused_vs_sdpa"] = round(us / r["us_fused"], 3)
    commit = os.environ.get("S4KV_COMMIT", "")
    if not commit:
        try:
            commit = subprocess.run(["git", "describe", "--always", "--dirty"], check=True,
                                    stdout=subprocess.PIPE, text=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = "unknown"
    res["command"] = " ".join(["python3", "bench/attention_bench.py"] + sys.argv[1:])
    res["commit"] = commit
    res["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    res["seconds"] = round(time.time() - t0, 1)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"copy bandwidth {res['copy_gbps']:.0f} GB/s ({res['gpu']})"
          + (f"; int4_kivi pool blocks by {res['int4_copy']}" if "int4_copy" in res else ""))
    if res.get("resident_bytes", 0) > 0:  # cuda_attention_bench --resident-bytes
        print(f"resident: the block tables walk over the first {res['resident_bytes']} bytes of "
              "each pool, which stay in L2: %copy is the kernels' rate against the copy "
              "bandwidth of the device memory, x sdpa against SDPA reading device memory")
    for r in res["rows"]:
        if r.get("check_rel_l2", -1) >= 0:
            print(f"check {r['format']} {r['heads']}/{r['kv_heads']}: decode kernels vs the "
                  f"reference kernel, max relative L2 {r['check_rel_l2']:.3g}"
                  + (f", fused merge {r['check_fused_rel_l2']:.3g}"
                     if r.get("check_fused_rel_l2", -1) >= 0 else ""))
    fused = any("us_fused" in r for r in res["rows"])
    print("eager: launched one by one from the host; graph: replayed from a CUDA graph "
          "(S4 KV's kernels and SDPA alike)")
    print(f"{'format':6} {'heads':6} {'B':>4} {'ctx':>7} {'us':>9} {'%copy':>6} {'sdpa us':>9} "
          f"{'x sdpa':>7} {'graph us':>9} {'%copy':>6} {'sdpa g us':>9} {'x sdpa':>7}"
          + (f" {'fused us':>9} {'x sdpa':>7}" if fused else ""))
    for r in res["rows"]:
        print(f"{r['format']:6} {r['heads']:2d}/{r['kv_heads']:<3d} {r['batch']:4d} "
              f"{r['context']:7d} {r['us']:9.1f} {r['pct_copy']:6.1f} {r['sdpa_fp16_us']:9.1f} "
              f"{r['speedup_vs_sdpa']:7.2f} {r.get('us_graph', 0):9.1f} "
              f"{r.get('pct_copy_graph', 0):6.1f} {r['sdpa_fp16_graph_us']:9.1f} "
              f"{r.get('speedup_graph_vs_sdpa_graph', 0):7.2f}"
              + (f" {r.get('us_fused', 0):9.1f} {r.get('speedup_fused_vs_sdpa', 0):7.2f}" if fused else ""))


if __name__ == "__main__":
    main()

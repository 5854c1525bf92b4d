#!/usr/bin/env python3
"""Serving benchmark of `s4kv serve`, in the manner of `vllm bench serve`: streaming
completions with fixed input and output lengths (prompt token ids, ignore_eos), sent by N
concurrent clients, at each concurrency level given. Per level it reports request and token
throughput, time to first token (TTFT), time per output token after the first (TPOT),
inter-token latency (ITL) between stream chunks, end-to-end latency, and the peak
vllm:kv_cache_usage_perc and vllm:num_requests_running seen on /metrics.

It starts the server itself (--serve "s4kv serve ARGS", on a free port, stopped with SIGTERM at
the end) or uses a running one (--base-url). Standard library only. Prints a table; --json
writes the figures (then stamp them with bench/stamp.py before they go into bench/results/).

  python3 bench/serve_bench.py --serve "build/src/cli/s4kv serve models/s4kv-tiny \\
      --kv-cache-memory 256MiB" --concurrency 1,4,16 --input-len 256 --output-len 64 \\
      --num-prompts 32 --json /tmp/serve.json
"""
import argparse
import http.client
import json
import random
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    def __init__(self, base_url, api_key):
        u = urllib.parse.urlparse(base_url)
        self.host, self.port = u.hostname, u.port or 80
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def get(self, path, timeout=10):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request("GET", path, headers=self.headers)
            r = conn.getresponse()
            return r.status, r.read()
        finally:
            conn.close()

    def stream_completion(self, body, timeout=600):
        """One streaming request; returns (chunk arrival times, usage, error) with times taken
        from just before the request is sent."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        t0 = time.perf_counter()
        arrivals, usage = [], None
        try:
            conn.request("POST", "/v1/completions", body=json.dumps(body), headers=self.headers)
            r = conn.getresponse()
            if r.status != 200:
                return t0, [], None, f"HTTP {r.status}: {r.read()[:200]!r}"
            while True:
                line = r.readline()
                if not line:
                    return t0, arrivals, usage, "stream ended without [DONE]"
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:].strip()
                if payload == b"[DONE]":
                    return t0, arrivals, usage, None
                event = json.loads(payload)
                if "error" in event:
                    return t0, arrivals, usage, f"error event: {event['error']}"
                if event.get("usage"):
                    usage = event["usage"]
                if any(c.get("text") for c in event.get("choices", [])):
                    arrivals.append(time.perf_counter())
        except OSError as e:
            return t0, arrivals, usage, repr(e)
        finally:
            conn.close()


def wait_healthy(proc, log_path, probe, timeout_s=300):
    """Waits until probe() (a /health request) is true; exits with the server's log tail when
    the server process (if this program started it) dies or the timeout passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc and proc.poll() is not None:
            with open(log_path, errors="replace") as f:
                sys.exit(f"the server exited with {proc.returncode}:\n{f.read()[-2000:]}")
        try:
            if probe():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            sys.exit(f"the server did not become healthy within {timeout_s} s")
        time.sleep(0.2)


def metric(text, name):
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(None, 1)[-1])
            found = True
    return total if found else None


def pct(values, q):
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def run_level(client, model, prompts, output_len, concurrency):
    results = [None] * len(prompts)
    next_index = [0]
    lock = threading.Lock()
    peaks = {"running": 0.0, "kv_usage": 0.0}
    stop_sampling = threading.Event()

    def sampler():
        while not stop_sampling.is_set():
            try:
                status, text = client.get("/metrics", timeout=5)
                if status == 200:
                    text = text.decode()
                    peaks["running"] = max(peaks["running"],
                                           metric(text, "vllm:num_requests_running") or 0.0)
                    peaks["kv_usage"] = max(peaks["kv_usage"],
                                            metric(text, "vllm:kv_cache_usage_perc") or 0.0)
            except OSError:
                pass
            stop_sampling.wait(0.05)

    def worker():
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(prompts):
                return
            body = {"model": model, "prompt": prompts[i], "max_tokens": output_len,
                    "min_tokens": output_len, "ignore_eos": True, "temperature": 0,
                    "stream": True, "stream_options": {"include_usage": True}}
            results[i] = client.stream_completion(body)

    sampling = threading.Thread(target=sampler, daemon=True)
    sampling.start()
    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    duration = time.perf_counter() - start
    stop_sampling.set()
    sampling.join()

    errors = [r[3] for r in results if r[3]]
    ok = [r for r in results if not r[3]]
    ttft = [(a[0] - t0) * 1000 for t0, a, _, _ in ok if a]
    e2e = [(a[-1] - t0) * 1000 for t0, a, _, _ in ok if a]
    itl, tpot = [], []
    out_tokens = in_tokens = 0
    for t0, a, usage, _ in ok:
        itl += [(y - x) * 1000 for x, y in zip(a, a[1:])]
        n = usage["completion_tokens"] if usage else len(a)
        out_tokens += n
        in_tokens += usage["prompt_tokens"] if usage else 0
        if n > 1 and a:
            tpot.append((a[-1] - a[0]) * 1000 / (n - 1))
    return {
        "concurrency": concurrency,
        "num_requests": len(prompts),
        "failed": len(errors),
        "first_errors": errors[:3],
        "duration_s": duration,
        "request_throughput_per_s": len(ok) / duration,
        "output_tokens_per_s": out_tokens / duration,
        "total_tokens_per_s": (in_tokens + out_tokens) / duration,
        "ttft_ms": {"mean": statistics.fmean(ttft) if ttft else None, "p50": pct(ttft, 50),
                    "p99": pct(ttft, 99)},
        "tpot_ms": {"mean": statistics.fmean(tpot) if tpot else None, "p50": pct(tpot, 50),
                    "p99": pct(tpot, 99)},
        "itl_ms": {"p50": pct(itl, 50), "p99": pct(itl, 99)},
        "e2e_ms": {"p50": pct(e2e, 50), "p99": pct(e2e, 99)},
        "peak_num_requests_running": peaks["running"],
        "peak_kv_cache_usage_perc": peaks["kv_usage"],
    }


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--serve", help='the server command, e.g. "build/src/cli/s4kv serve '
                                       'models/s4kv-tiny" (--host/--port are added)')
    where.add_argument("--base-url", help="a running server, e.g. http://127.0.0.1:8000")
    ap.add_argument("--model", help="served name (default: the first of /v1/models)")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--concurrency", default="1,4,16", help="comma-separated levels")
    ap.add_argument("--num-prompts", type=int, default=32, help="requests per level")
    ap.add_argument("--input-len", type=int, default=256, help="prompt tokens per request")
    ap.add_argument("--output-len", type=int, default=64, help="generated tokens per request")
    ap.add_argument("--vocab-limit", type=int, default=8000,
                    help="prompt ids are drawn from [0, this): keep it below the special ids")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args()

    proc = None
    base_url = args.base_url
    if args.serve:
        port = free_port()
        cmd = shlex.split(args.serve) + ["--host", "127.0.0.1", "--port", str(port)]
        # The server's log goes to a file: a pipe nobody reads would fill and stall it.
        log = tempfile.NamedTemporaryFile(prefix="serve_bench_", suffix=".log", delete=False)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        base_url = f"http://127.0.0.1:{port}"
    client = Client(base_url, args.api_key)
    try:
        wait_healthy(proc, log.name if proc else None,
                     lambda: client.get("/health", timeout=2)[0] == 200)
        model = args.model or json.loads(client.get("/v1/models")[1])["data"][0]["id"]
        rng = random.Random(args.seed)
        levels = [int(c) for c in args.concurrency.split(",")]
        rows = []
        # One short warm-up request, not counted.
        client.stream_completion({"model": model, "prompt": [1, 2, 3], "max_tokens": 2,
                                  "stream": True})
        for c in levels:
            # Distinct random prompts per level, so the prefix cache does not help.
            prompts = [[rng.randrange(args.vocab_limit) for _ in range(args.input_len)]
                       for _ in range(args.num_prompts)]
            rows.append(run_level(client, model, prompts, args.output_len, c))
            r = rows[-1]
            print(f"concurrency {c:>3}: {r['request_throughput_per_s']:.2f} req/s, "
                  f"{r['output_tokens_per_s']:.1f} output tok/s, TTFT p50 "
                  f"{fmt(r['ttft_ms']['p50'])} ms p99 {fmt(r['ttft_ms']['p99'])} ms, TPOT mean "
                  f"{fmt(r['tpot_ms']['mean'])} ms, ITL p99 {fmt(r['itl_ms']['p99'])} ms, "
                  f"peak running {r['peak_num_requests_running']:.0f}, peak KV "
                  f"{100 * r['peak_kv_cache_usage_perc']:.1f}%, failed {r['failed']}",
                  flush=True)
    finally:
        if proc and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    result = {"benchmark": "serve_bench", "server": args.serve or base_url, "model": model,
              "input_len": args.input_len, "output_len": args.output_len,
              "num_prompts_per_level": args.num_prompts, "seed": args.seed, "levels": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    if any(r["failed"] for r in rows):
        sys.exit("some requests failed: " + "; ".join(e for r in rows for e in r["first_errors"]))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Soak test of `s4kv serve`: K concurrent clients (default 64) send requests back to back for
D minutes (default 30) with mixed parameters (chat or completions, streamed or not, temperature,
top_p, seed, stop, logprobs, n, max_tokens, ignore_eos varied) and about 10 % of them cut by the
client on purpose (a stream after a few chunks, a non-streamed request while it is generating,
with a FIN or a reset). It records requests started, completed and cut, errors by HTTP status
(every 5xx or connection failure is an error; a 4xx is counted apart, as the requests are all
valid), the server's RSS at start, end and each minute (/proc/<pid>/status), /health polled
every second (failures, worst latency), and whether vllm:num_requests_running and
vllm:kv_cache_usage_perc are back to 0 at the end. Exit code 1 when any of that fails.

It starts the server itself, as bench/serve_bench.py does (--serve, on a free port, log to a
file, SIGTERM at the end: the exit code is recorded), and writes JSON stamped with the command
and commit (bench/stamp.py) to bench/results/ (--json to choose the file). Standard library.

  python3 bench/soak.py --minutes 30 --concurrency 64
  python3 bench/soak.py --serve "build/src/cli/s4kv serve models/s4kv-tiny" --minutes 2
"""
import argparse
import http.client
import json
import os
import random
import shlex
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from serve_bench import metric, wait_healthy

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SERVE = ("build/src/cli/s4kv serve models/s4kv-tiny --max-model-len 1024 "
                 "--kv-cache-memory 256MiB --disable-log-requests")
WORDS = ("the river castle market harbor bridge library garden tower old city story night "
         "morning people walked long road water stone light across under above king queen "
         "child friend ship sea forest song").split()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid, field="VmRSS"):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {"started": 0, "completed": 0, "cut_by_client": 0, "errors": 0,
                       "unexpected_4xx": 0}
        self.by_status = {}
        self.by_kind = {"chat": 0, "completions": 0, "stream": 0, "non_stream": 0}
        self.first_errors = []

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] += n

    def error(self, status, what):
        with self.lock:
            self.by_status[str(status)] = self.by_status.get(str(status), 0) + 1
            if isinstance(status, int) and 400 <= status < 500:
                self.counts["unexpected_4xx"] += 1
            else:
                self.counts["errors"] += 1
            if len(self.first_errors) < 20:
                self.first_errors.append(f"{status}: {what[:300]}")


def make_request(rng, model):
    """A random valid request: (path, body, stream)."""
    chat = rng.random() < 0.5
    stream = rng.random() < 0.5
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 120)))
    body = {"model": model, "stream": stream, "max_tokens": rng.randint(1, 96)}
    body["temperature"] = rng.choice([0.0, 0.0, 0.7, 1.0, 1.3])
    if rng.random() < 0.5:
        body["top_p"] = rng.choice([1.0, 0.9, 0.5])
    if rng.random() < 0.5:
        body["seed"] = rng.randrange(1 << 30)
    if rng.random() < 0.3:
        body["stop"] = rng.choice(["\n", ["the", "."], "river"])
    if body["temperature"] > 0 and rng.random() < 0.3:  # n > 1 needs sampling (as vLLM)
        body["n"] = rng.choice([2, 3])
    if rng.random() < 0.2:
        body["ignore_eos"] = True
    if stream and rng.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    if chat:
        body["messages"] = [{"role": "user", "content": words}]
        if rng.random() < 0.3:
            body["messages"].insert(0, {"role": "system", "content": "Answer briefly."})
        if rng.random() < 0.3:
            body["logprobs"] = True
            body["top_logprobs"] = rng.randint(0, 5)
        return "/v1/chat/completions", body, stream
    r = rng.random()
    if r < 0.6:
        body["prompt"] = words
    elif r < 0.8:
        body["prompt"] = [rng.randrange(8000) for _ in range(rng.randint(2, 200))]
    else:
        body["prompt"] = [words, " ".join(reversed(words.split()))]
    if rng.random() < 0.3:
        body["logprobs"] = rng.randint(0, 5)
    elif rng.random() < 0.1:  # echo with logprobs needs prompt logprobs: not supported
        body["echo"] = True
    return "/v1/completions", body, stream


def cut(conn, rng):
    """Closes the connection from the client's side: a FIN or (half the time) a reset."""
    sock = conn.sock
    if sock is not None and rng.random() < 0.5:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    conn.close()


def one_request(host, port, headers, rng, model, disconnect_rate, stats):
    path, body, stream = make_request(rng, model)
    with stats.lock:
        stats.by_kind["chat" if "messages" in body else "completions"] += 1
        stats.by_kind["stream" if stream else "non_stream"] += 1
    cut_it = rng.random() < disconnect_rate
    stats.add("started")
    conn = http.client.HTTPConnection(host, port, timeout=300)
    try:
        conn.request("POST", path, body=json.dumps(body), headers=headers)
        if cut_it and not stream:
            time.sleep(rng.uniform(0.0, 0.5))  # while it waits or generates
            cut(conn, rng)
            stats.add("cut_by_client")
            return
        resp = conn.getresponse()
        if resp.status != 200:
            stats.error(resp.status, resp.read().decode(errors="replace"))
            return
        if not stream:
            data = json.loads(resp.read())
            if not data.get("choices"):
                stats.error("bad_body", json.dumps(data))
                return
            stats.add("completed")
            return
        cut_after = rng.randint(1, 5) if cut_it else None
        chunks = 0
        while True:
            line = resp.readline()
            if not line:
                stats.error("stream_ended_without_done", f"after {chunks} chunks")
                return
            if not line.startswith(b"data: "):
                continue
            payload = line[6:].strip()
            if payload == b"[DONE]":
                stats.add("completed")
                return
            event = json.loads(payload)
            if "error" in event:
                stats.error("stream_error_event", json.dumps(event))
                return
            chunks += 1
            if cut_after is not None and chunks >= cut_after:
                cut(conn, rng)
                stats.add("cut_by_client")
                return
    except (OSError, http.client.HTTPException, ValueError) as e:
        stats.error("connection", repr(e))
    finally:
        conn.close()


def poll_health(host, port, stop, health):
    while not stop.is_set():
        t0 = time.perf_counter()
        ok = False
        try:
            conn = http.client.HTTPConnection(host, port, timeout=10)
            conn.request("GET", "/health")
            ok = conn.getresponse().status == 200
            conn.close()
        except (OSError, http.client.HTTPException):
            pass
        dt = time.perf_counter() - t0
        health["polls"] += 1
        health["failures"] += not ok
        health["worst_latency_s"] = max(health["worst_latency_s"], dt)
        stop.wait(max(0.0, 1.0 - dt))


def get(host, port, path, headers, timeout=10):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", default=DEFAULT_SERVE,
                    help="the server command (--host/--port/--api-key are added)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--disconnect-rate", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None,
                    help="output (default bench/results/soak_<minutes>min_c<K>.json)")
    args = ap.parse_args()
    out = args.json or os.path.join(
        HERE, "results", f"soak_{args.minutes:g}min_c{args.concurrency}.json")

    host, port = "127.0.0.1", free_port()
    api_key = "soak-" + os.urandom(8).hex()
    cmd = shlex.split(args.serve) + ["--host", host, "--port", str(port), "--api-key", api_key]
    log = tempfile.NamedTemporaryFile(prefix="soak_", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"}
    stats = Stats()
    health = {"polls": 0, "failures": 0, "worst_latency_s": 0.0}
    rss_series = []
    exit_code = None
    try:
        wait_healthy(proc, log.name, lambda: get(host, port, "/health", {}, timeout=2)[0] == 200)
        model = json.loads(get(host, port, "/v1/models", headers)[1])["data"][0]["id"]
        rss_start = rss_kib(proc.pid)

        stop_health = threading.Event()
        poller = threading.Thread(target=poll_health, args=(host, port, stop_health, health))
        poller.start()
        t_start = time.monotonic()
        end_at = t_start + 60 * args.minutes

        def worker(i):
            rng = random.Random(args.seed * 100003 + i)
            while time.monotonic() < end_at:
                one_request(host, port, headers, rng, model, args.disconnect_rate, stats)

        workers = [threading.Thread(target=worker, args=(i,)) for i in range(args.concurrency)]
        for w in workers:
            w.start()
        next_report = t_start + 60
        while any(w.is_alive() for w in workers):
            time.sleep(1)
            if time.monotonic() >= next_report:
                next_report += 60
                rss_series.append({"minute": round((time.monotonic() - t_start) / 60, 1),
                                   "rss_mib": round((rss_kib(proc.pid) or 0) / 1024, 1)})
                with stats.lock:
                    c = dict(stats.counts)
                print(f"[{rss_series[-1]['minute']:5.1f} min] started {c['started']} completed "
                      f"{c['completed']} cut {c['cut_by_client']} errors {c['errors']} "
                      f"4xx {c['unexpected_4xx']} rss {rss_series[-1]['rss_mib']} MiB, health "
                      f"failures {health['failures']}, worst {health['worst_latency_s']:.3f} s",
                      flush=True)
        for w in workers:
            w.join()
        ran_s = time.monotonic() - t_start

        # Everything the clients left must drain: nothing running or waiting, KV cache empty.
        settle_start = time.monotonic()
        running = waiting = kv = None
        while time.monotonic() - settle_start < 60:
            status, text = get(host, port, "/metrics", headers)
            text = text.decode()
            running = metric(text, "vllm:num_requests_running")
            waiting = metric(text, "vllm:num_requests_waiting")
            kv = metric(text, "vllm:kv_cache_usage_perc")
            if status == 200 and (running, waiting, kv) == (0.0, 0.0, 0.0):
                break
            time.sleep(0.2)
        settle_s = time.monotonic() - settle_start
        stop_health.set()
        poller.join()
        rss_end = rss_kib(proc.pid)
        rss_peak = rss_kib(proc.pid, "VmHWM")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                exit_code = proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                proc.kill()
                exit_code = "killed after 90 s"
        else:
            exit_code = proc.returncode

    c = stats.counts
    result = {
        "benchmark": "soak", "server": " ".join(cmd[:-2] + ["--api-key", "<random>"]),
        "model": model, "concurrency": args.concurrency, "minutes": args.minutes,
        "ran_s": round(ran_s, 1), "disconnect_rate": args.disconnect_rate, "seed": args.seed,
        "requests": {"started": c["started"], "completed": c["completed"],
                     "cut_by_client": c["cut_by_client"], "errors": c["errors"],
                     "unexpected_4xx": c["unexpected_4xx"],
                     "unfinished": c["started"] - c["completed"] - c["cut_by_client"]
                     - c["errors"] - c["unexpected_4xx"]},
        "mix": stats.by_kind, "errors_by_status": stats.by_status,
        "first_errors": stats.first_errors,
        "rss_mib": {"start": round(rss_start / 1024, 1), "end": round(rss_end / 1024, 1),
                    "peak": round(rss_peak / 1024, 1) if rss_peak else None,
                    "per_minute": rss_series},
        "end_state": {"num_requests_running": running, "num_requests_waiting": waiting,
                      "kv_cache_usage_perc": kv, "settled_in_s": round(settle_s, 2)},
        "health": {"polls": health["polls"], "failures": health["failures"],
                   "worst_latency_s": round(health["worst_latency_s"], 4),
                   "stayed_200": health["failures"] == 0},
        "server_exit_code": exit_code, "server_log": log.name,
    }
    ok = (c["errors"] == 0 and c["unexpected_4xx"] == 0 and health["failures"] == 0
          and (running, waiting, kv) == (0.0, 0.0, 0.0) and exit_code == 0)
    result["passed"] = ok
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    subprocess.run([sys.executable, os.path.join(HERE, "stamp.py"), out, "--command",
                    " ".join(shlex.quote(a) for a in ["python3", "bench/soak.py"] + sys.argv[1:])],
                   check=False)
    print(json.dumps({k: result[k] for k in ("requests", "errors_by_status", "rss_mib",
                                             "end_state", "health", "server_exit_code")},
                     indent=1))
    print(f"written: {out}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

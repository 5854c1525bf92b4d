#!/usr/bin/env python3
"""S4 KV's CPU backend against llama.cpp on the same model, machine and threads.

Sets up llama.cpp first (setup_llamacpp.py: pinned source, CPU build, bf16 GGUF of the model;
cached in .work/). Then, before any timing, two checks: both tokenize a stretch of the held-out
text to the same ids, and both continue a few prompts greedily to the same tokens (S4 KV through
`s4kv serve` with logprobs, so a divergence can be told apart from a near-tie). Then --rounds
interleaved rounds (the order of the two engines alternates) of, per thread count and KV-cache
pair (S4 KV 16bit vs llama.cpp f16, int4_kivi vs q4_0):
  - prompt: 512 tokens of one sequence, tokens/s;
  - decode: 1 and 8 sequences at context 512 and 2048, generated tokens/s.
S4 KV's figures come from build/bench/cpu_forward_bench (decode: median of 32 steps), llama.cpp's
from llama-bench (prompt; decode of 1 sequence, -n 32 after a -d depth) and llama-batched-bench
(8 sequences, -ntg 32). llama.cpp runs with flash attention on for both pairs (its quantized V
cache needs it). Writes medians and min-max over rounds to JSON (stamped by bench/stamp.py) and
prints a table with the ratios S4 KV / llama.cpp.

  python3 bench/cpu_vs_llamacpp/run.py [--rounds 5] [--threads 1,2] [--pairs 16bit,int4_kivi]
"""
import argparse
import json
import lzma
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import setup_llamacpp  # noqa: E402

PAIRS = {"16bit": "f16", "int4_kivi": "q4_0"}  # S4 KV KV cache -> llama.cpp's -ctk/-ctv
CONTEXTS = (512, 2048)
PROMPT_TOKENS = 512
DECODE_TOKENS = 32  # cpu_forward_bench's decode steps
FLASH_ATTN = "on"
PROMPTS = ["The history of the city", "Once upon a time, there was a",
           "The most important thing to remember about"]


def rel(path):
    return os.path.relpath(path, ROOT)


def sh(cmd):
    return " ".join(shlex.quote(c) for c in cmd)


def run_out(cmd, stdin=None):
    r = subprocess.run(cmd, input=stdin, capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {sh(cmd)}\n{r.stderr[-3000:]}")
    return r.stdout


# ---- checks before timing ----

def tokenization_check(args, env, num_chars=20000):
    """Ids of S4 KV's tokenizer and llama.cpp's for the same text; equal or the bench stops."""
    with lzma.open(os.path.join(ROOT, "bench/data/heldout.txt.xz"), "rt") as f:
        text = f.read(num_chars)
    ours = json.loads(run_out([args.s4kv, "tokenize", "--model", args.model], json.dumps(text) + "\n"))
    theirs = json.loads(run_out([os.path.join(env["bin"], "llama-tokenize"), "-m", env["gguf"],
                                 "--stdin", "--ids", "--no-escape", "--log-disable"], text))
    same = ours == theirs
    print(f"tokenization: {len(ours)} S4 KV ids, {len(theirs)} llama.cpp ids for {num_chars} "
          f"characters of bench/data/heldout.txt.xz: {'identical' if same else 'DIFFERENT'}")
    if not same:
        sys.exit("the GGUF tokenizer does not match S4 KV's; no figures reported")
    return {"text": "bench/data/heldout.txt.xz", "num_chars": num_chars, "num_tokens": len(ours),
            "identical": same}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def s4kv_greedy(args, max_tokens):
    """[(tokens, top-2 logprobs per step, finish_reason)] per prompt, from `s4kv serve`."""
    port = free_port()
    log = open(os.path.join(setup_llamacpp.WORK, "s4kv_serve.log"), "w")
    proc = subprocess.Popen([args.s4kv, "serve", args.model, "--port", str(port), "--device", "cpu",
                             "--kv-cache-dtype", "auto"], stdout=log, stderr=subprocess.STDOUT,
                            cwd=ROOT)
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None:
                    sys.exit(f"s4kv serve exited; see {rel(log.name)}")
                time.sleep(0.2)
        out = []
        for prompt in PROMPTS:
            r = post(port, "/v1/completions", {"model": args.model, "prompt": prompt, "temperature": 0,
                                               "max_tokens": max_tokens, "logprobs": 2})
            c = r["choices"][0]
            out.append((c["logprobs"]["tokens"], c["logprobs"]["top_logprobs"], c["finish_reason"]))
        return out
    finally:
        proc.terminate()
        proc.wait()
        log.close()


def agreement(prompt, tokens, tops, theirs):
    """How many of S4 KV's tokens llama.cpp's text reproduces in order; at the first
    divergence, S4 KV's margin between its top two tokens (a near-tie when small)."""
    text, n = "", 0
    for tok in tokens:
        if not theirs.startswith(text + tok):
            break
        text += tok
        n += 1
    row = {"prompt": prompt, "num_tokens": len(tokens), "num_agreeing": n}
    if n < len(tokens):
        ranked = sorted(tops[n].items(), key=lambda kv: -kv[1])
        row["divergence"] = {
            "index": n, "s4kv_token": tokens[n], "s4kv_top2": ranked,
            "s4kv_margin_nats": ranked[0][1] - ranked[1][1] if len(ranked) > 1 else None,
            "llama_cpp_continues": theirs[len(text):len(text) + 40],
            "llama_cpp_took_s4kv_runner_up": len(ranked) > 1 and theirs[len(text):].startswith(ranked[1][0])}
    return row


def greedy_check(args, env):
    rows = []
    for prompt, (tokens, tops, finish) in zip(PROMPTS, s4kv_greedy(args, args.greedy_tokens)):
        out = run_out([os.path.join(env["bin"], "llama-simple"), "-m", env["gguf"], "-n",
                       str(args.greedy_tokens), prompt])
        if not out.startswith(prompt):
            sys.exit(f"llama-simple did not echo the prompt first: {out[:80]!r}")
        theirs = out[len(prompt):].removesuffix("\n")
        row = agreement(prompt, tokens, tops, theirs)
        row["s4kv_finish_reason"] = finish
        rows.append(row)
        msg = f"greedy: {row['num_agreeing']}/{row['num_tokens']} tokens agree for {prompt!r}"
        if "divergence" in row:
            d = row["divergence"]
            margin = d["s4kv_margin_nats"]
            msg += (f"; diverges at token {d['index']}: S4 KV {d['s4kv_token']!r}, llama.cpp "
                    f"{d['llama_cpp_continues'][:16]!r}; S4 KV's top-2 margin "
                    + (f"{margin:.4f} nats" if margin is not None else "unknown")
                    + (" (near-tie)" if margin is not None and margin < args.near_tie else " (NOT a near-tie)"))
        print(msg)
    agree = sum(r["num_agreeing"] for r in rows)
    total = sum(r["num_tokens"] for r in rows)
    near_ties_only = all(r["divergence"]["s4kv_margin_nats"] is not None
                         and r["divergence"]["s4kv_margin_nats"] < args.near_tie
                         for r in rows if "divergence" in r)
    diverged = sum(1 for r in rows if "divergence" in r)
    print(f"greedy: {agree}/{total} tokens agree; " + (
        "no divergence" if not diverged else
        f"{diverged} divergence(s), all after near-ties (< {args.near_tie} nats): {near_ties_only}"))
    return {"s4kv_kv_cache": "16bit", "llama_cpp_kv_cache": "f16 (llama-simple's default context)",
            "max_tokens": args.greedy_tokens, "num_agreeing": agree, "num_tokens": total,
            "near_tie_nats": args.near_tie, "divergences_only_after_near_ties": near_ties_only,
            "prompts": rows}


# ---- one round's measurements ----

def s4kv_cmd(args, threads, kv):
    return [args.forward_bench, "--model", args.model, "--threads", str(threads),
            "--kv-cache-dtype", kv, "--json"]


def measure_s4kv(args, threads, kv, seen_threads):
    """{(metric, batch, context): tokens/s} from one cpu_forward_bench run; records the threads
    it reports (forward pass, OpenBLAS) in seen_threads."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        run_out(s4kv_cmd(args, threads, kv) + [f.name])
        data = json.load(open(f.name))
    seen_threads[str(threads)] = {"forward": data.get("forward_threads"),
                                  "openblas": data.get("openblas_threads")}
    out = {}
    for r in data["results"]:
        if r["phase"] == "prefill" and r["tokens"] == PROMPT_TOKENS:
            out[("prompt", 1, PROMPT_TOKENS)] = r["tokens_per_s"]
        elif r["phase"] == "decode":
            out[("decode", r["batch"], r["context"])] = r["tokens_per_s"]
    return out


def llama_common(threads, ctype):
    return ["-t", str(threads), "-fa", FLASH_ATTN, "-ctk", ctype, "-ctv", ctype]


def llama_cmds(env, threads, ctype, reps):
    bench = [os.path.join(env["bin"], "llama-bench"), "-m", env["gguf"], "-o", "json", "-r", str(reps)]
    depths = ",".join(str(c) for c in CONTEXTS)
    n_ctx = 8 * (max(CONTEXTS) + DECODE_TOKENS)
    return {
        "prompt": bench + ["-p", str(PROMPT_TOKENS), "-n", "0"] + llama_common(threads, ctype),
        "decode_1": bench + ["-p", "0", "-n", str(DECODE_TOKENS), "-d", depths] + llama_common(threads, ctype),
        "decode_8": [os.path.join(env["bin"], "llama-batched-bench"), "-m", env["gguf"], "-c", str(n_ctx),
                     "-b", "2048", "-ub", "512", "-npp", depths, "-ntg", str(DECODE_TOKENS), "-npl", "8",
                     "--output-format", "jsonl"] + llama_common(threads, ctype),
    }


def measure_llama(env, threads, ctype, reps):
    cmds = llama_cmds(env, threads, ctype, reps)
    out = {}
    for t in json.loads(run_out(cmds["prompt"])):
        out[("prompt", 1, t["n_prompt"])] = statistics.median(t["samples_ts"])
    for t in json.loads(run_out(cmds["decode_1"])):
        out[("decode", 1, t["n_depth"])] = statistics.median(t["samples_ts"])
    # batched-bench logs its JSON lines among other log lines.
    r = subprocess.run(cmds["decode_8"], capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        sys.exit(f"failed: {sh(cmds['decode_8'])}\n{r.stderr[-3000:]}")
    for line in (r.stdout + r.stderr).splitlines():
        if line.startswith("{") and '"speed_tg"' in line:
            t = json.loads(line)
            out[("decode", t["pl"], t["pp"])] = t["speed_tg"]
    return out


# ---- summary ----

def cpu_flags():
    """The /proc/cpuinfo flags that decide which matmul paths either engine can take."""
    wanted = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_bf16")
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return [f for f in wanted if f in have]
    except OSError:
        pass
    return []


def spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "rounds": values}


def summarize(samples):
    rows = []
    for (threads, kv), per_engine in samples.items():
        keys = sorted(set(per_engine["s4kv"][0]) & set(per_engine["llama_cpp"][0]))
        for key in keys:
            ours = spread([r[key] for r in per_engine["s4kv"]])
            theirs = spread([r[key] for r in per_engine["llama_cpp"]])
            rows.append({"metric": key[0], "batch": key[1], "context": key[2], "threads": threads,
                         "s4kv_kv_cache": kv, "llama_cpp_kv_cache": PAIRS[kv],
                         "s4kv_tokens_per_s": ours, "llama_cpp_tokens_per_s": theirs,
                         "ratio": ours["median"] / theirs["median"]})
    order = {"prompt": 0, "decode": 1}
    rows.sort(key=lambda r: (order[r["metric"]], r["batch"], r["context"], r["threads"],
                             list(PAIRS).index(r["s4kv_kv_cache"])))
    return rows


def print_table(rows, rounds):
    print(f"\ntokens/s, median of {rounds} round(s) [min-max]; ratio = S4 KV / llama.cpp")
    print(f"{'metric':7s} {'seqs':>4s} {'ctx':>5s} {'thr':>3s} {'S4 KV kv':>10s} {'S4 KV':>22s} "
          f"{'llama kv':>8s} {'llama.cpp':>22s} {'ratio':>6s}")
    for r in rows:
        a, b = r["s4kv_tokens_per_s"], r["llama_cpp_tokens_per_s"]
        print(f"{r['metric']:7s} {r['batch']:4d} {r['context']:5d} {r['threads']:3d} "
              f"{r['s4kv_kv_cache']:>10s} {a['median']:8.0f} [{a['min']:5.0f}-{a['max']:5.0f}] "
              f"{r['llama_cpp_kv_cache']:>8s} {b['median']:8.0f} [{b['min']:5.0f}-{b['max']:5.0f}] "
              f"{r['ratio']:6.2f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median, min-max)")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--pairs", default="16bit,int4_kivi",
                    help="S4 KV KV caches (16bit vs llama.cpp f16, int4_kivi vs q4_0)")
    ap.add_argument("--llama-reps", type=int, default=3,
                    help="llama-bench repetitions per round (their median is the round's figure)")
    ap.add_argument("--model", default="models/s4kv-tiny")
    ap.add_argument("--s4kv", default="build/src/cli/s4kv")
    ap.add_argument("--forward-bench", default="build/bench/cpu_forward_bench")
    ap.add_argument("--greedy-tokens", type=int, default=64, help="tokens per prompt of the greedy check")
    ap.add_argument("--near-tie", type=float, default=0.05,
                    help="S4 KV top-2 logprob margin (nats) under which a divergence is a near-tie")
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="llama.cpp build jobs")
    ap.add_argument("--json", default=None,
                    help="output (default bench/results/cpu_vs_llamacpp_<model>.json)")
    ap.add_argument("--setup-only", action="store_true", help="build and convert, then stop")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    pairs = args.pairs.split(",")
    if any(p not in PAIRS for p in pairs):
        sys.exit(f"--pairs: each of {', '.join(PAIRS)}")
    for exe in (args.s4kv, args.forward_bench):
        if not os.access(os.path.join(ROOT, exe), os.X_OK):
            sys.exit(f"{exe} is missing: build S4 KV first (cmake --build build)")
    model_name = os.path.basename(os.path.normpath(args.model))
    out_path = args.json or os.path.join(ROOT, "bench/results", f"cpu_vs_llamacpp_{model_name}.json")

    env = setup_llamacpp.setup(os.path.join(ROOT, args.model), args.jobs)
    print(f"llama.cpp {env['commit'][:9]} tools in {rel(env['bin'])}; model {rel(env['gguf'])}")
    if args.setup_only:
        return
    tokenization = tokenization_check(args, env)
    greedy = greedy_check(args, env)

    samples = {(t, kv): {"s4kv": [], "llama_cpp": []} for t in threads for kv in pairs}
    s4kv_threads = {}
    started = time.time()
    for rnd in range(args.rounds):
        for t in threads:
            for kv in pairs:
                engines = [("s4kv", lambda: measure_s4kv(args, t, kv, s4kv_threads)),
                           ("llama_cpp", lambda: measure_llama(env, t, PAIRS[kv], args.llama_reps))]
                for name, measure in engines if rnd % 2 == 0 else engines[::-1]:
                    samples[(t, kv)][name].append(measure())
        print(f"round {rnd + 1}/{args.rounds} done ({time.time() - started:.0f} s)", flush=True)
    rows = summarize(samples)
    print_table(rows, args.rounds)

    llama_example = llama_cmds(env, threads[0], PAIRS[pairs[0]], args.llama_reps)
    result = {
        "benchmark": "cpu_vs_llamacpp", "model": args.model, "rounds": args.rounds, "threads": threads,
        "hardware_threads": os.cpu_count(), "cpu_flags": cpu_flags(), "seconds": round(time.time() - started),
        "note": "ratio = S4 KV median / llama.cpp median; decode figures are generated tokens/s "
                "over all sequences; rounds interleave the engines (order alternates)",
        "s4kv": {"bench": rel(os.path.join(ROOT, args.forward_bench)), "decode_steps": DECODE_TOKENS,
                 "threads_reported": s4kv_threads,
                 "command_example": sh(s4kv_cmd(args, threads[0], pairs[0]) + ["OUT.json"])},
        "llama_cpp": {"source": f"llama-cpp-python=={setup_llamacpp.LLAMA_CPP_PYTHON} (PyPI source "
                                f"package) vendor/llama.cpp", "commit": env["commit"],
                      "cmake_flags": env["cmake_flags"], "flash_attn": FLASH_ATTN,
                      "commands_example": {k: sh([rel(c) if c.startswith(ROOT) else c for c in v])
                                           for k, v in llama_example.items()}},
        "gguf": {"file": rel(env["gguf"]), "converter": "bench/cpu_vs_llamacpp/to_gguf.py",
                 **env["gguf_info"]},
        "tokenization": tokenization, "greedy": greedy, "results": rows}
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    subprocess.run([sys.executable, os.path.join(ROOT, "bench/stamp.py"), out_path, "--command",
                    sh(["python3", "bench/cpu_vs_llamacpp/run.py"] + sys.argv[1:])], check=True, cwd=ROOT)
    print(f"wrote {rel(out_path)}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Tokenizer speed, S4 KV against Hugging Face tokenizers, side by side on one thread.

For each tokenizer: the same strings (the golden corpus, tests/golden/tokenizers/corpus.jsonl.gz,
each string one encode call), encode MB/s and decode MB/s (text bytes per second), median of
--reps runs after a warm-up. The ids of both implementations are checked equal (count and sum)
before any figure is reported. Hugging Face runs with RAYON_NUM_THREADS=1 and
TOKENIZERS_PARALLELISM=false, through encode_batch/decode_batch (no Python loop per string).

  .venv/bin/python bench/tokenizer_bench.py --bench build/bench/tokenizer_bench \\
      --out bench/results/tokenizer_cpu.json
"""
import os

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import lzma  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import tokenizers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = {
    "qwen2.5": "tests/fixtures/tokenizers/qwen2.5/tokenizer.json.xz",
    "llama3": "tests/fixtures/tokenizers/llama3/tokenizer.json.xz",
    "s4kv-tiny": "models/s4kv-tiny/tokenizer.json",
}


def median_seconds(reps, f):
    f()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def hf_figures(path, texts, reps):
    tok = Tokenizer.from_file(path)
    text_bytes = sum(len(t.encode("utf-8")) for t in texts)
    enc = []
    encode_s = median_seconds(reps, lambda: enc.__setitem__(slice(None), tok.encode_batch(texts, add_special_tokens=False)))
    ids = [e.ids for e in enc]
    dec = []
    decode_s = median_seconds(reps, lambda: dec.__setitem__(slice(None), tok.decode_batch(ids, skip_special_tokens=False)))
    decoded_bytes = sum(len(d.encode("utf-8")) for d in dec)
    return {"implementation": "huggingface tokenizers " + tokenizers.__version__,
            "num_tokens": sum(len(i) for i in ids), "id_sum": sum(sum(i) for i in ids),
            "encode_s": encode_s, "decode_s": decode_s,
            "encode_mb_s": text_bytes / encode_s / 1e6, "decode_mb_s": decoded_bytes / decode_s / 1e6}


def tokenizer_file(name, tmp):
    src = os.path.join(ROOT, SOURCES[name])
    if not src.endswith(".xz"):
        return src
    dst = os.path.join(tmp, name + ".json")
    with lzma.open(src, "rb") as fin, open(dst, "wb") as fout:
        fout.write(fin.read())
    return dst


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default=os.path.join(ROOT, "build/bench/tokenizer_bench"))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", default=None, help="write the JSON here (then stamp it)")
    args = ap.parse_args()
    with gzip.open(os.path.join(ROOT, "tests/golden/tokenizers/corpus.jsonl.gz"), "rt") as f:
        texts = [json.loads(line)["text"] for line in f]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        strings = os.path.join(tmp, "strings.jsonl")
        with open(strings, "w") as f:
            for t in texts:
                f.write(json.dumps(t) + "\n")
        for name in SOURCES:
            path = tokenizer_file(name, tmp)
            ours = json.loads(subprocess.run(
                [args.bench, "--tokenizer", path, "--input", strings, "--reps", str(args.reps)],
                check=True, capture_output=True, text=True).stdout)
            hf = hf_figures(path, texts, args.reps)
            same = ours["num_tokens"] == hf["num_tokens"] and ours["id_sum"] == hf["id_sum"]
            if not same:
                sys.exit(f"{name}: ids differ from Hugging Face; no speed figures reported")
            ours["tokenizer"] = name
            rows.append({"tokenizer": name, "ids_identical": same, "s4kv": ours, "huggingface": hf,
                         "encode_speedup": ours["encode_mb_s"] / hf["encode_mb_s"],
                         "decode_speedup": ours["decode_mb_s"] / hf["decode_mb_s"]})
            print(f"{name:10s} encode {ours['encode_mb_s']:7.1f} MB/s (HF {hf['encode_mb_s']:6.1f}, "
                  f"x{rows[-1]['encode_speedup']:.1f})   decode {ours['decode_mb_s']:7.1f} MB/s "
                  f"(HF {hf['decode_mb_s']:6.1f}, x{rows[-1]['decode_speedup']:.1f})")
    result = {"benchmark": "tokenizer", "threads": 1,
              "corpus": {"source": "tests/golden/tokenizers/corpus.jsonl.gz", "num_strings": len(texts),
                         "bytes": sum(len(t.encode("utf-8")) for t in texts)},
              "results": rows}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        subprocess.run([sys.executable, os.path.join(ROOT, "bench/stamp.py"), args.out,
                        "--command", " ".join(["bench/tokenizer_bench.py"] + sys.argv[1:])], check=True)


if __name__ == "__main__":
    main()

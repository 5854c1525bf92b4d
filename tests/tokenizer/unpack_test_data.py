#!/usr/bin/env python3
"""Unpacks the tokenizer test data into the build tree (run by CMake before the tests).

usage: unpack_test_data.py REPO_ROOT OUT_DIR
  tests/fixtures/tokenizers/<name>/tokenizer.json.xz -> OUT_DIR/<name>/tokenizer.json
  tests/golden/tokenizers/<name>.jsonl.gz            -> OUT_DIR/golden/<name>.jsonl
"""
import gzip
import lzma
import os
import shutil
import sys


def unpack(opener, src, dst):
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = dst + ".tmp"
    with opener(src, "rb") as fin, open(tmp, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    os.replace(tmp, dst)  # never leaves a half-written file behind


def main():
    root, out = sys.argv[1], sys.argv[2]
    fixtures = os.path.join(root, "tests", "fixtures", "tokenizers")
    for name in sorted(os.listdir(fixtures)):
        src = os.path.join(fixtures, name, "tokenizer.json.xz")
        if os.path.exists(src):
            unpack(lzma.open, src, os.path.join(out, name, "tokenizer.json"))
    golden = os.path.join(root, "tests", "golden", "tokenizers")
    for f in sorted(os.listdir(golden)):
        if f.endswith(".jsonl.gz"):
            unpack(gzip.open, os.path.join(golden, f), os.path.join(out, "golden", f[:-3]))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Tokenize the corpus into flat uint16 token files for tools/train_tiny_model.py.

    .venv/bin/python tools/tokenize_corpus.py [--data build/corpus] [--tokenizer models/s4kv-tiny]

Reads DATA/{train,heldout}.jsonl and writes DATA/{train,heldout}_tokens.bin: little-endian
uint16 token ids, documents in file order, each document followed by <|endoftext|> (the same
layout train_tiny_model.py builds itself when the .bin files are missing).
"""
import argparse
import json
import os

import numpy as np
from tokenizers import Tokenizer

BATCH = 512


def read_batches(path):
    batch = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            batch.append(json.loads(line)["text"])
            if len(batch) == BATCH:
                yield batch
                batch = []
    if batch:
        yield batch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="build/corpus")
    ap.add_argument("--tokenizer", default="models/s4kv-tiny")
    args = ap.parse_args()
    tok = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    assert tok.get_vocab_size() <= 65536, "ids must fit in uint16"
    eot = tok.token_to_id("<|endoftext|>")
    assert eot is not None
    for name in ("train", "heldout"):
        src = os.path.join(args.data, f"{name}.jsonl")
        dst = os.path.join(args.data, f"{name}_tokens.bin")
        ndocs = ntok = nbytes = 0
        with open(dst + ".tmp", "wb") as out:
            for batch in read_batches(src):
                encs = tok.encode_batch(batch, add_special_tokens=False)
                parts = []
                for text, enc in zip(batch, encs):
                    parts.append(np.asarray(enc.ids, dtype="<u2"))
                    parts.append(np.asarray([eot], dtype="<u2"))
                    nbytes += len(text.encode("utf-8"))
                arr = np.concatenate(parts)
                arr.tofile(out)
                ndocs += len(batch)
                ntok += len(arr)
        os.replace(dst + ".tmp", dst)
        print(f"{name:8s} {ndocs:6d} docs  {ntok:12,d} tokens (incl. {ndocs} <|endoftext|>)  "
              f"{nbytes / max(1, ntok - ndocs):.3f} bytes/token  -> {dst}", flush=True)


if __name__ == "__main__":
    main()

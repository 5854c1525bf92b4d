#!/usr/bin/env python3
"""Golden token ids for S4 KV's C++ tokenizer, from the Hugging Face `tokenizers` library.

Builds a deterministic corpus (seeded; same output on every run and machine) of strings that
stress byte-level BPE: English prose, code, Japanese, Chinese, Korean, emoji with ZWJ and skin
tones, combining marks, numbers of many lengths, whitespace runs, tabs, CR/LF mixes,
special-token text, very long words and the empty string. Then, for each tokenizer, records the
ids Hugging Face produces, its decode of them (when it differs from the text) and its decode
with skip_special_tokens (when that differs), plus decodes of random id sequences.

Outputs (gzip JSON Lines, under tests/golden/tokenizers/):
  corpus.jsonl.gz        {"text": ...} per line
  <name>.jsonl.gz        per corpus line: {"ids": [...], "decoded"?: ..., "decoded_skip"?: ...,
                         "ids_special"?: [...]}; then {"decode_ids": [...], "decoded": ...,
                         "decoded_skip": ...} lines
  variants.json          s4kv-tiny with other tokenizer.json options (added-token lstrip,
                         rstrip, single_word, normalized; Split behaviors and invert; ByteLevel
                         with add_prefix_space and GPT-2's regex; a template with a suffix):
                         each variant's JSON patch and the ids and text of a few strings
  meta.json              generator version, tokenizers version, counts

Usage: .venv/bin/python tools/make_tokenizer_golden.py [--count 6000]
"""
import argparse
import gzip
import json
import lzma
import os
import random
import sys

import tokenizers
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "golden", "tokenizers")
SEED = 20251202
GENERATOR_VERSION = 1

TOKENIZERS = {
    "qwen2.5": "tests/fixtures/tokenizers/qwen2.5/tokenizer.json.xz",
    "qwen3": "tests/fixtures/tokenizers/qwen3/tokenizer.json.xz",
    "llama3": "tests/fixtures/tokenizers/llama3/tokenizer.json.xz",
    "s4kv-tiny": "models/s4kv-tiny/tokenizer.json",
}

# Llama-3 as later published: a TemplateProcessing post-processor adding BOS. The fixture has
# the original ByteLevel-only one; the C++ test builds the same variant in memory.
LLAMA3_BOS_POST_PROCESSOR = {
    "type": "Sequence",
    "processors": [
        {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [
                {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 1}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {
                "<|begin_of_text|>": {
                    "id": "<|begin_of_text|>", "ids": [128000], "tokens": ["<|begin_of_text|>"]
                }
            },
        },
    ],
}

WORDS = (
    "the of and to in is was for on that with as by at from his her it an are were which be this "
    "has had not but its they have one their also new first two after who been more other time "
    "world people model token server cache memory quantization attention request stream batch "
    "language English Tokyo Paris Mr Mrs Dr don't can't it's we're they've I'm you'll she'd "
    "HELLO World Über naïve café résumé façade coöperate jalapeño São Zürich Ελληνικά Москва"
).split()
CODE = [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n",
    "if __name__ == \"__main__\":\n    main()\n",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null, \"b\": true}}",
    "#include <vector>\nstd::vector<int> v{1,2,3};\r\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "    x = [i**2 for i in range(10) if i % 3 == 0]  # squares\n",
    "fn main() { println!(\"{}\", 1 + 2); }",
    "<div class=\"a\">&nbsp;&lt;tag&gt;</div>",
    "$ ls -la | grep '^d' && echo \"done\" >> log.txt\n",
    "\t\t\treturn nullptr;\n\t\t}\n\t}\n",
    "a+=1;b-=2;c*=3;d/=4;e%=5;f<<=6;g>>=7;h&&=i||j",
]
JA = ["こんにちは、世界。", "東京都は日本の首都です。", "カタカナとひらがな", "ｶﾞｷﾞｸﾞ半角",
      "か\u3099き\u3099", "吾輩は猫である。名前はまだ無い。", "ラーメン🍜を食べたい！"]
ZH = ["你好，世界！", "我们在北京。", "机器学习和自然语言处理", "繁體中文與簡體中文", "一二三四五六七八九十"]
KO = ["안녕하세요, 세계!", "한국어 텍스트입니다.", "\u1100\u1161\u11a8", "서울특별시 강남구"]
EMOJI = ["👨‍👩‍👧‍👦", "👍🏽", "👩🏾‍💻", "🇯🇵🇺🇸", "1️⃣", "❤️‍🔥", "🏳️‍🌈", "🧑🏻‍🤝‍🧑🏿", "😀😃😄", "✌🏼"]
COMBINING = ["e\u0301", "a\u0308", "o\u0302\u0323", "n\u0303", "Z\u0351\u0325\u0330",
             "\u0915\u094d\u0937", "Tie\u0302\u0301ng Vie\u0323\u0302t", "A\u030a", "\u0301start"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", " \n", "\u00a0", "\u3000", "\u2009",
          "\u2028", "\u000b", "\u000c", "\u0085", "\u200b", "\u180e", "\u2003"]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|begin_of_text|>", "<|eot_id|>",
            "<|start_header_id|>", "<think>", "</think>", "<|fim_prefix|>", "<tool_call>",
            "<|im_sta", "<|im_start|", "<|", "|>", "<|reserved_special_token_7|>"]
SCRIPTS = [(0x0041, 0x024F), (0x0370, 0x03FF), (0x0400, 0x04FF), (0x0590, 0x05FF),
           (0x0600, 0x06FF), (0x0900, 0x097F), (0x0E00, 0x0E7F), (0x3040, 0x30FF),
           (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0x2000, 0x206F), (0x2190, 0x23FF),
           (0x1F300, 0x1F64F), (0xFF00, 0xFFEF)]


def number(r):
    n = r.choice([1, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 32, 40])
    s = "".join(r.choice("0123456789") for _ in range(n))
    return r.choice(["", "-", "+", "$"]) + s + r.choice(["", "", ".5", ",000", "%", "e-3", "th"])


def prose(r):
    words = [r.choice(WORDS) for _ in range(r.randint(3, 40))]
    words[0] = words[0].capitalize()
    text = " ".join(words)
    for p in ", . ; : ! ? — ( ) \" '".split():
        if r.random() < 0.2:
            i = r.randint(0, len(text))
            text = text[:i] + p + text[i:]
    return text + r.choice([".", "!", "?", "...", ""])


def random_chars(r, n):
    out = []
    for _ in range(n):
        lo, hi = r.choice(SCRIPTS)
        out.append(chr(r.randint(lo, hi)))
    return "".join(out)


def long_word(r):
    kind = r.randrange(5)
    n = r.choice([100, 300, 1000, 3000])
    if kind == 0:
        return r.choice("aeioxz") * n
    if kind == 1:
        return "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
    if kind == 2:
        return "".join(r.choice("0123456789") for _ in range(n))
    if kind == 3:
        return "".join(r.choice("!@#$%^&*()-=+[]{};:,./<>?") for _ in range(n))
    return "".join(r.choice(ZH + JA)) * (n // 20)


def fragment(r):
    kind = r.randrange(14)
    pick = {
        0: lambda: prose(r), 1: lambda: r.choice(CODE), 2: lambda: r.choice(JA),
        3: lambda: r.choice(ZH), 4: lambda: r.choice(KO), 5: lambda: r.choice(EMOJI),
        6: lambda: r.choice(COMBINING), 7: lambda: number(r),
        8: lambda: "".join(r.choice(SPACES) for _ in range(r.randint(1, 8))),
        9: lambda: r.choice(SPECIALS), 10: lambda: random_chars(r, r.randint(1, 30)),
        11: lambda: r.choice(WORDS), 12: lambda: " " * r.randint(1, 40),
        13: lambda: r.choice(["'s", "'LL", "'Re", "'d", "'", "''", "'ve'"]),
    }
    return pick[kind]()


def make_corpus(count):
    r = random.Random(SEED)
    corpus = ["", " ", "\n", "a", "Hello world", "<|im_start|>user\nHi<|im_end|>\n",
              "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"]
    while len(corpus) < count:
        if r.random() < 0.03:
            corpus.append(long_word(r))
            continue
        parts = [fragment(r) for _ in range(r.randint(1, 8))]
        sep = r.choice(["", " ", "", "\n"])
        corpus.append(sep.join(parts))
    return corpus


def load(name):
    path = os.path.join(ROOT, TOKENIZERS[name])
    if path.endswith(".xz"):
        with lzma.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


VARIANT_TEXTS = [
    "", "Hi <mask> there\t<mask>\t<mask>\u2000", "a<mask> <mask>b <mask>, x", "cafe\u0301 and café",
    "[SEP]y[SEP] [SEP]", "split-these--words  and\tkeep - dashes", " leading space", "x",
    "Hello world, it's 2025!\n\nNew line   spaces", "<|im_start|>user\nhi<|im_end|>",
]
EXTRA_ADDED = [
    {"id": 8192, "content": "<mask>", "single_word": True, "lstrip": True, "rstrip": True,
     "normalized": False, "special": False},
    {"id": 8193, "content": "caf\u00e9", "single_word": False, "lstrip": False, "rstrip": False,
     "normalized": True, "special": False},
    {"id": 8194, "content": "[SEP]", "single_word": False, "lstrip": False, "rstrip": True,
     "normalized": False, "special": True},
]


def split_step(pattern, behavior, invert=False, literal=False):
    return {"type": "Split", "pattern": {"String" if literal else "Regex": pattern},
            "behavior": behavior, "invert": invert}


def byte_level(add_prefix_space=False, use_regex=False):
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": False,
            "use_regex": use_regex}


def variants():
    v = {"added_options": {"added_tokens_extra": EXTRA_ADDED}}
    for behavior in ["Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"]:
        for invert in (False, True):
            v[f"split_{behavior}_{invert}"] = {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                split_step("-", behavior, invert, literal=True),
                split_step(r"\s+", behavior, invert), byte_level()]}}
    v["gpt2_byte_level"] = {"pre_tokenizer": byte_level(True, True), "normalizer": None}
    v["template_suffix"] = {"post_processor": {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<|im_start|>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "<|im_end|>", "type_id": 0}}],
        "pair": [], "special_tokens": {
            "<|im_start|>": {"id": "<|im_start|>", "ids": [8190], "tokens": ["<|im_start|>"]},
            "<|im_end|>": {"id": "<|im_end|>", "ids": [8191], "tokens": ["<|im_end|>"]}}}}
    return v


def apply_patch(base, patch):
    j = json.loads(base)
    for key, value in patch.items():
        if key == "added_tokens_extra":
            j["added_tokens"] += value
        else:
            j[key] = value
    return j


def make_variants():
    base = load("s4kv-tiny")
    out = []
    for name, patch in variants().items():
        tok = Tokenizer.from_str(json.dumps(apply_patch(base, patch)))
        cases = []
        for text in VARIANT_TEXTS:
            for add in (False, True):
                ids = tok.encode(text, add_special_tokens=add).ids
                cases.append({"text": text, "add_special_tokens": add, "ids": ids,
                              "decoded": tok.decode(ids, skip_special_tokens=False),
                              "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
        out.append({"name": name, "patch": patch, "cases": cases})
    return out


def random_decode_cases(r, tok, n):
    vocab = tok.get_vocab_size(with_added_tokens=True)
    special = sorted(t for t, a in tok.get_added_tokens_decoder().items() if a.special)
    cases = []
    for _ in range(n):
        ids = [r.randrange(vocab) for _ in range(r.randint(0, 12))]
        if special and r.random() < 0.3:
            ids.insert(r.randint(0, len(ids)), r.choice(special))
        cases.append({"decode_ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                      "decoded_skip": tok.decode(ids, skip_special_tokens=True)})
    return cases


def golden_for(name, corpus):
    text = load(name)
    tok = Tokenizer.from_str(text)
    bos = None
    if name == "llama3":
        j = json.loads(text)
        j["post_processor"] = LLAMA3_BOS_POST_PROCESSOR
        bos = Tokenizer.from_str(json.dumps(j))
    lines = []
    for i, s in enumerate(corpus):
        ids = tok.encode(s, add_special_tokens=False).ids
        assert tok.encode(s, add_special_tokens=True).ids == ids  # no template in these files
        row = {"ids": ids}
        decoded = tok.decode(ids, skip_special_tokens=False)
        if decoded != s:
            row["decoded"] = decoded
        skipped = tok.decode(ids, skip_special_tokens=True)
        if skipped != decoded:
            row["decoded_skip"] = skipped
        if bos is not None and i < 500:
            row["ids_special"] = bos.encode(s, add_special_tokens=True).ids
        lines.append(row)
    lines += random_decode_cases(random.Random(SEED + len(name)), tok, 500)
    return lines


def write_jsonl_gz(path, rows):
    # mtime=0 keeps the gzip bytes identical across runs.
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        for row in rows:
            f.write((json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=6000)
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    corpus = make_corpus(args.count)
    write_jsonl_gz(os.path.join(OUT, "corpus.jsonl.gz"), [{"text": s} for s in corpus])
    meta = {"generator": "tools/make_tokenizer_golden.py", "generator_version": GENERATOR_VERSION,
            "seed": SEED, "tokenizers_version": tokenizers.__version__, "corpus_lines": len(corpus),
            "tokenizers": {}}
    for name in TOKENIZERS:
        rows = golden_for(name, corpus)
        write_jsonl_gz(os.path.join(OUT, name + ".jsonl.gz"), rows)
        meta["tokenizers"][name] = {"source": TOKENIZERS[name], "lines": len(rows)}
        print(f"{name}: {len(rows)} lines", file=sys.stderr)
    with open(os.path.join(OUT, "variants.json"), "w") as f:
        json.dump(make_variants(), f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()

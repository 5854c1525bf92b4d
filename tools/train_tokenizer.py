#!/usr/bin/env python3
"""Train the byte-level BPE tokenizer of models/s4kv-tiny (Qwen2-style, 8192 tokens).

    .venv/bin/python tools/train_tokenizer.py [--data build/corpus] [--out models/s4kv-tiny]

Input: DATA/train.jsonl (from tools/prepare_corpus.sh); DATA/heldout.jsonl is used only for the
summary (bytes per token). Writes OUT/tokenizer.json, OUT/tokenizer_config.json and
OUT/generation_config.json.

Layout (same pipeline as Qwen2's tokenizer.json):
  normalizer     NFC
  pre_tokenizer  Sequence[Split(Qwen2 regex, isolated), ByteLevel(no prefix space, no regex)]
  model          BPE, no unk token, no byte fallback, initial alphabet = the 256 ByteLevel chars
  decoder        ByteLevel;  post_processor ByteLevel
  ids 0..8188    the 256 byte tokens and 7933 learned merges
  ids 8189..8191 <|endoftext|>, <|im_start|>, <|im_end|> (special, not normalized), at the end
                 of the vocabulary like Qwen2.
Deterministic for a given corpus (the BPE trainer breaks ties by byte order).
"""
import argparse
import json
import os
import sys
import time

from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

VOCAB_SIZE = 8192
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Copied verbatim from Qwen2.5's tokenizer.json pre_tokenizer (Split pattern).
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
DEFAULT_SYSTEM = "You are a helpful assistant."

# ChatML template written for this project (jinja2; transformers renders it in a sandboxed
# environment with trim_blocks and lstrip_blocks; every tag here also trims whitespace itself).
CHAT_TEMPLATE = r"""
{%- macro render_content(content) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- elif content is mapping -%}
        {{- content.text if content.text is defined else '' -}}
    {%- elif content is iterable -%}
        {%- for part in content -%}
            {%- if part is string -%}
                {{- part -}}
            {%- elif part.type is defined and part.type == 'text' -%}
                {{- part.text -}}
            {%- endif -%}
        {%- endfor -%}
    {%- elif content is not none -%}
        {{- content -}}
    {%- endif -%}
{%- endmacro -%}
{%- if messages and messages[0].role == 'system' -%}
    {%- set system_text = render_content(messages[0].content) -%}
    {%- set conversation = messages[1:] -%}
{%- else -%}
    {%- set system_text = 'You are a helpful assistant.' -%}
    {%- set conversation = messages -%}
{%- endif -%}
{{- '<|im_start|>system\n' + system_text -}}
{%- if tools -%}
    {{- '\n\n# Tools\n\nYou can call functions to help with the request. Their signatures are listed below, one JSON object per line, inside <tools></tools>:\n<tools>' -}}
    {%- for tool in tools -%}
        {{- '\n' -}}
        {{- tool | tojson -}}
    {%- endfor -%}
    {{- '\n</tools>\n\nTo call a function, answer with a JSON object holding its name and arguments inside <tool_call></tool_call>:\n<tool_call>\n{"name": <function-name>, "arguments": <arguments-json-object>}\n</tool_call>' -}}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- for message in conversation -%}
    {%- if message.role == 'tool' -%}
        {%- if loop.first or conversation[loop.index0 - 1].role != 'tool' -%}
            {{- '<|im_start|>user' -}}
        {%- endif -%}
        {{- '\n<tool_response>\n' -}}
        {{- render_content(message.content) -}}
        {{- '\n</tool_response>' -}}
        {%- if loop.last or conversation[loop.index0 + 1].role != 'tool' -%}
            {{- '<|im_end|>\n' -}}
        {%- endif -%}
    {%- elif message.role == 'assistant' and message.tool_calls -%}
        {{- '<|im_start|>assistant' -}}
        {%- set text = render_content(message.content) -%}
        {%- if text -%}
            {{- '\n' -}}
            {{- text -}}
        {%- endif -%}
        {%- for call in message.tool_calls -%}
            {%- if call.function is defined -%}
                {%- set call = call.function -%}
            {%- endif -%}
            {{- '\n<tool_call>\n{"name": ' -}}
            {{- call.name | tojson -}}
            {{- ', "arguments": ' -}}
            {%- if call.arguments is string -%}
                {{- call.arguments -}}
            {%- elif call.arguments is defined and call.arguments is not none -%}
                {{- call.arguments | tojson -}}
            {%- else -%}
                {{- '{}' -}}
            {%- endif -%}
            {{- '}\n</tool_call>' -}}
        {%- endfor -%}
        {{- '<|im_end|>\n' -}}
    {%- else -%}
        {{- '<|im_start|>' + message.role + '\n' -}}
        {{- render_content(message.content) -}}
        {{- '<|im_end|>\n' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n' -}}
{%- endif -%}
""".strip() + "\n"


def iter_texts(path):
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)["text"]


def build_tokenizer():
    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False, fuse_unk=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                              use_regex=False)
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="build/corpus")
    ap.add_argument("--out", default="models/s4kv-tiny")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    tok = build_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(SPECIALS),
        min_frequency=2,
        show_progress=False,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    t0 = time.time()
    tok.train_from_iterator(iter_texts(os.path.join(args.data, "train.jsonl")), trainer=trainer)
    print(f"trained in {time.time() - t0:.0f}s; base vocab {tok.get_vocab_size()}")
    if tok.get_vocab_size() != VOCAB_SIZE - len(SPECIALS):
        sys.exit(f"unexpected base vocabulary size {tok.get_vocab_size()}")
    tok.add_special_tokens([AddedToken(s, single_word=False, lstrip=False, rstrip=False,
                                       normalized=False, special=True) for s in SPECIALS])
    assert tok.get_vocab_size() == VOCAB_SIZE
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    assert ids == {s: VOCAB_SIZE - len(SPECIALS) + i for i, s in enumerate(SPECIALS)}, ids
    # Every byte must be a single token.
    vocab = tok.get_vocab()
    assert all(ch in vocab for ch in pre_tokenizers.ByteLevel.alphabet())
    # Serialise, then set the fields that the Python bindings fill with other (equivalent)
    # defaults to exactly what Qwen2's tokenizer.json has.
    spec = json.loads(tok.to_str())
    spec["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                       "use_regex": False}
    spec["model"]["continuing_subword_prefix"] = ""
    spec["model"]["end_of_word_suffix"] = ""
    with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(spec, f, indent=2, ensure_ascii=False)
        f.write("\n")

    eot, im_start, im_end = (ids[s] for s in SPECIALS)
    config = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(ids[s]): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                          "single_word": False, "special": True} for s in SPECIALS},
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 4096,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")
    gen = {"eos_token_id": [im_end, eot], "pad_token_id": eot, "do_sample": False,
           "transformers_version": "5.17.0"}
    with open(os.path.join(args.out, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump(gen, f, indent=2)
        f.write("\n")

    # ---- summary
    tok = Tokenizer.from_file(os.path.join(args.out, "tokenizer.json"))
    print(f"vocab size {tok.get_vocab_size()} (with added tokens); specials {ids}")
    held = list(iter_texts(os.path.join(args.data, "heldout.jsonl")))
    nbytes = sum(len(t.encode("utf-8")) for t in held)
    ntok = sum(len(e.ids) for e in tok.encode_batch(held, add_special_tokens=False))
    print(f"heldout: {len(held)} docs, {nbytes:,} bytes, {ntok:,} tokens, "
          f"{nbytes / ntok:.3f} bytes/token")
    for s in ["Hello, world! The quick brown fox jumps over the lazy dog.",
              "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
              "The kernel's KV cache stores 4096 keys; naïve café — ünïcödé ✓ 日本語",
              "<|im_start|>user\nWhat is apt-get?<|im_end|>\n<|im_start|>assistant\n"]:
        enc = tok.encode(s, add_special_tokens=False)
        assert tok.decode(enc.ids, skip_special_tokens=False) == s
        print(f"{len(enc.ids):3d} tokens {enc.tokens}")


if __name__ == "__main__":
    main()

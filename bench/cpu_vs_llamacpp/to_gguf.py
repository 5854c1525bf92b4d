#!/usr/bin/env python3
"""Writes a Qwen2 checkpoint in the Hugging Face layout (config.json, model.safetensors,
tokenizer.json, tokenizer_config.json) as a GGUF file for llama.cpp, keeping every weight value
unchanged: 2-D tensors stay bf16 (their raw 16-bit patterns are copied), 1-D tensors (norms,
biases) are widened to f32, which is exact, because llama.cpp adds them to f32 activations.
After writing, the file is read back and every tensor compared with the checkpoint bit for bit.

Only what the bench needs: architecture qwen2, a bf16 or f32 checkpoint in one safetensors file,
a byte-level BPE tokenizer whose pre-tokenizer is Qwen2's (written as tokenizer.ggml.pre "qwen2";
the bench checks that llama.cpp then tokenizes as S4 KV does). Needs gguf and numpy only: the
safetensors file is parsed here (numpy has no bf16), no torch.

  python to_gguf.py models/s4kv-tiny OUT.gguf
"""
import argparse
import importlib.metadata
import json
import os
import sys

import gguf
import numpy as np

# Hugging Face tensor name (after "model.layers.N.") -> gguf per-block tensor kind.
BLOCK_TENSORS = {
    "input_layernorm": gguf.MODEL_TENSOR.ATTN_NORM,
    "self_attn.q_proj": gguf.MODEL_TENSOR.ATTN_Q,
    "self_attn.k_proj": gguf.MODEL_TENSOR.ATTN_K,
    "self_attn.v_proj": gguf.MODEL_TENSOR.ATTN_V,
    "self_attn.o_proj": gguf.MODEL_TENSOR.ATTN_OUT,
    "post_attention_layernorm": gguf.MODEL_TENSOR.FFN_NORM,
    "mlp.gate_proj": gguf.MODEL_TENSOR.FFN_GATE,
    "mlp.up_proj": gguf.MODEL_TENSOR.FFN_UP,
    "mlp.down_proj": gguf.MODEL_TENSOR.FFN_DOWN,
}
GLOBAL_TENSORS = {
    "model.embed_tokens": gguf.MODEL_TENSOR.TOKEN_EMBD,
    "model.norm": gguf.MODEL_TENSOR.OUTPUT_NORM,
    "lm_head": gguf.MODEL_TENSOR.OUTPUT,
}


def gguf_name(hf_name):
    """model.layers.3.mlp.up_proj.weight -> blk.3.ffn_up.weight; None when not ours."""
    stem, _, suffix = hf_name.rpartition(".")
    if stem in GLOBAL_TENSORS:
        return gguf.TENSOR_NAMES[GLOBAL_TENSORS[stem]] + "." + suffix
    parts = stem.split(".", 3)
    if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in BLOCK_TENSORS:
        return gguf.TENSOR_NAMES[BLOCK_TENSORS[parts[3]]].format(bid=int(parts[2])) + "." + suffix
    return None


def load_json(model_dir, name, required=True):
    path = os.path.join(model_dir, name)
    if not os.path.exists(path) and not required:
        return {}
    with open(path) as f:
        return json.load(f)


def first_id(value):
    return value[0] if isinstance(value, list) else value


def read_tensors(model_dir):
    """{hf name: (array, bf16?)}, straight from the file's bytes; bf16 as its uint16 patterns
    (numpy has no bf16)."""
    path = os.path.join(model_dir, "model.safetensors")
    with open(path, "rb") as f:
        header_len = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(header_len))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        kind = {"BF16": "<u2", "F32": "<f4"}.get(info["dtype"])
        if kind is None:
            sys.exit(f"{name}: dtype {info['dtype']} not supported (bf16 or f32 checkpoints only)")
        arr = np.frombuffer(data[start:end], dtype=kind).reshape(info["shape"])
        out[name] = (arr, info["dtype"] == "BF16")
    return out


def to_gguf_tensors(hf, tied):
    """[(gguf name, array, raw dtype or None)]; 2-D bf16 stays bf16, 1-D becomes f32."""
    out = []
    for name, (arr, is_bf16) in sorted(hf.items()):
        target = gguf_name(name)
        if target is None:
            sys.exit(f"{name}: no GGUF name for this tensor (qwen2 tensors only)")
        if name.startswith("lm_head.") and tied:
            continue  # llama.cpp reuses token_embd when the file has no output tensor
        if is_bf16 and arr.ndim >= 2:
            out.append((target, arr, gguf.GGMLQuantizationType.BF16))
        elif is_bf16:
            out.append((target, (arr.astype(np.uint32) << 16).view(np.float32), None))
        else:
            out.append((target, np.ascontiguousarray(arr, dtype=np.float32), None))
    return out


def add_hparams(w, config, name):
    text = config.get("text_config", config)
    w.add_name(name)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    w.add_context_length(text["max_position_embeddings"])
    w.add_embedding_length(text["hidden_size"])
    w.add_block_count(text["num_hidden_layers"])
    w.add_feed_forward_length(text["intermediate_size"])
    w.add_head_count(text["num_attention_heads"])
    w.add_head_count_kv(text.get("num_key_value_heads", text["num_attention_heads"]))
    head_dim = text.get("head_dim") or text["hidden_size"] // text["num_attention_heads"]
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
    if rope.get("rope_type", "default") != "default":
        sys.exit(f"rope_type {rope['rope_type']!r} not supported (default RoPE only)")
    w.add_rope_freq_base(float(rope.get("rope_theta", text.get("rope_theta", 10000.0))))
    w.add_layer_norm_rms_eps(float(text["rms_norm_eps"]))


def add_tokenizer(w, model_dir, config):
    tok = load_json(model_dir, "tokenizer.json")
    tok_config = load_json(model_dir, "tokenizer_config.json", required=False)
    gen_config = load_json(model_dir, "generation_config.json", required=False)
    if tok["model"]["type"] != "BPE":
        sys.exit(f"tokenizer model {tok['model']['type']} not supported (byte-level BPE only)")
    vocab_size = config.get("vocab_size", 0)
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    kinds = {i: gguf.TokenType.NORMAL for i in by_id}
    for added in tok.get("added_tokens", []):
        by_id[added["id"]] = added["content"]
        kinds[added["id"]] = gguf.TokenType.CONTROL if added["special"] else gguf.TokenType.USER_DEFINED
    num_tokens = max(vocab_size, max(by_id) + 1)
    tokens, types = [], []
    for i in range(num_tokens):
        # The embedding may have rows no tokenizer entry names: give them placeholder names.
        tokens.append(by_id.get(i, f"[PAD{i}]"))
        types.append(kinds.get(i, gguf.TokenType.UNUSED))
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    ids = {t: i for i, t in enumerate(tokens)}

    def special_id(config_key, token_key):
        value = first_id(gen_config.get(config_key, config.get(config_key)))
        if value is None and isinstance(tok_config.get(token_key), str):
            value = ids.get(tok_config[token_key])
        return value

    # eos: tokenizer_config's eos_token (the one chat turns end with), else config's first.
    eos = ids.get(tok_config["eos_token"]) if isinstance(tok_config.get("eos_token"), str) else None
    eos = eos if eos is not None else special_id("eos_token_id", "eos_token")
    bos = special_id("bos_token_id", "bos_token")
    pad = special_id("pad_token_id", "pad_token")
    if bos is not None:
        w.add_bos_token_id(bos)
    if eos is not None:
        w.add_eos_token_id(eos)
    if pad is not None:
        w.add_pad_token_id(pad)
    w.add_add_bos_token(bool(tok_config.get("add_bos_token", False)))
    return {"num_tokens": num_tokens, "num_merges": len(merges), "bos": bos, "eos": eos, "pad": pad}


def verify(path, expected):
    """Reads the file back: every tensor's bytes equal what was meant to be written."""
    reader = gguf.GGUFReader(path)
    found = {t.name: t for t in reader.tensors}
    if set(found) != {name for name, _, _ in expected}:
        sys.exit(f"{path}: tensor names differ from the checkpoint's")
    for name, arr, _ in expected:
        got = np.asarray(found[name].data).view(np.uint8).ravel()
        if got.tobytes() != np.ascontiguousarray(arr).tobytes():
            sys.exit(f"{path}: {name} differs from the checkpoint")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="Hugging Face model directory (qwen2)")
    ap.add_argument("out", help="GGUF file to write")
    args = ap.parse_args()
    config = load_json(args.model, "config.json")
    if config.get("model_type") != "qwen2":
        sys.exit(f"model_type {config.get('model_type')!r} not supported (qwen2 only)")
    hf = read_tensors(args.model)
    tied = bool(config.get("tie_word_embeddings", False)) or "lm_head.weight" not in hf
    tensors = to_gguf_tensors(hf, tied)

    w = gguf.GGUFWriter(args.out + ".tmp", "qwen2")
    add_hparams(w, config, os.path.basename(os.path.normpath(args.model)))
    tokenizer = add_tokenizer(w, args.model, config)
    for name, arr, raw_dtype in tensors:
        w.add_tensor(name, arr, raw_dtype=raw_dtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    verify(args.out + ".tmp", tensors)
    os.replace(args.out + ".tmp", args.out)
    print(json.dumps({"gguf": args.out, "num_tensors": len(tensors), "tied_embeddings": tied,
                      "gguf_package": importlib.metadata.version("gguf"),
                      **tokenizer}))


if __name__ == "__main__":
    main()

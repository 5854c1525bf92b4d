#!/usr/bin/env python3
"""llama-tiny: a random-weight model of the Llama-3 architecture, for testing the engine's Llama
path against transformers (tests/golden/llama-tiny; the trained s4kv-tiny covers Qwen2).

What it exercises that s4kv-tiny does not: LlamaForCausalLM weight names, no q/k/v biases, a
separate lm_head (tie_word_embeddings false, as Llama-3.1-8B), rms_norm_eps 1e-5,
rope_theta 500000 and llama3 rope scaling. The scaling uses original_max_position_embeddings 256
(Llama-3 uses 8192) so that prompts of a few hundred tokens already cross it and most rotary
frequencies fall in the scaled or the smoothed band. head_dim 128, 2 query heads sharing 1 KV
head, 2 layers, hidden 256, vocab 8192 with s4kv-tiny's tokenizer. Weights: normal with std
0.05, norm weights 1 + N(0, 0.1), stored as bfloat16. config.json is written in the legacy form
of the real Llama-3 checkpoints (rope_theta and rope_scaling at the top level, torch_dtype).

Usage (GPU machine or any machine with torch and transformers):
  python3 tools/make_llama_tiny.py --tokenizer-from models/s4kv-tiny \\
      --out tests/golden/llama-tiny/model --seed 0
"""
import argparse
import json
import os
import shutil

import torch

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": None,
    "eos_token_id": 8191,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 256,
    "initializer_range": 0.05,
    "intermediate_size": 512,
    "max_position_embeddings": 4096,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "num_key_value_heads": 1,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 256,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_cache": True,
    "vocab_size": 8192,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-from", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from transformers import AutoConfig, LlamaForCausalLM

    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    config = AutoConfig.from_pretrained(args.out)
    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, CONFIG["initializer_range"])
    model.to(torch.bfloat16).save_pretrained(args.out)
    # save_pretrained writes the transformers-5 form; keep the checkpoints' legacy form.
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
    for leftover in ("generation_config.json",):
        path = os.path.join(args.out, leftover)
        if os.path.exists(path):
            os.remove(path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.tokenizer_from, name), os.path.join(args.out, name))
    print(json.dumps({"params": sum(p.numel() for p in model.parameters()),
                      "files": sorted(os.listdir(args.out))}))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Shape twins of the five seed models: each config of tests/fixtures/configs cut to 2 layers,
random weights written by transformers with a fixed seed, the model's real tokenizer, so that
S4 KV's forward pass runs on the real head counts, hidden sizes, vocabularies, biases, tied or
separate heads and RoPE settings (plain, llama3-scaled) at a size that fits any machine.

Weights: normal with std 0.02 (norm weights 1 + N(0, 0.1)), stored bfloat16 as the
checkpoints are. The goldens are then made by tools/make_golden.py --synthetic-seed.

Usage (GPU machine: tools/device_shape_twins.sh):
  python3 tools/make_shape_twins.py --out /tmp/twins --seed 0 [--only qwen2.5-7b-instruct]
"""
import argparse
import json
import lzma
import os
import shutil

import torch

CONFIGS = "tests/fixtures/configs"
TOKENIZERS = "tests/fixtures/tokenizers"
NUM_LAYERS = 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", action="append", default=[])
    args = ap.parse_args()

    from transformers import AutoConfig, AutoModelForCausalLM

    for file in sorted(os.listdir(CONFIGS)):
        name = file[:-len(".json")]
        if args.only and name not in args.only:
            continue
        out = os.path.join(args.out, name)
        os.makedirs(out, exist_ok=True)
        config = json.load(open(os.path.join(CONFIGS, file)))
        config["num_hidden_layers"] = NUM_LAYERS
        if config.get("max_window_layers") is not None:
            config["max_window_layers"] = NUM_LAYERS
        if config.get("layer_types"):
            config["layer_types"] = config["layer_types"][:NUM_LAYERS]
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        tok = "llama3" if config["model_type"] == "llama" else "qwen2.5"
        with lzma.open(os.path.join(TOKENIZERS, tok, "tokenizer.json.xz")) as src, \
                open(os.path.join(out, "tokenizer.json"), "wb") as dst:
            shutil.copyfileobj(src, dst)
        shutil.copy(os.path.join(TOKENIZERS, tok, "tokenizer_config.json"), out)
        torch.manual_seed(args.seed)
        # Built on the GPU when there is one (initializing 1.5B parameters on the CPU is slow);
        # the seeded values then come from the GPU's generator.
        with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(out),
                                                     dtype=torch.float32)
        with torch.no_grad():
            for pname, p in model.named_parameters():
                if pname.endswith("norm.weight"):
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
                else:
                    p.normal_(0.0, 0.02)
        model.to(torch.bfloat16).save_pretrained(out)
        print(name, sum(p.numel() for p in model.parameters()), "parameters ->", out, flush=True)


if __name__ == "__main__":
    main()

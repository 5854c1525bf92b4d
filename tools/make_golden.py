#!/usr/bin/env python3
"""Golden logits and greedy continuations of s4kv-tiny, made with Hugging Face transformers.

The reference is the engine's recipe for a 16-bit KV cache: weights as stored (bfloat16)
upcast to float32, every activation in float32, and keys (after RoPE) and values rounded to
the model's 16-bit dtype before attention, as a 16-bit KV cache holds them. Computed on the
CPU in float32 (no TF32), so the numbers do not depend on a GPU.

Output (--out): logits.safetensors with, per prompt i, `p{i}.ids` (I32 [n]), `p{i}.positions`
(I32 [k]), `p{i}.logits` (F32 [k, vocab]: full rows at those positions), `p{i}.greedy`
(I32 [m]: greedy continuation) and `p{i}.greedy_margin` (F32 [m]: top-1 minus top-2 logit at
each greedy step, so a comparison can tell a real difference from a near-tie); and
golden.json describing prompts, positions, versions and the command.

Usage: python3 tools/make_golden.py --model models/s4kv-tiny --heldout heldout_tokens.bin
  --out tests/golden/s4kv-tiny
A model without held-out text (random weights, tools/make_llama_tiny.py) takes
--synthetic-seed N instead: the long windows are then seeded random token ids.
"""
import argparse
import json
import os

import numpy as np
import torch

GREEDY_LEN = 48


def round_kv_attention(module, query, key, value, attention_mask, **kwargs):
    try:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    except ImportError:
        from transformers.masking_utils import ALL_ATTENTION_FUNCTIONS

    dtype = module.config.s4kv_kv_dtype
    key = key.to(dtype).to(torch.float32)
    value = value.to(dtype).to(torch.float32)
    return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask, **kwargs)


def pick_positions(n):
    pos = set(range(min(4, n))) | set(range(max(0, n - 4), n))
    pos |= {int(p) for p in np.linspace(0, n - 1, num=10)}
    return sorted(pos)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--heldout", help="uint16 token file of held-out text")
    src.add_argument("--synthetic-seed", type=int,
                     help="long windows of seeded random ids (for random-weight models)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cpu",
                    help="torch device of the fp32 reference (cuda: TF32 stays off)")
    ap.add_argument("--long-lens", default="300,1024,2048",
                    help="lengths of the long windows (comma-separated)")
    args = ap.parse_args()
    long_lens = [int(x) for x in args.long_lens.split(",")]

    import safetensors
    import tokenizers
    import transformers
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer
    from transformers import AttentionInterface, AutoModelForCausalLM

    torch.set_num_threads(min(16, os.cpu_count() or 1))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    AttentionInterface.register("s4kv_16bit_kv", round_kv_attention)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32,
                                                 attn_implementation="s4kv_16bit_kv")
    model.to(args.device)
    stored = json.load(open(os.path.join(args.model, "config.json")))
    kv_name = stored.get("torch_dtype") or stored.get("dtype") or "bfloat16"
    model.config.s4kv_kv_dtype = getattr(torch, kv_name)
    model.eval()
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    eot = tok.token_to_id("<|endoftext|>")

    chat = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
            "What is a dictionary?<|im_end|>\n<|im_start|>assistant\n")
    prompts = [
        {"name": "short", "ids": tok.encode("The history of the").ids},
        {"name": "sentence", "ids": tok.encode(
            "In computer programming, a function is a sequence of instructions that").ids},
        {"name": "chat", "ids": tok.encode(chat).ids},
    ]
    if args.heldout:
        # Windows of held-out text starting at a document boundary, up to 2048 tokens.
        held = np.fromfile(args.heldout, dtype="<u2").astype(np.int64)
        starts = np.flatnonzero(held == eot) + 1
        for n, s in zip(long_lens, (starts[3], starts[len(starts) // 2], starts[-40])):
            s = int(s)
            if s + n > len(held):
                s = len(held) - n
            prompts.append({"name": f"heldout_{n}", "ids": held[s:s + n].tolist()})
    else:
        # Ordinary (non-special) ids: the tokenizer's added tokens sit at the top of the vocab.
        rng = np.random.default_rng(args.synthetic_seed)
        num_ordinary = min(tok.get_added_tokens_decoder())
        for n in long_lens:
            ids = rng.integers(0, num_ordinary, size=n).tolist()
            prompts.append({"name": f"random_{n}", "ids": ids})

    tensors, meta = {}, []
    for i, p in enumerate(prompts):
        ids = torch.tensor([p["ids"]], device=args.device)
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0].float().cpu().numpy()
            gen = model.generate(ids, max_new_tokens=GREEDY_LEN, min_new_tokens=GREEDY_LEN,
                                 do_sample=False, output_scores=True, return_dict_in_generate=True,
                                 pad_token_id=eot)
        greedy = gen.sequences[0, ids.shape[1]:].cpu().numpy()
        margins = []
        for score in gen.scores:
            top2 = torch.topk(score[0].float(), 2).values
            margins.append(float(top2[0] - top2[1]))
        positions = pick_positions(len(p["ids"]))
        tensors[f"p{i}.ids"] = np.asarray(p["ids"], dtype=np.int32)
        tensors[f"p{i}.positions"] = np.asarray(positions, dtype=np.int32)
        tensors[f"p{i}.logits"] = np.ascontiguousarray(logits[positions], dtype=np.float32)
        tensors[f"p{i}.greedy"] = greedy.astype(np.int32)
        tensors[f"p{i}.greedy_margin"] = np.asarray(margins, dtype=np.float32)
        meta.append({"index": i, "name": p["name"], "num_tokens": len(p["ids"]),
                     "positions": positions, "greedy_text": tok.decode(greedy.tolist()),
                     "min_greedy_margin": min(margins)})
        print(json.dumps(meta[-1])[:300], flush=True)

    os.makedirs(args.out, exist_ok=True)
    save_file(tensors, os.path.join(args.out, "logits.safetensors"))
    with open(os.path.join(args.out, "golden.json"), "w") as f:
        json.dump({
            "made_by": "tools/make_golden.py",
            "reference": "float32 compute from the stored weights; keys (after RoPE) and values "
                         "rounded to the model dtype before attention (a 16-bit KV cache); " +
                         ("CPU" if args.device == "cpu" else "GPU, no TF32"),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "tokenizers": tokenizers.__version__,
                         "safetensors": safetensors.__version__},
            "greedy_len": GREEDY_LEN,
            "prompts": meta,
        }, f, indent=1)


if __name__ == "__main__":
    main()

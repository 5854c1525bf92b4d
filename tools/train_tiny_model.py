#!/usr/bin/env python3
"""Trains s4kv-tiny, the small Qwen2-architecture model S4 KV ships for tests and the demo.

Architecture: Qwen2 (q/k/v bias, RMSNorm, SwiGLU, RoPE), hidden 512, 6 layers, 4 query heads
and 2 KV heads of head_dim 128 (grouped-query attention), intermediate 1024, vocab 8192
(tools/train_tokenizer.py), tied embeddings, max_position_embeddings 4096. Trained from
scratch with transformers on sequences of 2048 tokens of English prose from Debian packages
(tools/corpus_sources.md), for a fixed wall-clock budget on one GPU; saved in bfloat16.

Input: token files from tools/tokenize_corpus.py (uint16 little-endian ids, documents
separated by <|endoftext|>), or the corpus JSON Lines (tokenized here with the tokenizer).
Output: --out gets config.json, model.safetensors and train_log.json (losses, settings,
versions, greedy samples). Tokenizer files are copied from --tokenizer-dir.

Reproduce (on the GPU machine): python3 tools/train_tiny_model.py --data DIR
  --tokenizer-dir models/s4kv-tiny --out OUT --seconds 390 --seed 1234
"""
import argparse
import json
import math
import os
import shutil
import time

import numpy as np
import torch

SEQ_LEN = 2048


def model_config(vocab_size, eos_id, bos_id):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=512,
        intermediate_size=1024,
        num_hidden_layers=6,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=128,
        hidden_act="silu",
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        use_sliding_window=False,
        attention_dropout=0.0,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        initializer_range=0.02,
    )


def load_tokens(data_dir, name, tokenizer_dir):
    path = os.path.join(data_dir, f"{name}_tokens.bin")
    if os.path.exists(path):
        return np.fromfile(path, dtype="<u2").astype(np.int64)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(tokenizer_dir, "tokenizer.json"))
    eot = tok.token_to_id("<|endoftext|>")
    texts = [json.loads(line)["text"] for line in open(os.path.join(data_dir, f"{name}.jsonl"))]
    ids = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(eot)
    return np.asarray(ids, dtype=np.int64)


def lr_at(step, warmup, total, peak, floor):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * t))


@torch.no_grad()
def heldout_loss(model, tokens, device, num_windows=64):
    model.eval()
    g = np.random.default_rng(7)
    starts = g.integers(0, len(tokens) - SEQ_LEN - 1, size=num_windows)
    losses = []
    for i in range(0, num_windows, 16):
        batch = np.stack([tokens[s:s + SEQ_LEN + 1] for s in starts[i:i + 16]])
        x = torch.from_numpy(batch).to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x[:, :-1]).logits.float()
        losses.append(torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1)).item())
    model.train()
    return float(np.mean(losses))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=390)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-steps", type=int, default=0, help="cap on steps (0: time budget only)")
    args = ap.parse_args()

    import transformers
    from tokenizers import Tokenizer
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    device = "cuda"

    tok = Tokenizer.from_file(os.path.join(args.tokenizer_dir, "tokenizer.json"))
    eot, im_end = tok.token_to_id("<|endoftext|>"), tok.token_to_id("<|im_end|>")
    t0 = time.time()
    train = load_tokens(args.data, "train", args.tokenizer_dir)
    held = load_tokens(args.data, "heldout", args.tokenizer_dir)
    print(f"tokens: train {len(train):,} heldout {len(held):,} ({time.time() - t0:.1f}s)", flush=True)

    cfg = model_config(tok.get_vocab_size(), eos_id=[im_end, eot], bos_id=None)
    model = Qwen2ForCausalLM(cfg).to(device)
    model.config._attn_implementation = "sdpa"
    nparams = sum(p.numel() for p in model.parameters())
    print(f"parameters: {nparams:,}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95),
                            weight_decay=0.1, fused=True)
    train_gpu = torch.from_numpy(train).to(device)
    rng = torch.Generator(device=device)
    rng.manual_seed(args.seed)
    offsets = torch.arange(SEQ_LEN + 1, device=device)

    warmup, probe_steps = 200, 30
    total = 10_000_000  # replaced once the step time is measured
    log, ema, step = [], None, 0
    start = time.time()
    while True:
        elapsed = time.time() - start
        if step == probe_steps:
            per_step = elapsed / probe_steps
            total = max(warmup + 10, int(args.seconds / per_step))
            if args.max_steps:
                total = min(total, args.max_steps)
            print(f"{per_step * 1000:.0f} ms/step -> {total} steps, "
                  f"{total * args.batch * SEQ_LEN / 1e6:.0f}M tokens", flush=True)
        if step >= total:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step, warmup, total, args.lr, args.lr * 0.05)
        starts = torch.randint(0, len(train) - SEQ_LEN - 1, (args.batch,), device=device,
                               generator=rng)
        batch = train_gpu[starts[:, None] + offsets]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=batch[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.shape[-1]),
                                                 batch[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 50 == 0 or step == total - 1:
            value = loss.item()
            ema = value if ema is None else 0.9 * ema + 0.1 * value
            log.append({"step": step, "loss": value, "seconds": round(time.time() - start, 1)})
            print(f"step {step} loss {value:.3f} ema {ema:.3f} t {time.time() - start:.0f}s",
                  flush=True)
        step += 1
    train_seconds = time.time() - start

    final_train = heldout_loss(model, train, device)
    final_held = heldout_loss(model, held, device)
    print(f"final: train loss {final_train:.4f} heldout loss {final_held:.4f} "
          f"(ppl {math.exp(final_held):.2f})", flush=True)

    os.makedirs(args.out, exist_ok=True)
    model = model.to(torch.bfloat16)
    model.save_pretrained(args.out, safe_serialization=True, max_shard_size="100MB")
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        src = os.path.join(args.tokenizer_dir, name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(args.out, name))

    samples = []
    model.eval()
    for prompt in ["The history of the", "A dictionary is", "In computer programming, a function",
                   "The hacker culture"]:
        ids = torch.tensor([tok.encode(prompt).ids], device=device)
        with torch.no_grad():
            gen = model.generate(ids, max_new_tokens=60, do_sample=False, eos_token_id=[eot, im_end],
                                 pad_token_id=eot)
        samples.append({"prompt": prompt, "completion": tok.decode(gen[0, ids.shape[1]:].tolist())})
        print(json.dumps(samples[-1]), flush=True)

    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump({
            "command": "python3 tools/train_tiny_model.py " + " ".join(
                f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
            "device": torch.cuda.get_device_name(0),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "parameters": nparams, "seq_len": SEQ_LEN, "batch": args.batch,
            "steps": total, "train_seconds": round(train_seconds, 1),
            "tokens_seen": total * args.batch * SEQ_LEN,
            "train_tokens": int(len(train)), "heldout_tokens": int(len(held)),
            "final_train_loss": final_train, "final_heldout_loss": final_held,
            "log": log, "greedy_samples": samples,
        }, f, indent=1)


if __name__ == "__main__":
    main()

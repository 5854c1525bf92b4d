#!/usr/bin/env python3
"""Stress models for the KV cache formats, made from models/s4kv-tiny by editing its weights.

s4kv-tiny was trained from scratch and lacks two outliers that real checkpoints carry; a KV
format must survive both (issue 12, docs/fidelity.md "Stress models"):

  keybias  Qwen2.5-like k_proj bias: in the first and the last layer every KV head gets a bias
           of norm --bias-norm (600, 150 per channel) on 8 RoPE pairs of the lowest-frequency
           channels (i, i + 64), i = 56..63 (0.02 .. 0.008 rad of rotation per 64-token block at
           theta 10000), alternating signs. Pre-RoPE the bias is a constant per channel; after
           RoPE it turns slowly with the position. 16-bit perplexity 23.6 -> 39 on the check
           text (the bias adds a smooth distance term to the scores).
  keybias-mid  the same bias on pairs 40..47 (0.2 .. 0.08 rad per block): post-RoPE keys then
           span ~40 per block in those channels instead of ~9, but the model degrades more
           (perplexity 23.6 -> 430): a harsher, less realistic variant, not in the default grid.
  sink     an attention-sink token: <|endoftext|> (id 8189, the model's document separator,
           BOS-like) gets keys and values --sink-ratio (30) times the median key/value norm of
           ordinary tokens, in every layer and KV head, from the model's own forward pass, and
           takes --sink-attention (10 %) of the attention of queries past the first block in
           every layer (35x an average token's share over 1k tokens); perplexity 23.6 -> 51.
           Mechanism: one hidden channel j (the embedding column with the smallest RMS) is
           cleared for every token and never written by any layer (o_proj and down_proj rows j
           zeroed); the sink token's embedding holds --sink-embed (2048) there. RMSNorm then
           gives the sink token x_j ~ sqrt(hidden) * gamma_j and every other token exactly 0, and
           a column added to k_proj/v_proj at j turns that into a key (per KV head, mostly along
           the direction the layer's post-RoPE queries read least, with a share along their mean
           direction bisected to give the sink its attention) and a value offset (a fixed random direction r, which o_proj is
           made blind to, so the sink's large value is a no-op as in real models while its
           quantization error is not). Other tokens' keys and values are untouched by the columns. `s4kv eval --first-token 8189` puts the
           token at the start of every window, as a server adds a BOS.

Each stressed model's own 16-bit cache is its reference: the edits change the model, and the
eval compares formats on the changed model. The script runs a numpy float32 forward pass
(Qwen2: RMSNorm, RoPE rotate-half, GQA, SiLU MLP, tied lm_head) over the first --check-tokens
tokens of bench/data/heldout.txt.xz to measure the sink directions and to verify the effect:
it prints and writes <out>/<name>/stress.json with the key/value norm ratios, the bias spread of
post-RoPE keys per block, the attention mass on the sink and the perplexity before and after,
and exits 1 when a model does not show its stress (sink keys/values > 0.8x the ratio, sink
attention within 20 % of its target, biased layers' keys at the bias's scale, perplexity
< 25x the base model's).

Deterministic (fixed seeds, float32 numpy, bf16 round-to-nearest-even written by hand): the
same inputs give byte-identical model.safetensors. Output goes to build/ (git-ignored); nothing
large is committed. Run (about a minute, one core):
    .venv/bin/python tools/make_stress_models.py [--out build/stress] [--only NAME]
writes build/stress/s4kv-tiny-{keybias,keybias-mid,sink}/ (config and tokenizer copied).
"""

import argparse
import json
import lzma
import pathlib
import shutil
import struct

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
SINK_TOKEN = 8189  # <|endoftext|>
MODELS = {"keybias": 56, "keybias-mid": 40, "sink": None}  # first biased RoPE pair, or a sink


# ---- safetensors with bf16, read and written by hand (numpy has no bf16) ----------------------

def read_safetensors(path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", None)
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        assert info["dtype"] == "BF16", (name, info["dtype"])
        b, e = info["data_offsets"]
        u16 = np.frombuffer(raw[base + b:base + e], dtype="<u2")
        tensors[name] = (u16.astype(np.uint32) << 16).view(np.float32).reshape(info["shape"])
    order = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    return tensors, meta, order


def to_bf16(x):
    """float32 -> bf16 bits, round to nearest even (inputs are finite)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    u = u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return (u >> np.uint32(16)).astype("<u2")


def write_safetensors(path, tensors, meta, order):
    header, blobs, off = {}, [], 0
    for name in order:
        data = to_bf16(tensors[name]).tobytes()
        header[name] = {"dtype": "BF16", "shape": list(tensors[name].shape),
                        "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    if meta is not None:
        header = {"__metadata__": meta, **header}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def round_bf16(x):
    return (to_bf16(x).astype(np.uint32) << 16).view(np.float32).reshape(x.shape)


# ---- numpy Qwen2 forward ------------------------------------------------------------------------

class Model:
    def __init__(self, w, cfg):
        self.w, self.cfg = w, cfg
        self.d = cfg["head_dim"]
        self.nh, self.nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.eps = cfg["rms_norm_eps"]
        theta = cfg.get("rope_parameters", {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
        self.inv_freq = 1.0 / (theta ** (np.arange(0, self.d, 2, dtype=np.float64) / self.d))

    def p(self, layer, name):
        return self.w[f"model.layers.{layer}.{name}"]

    def norm(self, x, g):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * g

    def rope(self, x, pos):  # x [T, H, D]
        ang = pos[:, None] * self.inv_freq[None, :]
        cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :].astype(np.float32)
        sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :].astype(np.float32)
        h = self.d // 2
        rot = np.concatenate([-x[..., h:], x[..., :h]], -1)
        return x * cos + rot * sin

    def forward(self, tokens, on_layer=None):
        """Logits [T, V]; on_layer(layer, h_in, x) may edit the layer's weights before use and
        returns nothing. Records per layer pre-RoPE k, v, post-RoPE q and attention probs of
        queries on position 0 in self.trace."""
        T = len(tokens)
        pos = np.arange(T, dtype=np.float64)
        x = self.w["model.embed_tokens.weight"][tokens].astype(np.float32)
        self.trace = []
        mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
        for layer in range(self.cfg["num_hidden_layers"]):
            h = self.norm(x, self.p(layer, "input_layernorm.weight"))
            if on_layer is not None:
                on_layer(self, layer, x, h)
            q = (h @ self.p(layer, "self_attn.q_proj.weight").T
                 + self.p(layer, "self_attn.q_proj.bias")).reshape(T, self.nh, self.d)
            k = (h @ self.p(layer, "self_attn.k_proj.weight").T
                 + self.p(layer, "self_attn.k_proj.bias")).reshape(T, self.nkv, self.d)
            v = (h @ self.p(layer, "self_attn.v_proj.weight").T
                 + self.p(layer, "self_attn.v_proj.bias")).reshape(T, self.nkv, self.d)
            qr, kr = self.rope(q, pos), self.rope(k, pos)
            out = np.empty_like(q)
            p0 = np.empty((self.nh, T), dtype=np.float32)
            group = self.nh // self.nkv
            for hh in range(self.nh):
                s = qr[:, hh] @ kr[:, hh // group].T / np.sqrt(self.d) + mask
                s = np.exp(s - s.max(-1, keepdims=True))
                s /= s.sum(-1, keepdims=True)
                p0[hh] = s[:, 0]
                out[:, hh] = s @ v[:, hh // group]
            self.trace.append({"k": k, "v": v, "q_rot": qr, "k_rot": kr, "p0": p0})
            x = x + out.reshape(T, -1) @ self.p(layer, "self_attn.o_proj.weight").T
            h2 = self.norm(x, self.p(layer, "post_attention_layernorm.weight"))
            g = h2 @ self.p(layer, "mlp.gate_proj.weight").T
            u = h2 @ self.p(layer, "mlp.up_proj.weight").T
            x = x + (g / (1 + np.exp(-g)) * u) @ self.p(layer, "mlp.down_proj.weight").T
        x = self.norm(x, self.w["model.norm.weight"])
        return x @ self.w["model.embed_tokens.weight"].T


def perplexity(logits, tokens, first):
    """Of tokens[first + 1:] predicted from positions first.. ."""
    lg = logits[first:-1].astype(np.float64)
    lse = np.log(np.exp(lg - lg.max(-1, keepdims=True)).sum(-1)) + lg.max(-1)
    nll = lse - lg[np.arange(len(lg)), tokens[first + 1:]]
    return float(np.exp(nll.mean()))


def sample_tokens(n):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(ROOT / "models/s4kv-tiny/tokenizer.json"))
    with lzma.open(ROOT / "bench/data/heldout.txt.xz", "rt", encoding="utf-8") as f:
        text = f.read(n * 8)
    ids = tok.encode(text, add_special_tokens=False).ids[:n - 1]
    return np.array([SINK_TOKEN] + ids, dtype=np.int64)


# ---- the two edits ------------------------------------------------------------------------------

def make_keybias(w, cfg, a, first_pair):
    d, nkv, L = cfg["head_dim"], cfg["num_key_value_heads"], cfg["num_hidden_layers"]
    pairs = list(range(first_pair, first_pair + 8))
    bias = np.zeros(d, dtype=np.float32)
    for n, i in enumerate(pairs):  # alternating signs, equal magnitude
        bias[i] = bias[i + d // 2] = (-1.0) ** n
    bias *= a.bias_norm / np.linalg.norm(bias)
    for layer in (0, L - 1):
        name = f"model.layers.{layer}.self_attn.k_proj.bias"
        w[name] = round_bf16(w[name] + np.tile(bias, nkv))
    return {"layers": [0, L - 1], "pairs": pairs, "bias_per_channel": float(abs(bias[pairs[0]])),
            "bias_norm_per_head": a.bias_norm}


def sink_key(model, k, qg, g, u, m, norm, target):
    """The sink's key (position 0, not rotated): norm |k| along u (read least by the queries)
    and m (their mean direction), the share along m bisected so that queries past the first block
    give the sink `target` of their attention on average. k: [T, nkv, D] pre-RoPE keys of this
    layer, qg: [T, group, D] post-RoPE queries of the kv head's group."""
    T, d = len(k), model.d
    kr = model.rope(k[:, g:g + 1], np.arange(T, dtype=np.float64))[:, 0].astype(np.float64)
    s = np.einsum("thd,sd->hts", qg, kr) / np.sqrt(d)  # [group, T, T]
    s[:, :, 0] = -np.inf  # the sink's own score is what we set
    s = np.where(np.tril(np.ones((T, T), dtype=bool))[None], s, -np.inf)
    mx = s.max(-1, keepdims=True)
    mx[~np.isfinite(mx)] = 0.0
    with np.errstate(divide="ignore"):  # position 0 has no ordinary token to attend to
        log_z = np.log(np.exp(s - mx).sum(-1)) + mx[..., 0]  # [group, T] over ordinary tokens
    first = min(64, T - 1)

    def mass(beta):
        ks = u * np.sqrt(max(norm * norm - beta * beta, 0.0)) + m * beta
        s0 = np.einsum("thd,d->ht", qg, ks) / np.sqrt(d)
        return float(np.mean(1.0 / (1.0 + np.exp(log_z - s0))[:, first:]))

    lo, hi = -norm, norm
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mass(mid) < target else (lo, mid)
    beta = 0.5 * (lo + hi)
    return u * np.sqrt(max(norm * norm - beta * beta, 0.0)) + m * beta


def make_sink(w, cfg, a, tokens):
    """Edits w in place (layer by layer during one forward pass); returns its parameters."""
    emb = w["model.embed_tokens.weight"]
    j = int(np.argmin(np.sqrt(np.mean(emb * emb, axis=0))))
    emb[:, j] = 0.0
    emb[SINK_TOKEN, j] = a.sink_embed
    for layer in range(cfg["num_hidden_layers"]):
        w[f"model.layers.{layer}.self_attn.o_proj.weight"][j, :] = 0.0
        w[f"model.layers.{layer}.mlp.down_proj.weight"][j, :] = 0.0
    d, nkv, nh = cfg["head_dim"], cfg["num_key_value_heads"], cfg["num_attention_heads"]
    rng = np.random.default_rng(a.seed)
    # Statistics of the layer's ordinary tokens come from a forward pass of the model edited so
    # far (probe) before the layer's own k/v columns are added.
    probe = Model(w, cfg)

    def edit(model, layer, x, h):
        hj = float(h[0, j])  # the sink's normalized channel j; every other token has 0 there
        assert np.all(h[1:, j] == 0.0)
        k = (h @ model.p(layer, "self_attn.k_proj.weight").T
             + model.p(layer, "self_attn.k_proj.bias")).reshape(len(h), nkv, d)
        v = (h @ model.p(layer, "self_attn.v_proj.weight").T
             + model.p(layer, "self_attn.v_proj.bias")).reshape(len(h), nkv, d)
        q = (h @ model.p(layer, "self_attn.q_proj.weight").T
             + model.p(layer, "self_attn.q_proj.bias")).reshape(len(h), nh, d)
        qr = model.rope(q, np.arange(len(h), dtype=np.float64))
        dk = np.zeros((nkv, d), dtype=np.float32)
        dv = np.zeros((nkv, d), dtype=np.float32)
        group = nh // nkv
        for g in range(nkv):
            kn = np.median(np.linalg.norm(k[1:, g], axis=-1))
            vn = np.median(np.linalg.norm(v[1:, g], axis=-1))
            qg = qr[:, g * group:(g + 1) * group].astype(np.float64)  # [T, group, D]
            qs = qg[1:].reshape(-1, d)
            _, vecs = np.linalg.eigh(qs.T @ qs / len(qs))
            u = vecs[:, 0]  # least-read key direction
            u *= np.sign(u[np.argmax(np.abs(u))])
            m = qs.mean(0)
            m -= u * (u @ m)
            m /= np.linalg.norm(m)  # the mean query direction, orthogonal to u
            r = rng.standard_normal(d)
            r /= np.linalg.norm(r)
            dk[g] = sink_key(model, k, qg, g, u, m, a.sink_ratio * kn, a.sink_attention) - k[0, g]
            dv[g] = r * a.sink_ratio * vn
        for name, delta in (("k_proj", dk), ("v_proj", dv)):
            wn = f"model.layers.{layer}.self_attn.{name}.weight"
            model.w[wn][:, j] = round_bf16(model.w[wn][:, j] + delta.reshape(-1) / hj)
        # o_proj reads nothing along the value offset's direction r_g (Wo_h <- Wo_h (I - r r^T)
        # for the query heads of group g): the sink's value is large but inert, like a real
        # sink's no-op value; its quantization error, spread over all channels, is not.
        wo = model.w[f"model.layers.{layer}.self_attn.o_proj.weight"]
        for hh in range(nh):
            r = dv[hh // group] / np.linalg.norm(dv[hh // group])
            blk = wo[:, hh * d:(hh + 1) * d]
            wo[:, hh * d:(hh + 1) * d] = round_bf16(blk - np.outer(blk @ r, r))

    probe.forward(tokens, on_layer=edit)
    return {"token": SINK_TOKEN, "hidden_channel": j, "embed_value": a.sink_embed,
            "ratio_target": a.sink_ratio, "attention_target": a.sink_attention, "seed": a.seed}


# ---- verification -------------------------------------------------------------------------------

def verify(name, base, stressed, cfg, tokens, params):
    first = 64  # perplexity over positions past the first block
    rb = base.forward(tokens)
    tb = base.trace
    rs = stressed.forward(tokens)
    ts = stressed.trace
    report = {"name": name, "params": params, "check_tokens": len(tokens),
              "ppl_base": perplexity(rb, tokens, first),
              "ppl_stressed": perplexity(rs, tokens, first), "layers": []}
    d = cfg["head_dim"]
    for layer, (b, s) in enumerate(zip(tb, ts)):
        row = {"layer": layer}
        kn = np.linalg.norm(s["k"], axis=-1)  # [T, nkv]
        vn = np.linalg.norm(s["v"], axis=-1)
        row["k0_over_median_k"] = [round(float(kn[0, g] / np.median(kn[1:, g])), 2)
                                   for g in range(kn.shape[1])]
        row["v0_over_median_v"] = [round(float(vn[0, g] / np.median(vn[1:, g])), 2)
                                   for g in range(vn.shape[1])]
        row["max_abs_k0"] = round(float(np.abs(s["k"][0]).max()), 1)
        row["max_abs_k_rest"] = round(float(np.abs(s["k"][1:]).max()), 1)
        # attention mass on position 0 from queries past the first block, against 1/(t+1)
        t = np.arange(first, len(tokens))
        row["attn_on_pos0"] = round(float(s["p0"][:, first:].mean()), 4)
        row["attn_on_pos0_base"] = round(float(b["p0"][:, first:].mean()), 4)
        row["uniform_share"] = round(float(np.mean(1.0 / (t + 1))), 4)
        # per-channel spread of keys inside 64-token blocks, pre-RoPE and post-RoPE (max over
        # channels and blocks): what one per-channel int4 step has to cover
        nb = (len(tokens) - 1) // 64
        kb = s["k"][1:1 + nb * 64].reshape(nb, 64, -1, d)
        kr = s["k_rot"][1:1 + nb * 64].reshape(nb, 64, -1, d)
        row["block_range_pre_rope"] = round(float((kb.max(1) - kb.min(1)).max()), 1)
        row["block_range_post_rope"] = round(float((kr.max(1) - kr.min(1)).max()), 1)
        report["layers"].append(row)
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default=str(ROOT / "models/s4kv-tiny"))
    ap.add_argument("--out", default=str(ROOT / "build/stress"))
    ap.add_argument("--only", choices=list(MODELS))
    ap.add_argument("--bias-norm", type=float, default=600.0)
    ap.add_argument("--sink-ratio", type=float, default=30.0)
    ap.add_argument("--sink-embed", type=float, default=2048.0)
    ap.add_argument("--sink-attention", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=12)
    ap.add_argument("--check-tokens", type=int, default=1024)
    a = ap.parse_args()
    base_dir = pathlib.Path(a.base)
    cfg = json.loads((base_dir / "config.json").read_text())
    w0, meta, order = read_safetensors(base_dir / "model.safetensors")
    tokens = sample_tokens(a.check_tokens)
    base = Model(w0, cfg)
    for name, first_pair in MODELS.items():
        if a.only and a.only != name:
            continue
        w = {k: v.copy() for k, v in w0.items()}
        if first_pair is None:
            params = make_sink(w, cfg, a, tokens)
        else:
            params = make_keybias(w, cfg, a, first_pair)
        out = pathlib.Path(a.out) / f"s4kv-tiny-{name}"
        out.mkdir(parents=True, exist_ok=True)
        for f in ("config.json", "generation_config.json", "tokenizer.json",
                  "tokenizer_config.json"):
            shutil.copyfile(base_dir / f, out / f)
        write_safetensors(out / "model.safetensors", w, meta, order)
        # Verify on the weights as written (bf16), not on the float32 edit.
        written, _, _ = read_safetensors(out / "model.safetensors")
        report = verify(name, base, Model(written, cfg), cfg, tokens, params)
        (out / "stress.json").write_text(json.dumps(report, indent=1) + "\n")
        print(json.dumps(report))
        check(report, a)


def check(report, a):
    """Fails (exit 1) when the written model does not show the stress it is documented to."""
    layers = report["layers"]
    if report["name"] == "sink":
        for row in layers:
            for key in ("k0_over_median_k", "v0_over_median_v"):
                assert min(row[key]) > 0.8 * a.sink_ratio, (row["layer"], key, row[key])
            assert abs(row["attn_on_pos0"] - a.sink_attention) < 0.2 * a.sink_attention, row
    else:
        for row in (layers[0], layers[-1]):  # the biased layers: keys of norm ~bias_norm
            assert row["max_abs_k_rest"] > 0.2 * a.bias_norm, row
    assert report["ppl_stressed"] < 25 * report["ppl_base"], report["ppl_stressed"]


if __name__ == "__main__":
    main()

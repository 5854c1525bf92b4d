#!/usr/bin/env python3
"""Golden int4_kivi blocks, computed independently of the C++ reference with numpy.

Writes tests/golden/kivi/cases.json and one <name>.bin per case:
    keys   float32 little-endian [B, D]   (pre-RoPE keys)
    values float32 little-endian [B, D]   (as the 16-bit cache holds them, widened)
    block  the expected int4_kivi block bytes (docs/kv-format.md)
A case with "value_hadamard" (format v2) rotates every value row by the normalized 128-point
Walsh-Hadamard transform first (stages h = 1, 2, ..., 64 of float32 (a+b, a-b) butterflies,
then a float32 product with 0x1.6a09e6p-4), as the commit does before the quantizer.
tests/kv/int4_kivi_golden_test.cc quantizes keys and values with quantize_block_ref and must
reproduce the block byte for byte.

The arithmetic follows DESIGN.md "Exactness" with numpy float32 semantics (every operation on
float32 arrays rounds to float32), np.float16 casts (round to nearest even, subnormals
included) and np.rint (half to even). Run: .venv/bin/python tools/make_kivi_golden.py
"""

import hashlib
import json
import pathlib

import numpy as np

F32 = np.float32
HEAD_DIM = 128
CASES = [  # (name, block size B, value group size Gv, seed, values Hadamard-rotated)
    ("b32_gv32", 32, 32, 1, False),
    ("b64_gv128", 64, 128, 2, False),
    ("b128_gv64", 128, 64, 3, False),
    ("b64_gv128_v2", 64, 128, 4, True),  # the v2 default layout
]
HADAMARD_SCALE_128 = F32(float.fromhex("0x1.6a09e6p-4"))
OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "golden" / "kivi"


def params(mn, mx):
    """fp16 scale and zero from float32 min and max (arrays); -0 canonicalized to +0."""
    mn = mn + F32(0.0)
    mx = mx + F32(0.0)
    scale = ((mx - mn) / F32(15.0)).astype(np.float16)
    return scale, mn.astype(np.float16)


def codes(x, scale_h, zero_h):
    """q = clamp(rint((x - zero) / scale), 0, 15) with the fp16 values; 0 where scale == 0."""
    s = scale_h.astype(F32)
    z = zero_h.astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = (x - z) / s
    q = np.clip(np.rint(v), F32(0.0), F32(15.0))
    q = np.where(s == F32(0.0), F32(0.0), q)
    return q.astype(np.uint8)


def pack(q):
    """[B, D] codes -> little-endian uint32 words, 8 channels each, nibbles 0,2,4,6,1,3,5,7."""
    b, d = q.shape
    q = q.reshape(b, d // 8, 8).astype(np.uint32)
    words = np.zeros((b, d // 8), dtype=np.uint32)
    for j in range(8):
        nibble = (j % 2) * 4 + j // 2
        words |= q[:, :, j] << np.uint32(4 * nibble)
    return words.astype("<u4").tobytes()


def fp16_bytes(a):
    return a.astype("<f2").tobytes()


def hadamard_rows(x):
    """Each row of [B, D] float32 through the fixed-order fast Walsh-Hadamard transform."""
    x = x.astype(F32).copy()
    b, d = x.shape
    h = 1
    while h < d:
        y = x.reshape(b, d // (2 * h), 2, h)
        a, c = y[:, :, 0, :].copy(), y[:, :, 1, :].copy()
        y[:, :, 0, :] = a + c
        y[:, :, 1, :] = a - c
        x = y.reshape(b, d)
        h *= 2
    return x * HADAMARD_SCALE_128


def quantize_block(keys, values, gv):
    k_scale, k_zero = params(keys.min(axis=0), keys.max(axis=0))  # per channel
    k_codes = codes(keys, k_scale[None, :], k_zero[None, :])
    b, d = values.shape
    grouped = values.reshape(b, d // gv, gv)
    v_scale, v_zero = params(grouped.min(axis=2), grouped.max(axis=2))  # per token per group
    v_codes = codes(grouped, v_scale[:, :, None], v_zero[:, :, None]).reshape(b, d)
    return b"".join([pack(k_codes), fp16_bytes(k_scale), fp16_bytes(k_zero),
                     pack(v_codes), fp16_bytes(v_scale), fp16_bytes(v_zero)])


def make_keys(rng, b):
    """Gaussian channels with log-normal spreads and offsets, plus edge-case channels."""
    d = HEAD_DIM
    spread = np.exp(rng.normal(0.0, 1.0, d))
    offset = rng.normal(0.0, 2.0, d)
    offset[rng.choice(np.arange(8, d), 6, replace=False)] = rng.uniform(300, 900, 6)
    k = rng.standard_normal((b, d)) * spread + offset
    t = np.arange(b)
    k[:, 0] = t                               # scale (B-1)/15, rounded to fp16
    k[:, 1] = 3.3                             # constant: scale 0, codes 0
    k[:, 2] = t * 2.0**-30                    # range > 0 but scale underflows fp16 to 0
    k[:, 3] = t * (21 * 2.0**-24 / (b - 1))   # fp16-subnormal scale: codes clamp at 15
    k[:, 4] = np.where(t == 0, 0.0, np.where(t == 1, 15.0, t % 15 + 0.5))  # exact ties
    k[:, 5] = 600.3 + 0.01 * rng.standard_normal(b)  # zero's rounding exceeds scale: clamp
    k[:, 6] = np.where(t % 2 == 0, -0.0, 0.0)  # signed zeros only
    k[:, 7] = -np.abs(k[:, 7]) - 1.0
    return k.astype(F32)


def make_values(rng, b, gv):
    d = HEAD_DIM
    v = rng.standard_normal((b, d)) * np.exp(rng.normal(0.0, 1.0, (b, 1)))
    v[0, :gv] = -1.25                          # a constant group
    v[1, :gv] = np.arange(gv) % 16 + 0.5       # ties (min 0.5, max 15.5: scale 1)
    v[2, :] = np.where(np.arange(d) % 3 == 0, -0.0, 0.0)
    v[3, :gv] = 1e4 + np.arange(gv) * 1e-3     # large offset, tiny range
    return v.astype(F32)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    manifest = {"generator": "tools/make_kivi_golden.py", "numpy": np.__version__,
                "head_dim": HEAD_DIM, "cases": []}
    for name, b, gv, seed, had in CASES:
        rng = np.random.default_rng(seed)
        keys = make_keys(rng, b)
        values = make_values(rng, b, gv)
        block = quantize_block(keys, hadamard_rows(values) if had else values, gv)
        expect = b * (HEAD_DIM // 2 + 4 * HEAD_DIM // b + HEAD_DIM // 2 + 4 * HEAD_DIM // gv)
        assert len(block) == expect, (len(block), expect)
        data = keys.astype("<f4").tobytes() + values.astype("<f4").tobytes() + block
        (OUT / f"{name}.bin").write_bytes(data)
        manifest["cases"].append({
            "name": name, "file": f"{name}.bin", "block_size": b, "value_group_size": gv,
            "value_hadamard": had, "seed": seed, "block_bytes": len(block),
            "block_sha256": hashlib.sha256(block).hexdigest()})
    (OUT / "cases.json").write_text(json.dumps(manifest, indent=2) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""One Markdown table from the JSON files of bench/run_fidelity_grid.sh (`s4kv eval --json`,
named <model>__<text>__<format>.json): per model and text, every format with its bytes per
token per layer per KV head, density at 8k context, mean / p99 / max KL with 95 % bootstrap
intervals over windows, how much the max hangs on one position (2nd largest) and one window
(smallest and median window max), mean KL relative to fp8_e4m3 on the same model and text, top-1
and confident top-1 agreement, perplexity change, greedy match. Then the choice rule of issue 12
(docs/fidelity.md): for every int4 format with density >= 3.5x at 8k, each (model, text, measure)
where it is not better than fp8_e4m3 and by how much, and the formats ranked by how close they
come (fewest such cells, then the smallest summed shortfall relative to fp8's value).

  python3 bench/fidelity_table.py DIR [--out TABLE.md]
"""
import argparse
import json
import pathlib

MODEL_ORDER = ["tiny", "keybias", "keybias-mid", "sink"]
TEXT_ORDER = ["heldout", "fortunes"]


def format_key(name):
    """fp8 first, then the KIVI post-RoPE comparison, then int4 candidates in grid order
    (B 64 before 32, Gv 128 before 64, plain before sink before Hadamard)."""
    if name == "fp8_e4m3":
        return (0,)
    if name.endswith("_post_rope"):
        return (1, name)
    parts = name.split("_")  # int4_b64_gv128[_sink1][_had]
    b = int(parts[1][1:]) if len(parts) > 1 and parts[1][1:].isdigit() else 0
    gv = int(parts[2][2:]) if len(parts) > 2 and parts[2][2:].isdigit() else 0
    return (2, -b, -gv, "sink1" in parts, "had" in parts, name)


def ci(r, key, fmt):
    lo, hi = r["ci95"][key]
    return f"{fmt.format(lo)}–{fmt.format(hi)}"


def per_layer_head(r):
    cfg = json.loads((pathlib.Path(r["settings"]["model"]) / "config.json").read_text())
    return r["bytes_per_token"] / (cfg["num_hidden_layers"] * cfg["num_key_value_heads"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--out")
    a = ap.parse_args()
    runs = {}
    for p in sorted(pathlib.Path(a.dir).glob("*__*__*.json")):
        model, text, fmt = p.stem.split("__")
        runs[(model, text, fmt)] = json.loads(p.read_text())
    lines = []
    for model in sorted({k[0] for k in runs}, key=lambda m: (MODEL_ORDER + [m]).index(m)):
        for text in sorted({k[1] for k in runs if k[0] == model},
                           key=lambda t: (TEXT_ORDER + [t]).index(t)):
            rows = {k[2]: v for k, v in runs.items() if k[0] == model and k[1] == text}
            any_r = next(iter(rows.values()))
            lines.append(f"\n### {model} on {text}: {any_r['num_windows']} windows, "
                         f"{any_r['num_positions']} positions, prefix "
                         f"{any_r['settings']['prefix_len']}, 16-bit ppl "
                         f"{any_r['ppl_reference']:.3f}\n")
            lines.append("| format | B/tok/layer/head | density@8k | mean KL [95% CI] | vs fp8 | "
                         "p99 KL [CI] | max KL [CI] | 2nd max; window max min/med | top-1 | "
                         "confident top-1 [CI] | ppl change [CI] | greedy |")
            lines.append("| --- " * 12 + "|")
            fp8 = rows.get("fp8_e4m3")
            for fmt in sorted(rows, key=format_key):
                r = rows[fmt]
                vs = f"{r['mean_kl'] / fp8['mean_kl']:.2f}x" if fp8 and fp8["mean_kl"] > 0 else "-"
                pc = 100 * r["ppl_change"]
                lo, hi = (100 * x for x in r["ci95"]["ppl_change"])
                lines.append(
                    f"| {r['format']} | {per_layer_head(r):.0f} | {r['density_8k']:.2f}x "
                    f"| {r['mean_kl']:.5f} [{ci(r, 'mean_kl', '{:.5f}')}] | {vs} "
                    f"| {r['p99_kl']:.4f} [{ci(r, 'p99_kl', '{:.4f}')}] "
                    f"| {r['max_kl']:.4f} [{ci(r, 'max_kl', '{:.4f}')}] "
                    f"| {r['second_max_kl']:.4f}; {r['window_max_kl']['min']:.4f}/"
                    f"{r['window_max_kl']['median']:.4f} "
                    f"| {r['top1_agreement']:.4f} "
                    f"| {r['confident_agreement']:.4f} [{ci(r, 'confident_agreement', '{:.4f}')}] "
                    f"| {pc:+.2f} % [{lo:+.2f}, {hi:+.2f}] | {r['greedy_match_rate']:.2f} |")
    lines += rule_check(runs)
    table = "\n".join(lines).lstrip("\n") + "\n"
    if a.out:
        pathlib.Path(a.out).write_text(table)
    print(table, end="")


# The rule's measures: (label, value getter, lower is better). Confident top-1 cannot beat 1.0,
# so a tie at 1.0 counts as met.
MEASURES = [
    ("mean KL", lambda r: r["mean_kl"], True),
    ("p99 KL", lambda r: r["p99_kl"], True),
    ("ppl change", lambda r: r["ppl_change"], True),
    ("confident top-1", lambda r: r["confident_agreement"], False),
]


def shortfalls(r, fp8):
    """(measure, format's value, fp8's value, relative shortfall) where r is not better."""
    out = []
    for name, get, lower in MEASURES:
        x, y = get(r), get(fp8)
        met = x < y if lower else (x > y or x == y == 1.0)
        if not met:
            gap = (x - y) if lower else (y - x)
            out.append((name, x, y, gap / max(abs(y), 1e-12)))
    return out


def rule_check(runs):
    cells = sorted({(m, t) for m, t, _ in runs})
    formats = sorted({f for _, _, f in runs if f.startswith("int4")}, key=format_key)
    lines = ["\n### The choice rule: int4 better than fp8_e4m3 on every measure, density >= 3.5x\n",
             "| format | density@8k | cells not better than fp8 | shortfalls |",
             "| --- | --- | --- | --- |"]
    ranked = []
    for f in formats:
        rows = [(m, t, runs.get((m, t, f)), runs.get((m, t, "fp8_e4m3"))) for m, t in cells]
        if any(r is None or fp8 is None for _, _, r, fp8 in rows):
            continue
        density = rows[0][2]["density_8k"]
        if density < 3.5:
            continue
        fails = [(m, t, *sf) for m, t, r, fp8 in rows for sf in shortfalls(r, fp8)]
        total = sum(x[-1] for x in fails)
        ranked.append((len(fails), total, f))
        text = "; ".join(f"{m}/{t} {name} {x:.4g} vs {y:.4g}" for m, t, name, x, y, _ in fails)
        lines.append(f"| {f} | {density:.2f}x | {len(fails)} | {text or 'none: meets the rule'} |")
    ranked.sort()
    if ranked:
        lines.append("\nClosest first: " + ", ".join(
            f"{f} ({n} cells, summed shortfall {t:.2f})" for n, t, f in ranked) + "\n")
    return lines


if __name__ == "__main__":
    main()

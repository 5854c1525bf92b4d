#!/usr/bin/env python3
"""One Markdown table from the JSON files of bench/run_fidelity_grid.sh (`s4kv eval --json`,
named <model>__<text>__<format>.json): per model and text, every format with its bytes per
token per layer per KV head, density at 8k context, mean / p99 / max KL with 95 % bootstrap
intervals over windows, how much the max hangs on one position (2nd largest) and one window
(smallest and median window max), mean KL relative to fp8_e4m3 on the same model and text, top-1
and confident top-1 agreement, perplexity change, greedy match.

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
    table = "\n".join(lines).lstrip("\n") + "\n"
    if a.out:
        pathlib.Path(a.out).write_text(table)
    print(table, end="")


if __name__ == "__main__":
    main()

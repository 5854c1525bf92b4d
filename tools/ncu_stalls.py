#!/usr/bin/env python3
"""Where a kernel's warps wait, instruction by instruction: the source page of a Nsight Compute
report with SASS (`ncu -i REPORT --page source --csv --print-source sass`, the report collected
with `--section SourceCounters`) summed into a ledger. Warp-stall samples are taken at a fixed
interval from every warp the multiprocessors hold; a sample names the instruction the warp was
at and why it did not issue (or that it did). The ledger says which share of a loop's samples
each stall reason, opcode and instruction takes, so that a change aims at what the samples
price, not at what reads plausible (docs/gpu_int4_decode.md).

  python3 tools/ncu_stalls.py stalls_sass.csv [--range 0x1cc0-0x3890 | --loops 64] [--top 30]
      [--json OUT]

--range keeps the instructions at those addresses (a loop from tools/sass_loops.py, the same
offsets in the function); --loops N gives a ledger for each loop of at least N instructions the
page's own branches show (tools/sass_loops.py's rule), besides the whole function's. Columns
read: Address, Source, the all-samples and not-issued-samples totals and every per-reason column
(stall_*); the others are ignored.
"""
import argparse
import collections
import csv
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sass_loops  # noqa: E402  (the opcode of a line; loops from backward branches)

ALL = "Warp Stall Sampling (All Samples)"
NOT_ISSUED = "Warp Stall Sampling (Not-issued Samples)"


def number(text):
    """A cell as a float: '' and '-' are 0; thousands separators are dropped."""
    text = (text or "").strip().replace(",", "")
    if text in ("", "-", "n/a"):
        return 0.0
    try:
        return float(text)
    except ValueError:
        return 0.0


def read_rows(lines):
    """The instruction rows of a source-page CSV as dicts: the first row naming both Address and
    Source is the header (ncu may print lines before it); rows without an address are skipped."""
    rows = list(csv.reader(lines))
    for h, row in enumerate(rows):
        if "Address" in row and "Source" in row:
            header = row
            break
    else:
        raise ValueError("no header with Address and Source columns")
    out = []
    for row in rows[h + 1:]:
        if len(row) != len(header):
            continue
        rec = dict(zip(header, row))
        try:
            rec["_address"] = int(rec["Address"], 16)
        except ValueError:
            continue
        out.append(rec)
    return header, out


def ledger(header, rows, lo=None, hi=None, top=30):
    """Totals, shares per stall reason and per opcode, and the `top` instructions by samples, of
    the rows at addresses [lo, hi] (all when None)."""
    reasons = [c for c in header if c.startswith("stall_")]
    sample_col = ALL if ALL in header else None
    if sample_col is None:
        raise ValueError(f"no '{ALL}' column: was the report collected with SourceCounters?")
    kept = [r for r in rows if (lo is None or r["_address"] >= lo) and
            (hi is None or r["_address"] <= hi)]
    total = sum(number(r[sample_col]) for r in kept)
    not_issued = sum(number(r.get(NOT_ISSUED)) for r in kept)
    by_reason = collections.Counter()
    for r in kept:
        for c in reasons:
            by_reason[c[len("stall_"):]] += number(r[c])
    by_opcode = collections.Counter()
    count_opcode = collections.Counter()
    for r in kept:
        op = sass_loops.opcode(r["Source"].strip())
        by_opcode[op] += number(r[sample_col])
        count_opcode[op] += 1
    ranked = sorted(kept, key=lambda r: -number(r[sample_col]))[:top]
    top_rows = []
    for r in ranked:
        mine = sorted(((number(r[c]), c[len("stall_"):]) for c in reasons), reverse=True)
        top_rows.append({
            "address": f"0x{r['_address']:04x}",
            "source": r["Source"].strip(),
            "samples": number(r[sample_col]),
            "reasons": {name: v for v, name in mine[:3] if v > 0},
        })
    return {
        "instructions": len(kept),
        "samples": total,
        "not_issued_samples": not_issued,
        "by_reason": dict(by_reason.most_common()),
        "by_opcode": {op: {"samples": v, "instructions": count_opcode[op]}
                      for op, v in by_opcode.most_common()},
        "top": top_rows,
    }


def render(result):
    total = result["samples"] or 1.0
    lines = [f"{result['instructions']} instructions, {result['samples']:.0f} samples "
             f"({100.0 * result['not_issued_samples'] / total:.1f} % not issued)"]
    if result["by_reason"]:
        lines.append("by reason: " + ", ".join(
            f"{name} {100.0 * v / total:.1f} %"
            for name, v in result["by_reason"].items() if v > 0))
    lines.append("by opcode: " + ", ".join(
        f"{op} {100.0 * d['samples'] / total:.1f} % ({d['instructions']})"
        for op, d in result["by_opcode"].items() if d["samples"] > 0))
    lines.append("top instructions:")
    for t in result["top"]:
        why = ", ".join(f"{k} {v:.0f}" for k, v in t["reasons"].items())
        lines.append(f"  {t['address']} {100.0 * t['samples'] / total:5.1f} %  {t['source']}"
                     + (f"  [{why}]" if why else ""))
    return "\n".join(lines)


def parse_range(text):
    lo, hi = text.split("-")
    return int(lo, 16), int(hi, 16)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv")
    p.add_argument("--range", help="addresses LO-HI (hex), both kept")
    p.add_argument("--loops", type=int,
                   help="a ledger for each loop of at least this many instructions")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--json")
    args = p.parse_args(argv)
    with open(args.csv, newline="") as f:
        header, rows = read_rows(f)
    lo, hi = parse_range(args.range) if args.range else (None, None)
    result = ledger(header, rows, lo, hi, args.top)
    print(render(result))
    if args.loops is not None:
        instrs = [(r["_address"], r["Source"].strip()) for r in rows]
        found = sass_loops.loops(instrs, args.loops)
        if not found:
            print(f"no loop of {args.loops} or more instructions in the page's branches "
                  "(targets shown as labels?): pass --range from tools/sass_loops.py")
        result["loops"] = []
        for lp in found:
            one = ledger(header, rows, int(lp["begin"], 16), int(lp["end"], 16), args.top)
            one["range"] = f"{lp['begin']}-{lp['end']}"
            result["loops"].append(one)
            print(f"\nloop {one['range']}:")
            print(render(one))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

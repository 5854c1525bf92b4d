#!/usr/bin/env python3
"""The instruction mix of the loops in a CUDA kernel's machine code (SASS), read from an object
file or cubin: for each backward branch spanning more than --min instructions, the loop's
address range, its instruction count and the count of each opcode; and each function's
registers and stack bytes (cuobjdump --dump-resource-usage: stack above 0 means spills). A
static count, no GPU needed: with the instructions a loop iteration runs per warp and the
bytes it reads, it says how many bytes a warp instruction moves, and so which rate (memory or
instruction issue) can bound the kernel (docs/gpu_kernels.md, "Roofline per kernel").

  python3 tools/sass_loops.py build/src/backend/CMakeFiles/s4kv_backend_cuda.dir/cuda/decode_int4.cu.o \
      --kernel 'decode_int4_kernelILi4ELi4E' [--cuobjdump PATH] [--min 64] [--json OUT]

cuobjdump is in the CUDA toolkit's bin/ (the `nvidia-cuda-cuobjdump` wheel on PyPI has one too).
"""
import argparse
import collections
import json
import re
import shutil
import subprocess
import sys

INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;")
BRANCH = re.compile(r"\bBRA\s+(?:!?U?P\w+,\s*)?`?\(?0x([0-9a-f]+)")
FUNCTION = re.compile(r"Function\s*:\s*(\S+)")
RESOURCE_FUNCTION = re.compile(r"Function\s+(\S+?):?\s*$")
RESOURCE = re.compile(r"REG:(\d+)\s+STACK:(\d+)")


def per_function(text, header, item):
    """{name: [item(m) for each line `item`'s pattern matches]} for the lines under each header
    line `header` matches (its group 1 the name). `item`: (pattern, function of the match)."""
    pattern, make = item
    out, name = {}, None
    for line in text.splitlines():
        m = header.search(line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        m = pattern.search(line)
        if m and name is not None:
            out[name].append(make(m))
    return out


def functions(sass):
    """{mangled name: [(address, instruction text)]}."""
    return per_function(sass, FUNCTION, (INSTR, lambda m: (int(m.group(1), 16), m.group(2))))


def resources(text):
    """{mangled name: (registers, stack bytes)} from cuobjdump --dump-resource-usage."""
    found = per_function(text, RESOURCE_FUNCTION,
                         (RESOURCE, lambda m: (int(m.group(1)), int(m.group(2)))))
    return {name: rows[0] for name, rows in found.items() if rows}


def opcode(text):
    text = re.sub(r"^@!?U?P\w+\s+", "", text)  # a predicate guard
    return text.split()[0].split(".")[0] if text.split() else "?"


def loops(instrs, min_len):
    found = []
    for addr, text in instrs:
        m = BRANCH.search(text)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target >= addr:
            continue
        body = [t for a, t in instrs if target <= a <= addr]
        if len(body) < min_len:
            continue
        found.append({"begin": hex(target), "end": hex(addr), "instructions": len(body),
                      "opcodes": dict(collections.Counter(opcode(t) for t in body).most_common())})
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("object", help="an object file or cubin with sm_XX machine code")
    ap.add_argument("--kernel", required=True, help="a regular expression the mangled name matches")
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump")
    ap.add_argument("--min", type=int, default=64, help="shortest loop reported (instructions)")
    ap.add_argument("--json", help="write the loops as JSON here")
    args = ap.parse_args()
    try:
        sass = subprocess.run([args.cuobjdump, "-sass", args.object], capture_output=True,
                              text=True, check=True).stdout
    except FileNotFoundError:
        sys.exit(f"sass_loops: no cuobjdump at {args.cuobjdump} (--cuobjdump PATH)")
    except subprocess.CalledProcessError as e:
        sys.exit(f"sass_loops: cuobjdump failed on {args.object}: {e.stderr.strip()}")
    usage = subprocess.run([args.cuobjdump, "--dump-resource-usage", args.object],
                           capture_output=True, text=True).stdout
    regs = resources(usage)
    picked = {n: i for n, i in functions(sass).items() if re.search(args.kernel, n)}
    if not picked:
        sys.exit(f"sass_loops: no function in {args.object} matches {args.kernel!r}")
    report = []
    for name, instrs in picked.items():
        found = loops(instrs, args.min)
        entry = {"function": name, "instructions": len(instrs), "loops": found}
        line = f"{name}: {len(instrs)} instructions"
        if name in regs:
            entry["registers"], entry["stack_bytes"] = regs[name]
            line += f", {regs[name][0]} registers, {regs[name][1]} bytes of stack"
        report.append(entry)
        print(line)
        for lp in found:
            top = ", ".join(f"{k} {v}" for k, v in list(lp["opcodes"].items())[:14])
            print(f"  loop {lp['begin']}-{lp['end']}: {lp['instructions']} instructions: {top}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

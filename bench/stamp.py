#!/usr/bin/env python3
"""Adds provenance to a benchmark's JSON before it goes into bench/results/: the command that
ran, the commit, the date and the machine (CPU model and cores, or the GPU given by --card).

  python3 bench/stamp.py RESULT.json --command "build/bench/x --flag" [--card "NVIDIA H200"]
"""
import argparse
import datetime
import json
import os
import platform
import subprocess


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("result")
    ap.add_argument("--command", required=True)
    ap.add_argument("--card", default=None, help="GPU name when the figures come from a GPU")
    args = ap.parse_args()
    with open(args.result) as f:
        data = json.load(f)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    # Results being written are not a change to the code that produced them.
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                            ":(exclude)bench/results"],
                           capture_output=True, text=True).stdout.strip()
    data["provenance"] = {
        "command": args.command,
        "commit": commit + ("+uncommitted" if dirty else ""),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "os": platform.platform()},
    }
    if args.card:
        data["provenance"]["card"] = args.card
    with open(args.result, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()

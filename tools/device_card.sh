#!/usr/bin/env bash
# The GPU machine's card as result files name it: h100, h200 (from nvidia-smi's name; "gpu" when
# the name has no H-number), so that a figure measured on an H100 is never filed as an H200's.
set -euo pipefail
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | head -1 || true)
card=$(grep -oiE 'h[0-9]{3}' <<< "$name" | head -1 | tr '[:upper:]' '[:lower:]' || true)
echo "${card:-gpu}"

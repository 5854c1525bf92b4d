#!/usr/bin/env bash
# Fidelity of each KV format against the 16-bit cache on s4kv-tiny (s4kv eval, two-pass method)
# on the held-out text, with provenance; results in bench/results/fidelity_<format>.json.
#   bash bench/run_fidelity.sh [NUM_WINDOWS]
set -euo pipefail
cd "$(dirname "$0")/.."
windows=${1:-4}
only=${2:-}  # run just the format whose name contains this
text=$(mktemp)
xz -dc bench/data/heldout.txt.xz > "$text"
run() {  # name, then extra flags
  local name=$1; shift
  [[ -z "$only" || "$name" == *"$only"* ]] || return 0
  local out=bench/results/fidelity_${name}_s4kv-tiny.json
  local cmd="build/src/cli/s4kv eval --model models/s4kv-tiny --text bench/data/heldout.txt \
--prefix-len 2048 --continuation-len 512 --num-windows $windows --greedy-len 128 $* --json $out"
  build/src/cli/s4kv eval --model models/s4kv-tiny --text "$text" --prefix-len 2048 \
    --continuation-len 512 --num-windows "$windows" --greedy-len 128 "$@" --json "$out"
  python3 bench/stamp.py "$out" --command "$cmd (text: xz -dc bench/data/heldout.txt.xz)"
}
run fp8_e4m3 --kv-cache-dtype fp8_e4m3
run int4_kivi_gv128 --kv-cache-dtype int4_kivi --kivi-group-size 128
run int4_kivi_gv64 --kv-cache-dtype int4_kivi --kivi-group-size 64
run int4_kivi_gv32 --kv-cache-dtype int4_kivi --kivi-group-size 32
# Key placement as the KIVI paper has it (after RoPE), for comparison with ours (before RoPE).
run int4_kivi_gv128_post_rope --kv-cache-dtype int4_kivi --kivi-group-size 128 \
  --int4-keys-post-rope
rm -f "$text"

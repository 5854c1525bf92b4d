#!/usr/bin/env bash
# The int4_kivi v2 grid (issue 12): every candidate KV format x every evaluation text x s4kv-tiny
# and its stress models, each against the model's own 16-bit cache with `s4kv eval`, then one
# table (bench/fidelity_table.py). One `s4kv eval --candidates` per model and text runs all its
# missing formats against one shared reference pass; JOBS of them run at once, each on one
# OpenBLAS thread. Each format's report lands in OUT/<model>__<text>__<format>.json (stamped
# with command, commit and machine); reports that exist are skipped, so an interrupted grid
# resumes. The stress models are generated into build/stress by tools/make_stress_models.py when
# missing; the sink model's windows start with its sink token (--first-token 8189).
#
#   bash bench/run_fidelity_grid.sh                 # the whole grid, campaign settings
#   WINDOWS=1 PREFIX=256 CONT=64 GREEDY=16 OUT=build/fidelity_smoke bash bench/run_fidelity_grid.sh
#
# Selection (space-separated names; default: all): MODELS (tiny keybias sink; also keybias-mid),
# TEXTS (heldout fortunes), FORMATS (`s4kv eval --candidates` names: 16bit, fp8_e4m3,
# int4[_b<B>][_gv<Gv>][_sink<N>][_had][_post_rope]). Settings: WINDOWS (8), PREFIX (1024), CONT
# (256), GREEDY (32), JOBS (nproc), OUT (bench/results/fidelity_grid), S4KV (build/src/cli/s4kv).
# Cost on s4kv-tiny at these settings: about 5 s of one CPU per window for the reference and
# for fp8, 8 s per int4 format; the whole grid (20 formats) about 2 CPU-hours.
set -euo pipefail
cd "$(dirname "$0")/.."
windows=${WINDOWS:-8}
prefix=${PREFIX:-1024}
cont=${CONT:-256}
greedy=${GREEDY:-32}
jobs=${JOBS:-$(nproc)}
out=${OUT:-bench/results/fidelity_grid}
s4kv=${S4KV:-build/src/cli/s4kv}

# fp8, the KIVI paper's key placement (comparison only), every int4_kivi layout (key block 64
# or 32, value group 128 or 64, with or without a 16-bit first block and value Hadamard), and
# the window block with the sink block (B64 Gv128: the only layout above 3.5x with both),
# with and without Hadamard: the last is format v2, the default.
all_formats="fp8_e4m3 int4_b64_gv128_post_rope"
for b in 64 32; do
  for gv in 128 64; do
    for opt in "" _sink1 _had _sink1_had; do all_formats+=" int4_b${b}_gv${gv}${opt}"; done
  done
done
all_formats+=" int4_b64_gv128_sink1_win1 int4_b64_gv128_sink1_win1_had"
models=${MODELS:-tiny keybias sink}
texts=${TEXTS:-heldout fortunes}
formats=${FORMATS:-$all_formats}

model_dir() { [[ $1 == tiny ]] && echo models/s4kv-tiny || echo "build/stress/s4kv-tiny-$1"; }
for m in $models; do
  dir=$(model_dir "$m")
  if [[ ! -f $dir/model.safetensors ]]; then
    .venv/bin/python tools/make_stress_models.py --only "$m"
  fi
done

mkdir -p "$out" build
# One model and text: every missing format in one eval, then each report stamped into OUT.
run_one() {
  local m=$1 t=$2 dir extra="" missing="" f
  dir=$(model_dir "$m")
  [[ $m == sink ]] && extra="--first-token 8189"
  for f in $formats; do
    [[ -f $out/${m}__${t}__${f}.json ]] || missing+="${missing:+,}$f"
  done
  [[ -n $missing ]] || return 0
  local tmp=$out/.tmp_${m}__${t}
  rm -rf "$tmp"
  local cmd="$s4kv eval --model $dir --text build/eval_text_$t.txt --prefix-len $prefix \
--continuation-len $cont --num-windows $windows --greedy-len $greedy --candidates $missing $extra"
  echo "== $m $t: $missing" >&2
  # shellcheck disable=SC2086
  OPENBLAS_NUM_THREADS=1 $cmd --json-dir "$tmp" > "$out/.log_${m}__${t}" 2>&1 ||
    { echo "FAILED: $m $t (see $out/.log_${m}__${t})" >&2; return 1; }
  for f in ${missing//,/ }; do
    python3 bench/stamp.py "$tmp/$f.json" --command "$cmd (text: xz -dc bench/data/$t.txt.xz)"
    mv "$tmp/$f.json" "$out/${m}__${t}__${f}.json"
  done
  rm -rf "$tmp"
}
for t in $texts; do
  [[ -f build/eval_text_$t.txt ]] || xz -dc "bench/data/$t.txt.xz" > "build/eval_text_$t.txt"
done
status=0
for t in $texts; do
  for m in $models; do
    while (( $(jobs -rp | wc -l) >= jobs )); do wait -n || status=1; done
    run_one "$m" "$t" &
  done
done
while (( $(jobs -rp | wc -l) > 0 )); do wait -n || status=1; done
(( status == 0 )) || exit 1
python3 bench/fidelity_table.py "$out"

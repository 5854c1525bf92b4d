#!/usr/bin/env bash
# The int4_kivi v2 grid (issue 12): every candidate KV format x every evaluation text x s4kv-tiny
# and its stress models, each against the model's own 16-bit cache with `s4kv eval`, then one
# table (bench/fidelity_table.py). Each run writes OUT/<model>__<text>__<format>.json (stamped
# with command, commit and machine); runs whose JSON exists are skipped, so an interrupted grid
# resumes. The stress models are generated into build/stress by tools/make_stress_models.py when
# missing; the sink model's windows start with its sink token (--first-token 8189).
#
#   bash bench/run_fidelity_grid.sh                 # the whole grid, campaign settings
#   WINDOWS=1 PREFIX=256 CONT=64 GREEDY=16 OUT=build/fidelity_smoke bash bench/run_fidelity_grid.sh
#
# Selection (space-separated names; default: all): MODELS (tiny keybias sink; also keybias-mid),
# TEXTS (heldout fortunes), FORMATS (see below). Settings: WINDOWS (8), PREFIX (2048), CONT
# (512), GREEDY (128), OUT (bench/results/fidelity_grid), S4KV (build/src/cli/s4kv).
# Cost: one run is two model passes (reference and test) over every window, about a minute
# and a half of one CPU per window and format at the campaign settings on s4kv-tiny.
set -euo pipefail
cd "$(dirname "$0")/.."
windows=${WINDOWS:-8}
prefix=${PREFIX:-2048}
cont=${CONT:-512}
greedy=${GREEDY:-128}
out=${OUT:-bench/results/fidelity_grid}
s4kv=${S4KV:-build/src/cli/s4kv}

# name -> s4kv eval flags. b<B>_gv<Gv>[_sink1][_had]: int4_kivi candidates; post_rope: the KIVI
# paper's key placement (comparison only).
declare -A FLAGS=(
  [fp8_e4m3]="--kv-cache-dtype fp8_e4m3"
  [int4_post_rope]="--kv-cache-dtype int4_kivi --int4-keys-post-rope"
)
all_formats="fp8_e4m3 int4_post_rope"
for b in 64 32; do
  for gv in 128 64; do
    for sink in 0 1; do
      for had in 0 1; do
        name="int4_b${b}_gv${gv}"
        flags="--kv-cache-dtype int4_kivi --block-size $b --kivi-group-size $gv"
        if [[ $sink == 1 ]]; then name+="_sink1"; flags+=" --int4-sink-blocks 1"; fi
        if [[ $had == 1 ]]; then name+="_had"; flags+=" --int4-value-hadamard"; fi
        FLAGS[$name]=$flags
        all_formats+=" $name"
      done
    done
  done
done
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
for t in $texts; do
  text=build/eval_text_$t.txt
  [[ -f $text ]] || xz -dc "bench/data/$t.txt.xz" > "$text"
  for m in $models; do
    dir=$(model_dir "$m")
    extra=""
    [[ $m == sink ]] && extra="--first-token 8189"
    for f in $formats; do
      [[ -n ${FLAGS[$f]:-} ]] || { echo "unknown format $f" >&2; exit 2; }
      json=$out/${m}__${t}__${f}.json
      [[ -f $json ]] && continue
      cmd="$s4kv eval --model $dir --text $text --prefix-len $prefix --continuation-len $cont \
--num-windows $windows --greedy-len $greedy ${FLAGS[$f]} $extra"
      echo "== $m $t $f" >&2
      # shellcheck disable=SC2086
      $cmd --json "$json.tmp" >&2
      python3 bench/stamp.py "$json.tmp" --command "$cmd (text: xz -dc bench/data/$t.txt.xz)"
      mv "$json.tmp" "$json"
    done
  done
done
python3 bench/fidelity_table.py "$out"

#!/usr/bin/env bash
# What every device call script shares (sourced: `. tools/device_call.sh`, on the GPU machine):
# the card's name in $OUT/gpu.txt, a deadline CALL_S seconds (default 540) after the start so
# that the results are packed before the call's limit, the SM clock and power every 200 ms in
# r/clocks.csv, and
#   step NAME CMD...   runs CMD with OUT=$OUT/r/NAME (its log r/NAME.log), bounded by the
#                      deadline, skipped when less than 20 s is left
#   ab_both TAG...     the int4 A/B of the builds on the ten target cells (CALL_CELLS):
#                      resident in L2 (r/rab1), from device memory (r/hab1), then both again in
#                      the reverse order (r/hab2, r/rab2)
#   ab_summary BASE    those runs as bench/results keeps them, r/resident/ and r/hbm/
#                      (ab_<tag>_run<N>.json), each summed by tools/ab_compare.py --base BASE into
#                      r/resident_compare.txt and r/hbm_compare.txt (printed)
#   call_finish        stops the clock poll and packs r/ into $OUT/results.tar.xz (a call
#                      returns at most 8 files)
# and CALL_H200, 1 on an H200 (for steps only its figures need), else 0.
set -u
CALL_T0=$(date +%s)
CALL_END=$((CALL_T0 + ${CALL_S:-540}))
CALL_OUT=$OUT
mkdir -p "$CALL_OUT/r"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$CALL_OUT/gpu.txt"
cat "$CALL_OUT/gpu.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv,nounits -lms 200 > "$CALL_OUT/r/clocks.csv" 2>&1 &
CALL_POLL=$!
date +%T
CALL_H200=$(grep -c H200 "$CALL_OUT/gpu.txt")
export CALL_H200  # (for the sourcing script)
# shellcheck disable=SC2054  # the commas are the bench's list syntax
CALL_CELLS=(--formats int4 --batches 16,64,256 --contexts 8192,32768)
CALL_RESIDENT=(--resident-bytes 16777216)
step() {
  local d=$1 left
  shift
  left=$((CALL_END - $(date +%s)))
  [ "$left" -gt 20 ] || { echo "$d skipped"; return; }
  mkdir -p "$CALL_OUT/r/$d"
  OUT=$CALL_OUT/r/$d timeout "$left" "$@" > "$CALL_OUT/r/$d.log" 2>&1
  echo "$d rc $? $(date +%T)"
}
ab_both() {
  local reversed=() t
  for t in "$@"; do reversed=("$t" "${reversed[@]}"); done
  step rab1 bash tools/device_attention.sh ab "$@" -- "${CALL_CELLS[@]}" "${CALL_RESIDENT[@]}"
  step hab1 bash tools/device_attention.sh ab "$@" -- "${CALL_CELLS[@]}"
  step hab2 bash tools/device_attention.sh ab "${reversed[@]}" -- "${CALL_CELLS[@]}"
  step rab2 bash tools/device_attention.sh ab "${reversed[@]}" -- "${CALL_CELLS[@]}" "${CALL_RESIDENT[@]}"
}
ab_summary() {
  local base=$1 m kind n f
  for m in r:resident h:hbm; do
    kind=${m#*:}
    mkdir -p "$CALL_OUT/r/$kind"
    for n in 1 2; do
      for f in "$CALL_OUT/r/${m%%:*}ab$n"/ab_*.json; do
        [ -e "$f" ] && cp "$f" "$CALL_OUT/r/$kind/$(basename "$f" .json)_run$n.json"
      done
    done
    python3 tools/ab_compare.py --base "$base" "$CALL_OUT/r/$kind" > "$CALL_OUT/r/${kind}_compare.txt" 2>&1
    echo "== $kind"
    head -16 "$CALL_OUT/r/${kind}_compare.txt"
  done
}
call_finish() {
  kill "$CALL_POLL"
  (cd "$CALL_OUT" && tar cJf results.tar.xz r && rm -rf r)
  ls -la "$CALL_OUT"
}

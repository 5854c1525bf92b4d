#!/usr/bin/env bash
# What every device call script shares (sourced: `. tools/device_call.sh`, on the GPU machine):
# the card's name in $OUT/gpu.txt, a deadline CALL_S seconds (default 540) after the start so
# that the results are packed before the call's limit, the SM clock and power every 200 ms in
# r/clocks.csv, and
#   step NAME CMD...   runs CMD with OUT=$OUT/r/NAME (its log r/NAME.log), bounded by the
#                      deadline, skipped when less than 20 s is left
#   ab_both BASE TAG...  the int4 A/B of the builds on the ten target cells ($CALL_CELLS):
#                      resident in L2 (r/rab1), from device memory (r/hab1), then both again in
#                      the reverse order (r/hab2, r/rab2)
#   ab_summary BASE TAG...  tools/ab_compare.py over each r/{r,h}ab1 and r/{r,h}ab2 pair (the A/B
#                      resident in L2 and from device memory, two orders)
# CALL_H200 is 1 on an H200 (steps that only its figures need), else 0.
#   call_finish        stops the clock poll and packs r/ into $OUT/results.tar.xz (a call
#                      returns at most 8 files)
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
# (read by the call scripts that source this file)
CALL_H200=$(grep -c H200 "$CALL_OUT/gpu.txt")
export CALL_H200
CALL_CELLS="--formats int4 --batches 16,64,256 --contexts 8192,32768"
ab_both() {
  local reversed=() t
  for t in "$@"; do reversed=("$t" "${reversed[@]}"); done
  # shellcheck disable=SC2086  # CALL_CELLS is a list of arguments
  step rab1 bash tools/device_attention.sh ab "$@" -- $CALL_CELLS --resident-bytes 16777216
  # shellcheck disable=SC2086
  step hab1 bash tools/device_attention.sh ab "$@" -- $CALL_CELLS
  # shellcheck disable=SC2086
  step hab2 bash tools/device_attention.sh ab "${reversed[@]}" -- $CALL_CELLS
  # shellcheck disable=SC2086
  step rab2 bash tools/device_attention.sh ab "${reversed[@]}" -- $CALL_CELLS --resident-bytes 16777216
}
step() {
  local d=$1 left
  shift
  left=$((CALL_END - $(date +%s)))
  [ "$left" -gt 20 ] || { echo "$d skipped"; return; }
  mkdir -p "$CALL_OUT/r/$d"
  OUT=$CALL_OUT/r/$d timeout "$left" "$@" > "$CALL_OUT/r/$d.log" 2>&1
  echo "$d rc $? $(date +%T)"
}
ab_summary() {
  local base=$1 m d n t
  shift
  for m in r h; do
    mkdir -p "$CALL_OUT/cmp_$m"
    n=0
    for d in ${m}ab1 ${m}ab2; do
      n=$((n + 1))
      for t in "$base" "$@"; do
        cp "$CALL_OUT/r/$d/ab_$t.json" "$CALL_OUT/cmp_$m/ab_${t}_run$n.json" 2> /dev/null
      done
    done
    echo "== $m"
    python3 tools/ab_compare.py --base "$base" "$CALL_OUT/cmp_$m" 2>&1 | head -16
    rm -rf "$CALL_OUT/cmp_$m"
  done
}
call_finish() {
  kill "$CALL_POLL"
  (cd "$CALL_OUT" && tar cJf results.tar.xz r && rm -rf r)
  ls -la "$CALL_OUT"
}

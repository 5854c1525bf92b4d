#!/usr/bin/env bash
# H200 wanted (any card runs it). q4 = main (50db267's kernels; bench built from a997969, the same
# src/backend/cuda), tw2 = branch turn2 f105cf1 (the turned query in 8-byte chunks: store_turn
# conflict-free), t2s2 = branch t2s5 67a9481 built with -DS4KV_INT4_TILES=2
# -DS4KV_INT4_ROTATIONS_SHARED -DS4KV_INT4_STAGES=2 (two tiles a warp, rotations in shared
# memory, two stages: five thread blocks of two warps a multiprocessor). A/B on the ten target
# cells resident in L2 and from device memory (both orders), the default grid (acceptance
# table) of each, ncu --set full resident (28/4 B 64 x 32k). Every step is bounded so that the
# results are packed before the call's limit.
set -u
T0=$(date +%s); END=$((T0 + ${CALL_S:-470}))
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
cat $OUT/gpu.txt
W=$OUT; mkdir -p $W/r
s(){ d=$1; shift; left=$((END - $(date +%s))); [ $left -gt 20 ] || { echo "$d skipped"; return; }
  mkdir -p $W/r/$d; OUT=$W/r/$d timeout $left "$@" > $W/r/$d.log 2>&1; echo "$d rc $? $(date +%T)"; }
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,nounits -lms 200 > $W/r/clocks.csv 2>&1 &
poll=$!
date +%T
H="--formats int4 --batches 16,64,256 --contexts 8192,32768"
R="$H --resident-bytes 16777216"
s rab1 bash tools/device_attention.sh ab q4 tw2 t2s2 -- $R
s hab1 bash tools/device_attention.sh ab q4 tw2 t2s2 -- $H
s grid_q4 bash -c "ATTN_TAG=q4 bash tools/device_attention.sh run"
s hab2 bash tools/device_attention.sh ab t2s2 tw2 q4 -- $H
s rab2 bash tools/device_attention.sh ab t2s2 tw2 q4 -- $R
s grid_tw2 bash -c "ATTN_TAG=tw2 bash tools/device_attention.sh run"
s grid_t2s2 bash -c "ATTN_TAG=t2s2 bash tools/device_attention.sh run"
s full_t2s2_l2 bash -c "ATTN_TAG=t2s2 bash tools/device_attention.sh full --resident-bytes 16777216"
s full_q4_l2 bash -c "ATTN_TAG=q4 bash tools/device_attention.sh full --resident-bytes 16777216"
s full_tw2_l2 bash -c "ATTN_TAG=tw2 bash tools/device_attention.sh full --resident-bytes 16777216"
kill $poll
for m in r h; do mkdir -p $W/cmp_$m; n=0; for d in ${m}ab1 ${m}ab2; do n=$((n+1)); for t in q4 tw2 t2s2; do cp $W/r/$d/ab_$t.json $W/cmp_$m/ab_${t}_run$n.json 2>/dev/null; done; done
  echo "== $m"; python3 tools/ab_compare.py --base q4 $W/cmp_$m 2>&1 | head -14; rm -rf $W/cmp_$m; done
(cd $W && tar cJf results.tar.xz r && rm -rf r)
ls -la $OUT

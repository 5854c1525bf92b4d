#!/usr/bin/env bash
# Two stages (one block in flight ahead) across the kernel's variants, against main (q4, built at
# a997969 = 50db267's src/backend/cuda): s2 = main -DS4KV_INT4_STAGES=2; tw2s2 = s2 with
# -DS4KV_INT4_TURN_WORDS=2; t2r2 = branch t2s5 (67a9481) -DS4KV_INT4_TILES=2 -DS4KV_INT4_STAGES=2
# (rotations in registers, 227 registers); t2s2 = the same with -DS4KV_INT4_ROTATIONS_SHARED (195
# registers: four thread blocks, not five: a scheduler's quarter of the register file holds two
# warps of 200); t2s2b5 = t2s2 with -DS4KV_INT4_MIN_BLOCKS=5 (168 registers, 40 bytes of spill:
# five thread blocks). Resident in L2 and from device memory, both orders; ncu of s2 and t2r2.
set -u
T0=$(date +%s); END=$((T0 + ${CALL_S:-540}))
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
A="q4 s2 tw2s2 t2r2 t2s2 t2s2b5"; B="t2s2b5 t2s2 t2r2 tw2s2 s2 q4"
s rab1 bash tools/device_attention.sh ab $A -- $R
s hab1 bash tools/device_attention.sh ab $A -- $H
s rab2 bash tools/device_attention.sh ab $B -- $R
s hab2 bash tools/device_attention.sh ab $B -- $H
s full_s2_l2 bash -c "ATTN_TAG=s2 bash tools/device_attention.sh full --resident-bytes 16777216"
s full_t2r2_l2 bash -c "ATTN_TAG=t2r2 bash tools/device_attention.sh full --resident-bytes 16777216"
kill $poll
for m in r h; do mkdir -p $W/cmp_$m; n=0; for d in ${m}ab1 ${m}ab2; do n=$((n+1)); for t in $A; do cp $W/r/$d/ab_$t.json $W/cmp_$m/ab_${t}_run$n.json 2>/dev/null; done; done
  echo "== $m"; python3 tools/ab_compare.py --base q4 $W/cmp_$m 2>&1 | head -9; rm -rf $W/cmp_$m; done
(cd $W && tar cJf results.tar.xz r && rm -rf r)
ls -la $OUT

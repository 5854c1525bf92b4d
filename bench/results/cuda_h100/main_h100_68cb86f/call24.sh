#!/usr/bin/env bash
# Main at 68cb86f (the turned query in 8-byte chunks by default): backend_cuda_test and
# async_backend_cuda_test of its pack (`tests`), then the default attention grid of its bench (m:
# the acceptance table, every format beside torch SDPA).
set -u
T0=$(date +%s); END=$((T0 + ${CALL_S:-420}))
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
cat $OUT/gpu.txt
W=$OUT; mkdir -p $W/r
s(){ d=$1; shift; left=$((END - $(date +%s))); [ $left -gt 20 ] || { echo "$d skipped"; return; }
  mkdir -p $W/r/$d; OUT=$W/r/$d timeout $left "$@" > $W/r/$d.log 2>&1; echo "$d rc $? $(date +%T)"; }
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,nounits -lms 200 > $W/r/clocks.csv 2>&1 &
poll=$!
date +%T
s grid_m bash -c "ATTN_TAG=m bash tools/device_attention.sh run"
s tests bash tools/device_cuda_tests.sh run tests
kill $poll
tail -4 $W/r/tests/summary.txt 2>/dev/null; grep -E 'PASSED|FAILED|tests ran' $W/r/tests.log | tail -6
(cd $W && tar cJf results.tar.xz r && rm -rf r)
ls -la $OUT

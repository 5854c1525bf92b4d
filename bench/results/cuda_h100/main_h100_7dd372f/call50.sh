#!/usr/bin/env bash
# main (pool rows landed): the KV-bound suite (512 prompts of 8,192 / 512) of int4_kivi, then
# 16-bit, on the warm machine of call49 (its pack in /tmp/s4kv-stash or carried again).
# there: CALL_S=<budget> bash call50.sh
. tools/device_call.sh
step cuda bash tools/device_cuda_tests.sh run PERF_SUITES=long PERF_FORMATS=int4_kivi,16bit \
  PERF_TAG=_long perf
cp "$CALL_OUT/r/cuda/summary.txt" "$CALL_OUT/summary_perf.txt" 2>/dev/null
grep -E "rc|Throughput" "$CALL_OUT/summary_perf.txt"
call_finish

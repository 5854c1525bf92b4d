#!/usr/bin/env bash
# main 7dd372f (pool rows landed): the prefill suite (64 prompts of 8,192) of 16-bit and
# int4_kivi, then memcheck and a racecheck of the prefill and int4_kivi kernels.
# Here: bash tools/device_cuda_tests.sh pack; SLIM_TOKENIZERS=1 bash tools/device_slim.sh out;
# copy tests/fixtures/tokenizers/qwen2.5 back; carry .devcarry/part.0* .devcarry/sums and this
# script; there: CALL_S=540 bash call49.sh
. tools/device_call.sh
step cuda bash tools/device_cuda_tests.sh run PERF_SUITES=prefill PERF_FORMATS=16bit,int4_kivi \
  PERF_TAG=_prefill perf
step memcheck bash tools/device_cuda_tests.sh run SANITIZE_TIMEOUT=200 memcheck
step racecheck bash tools/device_cuda_tests.sh run SANITIZE_TIMEOUT=120 \
  "SANITIZE_RACECHECK_FILTER=*CudaPrefillAttention*int4*:*Int4Kivi*:*PoolRows*" racecheck
cp "$CALL_OUT/r/cuda/summary.txt" "$CALL_OUT/summary_perf.txt" 2>/dev/null
cat "$CALL_OUT"/r/memcheck/summary.txt "$CALL_OUT"/r/racecheck/summary.txt 2>/dev/null | tail -20
grep -E "Throughput" "$CALL_OUT/summary_perf.txt"
call_finish

#!/usr/bin/env bash
# Twenty-third session's second call: the KV-bound throughput rows (input 8192, output 512, 512
# prompts) of 16-bit and int4_kivi from the pack of cf4f76a, on the machine of the first call.
. tools/device_call.sh
step perf_long bash tools/device_cuda_tests.sh run PERF_SUITES=long \
  PERF_FORMATS="${LONG_FORMATS:-16bit,int4_kivi}" PERF_TAG="_long_cf4f76a${LONG_TAG:-}" perf
cp "$CALL_OUT/r/perf_long/summary.txt" "$CALL_OUT/summary.txt" 2>/dev/null
call_finish

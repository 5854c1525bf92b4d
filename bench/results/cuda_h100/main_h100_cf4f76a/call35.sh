#!/usr/bin/env bash
# Twenty-third session's first call: main's (cf4f76a) default attention grid (the acceptance
# table) on whatever card comes, then the end-to-end rows of 16-bit and int4_kivi (batch 1, short,
# prefill) from the pack of cf4f76a; on an H200 also ncu of the grid's 28/4 B 64 x 32k resident.
. tools/device_call.sh
step grid_h bash -c "ATTN_TAG=h bash tools/device_attention.sh run"
step perf bash tools/device_cuda_tests.sh run PERF_SUITES=latency1,short,prefill \
  PERF_FORMATS=16bit,int4_kivi PERF_TAG=_cf4f76a perf
[ $CALL_H200 = 1 ] && step full_h_l2 bash -c "ATTN_TAG=h bash tools/device_attention.sh full --resident-bytes 16777216"
cp "$CALL_OUT/r/perf/summary.txt" "$CALL_OUT/summary.txt" 2>/dev/null
call_finish

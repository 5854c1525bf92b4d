#!/usr/bin/env bash
# For the next session: branch prepass (int4_kivi pool rows made before the prefill attention).
# Here: git checkout prepass && bash tools/device_cuda_tests.sh pack; SLIM_TOKENIZERS=1 bash
# tools/device_slim.sh out; copy tests/fixtures/tokenizers/qwen2.5 back (perf); carry
# .devcarry/part.0* .devcarry/sums and this script; there: CALL_S=540 bash call48.sh
. tools/device_call.sh
step tests bash tools/device_cuda_tests.sh run tests serve
n=0
for r in "" --pool-rows --pool-rows ""; do
  n=$((n + 1))
  step "prefill_${r:+rows_}$n" bash -c "ATTN_PACK=1 ATTN_TAG=pp bash tools/device_attention.sh \
    prefill --formats 16bit,int4 $r"
done
step cuda bash tools/device_cuda_tests.sh run PERF_SUITES=prefill32k PERF_FORMATS=16bit,int4_kivi \
  PERF_TAG=_rows perf S4KV_PREFILL_POOL_ROWS=0 PERF_FORMATS=int4_kivi PERF_TAG=_norows perf
cp "$CALL_OUT/r/tests/summary.txt" "$CALL_OUT/summary.txt" 2>/dev/null
cp "$CALL_OUT/r/cuda/summary.txt" "$CALL_OUT/summary_perf.txt" 2>/dev/null
for d in "$CALL_OUT"/r/prefill_*/; do echo "$d" && grep -E "2048@8192|1x8192" "$d/prefill.txt"; done
grep -E "PASSED|FAILED|Throughput" "$CALL_OUT/summary.txt" "$CALL_OUT/summary_perf.txt"
call_finish

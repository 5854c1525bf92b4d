#!/usr/bin/env bash
# Branch partial (call51, with main's decode grid on an H200): a sequence's pool partly in pool rows (the whole tiles the room left holds).
# Here: git checkout partial && bash tools/device_cuda_tests.sh pack; SLIM_TOKENIZERS=1 bash
# tools/device_slim.sh out; copy tests/fixtures/tokenizers/llama3 back (the prefill64k suite runs
# the Llama-3.1-8B config); carry .devcarry/part.0* .devcarry/sums and this script;
# there: CALL_S=540 bash call51.sh
. tools/device_call.sh
step tests bash tools/device_cuda_tests.sh run tests
[ "$CALL_H200" = 1 ] && step grid bash -c "ATTN_PACK=1 bash tools/device_attention.sh run"
step prefill bash -c "ATTN_PACK=1 ATTN_TAG=pt bash tools/device_attention.sh prefill \
  --formats 16bit,int4 --pool-rows --cases 2048@8192,1x8192"
step cuda bash tools/device_cuda_tests.sh run PERF_MODEL=llama-3.1-8b-instruct \
  PERF_SUITES=prefill64k PERF_FORMATS=16bit,int4_kivi PERF_TAG=_64k perf \
  S4KV_PREFILL_POOL_ROWS=0 PERF_FORMATS=int4_kivi PERF_TAG=_64k_norows perf
step memcheck bash tools/device_cuda_tests.sh run SANITIZE_TIMEOUT=120 memcheck
step racecheck bash tools/device_cuda_tests.sh run SANITIZE_TIMEOUT=150 racecheck
cat "$CALL_OUT"/r/memcheck/summary.txt "$CALL_OUT"/r/racecheck/summary.txt 2>/dev/null | tail -20
cp "$CALL_OUT/r/tests/summary.txt" "$CALL_OUT/summary.txt" 2>/dev/null
cp "$CALL_OUT/r/cuda/summary.txt" "$CALL_OUT/summary_perf.txt" 2>/dev/null
grep -E "2048@8192|1x8192" "$CALL_OUT"/r/prefill/prefill.txt
grep -E "PASSED|FAILED|Throughput|rc " "$CALL_OUT/summary.txt" "$CALL_OUT/summary_perf.txt"
call_finish

#!/usr/bin/env bash
# The measurements of issue 14 that no device call has made yet, in the order they matter, for
# whichever card a call gets (a call script kept in the tree, so that a session whose checkout
# lost its own queue can run them). Steps past the call's deadline are skipped; rerun what is left.
#   here:  bash tools/device_cuda_tests.sh pack; SLIM_PERF=1 bash tools/device_slim.sh out
#          (dummy weights only: models/ and the goldens stay here, both tokenizers travel)
#   call:  carry .devcarry/part.0* and .devcarry/sums; CALL_S=540 bash tools/device_pending.sh
#   after: bash tools/device_slim.sh in; results under bench/results/cuda_<card>/ with the card,
#          the command and the commit.
# H200 (the targets are stated for it): the decode grid twice (int4_kivi at >= 80 % of the copy
# bandwidth and >= 3x SDPA at B >= 16 x ctx >= 8k), the KV-bound row (int4_kivi and 16-bit in one
# run), capacity on the Qwen2.5-7B config (the pool rows' 64 MB included).
# H100: 128,000-token prompts on the Llama-3.1-8B config, 16-bit and int4_kivi at the default
# pool-row cap (32,768 positions), then int4_kivi with rows for the whole context
# (S4KV_PREFILL_POOL_ROW_CAP=131072: whether the cap should be max_model_len); then a prefill's
# time by kernel (16-bit, 1 x 8192: attention's share against the GEMMs'), then the KV-bound row
# of fp8_e4m3 beside int4_kivi.
# Either card, in the time left: racecheck's sampler group (groups 1-3 gave 0 hazards at 459c9db).
. tools/device_call.sh
keep_perf() { cp /tmp/s4kv-results/perf_*.json "$CALL_OUT/r/" 2>/dev/null || true; }
if [ "$CALL_H200" = 1 ]; then
  step unpack bash tools/device_cuda_tests.sh run
  step grid bash -c "ATTN_PACK=1 bash tools/device_attention.sh run"
  step grid2 bash -c "ATTN_PACK=1 bash tools/device_attention.sh run"
  step long bash tools/device_cuda_tests.sh run PERF_SUITES=long PERF_FORMATS=int4_kivi,16bit \
    PERF_TAG=_long perf
  keep_perf
  step capacity bash tools/device_cuda_tests.sh run CAPACITY_MODELS=qwen2.5-7b-instruct capacity
else
  step p128 bash tools/device_cuda_tests.sh run PERF_MODEL=llama-3.1-8b-instruct \
    PERF_SUITES=prefill128k PERF_FORMATS=16bit,int4_kivi PERF_TAG=_128k perf \
    S4KV_PREFILL_POOL_ROW_CAP=131072 PERF_FORMATS=int4_kivi PERF_TAG=_128k_cap131072 perf
  keep_perf
  step profile bash tools/device_cuda_tests.sh run PROFILE_TAG=_prefill \
    "PROFILE_ARGS=--batch-size 1 --input-len 8192 --output-len 1 --launch-skip 0 --launch-count 1200 --formats 16bit" \
    profile
  step long bash tools/device_cuda_tests.sh run PERF_SUITES=long PERF_FORMATS=fp8_e4m3,int4_kivi \
    PERF_TAG=_long perf
  keep_perf
fi
left=$((CALL_END - $(date +%s) - 25))
if [ "$left" -gt 60 ]; then
  step race bash tools/device_cuda_tests.sh run SANITIZE_TIMEOUT=$left \
    "SANITIZE_RACECHECK_FILTER=*CudaSampler*/0" racecheck
fi
for d in grid grid2 long capacity p128 profile race; do
  [ -f "$CALL_OUT/r/$d/summary.txt" ] && { echo "== $d"; tail -25 "$CALL_OUT/r/$d/summary.txt"; }
done
for d in grid grid2; do tail -40 "$CALL_OUT/r/$d.log" 2>/dev/null; done
call_finish

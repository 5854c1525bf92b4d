#!/usr/bin/env bash
# Twenty-fourth session: int4_kivi prefill pool tiles with their RoPE rows staged in fp16 (pr)
# against main's kernels (dd): the decode checks of pr, the prefill bench of each build twice in
# opposite orders; then the GPU tests of the new pack and the long-prompt prefill (input 32000,
# four chunks of 8192) of 16-bit and int4_kivi from the new pack (.devcarry) and from main's
# (.devcarry2).
. tools/device_call.sh
step check_pr bash -c "ATTN_TAG=pr bash tools/device_attention.sh check"
for t in dd pr; do step "prefill_${t}_1" bash -c "ATTN_TAG=$t bash tools/device_attention.sh prefill"; done
for t in pr dd; do step "prefill_${t}_2" bash -c "ATTN_TAG=$t bash tools/device_attention.sh prefill"; done
step cuda bash tools/device_cuda_tests.sh run tests serve PERF_SUITES=prefill32k \
  PERF_FORMATS=16bit,int4_kivi PERF_TAG=_new perf use:.devcarry2 PERF_TAG=_main perf
cp "$CALL_OUT/r/cuda/summary.txt" "$CALL_OUT/summary.txt" 2>/dev/null
call_finish

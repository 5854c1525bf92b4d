#!/usr/bin/env bash
# Twenty-fourth session, the last call's budget: int4_kivi prefill in thread blocks of two heads
# (the pack of 7b42d2c; S4KV_PREFILL_HEAD_PAIRS=0 runs 2a13bb6's one-head blocks in the same
# binaries): the pack's GPU tests, then its prefill bench both ways, twice in opposite orders.
. tools/device_call.sh
step tests bash tools/device_cuda_tests.sh run tests
n=0
for v in 0 1 1 0; do
  n=$((n + 1))
  step "prefill_p${v}_$n" bash -c "S4KV_PREFILL_HEAD_PAIRS=$v ATTN_PACK=1 ATTN_TAG=pp \
    bash tools/device_attention.sh prefill --formats int4 --cases 1x8192,2048@8192"
done
cp "$CALL_OUT/r/tests/summary.txt" "$CALL_OUT/summary.txt" 2>/dev/null
call_finish

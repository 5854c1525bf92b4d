#!/usr/bin/env bash
# Main at 68cb86f (the turned query in 8-byte chunks by default): the default attention grid of
# its bench (m: the acceptance table, every format beside torch SDPA), then backend_cuda_test and
# async_backend_cuda_test of its pack (`tests`).
# Run as `CALL_S=480 bash .devq/call24.sh` (its prologue inline then; tools/device_call.sh since).
. tools/device_call.sh
step grid_m bash -c "ATTN_TAG=m bash tools/device_attention.sh run"
step tests bash tools/device_cuda_tests.sh run tests
tail -4 "$OUT/r/tests/summary.txt" 2> /dev/null
grep -E 'PASSED|FAILED|tests ran' "$OUT/r/tests.log" | tail -6
call_finish

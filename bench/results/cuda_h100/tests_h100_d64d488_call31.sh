#!/usr/bin/env bash
# Twenty-second session's fourth call: the GPU tests of main with two stages the default
# (backend_cuda_test, serve's cuda and cpu texts); on an H200 also main's default grid from the
# tw2s2 bench (the same kernels: 68cb86f with -DS4KV_INT4_STAGES=2).
. tools/device_call.sh
step tests bash tools/device_cuda_tests.sh run tests serve
[ $CALL_H200 = 1 ] && step grid_tw2s2 bash -c "ATTN_TAG=tw2s2 bash tools/device_attention.sh run"
cp "$CALL_OUT/r/tests/summary.txt" "$CALL_OUT/summary.txt" 2>/dev/null
call_finish

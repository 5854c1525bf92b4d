#!/usr/bin/env bash
# Twenty-fourth session: the GPU tests of the pack with int4_kivi prefill's RoPE rows staged in
# fp16 (backend_cuda_test, async_backend_cuda_test, serve's cuda and cpu texts), then
# compute-sanitizer's memcheck and racecheck subsets (tools/device_steps.sh sanitize).
. tools/device_call.sh
step cuda bash tools/device_cuda_tests.sh run tests serve sanitize
cp "$CALL_OUT/r/cuda/summary.txt" "$CALL_OUT/summary.txt" 2>/dev/null
call_finish

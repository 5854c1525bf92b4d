#!/usr/bin/env bash
# Branch partial on the warm machine after call52: racecheck's kernel-family subset with room to
# finish, then the KV-bound row of fp8_e4m3 on the same build.
. tools/device_call.sh
step racecheck bash tools/device_cuda_tests.sh run SANITIZE_TIMEOUT=330 racecheck
step cuda bash tools/device_cuda_tests.sh run PERF_SUITES=long PERF_FORMATS=fp8_e4m3 PERF_TAG=_long_fp8 perf
tail -25 "$CALL_OUT"/r/racecheck/summary.txt 2>/dev/null
grep -E "rc |Throughput|preempt" "$CALL_OUT"/r/cuda/summary.txt 2>/dev/null
call_finish

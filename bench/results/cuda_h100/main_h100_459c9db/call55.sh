#!/usr/bin/env bash
# main at 459c9db (int4_kivi's kernel rows only for the tensor-core kernels; racecheck in
# groups): the CUDA tests, then racecheck's groups in the time left.
# Here: bash tools/device_cuda_tests.sh pack; SLIM_TOKENIZERS=1 bash tools/device_slim.sh out;
# carry .devcarry/part.0* .devcarry/sums and this script; there: CALL_S=230 bash call55.sh
. tools/device_call.sh
step tests bash tools/device_cuda_tests.sh run tests
left=$((CALL_END - $(date +%s) - 25))
step racecheck bash tools/device_cuda_tests.sh run SANITIZE_TIMEOUT=$left racecheck
cp "$CALL_OUT/r/tests/summary.txt" "$CALL_OUT/summary.txt" 2>/dev/null
grep -E "PASSED|FAILED" "$CALL_OUT/summary.txt"
grep -E "racecheck|SUMMARY" "$CALL_OUT/r/racecheck/summary.txt" 2>/dev/null
call_finish

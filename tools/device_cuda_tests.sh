#!/usr/bin/env bash
# The cuda-labelled tests on the GPU machine without building there: here, build
# backend_cuda_test (sm_90 is enough for the H200), strip and xz it into .devcarry/ (ignored by
# git; about 0.4 MB, within what travels); there, unpack it and run it plain, under
# compute-sanitizer memcheck and under racecheck. Results land in $OUT.
#
#   bash tools/device_cuda_tests.sh pack                 # here
#   device run, carry [".devcarry"]: bash tools/device_cuda_tests.sh run
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  pack)
    cmake --build build -j2 --target backend_cuda_test
    mkdir -p .devcarry
    grep -qx '/.devcarry/' .git/info/exclude || echo '/.devcarry/' >> .git/info/exclude
    strip -o .devcarry/backend_cuda_test build/tests/backend/backend_cuda_test
    xz -9 -f .devcarry/backend_cuda_test
    ls -la .devcarry/backend_cuda_test.xz
    ;;
  run)
    : "${OUT:?run on the GPU machine, where the device tool sets OUT}"
    python3 -c "import lzma; open('/tmp/bct', 'wb').write(lzma.open('.devcarry/backend_cuda_test.xz').read())"
    chmod +x /tmp/bct
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
    status=0
    /tmp/bct > "$OUT/tests.txt" 2>&1 || status=1
    tail -3 "$OUT/tests.txt"
    compute-sanitizer --tool memcheck /tmp/bct > "$OUT/memcheck.txt" 2>&1 || status=1
    tail -1 "$OUT/memcheck.txt"
    compute-sanitizer --tool racecheck /tmp/bct --gtest_filter='*Int4*' > "$OUT/racecheck.txt" 2>&1 || status=1
    tail -1 "$OUT/racecheck.txt"
    exit $status
    ;;
  *) echo "usage: $0 pack|run" >&2; exit 2 ;;
esac

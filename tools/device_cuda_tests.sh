#!/usr/bin/env bash
# The cuda-labelled tests and a `serve --device cuda` smoke run on the GPU machine, without
# building there (it lacks the Debian libraries). Here: build `s4kv` and `backend_cuda_test` in
# build-device/ (sm_90 for the H200, OpenBLAS linked statically so the binaries need only the
# CUDA runtime there), strip, xz and split them into parts of at most 0.9 MB under .devcarry/
# (ignored by git), since only about 1 MB travels beside the tracked tree per call. There:
# carry one part per call, `stash` keeps it in /tmp/s4kv-stash (the warm machine keeps /tmp;
# the carried folder is replaced each call); `run` joins the stash and the last part, checks
# the sum, unpacks them and runs the tests plain, under
# compute-sanitizer memcheck and racecheck, then a short serve run. Results land in $OUT.
#
#   bash tools/device_cuda_tests.sh pack        # here; prints the parts
#   device run, carry [".devcarry/part.00"]: bash tools/device_cuda_tests.sh stash
#   ... one call per part ...
#   device run, carry [last part, ".devcarry/bins.sha256"]: bash tools/device_cuda_tests.sh run
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  pack)
    grep -qx '/.devcarry/' .git/info/exclude || echo '/.devcarry/' >> .git/info/exclude
    if [ ! -f build-device/CMakeCache.txt ]; then
      cmake -S . -B build-device -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DS4KV_BUILD_BENCH=OFF \
        -DS4KV_OPENBLAS_LIB=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.a \
        ${S4KV_CMAKE_ARGS:-}
    fi
    cmake --build build-device -j2 --target s4kv backend_cuda_test
    rm -rf .devcarry && mkdir -p .devcarry/stage
    strip -o .devcarry/stage/s4kv build-device/src/cli/s4kv
    strip -o .devcarry/stage/backend_cuda_test build-device/tests/backend/backend_cuda_test
    tar -C .devcarry/stage -cf - s4kv backend_cuda_test | xz -9e -T2 > .devcarry/bins.tar.xz
    rm -rf .devcarry/stage
    (cd .devcarry && split -b 900000 -d bins.tar.xz part. && sha256sum bins.tar.xz > bins.sha256 \
      && rm bins.tar.xz)
    ls -la .devcarry
    ;;
  stash)
    mkdir -p /tmp/s4kv-stash && cp .devcarry/part.* /tmp/s4kv-stash/ && ls -la /tmp/s4kv-stash
    ;;
  run)
    : "${OUT:?run on the GPU machine, where the device tool sets OUT}"
    mkdir -p /tmp/s4kv-stash && cp .devcarry/part.* /tmp/s4kv-stash/
    cat /tmp/s4kv-stash/part.* > /tmp/bins.tar.xz
    (cd /tmp && sed 's#bins.tar.xz#/tmp/bins.tar.xz#' "$OLDPWD/.devcarry/bins.sha256" | sha256sum -c -)
    mkdir -p /tmp/s4kv-bin && tar -C /tmp/s4kv-bin -xJf /tmp/bins.tar.xz
    export PATH=/tmp/s4kv-bin:$PATH
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
    status=0
    backend_cuda_test > "$OUT/tests.txt" 2>&1 || status=1
    grep -E "^\[ (golden|cuda/cpu) |FAILED|PASSED" "$OUT/tests.txt" | tail -60
    if [ "${S4KV_SANITIZE:-1}" = 1 ]; then
      compute-sanitizer --tool memcheck backend_cuda_test \
        --gtest_filter='*Int4*:*Rope*:*Rmsnorm*:*s4kv_tiny_int4_v2_b64*:*llama_tiny_fp8_b32*:*Refuses*' \
        > "$OUT/memcheck.txt" 2>&1 || status=1
      tail -1 "$OUT/memcheck.txt"
      compute-sanitizer --tool racecheck backend_cuda_test \
        --gtest_filter='*Int4*:*s4kv_tiny_int4_v2_b32*' > "$OUT/racecheck.txt" 2>&1 || status=1
      tail -1 "$OUT/racecheck.txt"
    fi
    bash tools/device_serve_smoke.sh "$OUT" || status=1
    exit $status
    ;;
  *) echo "usage: $0 pack|stash|run" >&2; exit 2 ;;
esac

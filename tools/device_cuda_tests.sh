#!/usr/bin/env bash
# The GPU checks of the CUDA backend on the GPU machine (device tool), without building there
# (it lacks the Debian libraries). Here, `pack` builds `s4kv` and `backend_cuda_test` in
# build-device/ (sm_90 for the H200; OpenBLAS linked statically, so the binaries need only the
# CUDA runtime and cuBLASLt there), strips and xz-compresses them (and, with E2E=1, the e2e
# suite's Python packages that the machine lacks: openai and its dependencies, as wheels from
# PyPI unpacked) and splits them into parts of 1.9 MB under .devcarry/ (ignored by git; a call
# carries at most 8 paths, so three or four parts and `sums`). With the tree slimmed
# (tools/device_slim.sh out: ~60 MB) one call carries the whole pack (~5.6 MB); where less
# room is left (PART_BYTES smaller), one call per part carries it and
# `stash` keeps it in /tmp/s4kv-stash (a warm machine keeps /tmp; the carried folder is replaced
# on every call); the last call carries the last part and the sums and runs the steps:
#   tests     backend_cuda_test (the `cuda` label: kernels, attention, whole backend, goldens)
#   sanitize  compute-sanitizer memcheck and racecheck on a subset of it (memcheck, racecheck:
#             one of them; each run under SANITIZE_TIMEOUT, 240 s)
#   sanitize_serve  a short s4kv serve --device cuda run under memcheck (greedy and seeded
#             requests with every sampling setting); racecheck_serve the same under racecheck
#   memcheck_all, racecheck_all  the whole backend_cuda_test under memcheck / racecheck
#   serve     s4kv serve --device cuda vs --device cpu on s4kv-tiny: one greedy completion each
#   twins     shape twins of the five seed models (tools/make_shape_twins.py), transformers'
#             goldens, S4 KV's logits against them (fp32 and bf16) and s4kv eval of int4_kivi
#             and fp8_e4m3 on each
#   eval      s4kv eval --device cuda on s4kv-tiny, docs/fidelity.md's settings
#   dummy     --load-format dummy on the full Qwen2.5-7B and Llama-3.1-8B configs: start,
#             one request, the capacity line
#   e2e       the tests/server suite against `s4kv serve --device cuda` (S4KV_SERVE_ARGS)
#   capacity  KV tokens and maximum concurrency of every format on the full 7B / 8B configs
#             (bench/gpu_capacity.py, dummy weights)
#   perf      s4kv bench latency / throughput of every format on the full Qwen2.5-7B config
#             (bench/gpu_perf.py; PERF_SUITES, PERF_LONG_PROMPTS)
#   profile   per-kernel GPU time of decode steps, every format (bench/gpu_profile.py; PROFILE_ARGS)
#   serve_bench  bench/serve_bench.py against s4kv serve --device cuda, 7B config, dummy weights
#             (SERVE_BENCH_FORMATS, SERVE_BENCH_ARGS, SERVE_BENCH_SERVE_ARGS)
#   attention decode attention of every format beside torch SDPA (bench/attention_bench.py;
#             ATTENTION_ARGS, e.g. --quick)
# Everything lands in $OUT/summary.txt and $OUT/results.tar.gz.
#
#   E2E=1 bash tools/device_cuda_tests.sh pack      # here; lists the parts
#   device run, carry [".devcarry/<part>"]: bash tools/device_cuda_tests.sh stash   (per part)
#   device run, carry [last part, ".devcarry/sums"]: bash tools/device_cuda_tests.sh run tests serve ...
#   (a NAME=VALUE among the steps is exported for the steps after it; use:DIR switches the
#   steps after it to the pack whose parts and sums are all in DIR, e.g. a second pack of another
#   commit made with `pack` in another worktree and copied to .devcarry2/, which travels with
#   the tree where git does not ignore it: an A/B of two builds in one call, on one machine,
#   `run use:.devcarry PERF_TAG=_new perf use:.devcarry2 PERF_TAG=_main perf ...`)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
case "${1:-}" in
  pack)
    exclude=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file
    mkdir -p "$(dirname "$exclude")"
    grep -qx '/.devcarry/' "$exclude" 2>/dev/null || echo '/.devcarry/' >> "$exclude"
    if [ ! -f build-device/CMakeCache.txt ]; then
      cmake -S . -B build-device -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DS4KV_BUILD_BENCH=ON \
        -DS4KV_OPENBLAS_LIB=/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.a \
        ${S4KV_CMAKE_ARGS:-}
    fi
    cmake --build build-device -j2 --target s4kv backend_cuda_test async_backend_cuda_test \
      cuda_attention_bench
    # Only the pack's own files: the benches kept beside them (tools/device_attention.sh build)
    # stay; every old part goes (a pack of fewer parts must not be joined to an old one's last).
    rm -rf .devcarry/stage .devcarry/part.* .devcarry/sums .devcarry/all.tar.xz
    mkdir -p .devcarry/stage/bin
    # What the binaries were built from (the device's copy of the tree has no history), and the
    # CUDA flags the build directory was configured with (a measurement switch, if any).
    cuda_flags=$(sed -n 's/^CMAKE_CUDA_FLAGS:STRING=//p' build-device/CMakeCache.txt)
    echo "built from $(git describe --always --dirty) on $(date -u +%FT%TZ)${cuda_flags:+ with \
CMAKE_CUDA_FLAGS=$cuda_flags}" > .devcarry/stage/BUILD_INFO
    # PACK_ONLY_S4KV=1: the server binary alone (steps that need nothing else: serve, dummy,
    # capacity), a third of the parts.
    strip -o .devcarry/stage/bin/s4kv build-device/src/cli/s4kv
    if [ "${PACK_ONLY_S4KV:-0}" != 1 ]; then
      strip -o .devcarry/stage/bin/backend_cuda_test build-device/tests/backend/backend_cuda_test
      strip -o .devcarry/stage/bin/cuda_attention_bench build-device/bench/cuda_attention_bench
      strip -o .devcarry/stage/bin/async_backend_cuda_test \
        build-device/tests/backend/async_backend_cuda_test
    fi
    if [ "${E2E:-0}" = 1 ]; then
      mkdir -p .devcarry/stage/whl .devcarry/stage/site
      # openai and what the machine's image lacks of its dependencies (KINDS.md lists the rest).
      for p in $(grep -E '^openai==' requirements-test.txt) httpx2 httpcore2 pydantic pydantic_core \
          jiter annotated-types typing-inspection sniffio truststore; do
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
          --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
          --platform manylinux2014_x86_64 -d .devcarry/stage/whl "$p"
      done
      for w in .devcarry/stage/whl/*.whl; do python3 -m zipfile -e "$w" .devcarry/stage/site; done
      find .devcarry/stage/site -name '*.pyi' -delete
      rm -rf .devcarry/stage/whl
    fi
    # Same inputs, same parts: a part already stashed there need not travel again.
    tar -C .devcarry/stage --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - . |
      xz -9e -T2 > .devcarry/all.tar.xz
    rm -rf .devcarry/stage
    (cd .devcarry && split -b ${PART_BYTES:-1900000} -d all.tar.xz part. && sha256sum all.tar.xz > sums && rm all.tar.xz)
    ls -la .devcarry
    ;;
  stash)
    mkdir -p /tmp/s4kv-stash && cp .devcarry/part.* /tmp/s4kv-stash/ && ls /tmp/s4kv-stash
    ;;
  run)
    shift
    : "${OUT:?run on the GPU machine, where the device tool sets OUT}"
    mkdir -p "$OUT"  # a call may point OUT at a folder of its own under the tool's
    res=/tmp/s4kv-results && rm -rf $res && mkdir -p $res
    # unpack PARTS_DIR SUMS_DIR: a pack's parts checked against its sums and unpacked into
    # /tmp/s4kv (the first pack's parts are those stashed by earlier calls plus this call's).
    unpack() {
      local sums
      sums=$(cd "$root" && realpath "$2/sums")
      cat "$1"/part.* > /tmp/all.tar.xz
      (cd /tmp && sed 's#all.tar.xz#/tmp/all.tar.xz#' "$sums" | sha256sum -c -)
      rm -rf /tmp/s4kv && mkdir -p /tmp/s4kv && tar -C /tmp/s4kv -xJf /tmp/all.tar.xz
      tee -a $res/gpu.txt < /tmp/s4kv/BUILD_INFO
    }
    mkdir -p /tmp/s4kv-stash && cp .devcarry/part.* /tmp/s4kv-stash/
    export PATH=/tmp/s4kv/bin:$PATH S4KV_BIN=/tmp/s4kv/bin/s4kv
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee $res/gpu.txt
    unpack /tmp/s4kv-stash .devcarry
    [ ! -d /tmp/s4kv/site ] || export PYTHONPATH=/tmp/s4kv/site
    status=0
    for step in "$@"; do
      if [[ "$step" == use:* ]]; then
        echo "== $step" | tee -a $res/summary.txt
        unpack "${step#use:}" "${step#use:}" | tee -a $res/summary.txt
        continue
      fi
      # NAME=VALUE between steps: set for the steps after it (e.g. a second perf run with
      # S4KV_SAMPLER_CLUSTER=0 PERF_TAG=_nocluster).
      if [[ "$step" == *=* ]]; then
        export "${step?}" && echo "== set $step" | tee -a $res/summary.txt && continue
      fi
      echo "== $step" | tee -a $res/summary.txt
      if ! bash tools/device_steps.sh "$step" $res >> $res/summary.txt 2>&1; then
        echo "STEP FAILED: $step" | tee -a $res/summary.txt
        status=1
      fi
      sed -n '/^== '"$step"'$/,$p' $res/summary.txt | tail -n 20
      # After every step, so that a later step cut off by the time limit loses only itself.
      cp $res/summary.txt "$OUT/summary.txt"
      tar -C /tmp -czf "$OUT/results.tar.gz" s4kv-results
    done
    exit $status
    ;;
  *) echo "usage: $0 pack|stash|run STEP..." >&2; exit 2 ;;
esac

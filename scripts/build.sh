#!/usr/bin/env bash
# Configures and builds S4 KV into build/ (Release with debug info). The CUDA backend is
# compiled when nvcc is found (on PATH or in /usr/local/cuda/bin) for sm_80, 86, 89 and 90; set
# S4KV_ENABLE_CUDA=OFF to skip it, S4KV_CUDA_ARCHITECTURES (e.g. 90) to compile fewer.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
jobs=${S4KV_JOBS:-$(nproc)}
# GPU architectures: S4KV_CUDA_ARCHITECTURES (scripts/test.sh sets 90), unless S4KV_CMAKE_ARGS
# names them. Passed on every configure so that build/ never keeps another script's choice.
args=${S4KV_CMAKE_ARGS:-}
if [[ "$args" != *CMAKE_CUDA_ARCHITECTURES* ]]; then
  args="$args -DCMAKE_CUDA_ARCHITECTURES=${S4KV_CUDA_ARCHITECTURES:-80;86;89;90}"
fi
cmake -S . -B build -DS4KV_ENABLE_CUDA="${S4KV_ENABLE_CUDA:-ON}" $args >/dev/null
cmake --build build -j"$jobs"

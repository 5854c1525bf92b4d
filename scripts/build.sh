#!/usr/bin/env bash
# Configures and builds S4 KV into build/ (Release with debug info). The CUDA backend is
# compiled when nvcc is found (on PATH or in /usr/local/cuda/bin); set S4KV_ENABLE_CUDA=OFF to skip.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
jobs=${S4KV_JOBS:-$(nproc)}
cmake -S . -B build -DS4KV_ENABLE_CUDA="${S4KV_ENABLE_CUDA:-ON}" ${S4KV_CMAKE_ARGS:-} >/dev/null
cmake --build build -j"$jobs"

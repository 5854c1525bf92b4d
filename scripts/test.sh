#!/usr/bin/env bash
# README's test command: installs dependencies (with the deploy/ linters), builds, runs every
# test (ctest).
# Tests labelled `cuda` skip cleanly on machines without a GPU. The CUDA code is compiled for
# sm_90 only here (scripts/run.sh builds sm_80, 86, 89 and 90).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh --deploy-tools
# One GPU architecture: the tests compile the CUDA code (a kernel that stops compiling fails)
# but CI has no GPU to run more than one; S4KV_CUDA_ARCHITECTURES or S4KV_CMAKE_ARGS override.
S4KV_CUDA_ARCHITECTURES=${S4KV_CUDA_ARCHITECTURES:-90} bash scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"

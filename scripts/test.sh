#!/usr/bin/env bash
# README's test command: installs dependencies, builds, runs every test (ctest).
# Tests labelled `cuda` skip cleanly on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"

#!/usr/bin/env bash
# README's main command: installs dependencies, builds, and starts the OpenAI-compatible
# server on the bundled model (http://127.0.0.1:8000, int4_kivi KV cache) until Ctrl-C or
# SIGTERM. Arguments are passed to `s4kv serve` (e.g. `bash scripts/run.sh --port 8080
# --api-key secret`, or `--host 0.0.0.0` to listen on every interface).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
exec build/src/cli/s4kv serve models/s4kv-tiny "$@"

#!/usr/bin/env bash
# README's main command: installs dependencies, builds, and runs S4 KV on the bundled model.
# Until the engine lands (`s4kv generate`, then `s4kv serve`), the main job is validating
# and loading the bundled checkpoint and reporting its KV cache footprint.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
exec build/src/cli/s4kv check-model --model models/s4kv-tiny "$@"

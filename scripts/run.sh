#!/usr/bin/env bash
# README's main command: installs dependencies, builds, and runs S4 KV on the bundled model.
# Until the HTTP server lands (`s4kv serve`), the main job is `s4kv generate`: with no
# arguments it completes a demo prompt greedily with the int4_kivi KV cache; any arguments
# replace the defaults (e.g. `bash scripts/run.sh --prompt "A dictionary is" --max-tokens 40`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
if [ $# -eq 0 ]; then
  set -- --prompt "The history of the" --max-tokens 64 --temperature 0
fi
exec build/src/cli/s4kv generate --model models/s4kv-tiny "$@"

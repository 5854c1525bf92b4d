#!/usr/bin/env bash
# Fails when a C++/CUDA source differs from .clang-format (clang-format 14). With --fix, rewrites.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=(--dry-run --Werror)
[ "${1:-}" = "--fix" ] && mode=(-i)
git ls-files --cached --others --exclude-standard -- 'src/*' 'tests/*' 'bench/*' |
  while read -r f; do [ -f "$f" ] && echo "$f"; done |
  grep -E '\.(h|cc|cu|cuh)$' | xargs -r clang-format "${mode[@]}"

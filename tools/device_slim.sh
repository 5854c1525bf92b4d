#!/usr/bin/env bash
# Keeps a device call within its 64 MiB (the working tree that travels plus the carried paths):
# the tree is ~67 MB, so a call that carries the packed build (tools/device_cuda_tests.sh pack,
# ~5.6 MB) or attention benches (tools/device_attention.sh build, ~0.9 MB each) first moves out
# files that no GPU step reads, and moves them back after the call. The limit is checked on the
# disk blocks the files take (a refused call showed that apparent sizes undercount: 60.0 MB of
# bytes are 61.5 MB of blocks). Slimmed (~61.5 MB), a call takes the pack alone only with
# SLIM_TOKENIZERS=1 (it moves the whole tests/fixtures/tokenizers, 3 MB, too: the steps tests,
# serve, sanitize*, eval, e2e and attention do not read it; capacity, dummy, perf, twins and
# serve_bench do), or four benches. SLIM_ATTENTION=1 (calls that run only
# tools/device_attention.sh) moves the model and golden files too (models/, tests/golden,
# tests/fixtures/tokenizers: ~52 MB more): then the whole .devcarry (every bench, ~50 MB) can be
# the one carried path (a call carries at most 8). SLIM_PERF=1 (calls that run only the steps of
# dummy weights: capacity, perf, profile, and tools/device_attention.sh) moves models/ and
# tests/golden but keeps the Qwen2.5 and Llama-3 tokenizers, so that the pack and both fit.
# Otherwise carry the files by name, not all of .devcarry. Never commit while they are out (git
# status shows them deleted).
#   bash tools/device_slim.sh size [CARRY...]  # bytes (in disk blocks) that would travel
#   [SLIM_TOKENIZERS=1 | SLIM_ATTENTION=1 | SLIM_PERF=1] bash tools/device_slim.sh out  # move them to
#                                              # ../device-slim-moved/
#   bash tools/device_slim.sh in               # move them back
# What moves: the tokenizer and chat-template goldens, the Qwen3 tokenizer (no GPU step uses
# Qwen3; gpu_capacity.py and device_steps.sh read the Qwen2.5 and Llama-3 ones), the held-out
# text, bench/results (results come back under $OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
moved=../device-slim-moved
tokenizers=tests/fixtures/tokenizers/qwen3/tokenizer.json.xz
[ "${SLIM_TOKENIZERS:-0}" != 1 ] || tokenizers=tests/fixtures/tokenizers
bulky=(tests/golden/tokenizers tests/golden/chat)
if [ "${SLIM_ATTENTION:-0}" = 1 ]; then
  bulky=(models tests/golden) && tokenizers=tests/fixtures/tokenizers
elif [ "${SLIM_PERF:-0}" = 1 ]; then
  bulky=(models tests/golden) && tokenizers=tests/fixtures/tokenizers/qwen3/tokenizer.json.xz
fi
paths=("${bulky[@]}" "$tokenizers" bench/data/heldout.txt.xz bench/results)
limit=$((64 * 1024 * 1024))
case "${1:-}" in
  size)
    shift
    tree=$( (git ls-files -z --cached --others --exclude-standard | xargs -0 -r du -B1 2>/dev/null || true) |
      awk '{s += $1} END {print s + 0}')
    carry=0
    for c in "$@"; do carry=$((carry + $(du -sB1 "$c" | cut -f1))); done
    total=$((tree + carry))
    echo "tree $tree bytes + carry $carry bytes = $total of $limit ($((limit - total)) to spare)"
    [ "$total" -le "$limit" ] || { echo "over the limit: move more out or carry less" >&2; exit 1; }
    ;;
  out)
    [ ! -e "$moved" ] || { echo "$moved exists: already out? (run 'in' first)" >&2; exit 1; }
    for p in "${paths[@]}"; do
      mkdir -p "$moved/$(dirname "$p")" && mv "$p" "$moved/$p"
    done
    echo "moved out: ${paths[*]}"
    ;;
  in)
    [ -d "$moved" ] || { echo "nothing moved out" >&2; exit 1; }
    cp -a "$moved/." . && rm -rf "$moved"
    git status --short | grep -v '^??' || echo "the tree is whole again"
    ;;
  *) echo "usage: $0 size [CARRY...]|out|in" >&2; exit 2 ;;
esac

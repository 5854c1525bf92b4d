#!/usr/bin/env bash
# Runs on the GPU machine (device tool): trains s4kv-tiny, makes the golden fixtures, runs the
# cuda-labelled tests that were built here, and packs the results into $OUT (split in 15 MB
# pieces, the transfer limit). Inputs are carried in .devcarry/ (see tools/README.md).
set -uo pipefail
: "${OUT:?}"
seconds=${1:-390}
work=/tmp/s4kv_train
mkdir -p "$work/data" "$work/out"
exec > >(tee "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
if [ -x .devcarry/backend_cuda_test ]; then
  .devcarry/backend_cuda_test 2>&1 | tail -30
fi
xz -dc .devcarry/train_tokens.bin.xz > "$work/data/train_tokens.bin"
cp .devcarry/heldout_tokens.bin "$work/data/"
export PYTHONUNBUFFERED=1
# Smoke run first (a few steps, then golden on it): a broken API call costs seconds, not the run.
python3 tools/train_tiny_model.py --data "$work/data" --tokenizer-dir models/s4kv-tiny \
  --out "$work/smoke" --seconds 3 --max-steps 40 && CUDA_VISIBLE_DEVICES= python3 tools/make_golden.py \
  --model "$work/smoke" --heldout "$work/data/heldout_tokens.bin" --out "$work/smoke_golden" \
  || { echo "SMOKE FAILED"; exit 1; }
python3 tools/train_tiny_model.py --data "$work/data" --tokenizer-dir models/s4kv-tiny \
  --out "$work/out/s4kv-tiny" --seconds "$seconds" || echo "TRAIN FAILED"
if [ -f "$work/out/s4kv-tiny/model.safetensors" ]; then
  CUDA_VISIBLE_DEVICES= python3 tools/make_golden.py --model "$work/out/s4kv-tiny" \
    --heldout "$work/data/heldout_tokens.bin" --out "$work/out/golden" || echo "GOLDEN FAILED"
fi
tar -C "$work/out" -cf "$work/result.tar" .
split -b 15m "$work/result.tar" "$OUT/result.tar.part-"
ls -la "$OUT"

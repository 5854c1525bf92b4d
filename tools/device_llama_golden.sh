#!/usr/bin/env bash
# Runs on the GPU machine (device tool): makes llama-tiny (tools/make_llama_tiny.py) and its
# golden logits with transformers on the CPU (tools/make_golden.py --synthetic-seed), into
# $OUT/llama-tiny. Nothing is carried: the tokenizer comes from models/s4kv-tiny.
set -euo pipefail
: "${OUT:?}"
exec > >(tee "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1
python3 -c "import torch, transformers, tokenizers, safetensors; print(torch.__version__, transformers.__version__, tokenizers.__version__, safetensors.__version__)"
python3 tools/make_llama_tiny.py --tokenizer-from models/s4kv-tiny \
  --out "$OUT/llama-tiny/model" --seed 0
CUDA_VISIBLE_DEVICES= python3 tools/make_golden.py --model "$OUT/llama-tiny/model" \
  --synthetic-seed 1 --out "$OUT/llama-tiny"
ls -la "$OUT/llama-tiny" "$OUT/llama-tiny/model"

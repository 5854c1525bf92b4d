#!/usr/bin/env bash
# The container's entry point: `s4kv serve MODEL ARGS...` on 0.0.0.0:$S4KV_PORT. The model is
# read from the Hugging Face cache in $HF_HOME (a mounted volume); with S4KV_FETCH_MODEL=1 a
# model missing there is downloaded first (the only network access, before the server starts).
# The API key comes from S4KV_API_KEY (the server reads it; it is never put on a command line).
set -euo pipefail
model=${1:?usage: s4kv image MODEL [s4kv serve arguments]}
shift
cache_dir="$HF_HOME/hub/models--${model//\//--}"
if [ ! -d "$cache_dir" ]; then
  if [ "${S4KV_FETCH_MODEL:-0}" = 1 ]; then
    echo "fetching $model into $HF_HOME"
    hf download "$model" --exclude '*.pth' '*.bin' 'original/*'
  else
    echo "error: $model is not in $HF_HOME (mount your Hugging Face cache at /models, or set S4KV_FETCH_MODEL=1)" >&2
    exit 2
  fi
fi
export HF_HUB_OFFLINE=1
exec s4kv serve "$model" --host 0.0.0.0 --port "${S4KV_PORT}" "$@"

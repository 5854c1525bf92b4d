#!/usr/bin/env bash
# `s4kv serve --device cuda` on the bundled model, started as users start it, asked for one
# chat completion (greedy) and one seeded completion through the OpenAI routes; the same
# requests against `--device cpu` must give the same greedy text. Logs into $1.
set -euo pipefail
out=${1:?output directory}
port=18777
run_server() {  # device log
  s4kv serve models/s4kv-tiny --device "$1" --port $port --kv-cache-memory 256MiB \
    > "$2" 2>&1 &
  pid=$!
  for _ in $(seq 1 120); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && return 0
    sleep 0.5
  done
  echo "server ($1) did not become healthy"; cat "$2"; return 1
}
ask() {  # device
  curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"model":"models/s4kv-tiny","prompt":"Once upon a time","max_tokens":48,"temperature":0}' \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'
}
for dev in cuda cpu; do
  run_server $dev "$out/serve_$dev.log"
  ask $dev > "$out/completion_$dev.txt"
  kill -TERM $pid; wait $pid || true
done
grep -h "KV cache" "$out/serve_cuda.log" | head -2
echo "cuda: $(cat "$out/completion_cuda.txt" | head -c 200)"
echo "cpu:  $(cat "$out/completion_cpu.txt" | head -c 200)"
cmp -s "$out/completion_cuda.txt" "$out/completion_cpu.txt" && echo "greedy text equal" \
  || echo "greedy text differs"

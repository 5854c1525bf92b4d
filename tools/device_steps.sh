#!/usr/bin/env bash
# One step of tools/device_cuda_tests.sh on the GPU machine: bash tools/device_steps.sh STEP DIR.
# Logs go to DIR; what is printed is the step's summary. See device_cuda_tests.sh for the steps.
set -euo pipefail
step=$1 res=$2
port=18777

serve_start() {  # log args...: starts s4kv serve in the background, waits for /health
  local log=$1; shift
  ${SERVE_PREFIX:-} s4kv serve "$@" --port $port > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 1200); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && return 0
    kill -0 $pid 2> /dev/null || break
    sleep 0.5
  done
  echo "server did not become healthy: $*"; tail -5 "$log"; return 1
}
complete() {  # model prompt max_tokens [extra JSON fields]
  curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\":\"$1\",\"prompt\":\"$2\",\"max_tokens\":$3,${4:-\"temperature\":0}}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'
}
# A seeded request with every sampling setting the device sampler implements.
seeded='"temperature":0.8,"top_p":0.9,"top_k":40,"min_p":0.02,"seed":7,"presence_penalty":0.3,"frequency_penalty":0.2,"repetition_penalty":1.1,"logprobs":5'

serve_stop() { kill -TERM $pid; wait $pid || true; }

# racecheck reports, per kernel, the hazards in kernels of ours: those inside cuBLAS's Hopper
# GEMM kernels (nvjet_*, TMA loads into shared memory ordered by mbarriers) are listed apart.
# (Excluding nvjet_* with --kernel-name-exclude made the sanitizer itself fail on this
# machine: "failed to handle a hardware exception".)
race_report() {  # log: prints hazard counts by kernel; fails on a hazard outside cuBLAS
  local log=$1
  grep -h "RACECHECK SUMMARY" "$log" || { echo "no racecheck summary (cut off?)"; return 1; }
  sed -nE 's/.*Race reported between [A-Za-z]+ access at (.*)\+0x[0-9a-f]+.*/\1/p' "$log" |
    sort | uniq -c | sed -E 's/^ *([0-9]+) /  \1 reports in /' || true
  ! grep -E "Race reported between" "$log" | grep -v nvjet_ | grep -q .
}
verdict() {  # tool log: the summary; fails on an error (memcheck) or a hazard of ours
  if [ "$1" = racecheck ]; then
    race_report "$2"
  else
    grep -h "ERROR SUMMARY" "$2" || echo "no summary (cut off?)"
    grep -q "ERROR SUMMARY: 0 errors" "$2"
  fi
}

case $step in
  tests)
    status=0
    backend_cuda_test > $res/tests.txt 2>&1 || status=1
    async_backend_cuda_test >> $res/tests.txt 2>&1 || status=1
    grep -E '^\[ (cuda|golden)' $res/tests.txt | grep -v 'golden   \] .* p[0-4] ' || true
    grep -E '^\[  (PASSED|FAILED) ' $res/tests.txt
    exit $status
    ;;
  sanitize | memcheck | racecheck)
    # sanitize runs both tools, memcheck and racecheck one each, every run under a timeout
    # (SANITIZE_TIMEOUT, default 240 s: a cut run still leaves its log and fails the step; the
    # whole step once did not fit a call, 2026-12-07). SANITIZE_MEMCHECK_FILTER /
    # SANITIZE_RACECHECK_FILTER replace the gtest filters below (e.g. one kernel's tests after a
    # change to it).
    # memcheck: a subset of every kernel family, each at one layout.
    # racecheck: one case of each kernel of ours that runs no cuBLAS GEMM (decode and prefill
    # attention of each format, int4_kivi's two-head prefill blocks and pool rows, int4
    # quantize / commit / dequantize, RMSNorm, RoPE, sampler): a prefill case of 32 heads took
    # 144 s under the tool (2026-12-07), so the whole of them (-*CudaBackendEquivalence*:
    # *CudaPadding*:*CpuForwardGolden*:*CudaGraphs*:*GemmCuda*:*CudaBackendSmall*) cannot
    # finish in a call. Graph capture under racecheck ended the process (CudaGraphs). The cases
    # run in groups, a process each with its own summary, in the time left of SANITIZE_TIMEOUT:
    # a group the time cuts loses only itself (the 13 cases in one process, cut inside the
    # last one, left no summary at all). SANITIZE_RACECHECK_FILTER: groups apart by spaces.
    memcheck_filter="${SANITIZE_MEMCHECK_FILTER:-*Int4Kivi*:*Rope*:*Rmsnorm*:*CudaAttention*int4_v2_b64*:*CudaAttention*fp8_b32*:*CudaPrefillAttention*int4_v2_b64*:*CudaPrefillAttention*fp8_b32*:*llama_tiny_int4_v2_b32*:*OnePrefill/s4kv_tiny_cuda_bf16*:*Refuses*:*CudaSampler*:*CudaPadding*int4*}"
    read -r -a race_groups <<< "${SANITIZE_RACECHECK_FILTER:-*CudaPrefillAttention*/int4_v2_b64_gv128_h32_8 *CudaAttention*/int4_v2_b64_gv128:*CudaAttention*/16bit_b16:*CudaAttention*/fp8_b32:*Int4KiviQuantizeCuda*/0:*Int4KiviCommitCuda*/0:*RopeCuda*/0:*RopeKvWriteCuda*:*RmsnormCuda*/0 *CudaPrefillAttention*/bf16_b16_h8_8:*CudaPrefillAttention*/fp8_b32_h8_8 *CudaSampler*/0}"
    memcheck() {
      local start
      start=$(date +%s)
      timeout "${SANITIZE_TIMEOUT:-240}" compute-sanitizer --tool memcheck backend_cuda_test \
        --gtest_filter="$memcheck_filter" > "$res/memcheck.txt" 2>&1 || status=1
      echo "memcheck: $(( $(date +%s) - start )) s"
      verdict memcheck "$res/memcheck.txt" || status=1
    }
    racecheck() {
      local start end n=0 left t0 filter
      start=$(date +%s) && end=$((start + ${SANITIZE_TIMEOUT:-240}))
      for filter in "${race_groups[@]}"; do
        n=$((n + 1)) left=$((end - $(date +%s)))
        [ "$left" -gt 5 ] || { echo "racecheck group $n not run (no time left): $filter"; status=1; continue; }
        t0=$(date +%s)
        timeout "$left" compute-sanitizer --tool racecheck backend_cuda_test \
          --gtest_filter="$filter" > "$res/racecheck_$n.txt" 2>&1 || status=1
        echo "racecheck group $n, $(grep -c '^\[       OK' "$res/racecheck_$n.txt") tests passed," \
          "$(( $(date +%s) - t0 )) s: $filter"
        verdict racecheck "$res/racecheck_$n.txt" || status=1
      done
      echo "racecheck: $(( $(date +%s) - start )) s"
    }
    status=0
    [ "$step" = racecheck ] || memcheck
    [ "$step" = memcheck ] || racecheck
    exit $status
    ;;
  memcheck_all | racecheck_all)
    # The whole equivalence suite under one tool (timeout: a cut run still leaves its log).
    tool=${step%_all}
    status=0
    timeout ${SANITIZE_TIMEOUT:-480} compute-sanitizer --tool $tool backend_cuda_test \
      > $res/${tool}_all.txt 2>&1 || status=1
    grep -h "tests from .* ran\|PASSED\|FAILED" $res/${tool}_all.txt | head -5
    verdict $tool $res/${tool}_all.txt || status=1
    exit $status
    ;;
  sanitize_serve | racecheck_serve)
    status=0
    tool=memcheck
    [ $step = sanitize_serve ] || tool=racecheck
    # A short serve run under the tool: start-up (the profiling step, KV allocation), greedy
    # and seeded requests with every sampling setting, shutdown.
    SERVE_PREFIX="compute-sanitizer --tool $tool" serve_start $res/serve_$tool.log \
      models/s4kv-tiny --device cuda --max-num-seqs 8 --gpu-memory-utilization 0.05 || status=1
    complete models/s4kv-tiny "Once upon a time" 16 > /dev/null || status=1
    complete models/s4kv-tiny "The fox" 16 "$seeded" > /dev/null || status=1
    # The server itself gets the signal (compute-sanitizer prints its summary when it exits).
    pkill -TERM -x s4kv; wait $pid || true
    echo -n "serve: "
    verdict $tool $res/serve_$tool.log || status=1
    exit $status
    ;;
  serve)
    for dev in cuda cpu; do
      serve_start $res/serve_$dev.log models/s4kv-tiny --device $dev --kv-cache-memory 256MiB \
        --max-num-seqs 64
      complete models/s4kv-tiny "Once upon a time" 48 > $res/completion_$dev.txt
      serve_stop
    done
    grep -h "KV cache" $res/serve_cuda.log | head -1
    serve_start $res/serve_auto.log models/s4kv-tiny --device cuda --max-num-seqs 32
    grep -h "KV cache" $res/serve_auto.log | head -1
    serve_stop
    # Seeded sampling is reproducible across devices: fp32 on both, the same text.
    for dev in cuda cpu; do
      serve_start $res/serve_seeded_$dev.log models/s4kv-tiny --device $dev --dtype float32 \
        --kv-cache-memory 256MiB --max-num-seqs 64
      complete models/s4kv-tiny "Once upon a time" 48 "$seeded" > $res/seeded_$dev.txt
      serve_stop
    done
    cmp -s $res/seeded_cuda.txt $res/seeded_cpu.txt && echo "seeded text equal (fp32)" ||
      { echo "seeded text differs: $(head -c 120 $res/seeded_cuda.txt) / $(head -c 120 $res/seeded_cpu.txt)"; status=1; }
    echo "cuda: $(head -c 120 $res/completion_cuda.txt)"
    echo "cpu:  $(head -c 120 $res/completion_cpu.txt)"
    cmp -s $res/completion_cuda.txt $res/completion_cpu.txt && echo "greedy text equal" ||
      { echo "greedy text differs"; exit 1; }
    exit ${status:-0}
    ;;
  twins)
    # Resumable on a warm machine (what a call that ran out of time made is kept in /tmp).
    [ -f /tmp/twins/.done ] ||
      { python3 tools/make_shape_twins.py --out /tmp/twins > $res/twins_make.log 2>&1 &&
        touch /tmp/twins/.done; }
    extra=""
    for d in /tmp/twins/*; do
      n=$(basename $d)
      # fp32 on the GPU (no TF32): the twins are too large for the CPU within one call.
      [ -f /tmp/twins-golden/$n/.done ] ||
        { python3 tools/make_golden.py --model $d --synthetic-seed 1 --device cuda \
            --long-lens 300,1024 --out /tmp/twins-golden/$n > $res/twins_golden_$n.log 2>&1 &&
          touch /tmp/twins-golden/$n/.done; }
      echo "$n: golden made $(date +%T)"
      extra+="${n//[.-]/_}=$d:/tmp/twins-golden/$n;"
    done
    status=0
    S4KV_GOLDEN_EXTRA="$extra" backend_cuda_test --gtest_filter='Extra/*' > $res/twins_tests.txt 2>&1 ||
      status=1
    sed -nE 's/^\[ golden +\] ([a-z0-9_]+) .* max rel L2 vs transformers ([0-9.e+-]+).*/\1 \2/p' \
      $res/twins_tests.txt | awk '{if (!($1 in m) || $2 > m[$1]) m[$1] = $2}
        END {for (k in m) print k, "max rel L2 vs transformers", m[k]}' | sort
    grep -E '^\[  (PASSED|FAILED) ' $res/twins_tests.txt
    xz -dc bench/data/heldout.txt.xz > /tmp/heldout.txt
    for d in /tmp/twins/*; do
      n=$(basename $d)
      s4kv eval --device cuda --model $d --text /tmp/heldout.txt --prefix-len 1024 \
        --continuation-len 256 --num-windows 4 --greedy-len 16 --bootstrap-resamples 200 \
        --candidates int4_b64_gv128_sink1_win1_had,fp8_e4m3 --json-dir $res/twin_eval_$n \
        > $res/twin_eval_$n.txt 2>&1 || status=1
      echo "$n: $(grep -o 'eval [a-z0-9_]* vs [a-z0-9]*: density@8k [0-9.x]*\|mean KL [0-9.]*' $res/twin_eval_$n.txt | paste -sd' ')"
    done
    exit $status
    ;;
  eval)
    for t in heldout fortunes; do
      xz -dc bench/data/$t.txt.xz > /tmp/$t.txt
      for dt in float32 bfloat16; do
        s4kv eval --device cuda --dtype $dt --model models/s4kv-tiny --text /tmp/$t.txt \
          --prefix-len 1024 --continuation-len 256 --num-windows 8 --greedy-len 32 \
          --candidates fp8_e4m3,int4_b64_gv128,int4_b64_gv128_sink1_win1_had \
          --json-dir $res/eval_${t}_$dt > $res/eval_${t}_$dt.txt 2>&1
        echo "$t $dt:"
        grep -o 'eval [a-z0-9_]* vs [a-z0-9]*\|mean KL [0-9.]* \[[0-9., ]*\]\|ppl [0-9.]* -> [0-9.]* ([-+0-9.%]*' \
          $res/eval_${t}_$dt.txt | paste -sd' ' | sed 's/ eval /\n  eval /g; s/^/  /'
      done
    done
    ;;
  dummy)
    for n in qwen2.5-7b-instruct llama-3.1-8b-instruct; do
      d=/tmp/full/$n && mkdir -p $d
      cp tests/fixtures/configs/$n.json $d/config.json
      tok=$([[ $n == llama* ]] && echo llama3 || echo qwen2.5)
      xz -dc tests/fixtures/tokenizers/$tok/tokenizer.json.xz > $d/tokenizer.json
      cp tests/fixtures/tokenizers/$tok/tokenizer_config.json $d/
      start=$(date +%s)
      serve_start $res/dummy_$n.log --model $d --load-format dummy --device cuda
      echo "$n: healthy after $(( $(date +%s) - start )) s"
      grep -h "KV cache" $res/dummy_$n.log | head -1
      echo "  completion: $(complete $d 'The capital of France is' 8 | head -c 80)"
      serve_stop
    done
    ;;
  e2e)
    # The CPU's --max-num-seqs default (64) where a test sets none: the suite's KV budgets are
    # sized for it (cuda's default, 256, reserves 4x the int4 residual blocks).
    # promtool (Debian's prometheus, 48 MB) is not on the GPU machine: its format check of
    # /metrics runs in CI; the text comes from the same code whatever the device.
    S4KV_SERVE_ARGS="--device cuda --max-num-seqs 64 --gpu-memory-utilization 0.05" timeout 500 \
      python3 -m pytest -q -p no:cacheprovider tests/server \
      --deselect tests/server/test_metrics.py::test_promtool_accepts > $res/e2e.txt 2>&1 || {
      tail -n 30 $res/e2e.txt; exit 1; }
    tail -n 3 $res/e2e.txt
    ;;
  capacity)
    # KV capacity of every format on the full Qwen2.5-7B and Llama-3.1-8B configs (dummy weights);
    # CAPACITY_MODELS: some of them (bench/gpu_capacity.py's --models), e.g. qwen2.5-7b-instruct
    # where the tree carries that tokenizer alone.
    S4KV_COMMIT=$(sed -n 's/^built from \([^ ]*\).*/\1/p' /tmp/s4kv/BUILD_INFO) \
      python3 bench/gpu_capacity.py --bin /tmp/s4kv/bin/s4kv --out "$res/capacity_$(bash tools/device_card.sh)${CAPACITY_TAG:-}.json" \
      ${CAPACITY_MODELS:+--models "$CAPACITY_MODELS"}
    ;;
  perf)
    # s4kv bench latency / throughput of every format on the full Qwen2.5-7B config (dummy
    # weights): PERF_SUITES (bench/gpu_perf.py's --suites), PERF_LONG_PROMPTS, PERF_FORMATS,
    # PERF_EXTRA_ARGS (more s4kv bench flags, e.g. --async-scheduling), PERF_MODEL (a config of
    # bench/gpu_capacity.py's MODELS, default qwen2.5-7b-instruct); PERF_TAG names the output
    # (perf_<card>$PERF_TAG.json, <card> h100 or h200: tools/device_card.sh).
    S4KV_COMMIT=$(sed -n 's/^built from \([^ ]*\).*/\1/p' /tmp/s4kv/BUILD_INFO) \
      python3 bench/gpu_perf.py --bin /tmp/s4kv/bin/s4kv --out "$res/perf_$(bash tools/device_card.sh)${PERF_TAG:-}.json" \
      --model "${PERF_MODEL:-qwen2.5-7b-instruct}" \
      --suites "${PERF_SUITES:-latency,short}" --long-prompts "${PERF_LONG_PROMPTS:-512}" \
      --formats "${PERF_FORMATS:-16bit,fp8_e4m3,int4_kivi}" --timeout "${PERF_TIMEOUT:-600}" \
      --extra-args="${PERF_EXTRA_ARGS:-}"
    ;;
  profile)
    # Per-kernel GPU time of decode steps, every format (bench/gpu_profile.py, ncu, eager):
    # PROFILE_ARGS, e.g. "--batch-size 256"; PROFILE_TAG names the output (profile$TAG.txt).
    S4KV_COMMIT=$(sed -n 's/^built from \([^ ]*\).*/\1/p' /tmp/s4kv/BUILD_INFO) \
      python3 bench/gpu_profile.py --bin /tmp/s4kv/bin/s4kv --out $res/profile${PROFILE_TAG:-}.txt \
      ${PROFILE_ARGS:-}
    ;;
  serve_bench)
    # bench/serve_bench.py against `s4kv serve --device cuda` on the full Qwen2.5-7B config
    # (dummy weights), one server per format: SERVE_BENCH_FORMATS, SERVE_BENCH_ARGS (serve_bench
    # flags), SERVE_BENCH_SERVE_ARGS (more serve flags, e.g. --async-scheduling); SERVE_BENCH_TAG
    # names the outputs (serve_bench$SERVE_BENCH_TAG_<format>.json / .txt).
    d=$(python3 -c "import sys, tempfile; sys.path.insert(0, 'bench'); import gpu_capacity; \
print(gpu_capacity.model_dir(tempfile.mkdtemp(), 'qwen2.5-7b-instruct'))")
    for fmt in $(echo "${SERVE_BENCH_FORMATS:-16bit,int4_kivi}" | tr ',' ' '); do
      kv=$fmt && [ "$fmt" = 16bit ] && kv=auto
      python3 bench/serve_bench.py --serve "/tmp/s4kv/bin/s4kv serve $d --load-format dummy \
--device cuda --kv-cache-dtype $kv ${SERVE_BENCH_SERVE_ARGS:-}" \
        ${SERVE_BENCH_ARGS:---concurrency 1,16,64 --input-len 1024 --output-len 128 --num-prompts 64} \
        --json $res/serve_bench${SERVE_BENCH_TAG:-}_$fmt.json \
        > $res/serve_bench${SERVE_BENCH_TAG:-}_$fmt.txt 2>&1 || {
        tail -n 20 $res/serve_bench${SERVE_BENCH_TAG:-}_$fmt.txt; exit 1; }
      # Card, build and settings into the JSON (the machine has no git history to stamp from).
      python3 -c "import json, os, subprocess, sys, time; p = sys.argv[1]; d = json.load(open(p)); \
d['provenance'] = {'command': 'tools/device_steps.sh serve_bench: ' + ' '.join(sys.argv[2:]), \
'commit': open('/tmp/s4kv/BUILD_INFO').read().split()[2], 'date': time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime()), \
'gpu': subprocess.run(['nvidia-smi', '--query-gpu=name,memory.total,driver_version', '--format=csv,noheader'], \
capture_output=True, text=True).stdout.strip()}; json.dump(d, open(p, 'w'), indent=1)" \
        $res/serve_bench${SERVE_BENCH_TAG:-}_$fmt.json "SERVE_BENCH_ARGS=${SERVE_BENCH_ARGS:-}" \
        "SERVE_BENCH_SERVE_ARGS=${SERVE_BENCH_SERVE_ARGS:-}" "kv=$kv"
      echo "== $fmt" && cat $res/serve_bench${SERVE_BENCH_TAG:-}_$fmt.txt
    done
    ;;
  attention)
    # Decode attention, every format, beside torch SDPA fp16 (bench/attention_bench.py);
    # ATTENTION_TAG names the files of one run among several (attention$ATTENTION_TAG.json).
    t=${ATTENTION_TAG:-}
    S4KV_COMMIT=$(sed -n 's/^built from \([^ ]*\).*/\1/p' /tmp/s4kv/BUILD_INFO) \
      python3 bench/attention_bench.py --bin cuda_attention_bench \
      --out $res/attention$t.json ${ATTENTION_ARGS:-} > $res/attention$t.txt 2>$res/attention_err$t.txt || {
      tail -n 20 $res/attention_err$t.txt; exit 1; }
    cat $res/attention$t.txt
    ;;
  *) echo "unknown step $step"; exit 2 ;;
esac

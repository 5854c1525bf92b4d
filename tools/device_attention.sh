#!/usr/bin/env bash
# Iterating on the decode attention kernels on the GPU machine (device tool) without the full
# pack of tools/device_cuda_tests.sh: `build` compiles cuda_attention_bench here with nvcc alone
# (sm_90; the few sources it needs) and leaves it stripped and xz-compressed in
# .devcarry/attention_bench.xz, small enough for one call to carry beside the tree. There:
#   bash tools/device_attention.sh run [cuda_attention_bench args]  # the grid beside SDPA, under $OUT
#   bash tools/device_attention.sh ncu [cuda_attention_bench args] # one launch of each kernel
#   bash tools/device_attention.sh stalls [cuda_attention_bench args]  # where the int4_kivi
#       kernel's warps wait: one launch under ncu's warp-stall sampling, its SASS source page in
#       $OUT/stalls_sass.csv and tools/ncu_stalls.py's ledger (whole kernel, each loop) in
#       $OUT/stalls.txt / .json; e.g. --formats int4 --batches 64 --contexts 32768 --heads 28/4
#   bash tools/device_attention.sh full [cuda_attention_bench args]  # ncu --set full of one
#       int4_kivi launch at 28/4 B 64 x 32k (args are added, e.g. --resident-bytes 16777216;
#       a later --batches, --contexts or --heads replaces the shape):
#       $OUT/details.txt, $OUT/raw.csv.xz (the raw counters), $OUT/ncu_log.txt
#   bash tools/device_attention.sh check   # the decode kernels against the exact kernel: every
#       int4_kivi layout (B 32/64/128 x Gv 32/64/128, v1 and v2), 16-bit and fp8 at B 16/128,
#       each with the merge kernel and fused (--fused-merge); fails past 2e-2 relative L2 (bf16
#       operands), 4e-3 for fp8
#   bash tools/device_attention.sh prefill [cuda_attention_bench --prefill args]  # the prefill
#       kernels against the reference kernel, every format: $OUT/prefill_<card>.json (h100, h200: the card it ran on), the table
#       in $OUT/prefill.txt; fails when a case's check is past 2e-2
#   bash tools/device_attention.sh ab TAG... [-- cuda_attention_bench args]  # check, then run,
#       each tagged build in turn (results in $OUT/ab_TAG.txt and .json), for an A/B of kernel
#       versions
# ATTN_PACK=1: the bench of the pack that tools/device_cuda_tests.sh's `run` unpacked into
# /tmp/s4kv in the same call, instead of a tagged build.
# Tagged builds sit side by side: `build TAG` here leaves .devcarry/attention_bench_TAG.xz
# (ATTN_NVCC_FLAGS adds nvcc flags), and ATTN_TAG=TAG makes run / ncu / check / prefill use it.
# A launch block by block: ATTN_NVCC_FLAGS=-DS4KV_DECODE_TIMELINE `build tl`, then there the
# bench itself with --timeline (or --timeline-csv DIR): src/backend/cuda/decode_timeline.cuh.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  build)
    tag=${2:-}
    mkdir -p build-attn .devcarry
    # shellcheck disable=SC2086  # ATTN_NVCC_FLAGS is a list of flags
    nvcc -std=c++20 -O3 -arch=sm_90 ${ATTN_NVCC_FLAGS:-} -Isrc -o build-attn/cuda_attention_bench \
      bench/cuda_attention_bench.cu bench/cuda_prefill_bench.cu src/backend/cuda/decode_attention.cu src/backend/cuda/decode_int4.cu \
      src/backend/cuda/prefill_attention.cu src/backend/cuda/prefill_plan.cc src/backend/cuda/paged_attention.cu src/backend/cuda/device.cu src/backend/rope_table.cc \
      src/backend/cpu/rope.cc src/backend/cpu/thread_pool.cc src/backend/forward_batch_builder.cc src/common/check.cc src/common/dtype.cc src/backend/cpu/gemm16.cc src/backend/cpu/gemm16_packed.cc \
      src/kv/int4_kivi_layout.cc src/kv/kv_format.cc
    strip build-attn/cuda_attention_bench
    echo "built from $(git describe --always --dirty) on $(date -u +%FT%TZ)" \
      "${ATTN_NVCC_FLAGS:+with ${ATTN_NVCC_FLAGS}}" > build-attn/BUILD_INFO
    out=.devcarry/attention_bench${tag:+_$tag}.xz
    tar -C build-attn -cf - cuda_attention_bench BUILD_INFO | xz -9e -T2 > "$out"
    ls -la "$out"
    ;;
  ab)
    : "${OUT:?run on the GPU machine, where the device tool sets OUT}"
    shift
    tags=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do tags+=("$1") && shift; done
    [ $# -gt 0 ] && shift
    status=0
    for tag in "${tags[@]}"; do
      echo "== $tag"
      mkdir -p "$OUT/$tag"
      if ATTN_TAG=$tag OUT=$OUT/$tag bash "$0" check > "$OUT/$tag/check_log.txt" 2>&1; then
        tail -1 "$OUT/$tag/check_log.txt"
        ATTN_TAG=$tag OUT=$OUT/$tag bash "$0" run "$@" || status=1
      else
        echo "$tag: the checks FAILED, not timed (ab_$tag.txt):"
        tail -5 "$OUT/$tag/check_log.txt"
        status=1
      fi
      # Two files a build (the device tool brings back 8): the JSON and one text file with the
      # checks, the table and the bench's stderr.
      cat "$OUT/$tag"/check_log.txt "$OUT/$tag"/attention.txt "$OUT/$tag"/attention_err.txt \
        > "$OUT/ab_$tag.txt" 2> /dev/null || true
      for f in "$OUT/$tag"/attention_*.json; do [ -f "$f" ] && mv "$f" "$OUT/ab_$tag.json"; done
      rm -rf "${OUT:?}/$tag"
    done
    exit $status
    ;;
  run | ncu | check | prefill | stalls | full)
    : "${OUT:?run on the GPU machine, where the device tool sets OUT}"
    mode=$1 && shift
    mkdir -p "$OUT"
    attn=/tmp/attn${ATTN_TAG:+_$ATTN_TAG}
    card=$(bash tools/device_card.sh)
    mkdir -p "$attn"
    if [ -n "${ATTN_PACK:-}" ]; then  # the bench of the pack tools/device_cuda_tests.sh unpacked
      cp /tmp/s4kv/bin/cuda_attention_bench /tmp/s4kv/BUILD_INFO "$attn"/
    else
      xz -dc ".devcarry/attention_bench${ATTN_TAG:+_$ATTN_TAG}.xz" | tar -C "$attn" -xf -
    fi
    cat "$attn/BUILD_INFO"
    # The case's first int4_kivi launch (the checks and warm-up launch the same kernel) under
    # ncu into report $1: ncu's options up to --, the bench's arguments after it.
    ncu_int4() {
      local rep=$1 opts=()
      shift
      while [ "$1" != -- ]; do opts+=("$1") && shift; done
      shift
      ncu --clock-control none "${opts[@]}" -k regex:decode_int4 -c 1 -f -o "$rep" \
        "$attn"/cuda_attention_bench --reps 1 "$@"
    }
    if [ "$mode" = prefill ]; then
      status=0
      "$attn"/cuda_attention_bench --prefill "$@" > "$OUT/prefill_$card.json" \
        2> "$OUT/prefill.txt" || status=$?
      cat "$OUT/prefill.txt"
      [ "$status" = 0 ] || { echo "FAILED: exit status $status"; exit 1; }
      if grep -q FAILED "$OUT/prefill.txt"; then echo "FAILED: a check past 2e-2"; exit 1; fi
    elif [ "$mode" = stalls ]; then
      ncu_int4 "$OUT/stalls" --section SourceCounters --section WarpStateStats \
        --section SchedulerStats --section Occupancy -- "$@" > "$OUT/stalls_ncu.txt" 2>&1 || true
      ncu -i "$OUT/stalls.ncu-rep" --page source --csv --print-source sass \
        > "$OUT/stalls_sass.csv" 2>> "$OUT/stalls_ncu.txt" || true
      ncu -i "$OUT/stalls.ncu-rep" --page details >> "$OUT/stalls_ncu.txt" 2>&1 || true
      python3 tools/ncu_stalls.py "$OUT/stalls_sass.csv" --loops 64 --json "$OUT/stalls.json" \
        > "$OUT/stalls.txt" 2>&1 || { tail -20 "$OUT/stalls_ncu.txt"; }
      cat "$OUT/stalls.txt"
    elif [ "$mode" = full ]; then
      ncu_int4 "$OUT/full" --cache-control none --set full -- --formats int4 --batches 64 \
        --contexts 32768 --heads 28/4 "$@" > "$OUT/ncu_log.txt" 2>&1 || true
      ncu -i "$OUT/full.ncu-rep" --page details > "$OUT/details.txt" 2>&1 || true
      ncu -i "$OUT/full.ncu-rep" --page raw --csv 2>&1 | xz -T4 > "$OUT/raw.csv.xz" || true
      rm -f "$OUT/full.ncu-rep"
      grep -E "Duration|SM Frequency|Registers Per|Issue Slots Busy|Active Warps Per|Eligible Warps|Warp Cycles Per" \
        "$OUT/details.txt" | head -20 || true
    elif [ "$mode" = check ]; then
      bin="$attn"/cuda_attention_bench
      # shellcheck disable=SC2054  # the commas are the bench's list syntax
      args=(--check-only --fused-merge --batches 3,17 --contexts 700,2113 --heads 28/4,32/8 --reps 1)
      {
        for b in 32 64 128; do
          for gv in 32 64 128; do
            for v in "" --int4-v1; do
              $bin "${args[@]}" --formats int4 --block-size $b --value-group-size $gv $v \
                2>&1 > /dev/null | grep '^check' | sed "s/^/B $b Gv $gv ${v:-v2} /"
            done
          done
        done
        for b in 16 128; do
          $bin "${args[@]}" --formats 16bit,fp8 --block-size $b 2>&1 > /dev/null |
            grep '^check' | sed "s/^/B $b /"
        done
      } | tee "$OUT/check.txt"
      # 18 int4 layouts x 8 shapes, 2 block sizes x 2 formats x 8 shapes, each with both merges;
      # each within its bound.
      awk '{e = $NF; lim = ($0 ~ / fp8 /) ? 4e-3 : 2e-2; if (e > lim || e != e + 0) bad = 1; n++}
           END {if (n != 352) {print "FAILED: " n " checks of 352"; exit 1}
                if (bad) {print "FAILED: an error past its bound"; exit 1}
                print "all " n " checks within bounds"}' "$OUT/check.txt"
    elif [ "$mode" = run ]; then
      S4KV_COMMIT=$(sed -n 's/^built from \([^ ]*\).*/\1/p' "$attn"/BUILD_INFO) \
        python3 bench/attention_bench.py --bin "$attn"/cuda_attention_bench \
        --out "$OUT/attention_$card.json" -- "$@" 2> "$OUT/attention_err.txt" | tee "$OUT/attention.txt"
    else
      ncu --clock-control none --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section SchedulerStats --section LaunchStats \
        -k regex:decode_ "$attn"/cuda_attention_bench --reps 1 "$@" > "$OUT/ncu.txt" 2>&1 || true
      grep -E "decode_|Duration|Throughput|Occupancy|Stall|Eligible|Issued|Registers|Block Limit|Warp Cycles" \
        "$OUT/ncu.txt" | head -120
    fi
    ;;
  *) echo "usage: $0 build|run|ncu|stalls|full|check|prefill|ab ..." >&2; exit 2 ;;
esac

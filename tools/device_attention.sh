#!/usr/bin/env bash
# Iterating on the decode attention kernels on the GPU machine (device tool) without the full
# pack of tools/device_cuda_tests.sh: `build` compiles cuda_attention_bench here with nvcc alone
# (sm_90; the few sources it needs) and leaves it stripped and xz-compressed in
# .devcarry/attention_bench.xz, small enough for one call to carry beside the tree. There:
#   bash tools/device_attention.sh run [attention_bench.py args]   # results under $OUT
#   bash tools/device_attention.sh ncu [cuda_attention_bench args] # one launch of each kernel
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  build)
    mkdir -p build-attn .devcarry
    nvcc -std=c++20 -O3 -arch=sm_90 -Isrc -o build-attn/cuda_attention_bench \
      bench/cuda_attention_bench.cu src/backend/cuda/decode_attention.cu \
      src/backend/cuda/paged_attention.cu src/backend/cuda/device.cu src/backend/rope_table.cc \
      src/backend/cpu/rope.cc src/backend/forward_batch_builder.cc src/common/check.cc src/common/dtype.cc \
      src/kv/int4_kivi_layout.cc src/kv/kv_format.cc
    strip build-attn/cuda_attention_bench
    echo "built from $(git describe --always --dirty) on $(date -u +%FT%TZ)" > build-attn/BUILD_INFO
    tar -C build-attn -cf - cuda_attention_bench BUILD_INFO | xz -9e -T2 > .devcarry/attention_bench.xz
    ls -la .devcarry/attention_bench.xz
    ;;
  run | ncu)
    : "${OUT:?run on the GPU machine, where the device tool sets OUT}"
    mode=$1 && shift
    mkdir -p /tmp/attn && xz -dc .devcarry/attention_bench.xz | tar -C /tmp/attn -xf -
    cat /tmp/attn/BUILD_INFO
    if [ "$mode" = run ]; then
      S4KV_COMMIT=$(sed -n 's/^built from \([^ ]*\).*/\1/p' /tmp/attn/BUILD_INFO) \
        python3 bench/attention_bench.py --bin /tmp/attn/cuda_attention_bench \
        --out "$OUT/attention_h200.json" "$@" 2> "$OUT/attention_err.txt" | tee "$OUT/attention.txt"
    else
      ncu --clock-control none --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section SchedulerStats --section LaunchStats \
        -k regex:decode_ /tmp/attn/cuda_attention_bench --reps 1 "$@" > "$OUT/ncu.txt" 2>&1 || true
      grep -E "decode_|Duration|Throughput|Occupancy|Stall|Eligible|Issued|Registers|Block Limit|Warp Cycles" \
        "$OUT/ncu.txt" | head -120
    fi
    ;;
  *) echo "usage: $0 build|run|ncu ..." >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# Twenty-fifth session: int4_kivi prefill in thread blocks of two heads on the staged RoPE rows
# (the pack of branch pairs2; S4KV_PREFILL_HEAD_PAIRS=0 runs main's one-head blocks in the same
# binaries): the pack's GPU tests, its prefill bench both ways twice in opposite orders (16-bit
# and int4_kivi), the long-prompt prefill (prefill32k) both ways beside 16-bit, then one launch
# of each int4_kivi kernel (and the 16-bit one) at 2048@8192 under ncu --set full.
. tools/device_call.sh
step tests bash tools/device_cuda_tests.sh run tests
n=0
for v in 0 1 1 0; do
  n=$((n + 1))
  step "prefill_p${v}_$n" bash -c "S4KV_PREFILL_HEAD_PAIRS=$v ATTN_PACK=1 ATTN_TAG=pp \
    bash tools/device_attention.sh prefill --formats 16bit,int4"
done
step cuda bash tools/device_cuda_tests.sh run PERF_SUITES=prefill32k \
  S4KV_PREFILL_HEAD_PAIRS=1 PERF_FORMATS=16bit,int4_kivi PERF_TAG=_pairs perf \
  S4KV_PREFILL_HEAD_PAIRS=0 PERF_FORMATS=int4_kivi PERF_TAG=_one perf
bin=/tmp/attn_pp/cuda_attention_bench
for k in int4:1 int4:0 16bit:1; do
  f=${k%%:*} v=${k##*:}
  step "ncu_${f}_p$v" bash -c "S4KV_PREFILL_HEAD_PAIRS=$v ncu --clock-control none --set full \
    -k regex:prefill_attention_kernel -c 1 -f -o \$OUT/rep $bin --prefill --formats $f \
    --heads 28/4 --cases 2048@8192 --reps 1 --no-reference --no-split > \$OUT/ncu_log.txt 2>&1; \
    ncu -i \$OUT/rep.ncu-rep --page details > \$OUT/details.txt 2>&1; \
    ncu -i \$OUT/rep.ncu-rep --page source --csv --print-source sass 2>/dev/null | xz -T4 > \$OUT/sass.csv.xz; \
    rm -f \$OUT/rep.ncu-rep; grep -E 'Duration|Registers Per|Issue Slots Busy|Active Warps Per|Eligible Warps|Warp Cycles Per|Theoretical Occ|Block Limit' \$OUT/details.txt"
done
cp "$CALL_OUT/r/tests/summary.txt" "$CALL_OUT/summary.txt" 2>/dev/null
cp "$CALL_OUT/r/cuda/summary.txt" "$CALL_OUT/summary_perf.txt" 2>/dev/null
for d in "$CALL_OUT"/r/prefill_p*; do [ -d "$d" ] && tail -14 "$d/prefill.txt"; done
cat "$CALL_OUT"/r/ncu_*.log 2>/dev/null
call_finish

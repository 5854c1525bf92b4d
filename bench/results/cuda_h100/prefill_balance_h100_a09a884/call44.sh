#!/usr/bin/env bash
# Twenty-fifth session, second call: int4_kivi prefill blocks of two heads, three builds in one
# call: `p0` the pack's one-head blocks (S4KV_PREFILL_HEAD_PAIRS=0; main's 728812c measured 0.82x
# of them in the first call), `b` f1d0923's balance (each half makes half of a pool tile's keys
# and half of its values), the pack's a09a884 (`c`: b, and every thread issues a pool tile's
# copies). The pack's GPU tests, the prefill bench of the three in two orders (16-bit once), one
# launch of c under ncu. (No room in 64 MiB for a third bench or the tokenizer perf needs.)
. tools/device_call.sh
step tests bash tools/device_cuda_tests.sh run tests
step prefill_16 bash -c "ATTN_PACK=1 ATTN_TAG=c bash tools/device_attention.sh prefill --formats 16bit"
n=0
for t in p0 b c c b p0; do
  n=$((n + 1))
  pre="ATTN_TAG=$t"
  [ "$t" = c ] && pre="ATTN_PACK=1 ATTN_TAG=c"
  [ "$t" = p0 ] && pre="ATTN_PACK=1 ATTN_TAG=p0 S4KV_PREFILL_HEAD_PAIRS=0"
  step "prefill_${t}_$n" bash -c "$pre bash tools/device_attention.sh prefill --formats int4"
done
step ncu_int4_c bash -c "ncu --clock-control none --set full -k regex:prefill_attention_kernel -c 1 \
  -f -o \$OUT/rep /tmp/attn_c/cuda_attention_bench --prefill --formats int4 --heads 28/4 \
  --cases 2048@8192 --reps 1 --no-reference --no-split > \$OUT/ncu_log.txt 2>&1; \
  ncu -i \$OUT/rep.ncu-rep --page details > \$OUT/details.txt 2>&1; \
  ncu -i \$OUT/rep.ncu-rep --page source --csv --print-source sass 2>/dev/null | xz -T4 > \$OUT/sass.csv.xz; \
  rm -f \$OUT/rep.ncu-rep"
cp "$CALL_OUT/r/tests/summary.txt" "$CALL_OUT/summary.txt" 2>/dev/null
for d in "$CALL_OUT"/r/prefill_*; do [ -d "$d" ] && echo "$d" && grep -E "2048@8192|1x8192" "$d/prefill.txt"; done
call_finish

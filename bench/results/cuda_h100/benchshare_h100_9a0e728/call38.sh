#!/usr/bin/env bash
# Twenty-fourth session: on an H200 main's default grid first (h = main at 08fdbe3), then on any
# card the bench with its two modes' shared helpers (dd, branch benchshare at 9a0e728) against h
# (the check columns should agree to the digit) and dd's prefill checks; on an H200 then ncu of
# the grid's 28/4 B 64 x 32k resident and the A/B of two against three stages (h3).
. tools/device_call.sh
[ "$CALL_H200" = 1 ] && step grid_h bash -c "ATTN_TAG=h bash tools/device_attention.sh run"
for t in h dd; do
  step "check_$t" bash -c "ATTN_TAG=$t bash tools/device_attention.sh check"
done
step prefill_dd bash -c "ATTN_TAG=dd bash tools/device_attention.sh prefill"
if [ "$CALL_H200" = 1 ]; then
  step full_h_l2 bash -c "ATTN_TAG=h bash tools/device_attention.sh full --resident-bytes 16777216"
  ab_both h h3
  ab_summary h
fi
call_finish

#!/usr/bin/env bash
# Twenty-second session's first call: on an H200, call27's (main's grid, the five builds' A/B,
# ncu of m resident); on an H100 the A/B of the three builds it has not timed beside m:
# s2b5 (two stages, five thread blocks, 96 registers) and cl (claimed pool blocks, a bound),
# tw2s2 again as the known reference.
. tools/device_call.sh
if [ $CALL_H200 = 1 ]; then
  step grid_m bash -c "ATTN_TAG=m bash tools/device_attention.sh run"
  ab_both m tw2s2 s2b5 cl
  step full_m_l2 bash -c "ATTN_TAG=m bash tools/device_attention.sh full --resident-bytes 16777216"
else
  ab_both m tw2s2 s2b5 cl
fi
ab_summary m
call_finish

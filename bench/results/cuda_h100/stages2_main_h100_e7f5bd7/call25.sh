#!/usr/bin/env bash
# An H200 wanted: main at 68cb86f (m: the turned query in 8-byte chunks) — its default attention
# grid (the acceptance table), then m against m with two stages (tw2s2: -DS4KV_INT4_STAGES=2, the
# same source) and two tiles a warp at two stages (t2r2: branch t2s5 67a9481,
# -DS4KV_INT4_TILES=2 -DS4KV_INT4_STAGES=2) on the ten target cells, resident in L2 and from
# device memory, both orders, and ncu --set full of m resident (28/4 B 64 x 32k). On an H100
# only the A/B runs. Run as `CALL_S=360 bash .devq/call25.sh`.
. tools/device_call.sh
[ $CALL_H200 = 1 ] && step grid_m bash -c "ATTN_TAG=m bash tools/device_attention.sh run"
ab_both m tw2s2 t2r2
[ $CALL_H200 = 1 ] && step full_m_l2 bash -c "ATTN_TAG=m bash tools/device_attention.sh full --resident-bytes 16777216"
ab_summary m
call_finish

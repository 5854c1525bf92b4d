#!/usr/bin/env bash
# H200 wanted (any card runs it). q4 = main (50db267's kernels; bench built from a997969, the same
# src/backend/cuda), tw2 = branch turn2 f105cf1 (the turned query in 8-byte chunks: store_turn
# conflict-free), t2s2 = branch t2s5 67a9481 built with -DS4KV_INT4_TILES=2
# -DS4KV_INT4_ROTATIONS_SHARED -DS4KV_INT4_STAGES=2 (two tiles a warp, rotations in shared
# memory, two stages). A/B on the ten target cells resident in L2 and from device memory (both
# orders), the default grid (acceptance table) of each, ncu --set full resident (28/4 B 64 x 32k).
# Run as `CALL_S=540 bash .devq/call22.sh` (its prologue inline then; tools/device_call.sh since).
. tools/device_call.sh
H="--formats int4 --batches 16,64,256 --contexts 8192,32768"
R="$H --resident-bytes 16777216"
step rab1 bash tools/device_attention.sh ab q4 tw2 t2s2 -- $R
step hab1 bash tools/device_attention.sh ab q4 tw2 t2s2 -- $H
step grid_q4 bash -c "ATTN_TAG=q4 bash tools/device_attention.sh run"
step hab2 bash tools/device_attention.sh ab t2s2 tw2 q4 -- $H
step rab2 bash tools/device_attention.sh ab t2s2 tw2 q4 -- $R
step grid_tw2 bash -c "ATTN_TAG=tw2 bash tools/device_attention.sh run"
step grid_t2s2 bash -c "ATTN_TAG=t2s2 bash tools/device_attention.sh run"
step full_t2s2_l2 bash -c "ATTN_TAG=t2s2 bash tools/device_attention.sh full --resident-bytes 16777216"
step full_q4_l2 bash -c "ATTN_TAG=q4 bash tools/device_attention.sh full --resident-bytes 16777216"
step full_tw2_l2 bash -c "ATTN_TAG=tw2 bash tools/device_attention.sh full --resident-bytes 16777216"
ab_summary q4
call_finish

#!/usr/bin/env bash
# The call waiting for an H200 (twenty-first session; not run yet). m = main at 68cb86f (HEAD's
# kernels are the same), tw2s2 = m with -DS4KV_INT4_STAGES=2, s2b5 = m with
# -DS4KV_INT4_STAGES=2 -DS4KV_INT4_MIN_BLOCKS=5 (96 registers, five thread blocks), t2r2 = branch
# t2s5 (67a9481) with -DS4KV_INT4_TILES=2 -DS4KV_INT4_STAGES=2, cl = claim_a06178d.patch on
# 29b6007 with -DS4KV_INT4_CLAIM=1 (README.md here). On an H200 main's default grid (the
# acceptance table) and ncu of m resident (28/4 B 64 x 32k); on any card the A/B of the five on
# the ten target cells, resident in L2 and from device memory, in both orders.
# Run as `CALL_S=540 bash <this file>` with the five benches in .devcarry/.
. tools/device_call.sh
[ $CALL_H200 = 1 ] && step grid_m bash -c "ATTN_TAG=m bash tools/device_attention.sh run"
ab_both m tw2s2 s2b5 t2r2 cl
[ $CALL_H200 = 1 ] && step full_m_l2 bash -c "ATTN_TAG=m bash tools/device_attention.sh full --resident-bytes 16777216"
ab_summary m
call_finish

#!/usr/bin/env bash
# Twenty-second session's second call: the L2 prefetch of the next block a lane copies
# (pf = -DS4KV_INT4_PREFETCH=1; pfs2 = with -DS4KV_INT4_STAGES=2) against m (main's kernels) and
# tw2s2 (two stages alone), on the ten target cells from device memory (where the prefetch should
# tell) and resident in L2, both orders; on an H200 main's default grid and ncu of m first.
. tools/device_call.sh
[ $CALL_H200 = 1 ] && step grid_m bash -c "ATTN_TAG=m bash tools/device_attention.sh run"
ab_both m pf pfs2 tw2s2
[ $CALL_H200 = 1 ] && step full_m_l2 bash -c "ATTN_TAG=m bash tools/device_attention.sh full --resident-bytes 16777216"
ab_summary m
call_finish

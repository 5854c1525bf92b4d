#!/usr/bin/env bash
# Two stages (one block in flight ahead) across the kernel's variants, against main (q4, built at
# a997969 = 50db267's src/backend/cuda): s2 = main -DS4KV_INT4_STAGES=2; tw2s2 = s2 with
# -DS4KV_INT4_TURN_WORDS=2; t2r2 = branch t2s5 (67a9481) -DS4KV_INT4_TILES=2 -DS4KV_INT4_STAGES=2
# (rotations in registers, 227 registers); t2s2 = the same with -DS4KV_INT4_ROTATIONS_SHARED;
# t2s2b5 = t2s2 with -DS4KV_INT4_MIN_BLOCKS=5 (168 registers, 40 bytes of spill). Resident in L2
# and from device memory, both orders; ncu of s2 and t2r2.
# Run as `CALL_S=540 bash .devq/call23.sh` (its prologue inline then; tools/device_call.sh since).
. tools/device_call.sh
H="--formats int4 --batches 16,64,256 --contexts 8192,32768"
R="$H --resident-bytes 16777216"
A="q4 s2 tw2s2 t2r2 t2s2 t2s2b5"
B="t2s2b5 t2s2 t2r2 tw2s2 s2 q4"
step rab1 bash tools/device_attention.sh ab $A -- $R
step hab1 bash tools/device_attention.sh ab $A -- $H
step rab2 bash tools/device_attention.sh ab $B -- $R
step hab2 bash tools/device_attention.sh ab $B -- $H
step full_s2_l2 bash -c "ATTN_TAG=s2 bash tools/device_attention.sh full --resident-bytes 16777216"
step full_t2r2_l2 bash -c "ATTN_TAG=t2r2 bash tools/device_attention.sh full --resident-bytes 16777216"
ab_summary q4
call_finish

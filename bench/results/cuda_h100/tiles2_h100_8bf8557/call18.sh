#!/usr/bin/env bash
# Any card. main's int4_kivi kernel (q4: a997969, the fp32 query held) against tiles2 (t2: two
# 16-position tiles a warp at block size >= 64, rotations held) on the target cells, from device
# memory and resident in L2 (and t2s: t2 with the rotations in shared memory); backend_cuda_test + async of main's pack and of t2's pack; the A/B
# again in the other order (from device memory); ncu --set full of t2 (28/4 B 64 x 32k); the default grid (acceptance
# table) of both.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
cat $OUT/gpu.txt
W=$OUT; s(){ d=$1; shift; mkdir -p $W/$d; OUT=$W/$d "$@" > $W/$d.log 2>&1; (cd $W && tar czf $d.tgz $d $d.log && rm -rf $d $d.log); echo "$d done $(date +%T)"; }
prof(){ d=$1; t=$2; shift 2; mkdir -p $W/$d; a=/tmp/attn_$t; mkdir -p $a && xz -dc .devcarry/attention_bench_$t.xz | tar -C $a -xf -
  ncu --clock-control none --cache-control none --set full -k regex:decode_int4 -c 1 -f -o $W/$d/prof $a/cuda_attention_bench --reps 1 --formats int4 --batches 64 --contexts 32768 --heads 28/4 "$@" > $W/$d/ncu_log.txt 2>&1
  ncu -i $W/$d/prof.ncu-rep --page details > $W/$d/details.txt 2>&1
  ncu -i $W/$d/prof.ncu-rep --page raw --csv > $W/$d/raw.csv 2>&1
  rm -f $W/$d/prof.ncu-rep; (cd $W && tar czf $d.tgz $d && rm -rf $d); echo "$d done $(date +%T)"; }
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,nounits -lms 200 > $OUT/clocks.csv 2>&1 &
poll=$!
date +%T
cp .devq/attention_bench_*.xz .devcarry/
(xz -dc .devq/model.safetensors.xz > models/s4kv-tiny/model.safetensors; echo "model rc $?") &
unz=$!
H="--formats int4 --batches 16,64,256 --contexts 8192,32768"
R="$H --resident-bytes 16777216"
s hab1 bash tools/device_attention.sh ab q4 t2 t2s -- $H
s rab1 bash tools/device_attention.sh ab q4 t2 t2s -- $R
wait $unz
s tests bash tools/device_cuda_tests.sh run tests use:.devq/pack_t2 tests
s hab2 bash tools/device_attention.sh ab t2s t2 q4 -- $H
prof prof_t2 t2
s grid_t2 bash -c "ATTN_TAG=t2 bash tools/device_attention.sh run"
s grid_q4 bash -c "ATTN_TAG=q4 bash tools/device_attention.sh run"
kill $poll; xz -T4 $OUT/clocks.csv
ls -la $OUT

#!/usr/bin/env bash
# Any card. The int4_kivi kernels with the pool resident in L2 (cuda_attention_bench
# --resident-bytes 16 MiB), then from device memory, on the target cells: main (res, bf2de4d's
# kernels) against rq3 (rotations and the fp32 query held in registers, 3 thread blocks a
# multiprocessor), rq4 (the query held, 4), rreg3 (rotations held, 3) and res3 (main at 3)
# (resident also tied, mend (14ba45b), hyb (8107236)); ncu --set full of main at 28/4 B 64 x 32k
# resident and not; the resident A/B again in the other order. On an H200 first main's default
# grid (the acceptance table), and every build from device memory in the other order.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
cat $OUT/gpu.txt
h200=0; grep -q H200 $OUT/gpu.txt && h200=1
W=$OUT; s(){ d=$1; shift; mkdir -p $W/$d; OUT=$W/$d "$@" > $W/$d.log 2>&1; (cd $W && tar czf $d.tgz $d $d.log && rm -rf $d $d.log); echo "$d done $(date +%T)"; }
prof(){ d=$1; shift; mkdir -p $W/$d; a=/tmp/attn_res; mkdir -p $a && xz -dc .devcarry/attention_bench_res.xz | tar -C $a -xf -
  ncu --clock-control none --cache-control none --set full -k regex:decode_int4 -c 1 -f -o $W/$d/prof $a/cuda_attention_bench --reps 1 --formats int4 --batches 64 --contexts 32768 --heads 28/4 "$@" > $W/$d/ncu_log.txt 2>&1
  ncu -i $W/$d/prof.ncu-rep --page details > $W/$d/details.txt 2>&1
  ncu -i $W/$d/prof.ncu-rep --page raw --csv > $W/$d/raw.csv 2>&1
  rm -f $W/$d/prof.ncu-rep; (cd $W && tar czf $d.tgz $d && rm -rf $d); echo "$d done $(date +%T)"; }
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv,nounits -lms 200 > $OUT/clocks.csv 2>&1 &
poll=$!
date +%T
H="--formats int4 --batches 16,64,256 --contexts 8192,32768"
R="$H --resident-bytes 16777216"
[ $h200 = 1 ] && s grid bash -c "ATTN_TAG=res bash tools/device_attention.sh run"
s rab1 bash tools/device_attention.sh ab res rq3 rq4 rreg3 res3 tiedres mendres hybres -- $R
s hab1 bash tools/device_attention.sh ab res rq3 rq4 rreg3 res3 -- $H
prof prof_res --resident-bytes 16777216
prof prof_hbm
[ $h200 = 0 ] && s rab2 bash tools/device_attention.sh ab rq4 rq3 rreg3 res3 res -- $R
[ $h200 = 1 ] && s hab2 bash tools/device_attention.sh ab hybres mendres tiedres res3 rreg3 rq4 rq3 res -- $H
kill $poll; gzip $OUT/clocks.csv
ls -la $OUT

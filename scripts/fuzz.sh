#!/usr/bin/env bash
# Builds the libFuzzer targets with clang-14 (address + undefined sanitizers) into build-fuzz/
# and runs each for SECONDS (default 60), seeded from the test data. Not part of CI's default
# run; use it after touching a parser.   bash scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
if ! command -v clang++-14 >/dev/null || ! dpkg-query -W libclang-rt-14-dev >/dev/null 2>&1; then
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq clang-14 libclang-rt-14-dev libfuzzer-14-dev
fi
mkdir -p build-fuzz/corpus/safetensors
flags="-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc"
clang++-14 $flags tests/model/fuzz_safetensors.cc src/model/{safetensors,weights,weight_map,model_config}.cc \
  src/common/{check,dtype,file,json}.cc -pthread -o build-fuzz/fuzz_safetensors
cp tests/model/data/reference.safetensors build-fuzz/corpus/safetensors/
build-fuzz/fuzz_safetensors -dict=tests/model/data/safetensors.dict -max_total_time="$seconds" \
  -print_final_stats=1 build-fuzz/corpus/safetensors

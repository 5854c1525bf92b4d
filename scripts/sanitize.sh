#!/usr/bin/env bash
# Builds the server, its unit tests and `s4kv` with a sanitizer (address: ASan + UBSan with
# LeakSanitizer; thread: TSan) into build-asan/ or build-tsan/ (CPU only), then runs the server's
# unit tests and the end-to-end suite against that `s4kv serve` (a leak or a race makes the
# server's exit code non-zero, which the suite checks at every SIGTERM). Not part of CI's run
# (about 10 minutes of building); use it after touching src/server/.
#   bash scripts/sanitize.sh [address|thread]
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-address}
case "$kind" in
  address) dir=build-asan; flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
           export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ;;
  thread)  dir=build-tsan; flags="-fsanitize=thread -Wno-tsan"  # asio fences: gcc warns under TSan
           export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ;;
  *) echo "usage: bash scripts/sanitize.sh [address|thread]" >&2; exit 2 ;;
esac
tests="http_server_test http_framing_test cors_test metrics_test stats_logger_test api_server_test work_pool_test request_limits_test openai_protocol_test openai_serving_test async_engine_test async_engine_fake_test async_engine_admission_test"
cmake -S . -B "$dir" -DS4KV_ENABLE_CUDA=OFF -DS4KV_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" >/dev/null
# shellcheck disable=SC2086
cmake --build "$dir" -j"$(nproc)" --target s4kv $tests
for t in $tests; do
  echo "== $t"
  "$dir/tests/server/$t" --gtest_brief=1
done
echo "== end-to-end suite against $dir/src/cli/s4kv"
S4KV_BIN="$dir/src/cli/s4kv" .venv/bin/python -m pytest -q -p no:cacheprovider tests/server/

#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ (clang-14, ASan + UBSan) into build-fuzz/ and runs
# each for SECONDS (default 600), JOBS targets at a time (default: as many as there are cores,
# at most one process per target), then writes a JSON summary: per target the seconds run,
# executions, corpus size, crashes (reproducers under build-fuzz/runs/<target>/artifacts/).
# Exit code 1 when any target crashed, leaked, timed out or ran out of memory.
#
#   bash scripts/fuzz.sh [-t SECONDS] [-j JOBS] [--summary FILE] [TARGET...]
#   bash scripts/fuzz.sh --no-build --bin DIR [--work DIR] ...   # prebuilt binaries elsewhere
#
# The binaries link libstdc++ statically and carry the bundled tokenizer, so build-fuzz/tests/
# fuzz/fuzz_* run on another x86-64 Linux machine (glibc 2.36+) with this repository's
# tests/fuzz/<target>/corpus as seeds and no clang installed: copy them and pass --no-build --bin.
# New inputs are written to WORK/<target>/corpus (default WORK: build-fuzz/runs), never to the
# checked-in seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
args_given="$*"
seconds=600
jobs=$(nproc)
build=1
bin=build-fuzz/tests/fuzz
work=build-fuzz/runs
summary=""
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    -t) seconds=$2; shift 2 ;;
    -j) jobs=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    --bin) bin=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --summary) summary=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  for d in tests/fuzz/*/; do
    t=$(basename "$d")
    [ -f "$d/fuzz_$t.cc" ] && targets+=("$t")
  done
fi
summary=${summary:-$work/summary.json}

if [ "$build" = 1 ]; then
  if ! command -v clang++-14 >/dev/null || ! dpkg-query -W libclang-rt-14-dev >/dev/null 2>&1; then
    sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq clang-14 libclang-rt-14-dev \
      libfuzzer-14-dev
  fi
  launcher=""
  command -v ccache >/dev/null && launcher="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
  cmake -S . -B build-fuzz -DS4KV_FUZZ=ON -DCMAKE_C_COMPILER=clang-14 \
    -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only" $launcher >/dev/null
  cmake --build build-fuzz -j"${S4KV_JOBS:-$(nproc)}" --target "${targets[@]/#/fuzz_}"
fi

# run_one TARGET: one libFuzzer process for $seconds; its log and a one-line result file.
run_one() {
  local t=$1 dir="$work/$1" seeds=(tests/fuzz/$1/corpus) opts=()
  mkdir -p "$dir/corpus" "$dir/artifacts"
  [ -d "tests/fuzz/$t/regressions" ] && seeds+=("tests/fuzz/$t/regressions")
  [ -f "tests/fuzz/$t/$t.dict" ] && opts+=("-dict=tests/fuzz/$t/$t.dict")
  local start end code=0
  start=$(date +%s.%N)
  "$bin/fuzz_$t" "${opts[@]}" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/" "$dir/corpus" "${seeds[@]}" \
    >"$dir/log" 2>&1 || code=$?
  end=$(date +%s.%N)
  echo "$t $code $start $end" >"$dir/result"
  echo "fuzz.sh: $t exit $code ($(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' \
    "$dir/log" || echo 'no stats'))"
}

for t in "${targets[@]}"; do rm -f "$work/$t/result"; done
echo "fuzz.sh: ${#targets[@]} targets, $seconds s each, $jobs at a time"
for t in "${targets[@]}"; do
  [ -x "$bin/fuzz_$t" ] || { echo "fuzz.sh: $bin/fuzz_$t missing" >&2; exit 2; }
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  run_one "$t" &
done
wait

python3 - "$summary" "$seconds" "$work" "$args_given" "${targets[@]}" <<'PY'
import datetime, glob, json, os, platform, re, subprocess, sys
out, budget, work, args_given, *targets = sys.argv[1:]
def stat(log, name):
    m = re.search(r"stat::%s:\s*(\d+)" % name, log)
    return int(m.group(1)) if m else None
rows, failed = [], False
for t in targets:
    d = os.path.join(work, t)
    name, code, start, end = open(os.path.join(d, "result")).read().split()
    log = open(os.path.join(d, "log"), errors="replace").read()
    files = [f for f in glob.glob(os.path.join(d, "corpus", "*")) if os.path.isfile(f)]
    artifacts = sorted(glob.glob(os.path.join(d, "artifacts", "*")))
    crashes = [a for a in artifacts
               if re.match(r"(crash|leak|timeout|oom)-", os.path.basename(a))]
    failed = failed or int(code) != 0 or bool(crashes)
    rows.append({
        "target": t, "seconds": round(float(end) - float(start), 1),
        "execs": stat(log, "number_of_executed_units"),
        "execs_per_sec": stat(log, "average_exec_per_sec"),
        "corpus_files": len(files), "corpus_bytes": sum(os.path.getsize(f) for f in files),
        "crashes": len(crashes), "artifacts": crashes, "exit_code": int(code),
        "peak_rss_mb": stat(log, "peak_rss_mb"), "log": os.path.join(d, "log")})
try:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or None
except OSError:
    commit = None
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
            if l.startswith("model name")), platform.processor())
doc = {"seconds_per_target": int(budget), "targets": rows, "commit": commit,
       "command": ("bash scripts/fuzz.sh " + args_given).strip(),
       "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
       "machine": {"cpu": cpu, "cores": os.cpu_count(), "os": platform.platform()}}
os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print(f"{'target':20} {'seconds':>8} {'execs':>12} {'corpus':>7} {'crashes':>7}")
for r in rows:
    print(f"{r['target']:20} {r['seconds']:8.0f} {r['execs'] or 0:12d} {r['corpus_files']:7d} "
          f"{r['crashes']:7d}" + ("" if r["exit_code"] == 0 else f"  exit {r['exit_code']}"))
print(f"summary: {out}")
sys.exit(1 if failed else 0)
PY

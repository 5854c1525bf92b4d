#!/usr/bin/env bash
# Installs everything S4 KV needs to build and test on Debian 12 (or Ubuntu 24.04, the GPU
# machines of deploy/): Debian packages (apt) and the pinned Python test oracles
# (requirements-test.txt) in a virtual environment at .venv.
#   --build-only    only what building s4kv needs (no test tools, no .venv): deploy/'s boot
#                   script, which then builds with S4KV_BUILD_TESTS=OFF and S4KV_BUILD_BENCH=OFF
#   --deploy-tools  also the deploy/ linters and AWS emulator in .venv-deploy (scripts/test.sh)
# Idempotent: packages already present are skipped; a second run changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
build_only=0 deploy_tools=0
for arg in "$@"; do
  case "$arg" in
    --build-only) build_only=1 ;;
    --deploy-tools) deploy_tools=1 ;;
    *) echo "usage: install_deps.sh [--build-only] [--deploy-tools]" >&2; exit 2 ;;
  esac
done

# Debian 12 (the project's machines) and Ubuntu 24.04 (the GPU AMI of deploy/) differ only in
# Boost's version.
. /etc/os-release
case "${ID:-}-${VERSION_ID:-}" in
  debian-12) boost=libboost1.81-dev ;;
  ubuntu-24.04) boost=libboost1.83-dev ;;
  *) echo "error: install_deps.sh supports Debian 12 and Ubuntu 24.04, not ${PRETTY_NAME:-this system}" >&2
     exit 2 ;;
esac

packages=(
  build-essential cmake pkg-config python3 python3-venv python3-pip
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev libutf8proc-dev libopenblas-dev "$boost" xz-utils
)
# Test tools: googletest, benchmarks, clang-format, promtool (prometheus), systemd-analyze.
[ "$build_only" = 1 ] || packages+=(
  googletest libgtest-dev libgmock-dev libbenchmark-dev clang-format prometheus systemd
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  echo "installing Debian packages: ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

[ "$build_only" = 0 ] || exit 0

# Python oracles and test tools, pinned.
py=${S4KV_PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
stamp=.venv/.requirements-test.sha
want=$(sha256sum requirements-test.txt | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-test.txt
  echo "$want" > "$stamp"
fi

# With --deploy-tools (scripts/test.sh): the deployment linters and the AWS emulator the
# deploy/ tests use (cfn-lint, checkov, hadolint, moto), pinned, in their own .venv-deploy
# (checkov and moto pin libraries of their own).
if [ "$deploy_tools" = 1 ]; then
  if [ ! -x .venv-deploy/bin/python ]; then
    "$py" -m venv .venv-deploy
  fi
  stamp=.venv-deploy/.requirements-deploy.sha
  want=$(sha256sum requirements-deploy.txt | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    .venv-deploy/bin/python -m pip install -q --upgrade pip
    .venv-deploy/bin/python -m pip install -q -r requirements-deploy.txt
    echo "$want" > "$stamp"
  fi
fi

#!/usr/bin/env bash
# Installs everything S4 KV needs to build and test on Debian 12: Debian packages (apt) and
# the pinned Python test oracles (requirements-test.txt) in a virtual environment at .venv.
# Idempotent: packages already present are skipped; a second run changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config python3 python3-venv python3-pip
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
  libpcre2-dev libutf8proc-dev libopenblas-dev libboost1.81-dev
  googletest libgtest-dev libgmock-dev libbenchmark-dev clang-format xz-utils
  prometheus
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

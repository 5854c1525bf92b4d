#!/usr/bin/env bash
# Build the English prose corpus for models/s4kv-tiny from Debian documentation packages.
#
#   sudo tools/prepare_corpus.sh [OUT_DIR]        (default OUT_DIR: build/corpus)
#
# 1. installs the source packages listed below (Debian 12 "bookworm", all in main; see
#    tools/corpus_sources.md for versions and licences),
# 2. extracts one cleaned UTF-8 text file per source into OUT_DIR/sources/<source>.{txt,jsonl}
#    (tools/extract_text.py, standard library only),
# 3. splits the documents deterministically into OUT_DIR/train.jsonl and OUT_DIR/heldout.jsonl
#    (~1% of documents held out, chosen by a seeded hash; shuffled with a fixed seed), one JSON
#    object {"source", "id", "text"} per line, plus OUT_DIR/{train,heldout}_documents.txt.
#
# Idempotent: packages already installed are left alone, outputs are rewritten atomically.
# Set PYTHON to choose the interpreter (default: .venv/bin/python if present, else python3).
# Set SKIP_APT=1 to skip package installation (e.g. when not root and packages are present).
set -euo pipefail

cd "$(dirname "$0")/.."
OUT="${1:-build/corpus}"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi

PACKAGES=(
    python3.11-doc debian-handbook jargon dict-gcide git-doc maint-guide debian-reference-en
    bash-doc gnu-standards linux-doc-6.1 postgresql-doc-15 bible-kjv-text bible-kjv
    developers-reference debian-policy debian-faq python-django-doc perl-doc debian-history
)
# bible-kjv provides the `bible` program that decodes bible-kjv-text's compressed data;
# perl (pod2text) is already present on every Debian system.

if [[ "${SKIP_APT:-0}" != 1 ]]; then
    missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "installing: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}"
    fi
fi

echo "== package versions"
for p in "${PACKAGES[@]}"; do
    printf '%-24s %s\n' "$p" "$(dpkg-query -W -f='${Version}' "$p")"
done

mkdir -p "$OUT"
echo "== extracting into $OUT/sources"
"$PYTHON" tools/extract_text.py extract --out "$OUT"
echo "== splitting"
"$PYTHON" tools/extract_text.py split --out "$OUT"
du -b "$OUT"/train.jsonl "$OUT"/heldout.jsonl

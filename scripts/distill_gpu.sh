#!/usr/bin/env bash
# The draft head's pipeline in one go on a lent CUDA machine (or, scaled down, anywhere): the lasting corpus
# grown on a copy (new written and derived prompts with the verifier's greedy replies), the verifier's hidden
# states and top-16 labels over all of it (the prompts' own text teacher-forced too), then one or more heads
# trained side by side on one device. What is worth bringing back goes into OUT_DIR: the new corpus shards
# (corpus-new.tar, to unpack into distill/corpus), each run's best head exported with its train.json
# (<run>.tar: <run>/, loadable as a model spec) and the log. The states stay in WORK (gigabytes at full
# size); held-out agreement is measured where the tar lands (`python -m distill agreement --draft FOLDER`),
# since both held-out sets' replies are there already.
#
#   scripts/distill_gpu.sh VERIFIER_SPEC OUT_DIR [RUN[:TRAIN-HEAD FLAGS] ...]
#
# Each RUN is a train-head run (default: one run "head" with the defaults below); runs after the first start
# together with it. Environment: DEVICE (cuda), WORK (scratch folder), CORPUS (shards to grow a copy of;
# distill/corpus), CORPUS_MIN / CORPUS_SHARDS (minutes / shards at most of new corpus; 0 shards: none),
# SOURCE (written, derived, both, languages), MAN_ROOT (the translated manual pages, for languages), BATCH
# (generation batch and shard size), MAX_NEW (reply length cap),
# FEATURE_TOKENS (tokens per features batch), STEPS, TRAIN_MIN, TRAIN_BATCH (reply positions per step),
# CHAIN (drafting steps trained).
set -euo pipefail
SPEC=${1:?verifier spec (a GGUF file, a model folder, or an embedded name)}
OUT_DIR=${2:?folder for the results}
shift 2
RUNS=("$@")
[ ${#RUNS[@]} -gt 0 ] || RUNS=(head)
DEVICE=${DEVICE:-cuda}
WORK=${WORK:-/tmp/distill-work}
CORPUS=${CORPUS:-distill/corpus}
CORPUS_MIN=${CORPUS_MIN:-2}
CORPUS_SHARDS=${CORPUS_SHARDS:-1000}
SOURCE=${SOURCE:-both}
MAN_ROOT=${MAN_ROOT:-/usr/share/man}
BATCH=${BATCH:-256}
MAX_NEW=${MAX_NEW:-192}
FEATURE_TOKENS=${FEATURE_TOKENS:-32768}
STEPS=${STEPS:-3000}
TRAIN_MIN=${TRAIN_MIN:-3}
TRAIN_BATCH=${TRAIN_BATCH:-8192}
CHAIN=${CHAIN:-4}
mkdir -p "$OUT_DIR" "$WORK"
export SPECDEC_CACHE_DIR=${SPECDEC_CACHE_DIR:-$WORK/cache} PYTHONUNBUFFERED=1 TQDM_MININTERVAL=${TQDM_MININTERVAL:-15}
# Each step's log starts with torch's and transformers' versions (--versions).
run() { python3 -m distill --versions --verifier "$SPEC" --work "$WORK" --device "$DEVICE" --dtype float32 "$@"; }
{
  date
  # Grow a copy: the checkout's corpus changes only when the new shards are unpacked into it.
  mkdir -p "$WORK/corpus"
  cp -n "$CORPUS"/shard-*.npz "$WORK/corpus/" 2>/dev/null || true
  ls "$WORK/corpus" >"$WORK/corpus-before.txt"
  if [ "$CORPUS_SHARDS" -gt 0 ]; then
    run corpus --folder "$WORK/corpus" --source "$SOURCE" --man-root "$MAN_ROOT" --shards "$CORPUS_SHARDS" \
        --shard-size "$BATCH" --batch-size "$BATCH" --max-new-tokens "$MAX_NEW" --max-minutes "$CORPUS_MIN"
  fi
  ls "$WORK/corpus" | grep -vxF -f "$WORK/corpus-before.txt" >"$WORK/corpus-new.txt" || true
  tar -cf "$OUT_DIR/corpus-new.tar" -C "$WORK/corpus" -T "$WORK/corpus-new.txt"
  echo "new corpus shards: $(wc -l <"$WORK/corpus-new.txt")"
  date; run corpus-replies --folder "$WORK/corpus" --teacher-forced
  date; run features --with-labels 16 --batch-tokens "$FEATURE_TOKENS"
  date
  pids=()
  for entry in "${RUNS[@]}"; do
    name=${entry%%:*}
    flags=""
    [ "$name" = "$entry" ] || flags=${entry#*:}
    # shellcheck disable=SC2086  # the flags are words
    run train-head --run "$name" --chain-steps "$CHAIN" --steps "$STEPS" --max-minutes "$TRAIN_MIN" \
        --batch-tokens "$TRAIN_BATCH" --export-to "$WORK/export/$name" $flags >"$WORK/train-$name.log" 2>&1 &
    pids+=($!)
  done
  status=0
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  for entry in "${RUNS[@]}"; do
    name=${entry%%:*}
    tail -n 5 "$WORK/train-$name.log"
    [ -f "$WORK/runs/$name/train.json" ] && [ -d "$WORK/export/$name" ] || continue
    cp "$WORK/runs/$name/train.json" "$WORK/export/$name/train.json"
    tar -cf "$OUT_DIR/$name.tar" -C "$WORK/export" "$name"
  done
  date
  exit "$status"
} 2>&1 | tee "$OUT_DIR/log.txt"

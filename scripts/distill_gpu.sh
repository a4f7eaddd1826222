#!/usr/bin/env bash
# The distillation pipeline in one go on a lent CUDA machine (or, scaled down, anywhere), packing what is
# worth bringing back into OUT_DIR: each run's weights (fp16, the token table in a file of its own so
# that no file passes 16 MiB), its config and training history, the replies (token ids), and the log.
#
#   scripts/distill_gpu.sh PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf OUT_DIR
#
# Environment: DEVICE (cuda), GEN_MIN / TRAIN_MIN (minutes for generation / each training run),
# SHAPES ("run:DraftShape ..."), BATCH (generation batch), LIMIT (first N prompts; 0 = all),
# MAX_NEW (reply length cap), WORK (scratch folder).
set -euo pipefail
GGUF=${1:?path to the verifier GGUF}
OUT_DIR=${2:?folder for the results}
DEVICE=${DEVICE:-cuda}
WORK=${WORK:-/tmp/distill-work}
GEN_MIN=${GEN_MIN:-2}
TRAIN_MIN=${TRAIN_MIN:-1}
SHAPES=${SHAPES:-"l2:layers=2,hidden=384 l4:layers=4,hidden=384"}
BATCH=${BATCH:-512}
LIMIT=${LIMIT:-0}
MAX_NEW=${MAX_NEW:-256}
TRAIN_BATCH=${TRAIN_BATCH:-16384}
LABEL_BATCH=${LABEL_BATCH:-65536}
mkdir -p "$OUT_DIR" "$WORK"
export SPECDEC_CACHE_DIR=$WORK/cache PYTHONUNBUFFERED=1 TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 TQDM_MININTERVAL=${TQDM_MININTERVAL:-15}
run() { python3 -m specdec_core.distill --verifier "$GGUF" --work "$WORK" --device "$DEVICE" --dtype float32 "$@"; }
{
  date; python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  run generate --modes greedy,t07 --batch-size "$BATCH" --shard-size $((BATCH * 2)) --max-new-tokens "$MAX_NEW" \
      --max-minutes "$GEN_MIN" --limit "$LIMIT"
  date; run label --batch-tokens "$LABEL_BATCH"
  for spec in $SHAPES; do
    date; run train --run "${spec%%:*}" --shape "${spec#*:}" --steps 100000 --max-minutes "$TRAIN_MIN" \
        --batch-tokens "$TRAIN_BATCH" --lr 2e-3 || echo "training ${spec} failed"
  done
  date; python3 - "$WORK" "$OUT_DIR" $((BATCH * 2)) <<'PY'
import json, sys
from pathlib import Path
import torch
from safetensors.torch import load_file, save_file
work, out, shard = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
for run in sorted((work / "runs").glob("*")):
    if not (run / "model" / "model.safetensors").exists():
        continue
    state = {k: v.half() if v.is_floating_point() else v for k, v in load_file(run / "model" / "model.safetensors").items()}
    table = "model.embed_tokens.weight"
    save_file({table: state.pop(table)}, out / f"{run.name}-table.safetensors")
    save_file(state, out / f"{run.name}-rest.safetensors")
    facts = {"config": json.loads((run / "model" / "config.json").read_text()),
             "train": json.loads((run / "train.json").read_text())}
    (out / f"{run.name}.json").write_text(json.dumps(facts, indent=2))
packed = {}
for path in sorted((work / "replies").glob("*.pt")):
    mode, index = path.stem.split("-")
    replies = torch.load(path)["reply_ids"]
    entry = packed.setdefault(mode, {"prompt_index": [], "lengths": [], "tokens": []})
    for i, reply in enumerate(replies):
        entry["prompt_index"].append(int(index) * shard + i)
        entry["lengths"].append(len(reply))
        entry["tokens"].extend(reply)
torch.save({m: {k: torch.tensor(v, dtype=torch.int32 if k != "tokens" else torch.int32).to(
    torch.int32 if k != "tokens" else torch.uint16) for k, v in e.items()} for m, e in packed.items()},
    out / "replies.pt")
print({m: (len(e["lengths"]), len(e["tokens"])) for m, e in packed.items()})
PY
  date
} 2>&1 | tee "$OUT_DIR/log.txt"

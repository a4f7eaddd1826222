#!/usr/bin/env bash
# The GPU checks, in a few minutes on one CUDA device (the device tool's machine): the costs of checking k
# tokens and trees on real model shapes with random weights (nothing is downloaded), for the Llama 8B + 1B
# shapes and for the Qwen2.5-Coder 1.5B + 0.5B pair that `specdec models` installs. Results land in $OUT
# (or bench/results). Run from the repository root: scripts/gpu_checks.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-bench/results}"
PY="${PY:-python3}"
"$PY" -c "import torch; assert torch.cuda.is_available(), 'no CUDA device here'; print(torch.cuda.get_device_name())"
"$PY" -m bench.gpu_shapes --device cuda --out-dir "$out"
"$PY" -m bench.gpu_shapes --device cuda --pair qwen-coder --out-dir "$out"
# A quantised GGUF's form on a GPU (torch's int4 product), untested on a GPU when written: a failure says why.
"$PY" -m bench.gpu_shapes --device cuda --pair qwen-coder --weights int4 --out-dir "$out" || echo "int4 lane failed"

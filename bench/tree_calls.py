"""Tokens per verifier call with the embedded pair: the chain against draft trees of a few sizes.

Tokens per call is how far one verifier pass advances the reply: hardware-independent, so it can be
measured on a busy machine. Speed is `specdec bench --tree-nodes N`'s job. From the repository root:

    python3 -m bench.tree_calls [--prompts all|FILE] [--count 16] [--max-new-tokens 64]

Prints one line per configuration (greedy; every reply is checked identical to the chain's).
"""

from __future__ import annotations

import argparse

from specdec_core.threads import prefer_passive_waiting

prefer_passive_waiting()

from specdec_core.chat import build_prompt  # noqa: E402
from specdec_core.config import GenerationConfig  # noqa: E402
from specdec_core.pairing import load_pair  # noqa: E402
from specdec_core.prompt_sets import load_prompts  # noqa: E402

CONFIGS = {
    "chain (--tree-nodes 0)": dict(tree_nodes=0),
    "trees, cost-aware, <= 16 nodes (auto, greedy)": dict(tree_nodes=16),
    "trees of 8 nodes, all checked, depth <= 4": dict(tree_nodes=8, cost_aware=False),
    "trees of 32 nodes, all checked, depth <= 6": dict(tree_nodes=32, gamma=6, cost_aware=False),
    "trees of 64 nodes, all checked, depth <= 8": dict(tree_nodes=64, gamma=8, cost_aware=False),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", default="all")
    parser.add_argument("--count", type=int, default=16, help="the first N prompts of the set")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    pair = load_pair(None, None, None)
    cases = load_prompts(args.prompts)[:args.count]
    prompts = [build_prompt(pair.verifier.tokenizer, list(c.messages), system=c.system,
                            context_length=pair.verifier.context_length,
                            reserve_new_tokens=args.max_new_tokens).ids for c in cases]
    reference = None
    for name, settings in CONFIGS.items():
        tokens = rounds = nodes = 0
        replies = []
        for ids in prompts:
            config = GenerationConfig(max_new_tokens=args.max_new_tokens, top_alternatives=0, **settings)
            *_, finished = pair.engine.generate(ids, config)
            tokens += finished.stats.new_tokens
            rounds += finished.stats.rounds
            nodes += finished.stats.drafted
            replies.append(finished.token_ids)
        reference = reference or replies
        same = sum(a == b for a, b in zip(replies, reference))
        print(f"{name:45s} {tokens / rounds:.2f} tokens/call  {nodes / rounds:5.1f} nodes/round  "
              f"identical {same}/{len(prompts)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

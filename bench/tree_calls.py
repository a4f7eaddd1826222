"""Tokens per verifier call with the embedded pair: the chain against draft trees of a few sizes.

Tokens per call is how far one verifier pass advances the reply: hardware-independent, so it can be
measured on a busy machine. Speed is `specdec bench --tree-nodes N`'s job. From the repository root:

    python3 -m bench.tree_calls [--prompts all|FILE] [--count 16] [--max-new-tokens 64]

Prints one line per configuration (greedy; every reply is checked identical to the chain's).

`--what-if` instead runs the cost-aware default two ways: with this machine's measured costs, and as if
checking up to 33 tokens cost one plain step, as it is expected to on a GPU (the verify costs pinned, not
measured; drafting is timed as usual). It shows what the verify cost takes from tokens per call here.

`--calibration` instead checks trees of 24 nodes, 5 deep, whole, and prints how often the verifier agreed
with a drafted token against the draft's probability for it, by depth (nodes whose parent the verifier
accepted, copies left out): whether the draft's confidence, which the sizer spends verifier rows on, is
what it says.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from specdec_core.commands.threads import prefer_passive_waiting

prefer_passive_waiting()

from specdec_core.config import GenerationConfig  # noqa: E402
from specdec_core.drafting.planner import DraftPlanner  # noqa: E402
from specdec_core.engine import Engine  # noqa: E402
from specdec_core.events import RoundVerified  # noqa: E402
from specdec_core.measuring.prompt_sets import load_prompts  # noqa: E402
from specdec_core.pairs.pairing import load_pair  # noqa: E402
from specdec_core.text.chat import build_prompt  # noqa: E402
from specdec_core.verification.cost import TreeSizer, VerifyCost  # noqa: E402

CONFIGS = {
    "chain (--tree-nodes 0)": dict(tree_nodes=0),
    "trees, cost-aware, <= 16 nodes (auto, greedy)": dict(tree_nodes=16),
    "trees of 8 nodes, all checked, depth <= 4": dict(tree_nodes=8, cost_aware=False),
    "trees of 32 nodes, all checked, depth <= 6": dict(tree_nodes=32, gamma=6, cost_aware=False),
    "trees of 64 nodes, all checked, depth <= 8": dict(tree_nodes=64, gamma=8, cost_aware=False),
}


class _PinnedCost(VerifyCost):
    """A verify cost that stays as given (a what-if): passes are not timed."""

    def observe(self, rows: int, seconds: float) -> None:
        pass


def _what_ifs(step_s: float) -> dict[str, tuple[dict, Callable[[], TreeSizer]]]:
    flat = {rows: step_s for rows in range(1, 34)}
    return {
        "cost-aware, this machine's measured costs": (dict(tree_nodes=16), TreeSizer),
        "cost-aware, <= 32 nodes, depth <= 6, as if 33 rows cost 1 step":
            (dict(tree_nodes=32, gamma=6), lambda: TreeSizer(cost=_PinnedCost(flat))),
    }


def _tokens_per_call(engine, prompts: list[list[int]], max_new_tokens: int, settings: dict):
    tokens = rounds = nodes = 0
    replies = []
    for ids in prompts:
        config = GenerationConfig(max_new_tokens=max_new_tokens, top_alternatives=0, **settings)
        *_, finished = engine.generate(ids, config)
        tokens += finished.stats.new_tokens
        rounds += finished.stats.rounds
        nodes += finished.stats.drafted
        replies.append(finished.token_ids)
    return tokens / rounds, nodes / rounds, replies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", default="all")
    parser.add_argument("--count", type=int, default=16, help="the first N prompts of the set")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--calibration", action="store_true", help="the draft's calibration, by depth")
    parser.add_argument("--what-if", action="store_true", help="the default, and as if checking k tokens were free")
    args = parser.parse_args(argv)
    pair = load_pair(None, None, None)
    cases = load_prompts(args.prompts)[:args.count]
    prompts = [build_prompt(pair.verifier.tokenizer, list(c.messages), system=c.system,
                            context_length=pair.verifier.context_length,
                            reserve_new_tokens=args.max_new_tokens).ids for c in cases]
    if args.calibration:
        print_calibration(pair.engine, prompts, args.max_new_tokens)
        return 0
    if args.what_if:
        *_, plain = pair.engine.generate(prompts[0], GenerationConfig(max_new_tokens=16, speculate=False))
        step_s = plain.stats.verify_s / plain.stats.rounds  # this machine's plain decoding step, now
        configs = _what_ifs(step_s)
    else:
        configs = {name: (settings, TreeSizer) for name, settings in CONFIGS.items()}
    reference = None
    for name, (settings, sizer) in configs.items():
        # Each configuration measures (or is given) its costs afresh.
        engine = Engine(pair.verifier, pair.drafter, DraftPlanner(sizer=sizer()))
        per_call, per_round, replies = _tokens_per_call(engine, prompts, args.max_new_tokens, settings)
        reference = reference or replies
        same = sum(a == b for a, b in zip(replies, reference))
        print(f"{name:65s} {per_call:.2f} tokens/call  {per_round:5.1f} nodes/round  "
              f"identical {same}/{len(prompts)}", flush=True)
    return 0


BINS = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def print_calibration(engine, prompts: list[list[int]], max_new_tokens: int) -> None:
    """Draft probability against the verifier's agreement, per depth, over whole trees."""
    judged: dict[int, list[tuple[float, bool]]] = {}  # depth -> (draft prob, accepted)
    config = GenerationConfig(max_new_tokens=max_new_tokens, top_alternatives=0, tree_nodes=24, gamma=5,
                              cost_aware=False)
    for ids in prompts:
        for event in engine.generate(ids, config):
            if not isinstance(event, RoundVerified) or not event.tree:
                continue
            depths: list[int] = []
            for node in event.tree:
                depths.append(0 if node.parent < 0 else depths[node.parent] + 1)
                reached = node.parent < 0 or event.tree[node.parent].accepted
                if reached and node.draft_prob < 1.0:  # a copy is shown with p = 1: its rates are learned apart
                    judged.setdefault(depths[-1], []).append((node.draft_prob, node.accepted))
    print("draft probability -> how often the verifier agreed (nodes), per depth; greedy")
    print("depth  " + "  ".join(f"{lo:.2f}-{hi:.2f}".rjust(10) for lo, hi in zip(BINS, BINS[1:])) + "   all")
    for depth in sorted(judged):
        cells = []
        for lo, hi in zip(BINS, BINS[1:]):
            hits = [accepted for prob, accepted in judged[depth] if lo <= prob < hi]  # copies (p = 1) left out
            cells.append(f"{sum(hits) / len(hits):.2f} ({len(hits):3d})" if len(hits) >= 10 else " " * 10)
        pairs = judged[depth]
        mean_prob = sum(p for p, _ in pairs) / len(pairs)
        print(f"{depth:5d}  " + "  ".join(cells) + f"   {sum(a for _, a in pairs) / len(pairs):.2f} "
              f"(mean p {mean_prob:.2f}, {len(pairs)})", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())

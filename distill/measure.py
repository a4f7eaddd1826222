"""What a draft is worth with its verifier on held-out prompts, measured through the real engine.

For each prompt, in one process and interleaved (so both see the same machine load): the verifier alone
(speculation off), then speculation with each gamma, then (with `hybrid`) the draft as shipped: a
HybridDrafter (prompt lookup where the conversation has a match, else the draft for at most N tokens).
Greedy runs check that every reply is token for token the verifier's own; sampled runs (temperature
0.7) give the acceptance rate there.
"""

from __future__ import annotations

import time

from tqdm.auto import tqdm

from distill.data import encode_messages
from distill.prompts import Messages
from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import HybridDrafter, drafter_for
from specdec_core.engine import Engine
from specdec_core.events import Finished, RoundVerified
from specdec_core.stats import StatsAccumulator


def _figures(tally: StatsAccumulator, mismatches: list[int] | None = None) -> dict:
    """One setting's figures from its runs' merged tally (stats.py's definitions, c included)."""
    stats = tally.snapshot()
    return {
        "tokens_per_s": stats.tokens_per_s,
        "acceptance_rate": stats.acceptance_rate,
        "draft_ms_per_token": 1e3 * tally.draft_s / tally.drafted if tally.drafted else 0.0,
        "tokens_per_round": stats.mean_accepted_length,
        # Per draft depth: accepted at depth i / drafted at depth i (stats.py), to compare heads trained to
        # different depths (train-head --ttt-depth).
        "per_position_acceptance": [round(a, 4) for a in stats.per_position_acceptance],
        "c": stats.c,
        "new_tokens": stats.new_tokens,
        "mismatches": list(mismatches or []),  # prompt indices whose greedy reply differed
    }


def _run(engine: Engine, ids: list[int], config: GenerationConfig, tally: StatsAccumulator) -> Finished:
    """One reply from empty caches, its rounds folded into `tally`."""
    engine.reset_caches()  # no prefix reuse between runs: every run pays its own prefill
    finished = None
    for event in engine.generate(ids, config):
        if isinstance(event, RoundVerified):
            event.add_to(tally)
        elif isinstance(event, Finished):
            finished = event
    assert finished is not None and finished.error is None, finished
    return finished


def measure_pair(verifier, draft, prompts: list[Messages], *, gammas: tuple[int, ...] = (3, 4, 5),
                 max_new_tokens: int = 128, sampled_gamma: int = 4, temperature: float = 0.7, seed: int = 0,
                 adaptive: bool = False, hybrid: tuple[int, int] | None = None, sampled: bool = True) -> dict:
    """Figures for the pair on `prompts`; `hybrid` = (gamma, draft tokens) also measures the hybrid.
    `sampled=False` leaves out the sampled runs (their figures come back as None). See the module
    docstring."""
    alone = drafter_for(draft)
    mixed = HybridDrafter(alone, model_tokens=hybrid[1]) if hybrid else None
    engine = Engine(verifier, alone)
    base = GenerationConfig(max_new_tokens=max_new_tokens, seed=seed, top_alternatives=0)
    off, on = StatsAccumulator(), {g: StatsAccumulator() for g in gammas}
    at_temperature, mixed_greedy, mixed_sampled = StatsAccumulator(), StatsAccumulator(), StatsAccumulator()
    mismatches: dict[object, list[int]] = {g: [] for g in gammas} | {"hybrid": []}
    started = time.perf_counter()
    for index, messages in enumerate(tqdm(prompts, desc="measure", unit="prompt")):
        ids = encode_messages(verifier.tokenizer, messages, verifier.context_length, max_new_tokens)
        plain = _run(engine, ids, base.with_(speculate=False), off)
        for gamma in gammas:
            result = _run(engine, ids, base.with_(gamma=gamma, adaptive=adaptive), on[gamma])
            if result.token_ids != plain.token_ids:
                mismatches[gamma].append(index)
        if sampled:
            _run(engine, ids, base.with_(temperature=temperature, gamma=sampled_gamma, seed=seed + index),
                 at_temperature)
        if mixed is not None:
            engine.set_drafter(mixed)
            result = _run(engine, ids, base.with_(gamma=hybrid[0]), mixed_greedy)
            if result.token_ids != plain.token_ids:
                mismatches["hybrid"].append(index)
            if sampled:
                _run(engine, ids, base.with_(temperature=temperature, gamma=hybrid[0], seed=seed + index),
                     mixed_sampled)
            engine.set_drafter(alone)
    figures_off = _figures(off)
    per_gamma = {}
    for gamma, tally in on.items():
        f = _figures(tally, mismatches[gamma])
        f["speedup"] = f["tokens_per_s"] / figures_off["tokens_per_s"] if figures_off["tokens_per_s"] else 0.0
        per_gamma[str(gamma)] = f
    best = max(per_gamma, key=lambda g: per_gamma[g]["speedup"])
    plain_stats = off.snapshot()
    verifier_ms = 1e3 * plain_stats.decode_s / plain_stats.new_tokens if plain_stats.new_tokens else 0.0
    draft_ms = per_gamma[best]["draft_ms_per_token"]
    shipped = None
    if mixed is not None:
        figures_mixed = _figures(mixed_greedy, mismatches["hybrid"])
        shipped = {"gamma": hybrid[0], "draft_tokens": hybrid[1], **figures_mixed,
                   "speedup": figures_mixed["tokens_per_s"] / figures_off["tokens_per_s"]
                   if figures_off["tokens_per_s"] else 0.0,
                   "identical_greedy_output": not mismatches["hybrid"],
                   f"sampled_t{temperature:g}_acceptance_rate":
                       _figures(mixed_sampled)["acceptance_rate"] if sampled else None}
    return {
        "hybrid": shipped,
        "prompts": len(prompts),
        "max_new_tokens": max_new_tokens,
        "verifier_alone": figures_off,
        "verifier_ms_per_token": verifier_ms,
        "speculative": per_gamma,
        "best_gamma": int(best),
        "greedy_acceptance_rate": per_gamma[best]["acceptance_rate"],
        "speedup": per_gamma[best]["speedup"],
        "identical_greedy_output": not any(mismatches[g] for g in gammas),
        "draft_ms_per_token": draft_ms,
        # c as stats.py defines it: draft time per drafted token / verifier time per speculative call, at
        # the best gamma. (Until head5's card it was the draft's time per token over the verifier-alone
        # time per token, which the card's "c = 0.084" still is.)
        "c": per_gamma[best]["c"],
        f"sampled_t{temperature:g}": {"gamma": sampled_gamma, **_figures(at_temperature)} if sampled else None,
        "sampled_acceptance_rate": _figures(at_temperature)["acceptance_rate"] if sampled else None,
        "wall_s": time.perf_counter() - started,
    }

"""What a draft is worth with its verifier on held-out prompts, measured through the real engine.

For each prompt, in one process and interleaved (so both see the same machine load): the verifier alone
(speculation off), then speculation with each gamma, then (with `hybrid`) the draft as shipped: a
HybridDrafter (prompt lookup where the conversation has a match, else the draft for at most N tokens).
Greedy runs check that every reply is token for token the verifier's own; sampled runs (temperature
0.7) give the acceptance rate there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from specdec_core.chat import build_prompt
from specdec_core.config import GenerationConfig
from specdec_core.distill.prompts import Messages
from specdec_core.drafters import HybridDrafter, drafter_for
from specdec_core.engine import Engine
from specdec_core.events import Finished


@dataclass
class Tally:
    new_tokens: int = 0
    decode_s: float = 0.0
    drafted: int = 0
    accepted: int = 0
    draft_s: float = 0.0
    rounds: int = 0
    mismatches: list[int] = field(default_factory=list)  # prompt indices whose greedy reply differed

    def add(self, finished: Finished) -> None:
        stats = finished.stats
        self.new_tokens += stats.new_tokens
        self.decode_s += stats.decode_s
        self.drafted += stats.drafted
        self.accepted += stats.accepted
        self.draft_s += stats.draft_s
        self.rounds += stats.rounds

    def figures(self) -> dict:
        return {
            "tokens_per_s": self.new_tokens / self.decode_s if self.decode_s else 0.0,
            "acceptance_rate": self.accepted / self.drafted if self.drafted else 0.0,
            "draft_ms_per_token": 1e3 * self.draft_s / self.drafted if self.drafted else 0.0,
            "tokens_per_round": self.new_tokens / self.rounds if self.rounds else 0.0,
            "new_tokens": self.new_tokens,
            "mismatches": list(self.mismatches),
        }


def _run(engine: Engine, ids: list[int], config: GenerationConfig) -> Finished:
    engine.reset_caches()  # no prefix reuse between runs: every run pays its own prefill
    finished = None
    for event in engine.generate(ids, config):
        if isinstance(event, Finished):
            finished = event
    assert finished is not None and finished.error is None, finished
    return finished


def measure_pair(verifier, draft, prompts: list[Messages], *, gammas: tuple[int, ...] = (3, 4, 5),
                 max_new_tokens: int = 128, sampled_gamma: int = 4, temperature: float = 0.7, seed: int = 0,
                 adaptive: bool = False, hybrid: tuple[int, int] | None = None) -> dict:
    """Figures for the pair on `prompts`; `hybrid` = (gamma, draft tokens) also measures the hybrid.
    See the module docstring."""
    alone = drafter_for(draft)
    mixed = HybridDrafter(alone, model_tokens=hybrid[1]) if hybrid else None
    engine = Engine(verifier, alone)
    base = GenerationConfig(max_new_tokens=max_new_tokens, seed=seed, top_alternatives=0)
    off, on = Tally(), {g: Tally() for g in gammas}
    sampled, mixed_greedy, mixed_sampled = Tally(), Tally(), Tally()
    started = time.perf_counter()
    for index, messages in enumerate(tqdm(prompts, desc="measure", unit="prompt")):
        ids = build_prompt(verifier.tokenizer, messages, context_length=verifier.context_length,
                           reserve_new_tokens=max_new_tokens).ids
        plain = _run(engine, ids, base.with_(speculate=False))
        off.add(plain)
        for gamma in gammas:
            result = _run(engine, ids, base.with_(gamma=gamma, adaptive=adaptive))
            on[gamma].add(result)
            if result.token_ids != plain.token_ids:
                on[gamma].mismatches.append(index)
        sampled.add(_run(engine, ids, base.with_(temperature=temperature, gamma=sampled_gamma, seed=seed + index)))
        if mixed is not None:
            engine.set_drafter(mixed)
            result = _run(engine, ids, base.with_(gamma=hybrid[0]))
            mixed_greedy.add(result)
            if result.token_ids != plain.token_ids:
                mixed_greedy.mismatches.append(index)
            mixed_sampled.add(_run(engine, ids, base.with_(temperature=temperature, gamma=hybrid[0],
                                                           seed=seed + index)))
            engine.set_drafter(alone)
    figures_off = off.figures()
    per_gamma = {}
    for gamma, tally in on.items():
        f = tally.figures()
        f["speedup"] = f["tokens_per_s"] / figures_off["tokens_per_s"] if figures_off["tokens_per_s"] else 0.0
        per_gamma[str(gamma)] = f
    best = max(per_gamma, key=lambda g: per_gamma[g]["speedup"])
    verifier_ms = 1e3 * off.decode_s / off.new_tokens if off.new_tokens else 0.0
    draft_ms = per_gamma[best]["draft_ms_per_token"]
    shipped = None
    if mixed is not None:
        shipped = {"gamma": hybrid[0], "draft_tokens": hybrid[1], **mixed_greedy.figures(),
                   "speedup": mixed_greedy.figures()["tokens_per_s"] / figures_off["tokens_per_s"]
                   if figures_off["tokens_per_s"] else 0.0,
                   "identical_greedy_output": not mixed_greedy.mismatches,
                   f"sampled_t{temperature:g}_acceptance_rate": mixed_sampled.figures()["acceptance_rate"]}
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
        "identical_greedy_output": all(not t.mismatches for t in on.values()),
        "draft_ms_per_token": draft_ms,
        "c": draft_ms / verifier_ms if verifier_ms else 0.0,
        f"sampled_t{temperature:g}": {"gamma": sampled_gamma, **sampled.figures()},
        "sampled_acceptance_rate": sampled.figures()["acceptance_rate"],
        "wall_s": time.perf_counter() - started,
    }

"""`specdec rank-drafts`: which draft (or prompt lookup) is fastest with this verifier on this machine.

Each candidate gets the doctor's verdict, then, when it can pair, its acceptance, cost and speedup at each draft
length, measured with bench.py's `time_reply` against the verifier alone on the same prompts. Its command line is
commands/bench_cli.py; the app's Rank drafts dialog runs it too.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specdec_core import defaults
from specdec_core.config import GenerationConfig
from specdec_core.errors import ConfigError, ModelLoadError
from specdec_core.measuring.bench import BenchError, Reply, chat_prompts, machine_description, summarize, time_reply
from specdec_core.measuring.prompt_sets import PromptCase

if TYPE_CHECKING:
    from specdec_core.engine import Engine
    from specdec_core.loading.models import LoadedModel


@dataclass(frozen=True)
class Candidate:
    spec: str | None  # None: prompt lookup


def rank_drafts(engine: Engine, verifier: LoadedModel, candidates: list[Candidate], cases: list[PromptCase],
                config: GenerationConfig, gammas: Sequence[int], repeats: int,
                load: Callable[[str], LoadedModel], progress: Callable[[str], None] | None = None,
                hybrid_tokens: int | None = None) -> dict:
    """For each candidate: the doctor's verdict, then (when compatible) α, c and speedup at each gamma;
    the best gamma is the one measured fastest. With `hybrid_tokens`, each compatible draft model is
    also ranked as a hybrid with prompt lookup (that many draft tokens per round without a match).
    Rows come back sorted by that speedup."""
    from specdec_core.drafting.drafters import PromptLookupDrafter
    from specdec_core.pairs.doctor import check_models
    from specdec_core.pairs.pairing import make_drafter

    say = progress or (lambda message: None)
    if repeats < 1:
        raise ConfigError(f"--repeats must be at least 1 (got {repeats})")
    prompts = chat_prompts(verifier, cases, config)
    rows = []
    for candidate in candidates:
        row: dict[str, Any] = {"draft": candidate.spec or "prompt lookup",
                               "kind": defaults.MODEL if candidate.spec else defaults.PROMPT_LOOKUP}
        draft = None
        if candidate.spec is None:
            row["verdict"] = "compatible: no model, copies from the conversation"
            row["compatible"] = True
            rows.append(_measured_row(engine, PromptLookupDrafter(), row, prompts, config, gammas, repeats, say))
            continue
        say(f"loading {candidate.spec}")
        try:
            draft = load(candidate.spec)
        except ModelLoadError as error:
            rows.append({**row, "compatible": False, "verdict": f"could not load: {error}"})
            continue
        verdict = check_models(verifier, draft)
        row.update(draft=draft.name, spec=candidate.spec, verdict=verdict.summary(), compatible=verdict.compatible)
        if not verdict.compatible:
            rows.append(row)
            continue
        if verdict.cross_vocabulary:
            row["kind"] = defaults.TLI  # a draft with another tokenizer drafts through the text (cross_vocab.py)
        rows.append(_measured_row(engine, make_drafter(defaults.MODEL, verifier, draft, verdict), row, prompts, config,
                                  gammas, repeats, say))
        if hybrid_tokens is not None:
            mixed = make_drafter(defaults.HYBRID, verifier, draft, verdict, hybrid_tokens)
            rows.append(_measured_row(engine, mixed, {**row, "draft": f"{draft.name} + prompt lookup",
                                                      "kind": defaults.HYBRID, "draft_tokens": hybrid_tokens},
                                      prompts, config, gammas, repeats, say))
        del draft
    rows.sort(key=lambda r: (not r.get("compatible") or "speedup" not in r, -r.get("speedup", 0.0)))
    return {"setup": {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                      "verifier": verifier.name, "gammas": list(gammas), "repeats": repeats,
                      "max_new_tokens": config.max_new_tokens, "temperature": config.temperature,
                      "prompts": len(cases), "machine": machine_description(verifier.device),
                      "hybrid_draft_tokens": hybrid_tokens},
            "ranking": rows}


def _measured_row(engine: Engine, drafter: Any, row: dict, prompts: list[list[int]], config: GenerationConfig,
                  gammas: Sequence[int], repeats: int, say: Callable[[str], None]) -> dict:
    """`row` plus the drafter's figures at each gamma (speculation off measured alongside)."""
    off = config.with_(speculate=False)
    engine.set_drafter(drafter)
    time_reply(engine, prompts[0], off.with_(max_new_tokens=8))  # warm-up, both models
    time_reply(engine, prompts[0], config.with_(max_new_tokens=8, gamma=gammas[0]))
    base: list[Reply] = []
    spec: dict[int, list[Reply]] = {g: [] for g in gammas}
    for repeat in range(repeats):
        for p, ids in enumerate(prompts):
            say(f"{row['draft']}: repeat {repeat + 1}/{repeats}, prompt {p + 1}/{len(prompts)}")
            base.append(time_reply(engine, ids, off))
            for g in gammas:
                spec[g].append(time_reply(engine, ids, config.with_(gamma=g, speculate=True,
                                                                     gamma_max=max(g, config.gamma_max))))
    engine.set_drafter(None)
    baseline = summarize(base)
    by_gamma = {}
    for g in gammas:
        s = summarize(spec[g])
        by_gamma[str(g)] = {
            "tokens_per_s": s["tokens_per_s"], "speedup": s["tokens_per_s"] / baseline["tokens_per_s"],
            "acceptance_rate": s["acceptance_rate"], "c": s["c"],
            "mean_accepted_length": s["mean_accepted_length"], "predicted_speedup": s["predicted_speedup"]}
    best = max(gammas, key=lambda g: by_gamma[str(g)]["speedup"])
    return {**row, "best_gamma": best, "baseline_tokens_per_s": baseline["tokens_per_s"], "by_gamma": by_gamma,
            **by_gamma[str(best)]}


def parse_gammas(text: str) -> list[int]:
    """"2,4,8" -> [2, 4, 8]: the draft lengths rank-drafts tries."""
    try:
        gammas = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError as error:
        raise BenchError(f"--gammas expects numbers separated by commas, e.g. 2,4,8 (got {text!r})") from error
    if not gammas or gammas[0] < 1:
        raise BenchError(f"--gammas must list draft lengths of at least 1 (got {text!r})")
    return gammas


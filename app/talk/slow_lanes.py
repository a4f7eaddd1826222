"""The runs of "What makes it slow" (no Qt: the window's decoding process runs them, app/host.py, as it runs the
chat's replies and races).

Each lane kind (the verifier alone, the good drafter, prompt lookup, a weakened drafter) runs `repeats` times,
alternating: the kinds in order, then in reverse, and so on, after a short warm-up run of each that is not
counted. A single run of each, the verifier alone first and cold, measured the machine's warming up as much as
the drafters: the poor draft read faster than the verifier alone in 3 runs of 4. Each drafter's figure is the
median of its runs' speedups against the verifier-alone run of the same repeat, with their spread.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from app.runs import Lane, RunContext, engine_lane, lane_events
from app.speedup import RaceSpread, race_spread, run_key
from app.talk.drafters import WeakenedDrafter
from app.trace import ReplyTrace
from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import ModelDrafter, PromptLookupDrafter

SLOW_REPEATS = 3  # runs of each lane kind; the figures are their medians
WARM_UP_TOKENS = 8  # each lane kind runs this many tokens first, not counted
CORRUPT = 0.8  # the weakened drafter's share of random proposals
FORCED_DRAFTING = {"cost_aware": False, "adaptive": False, "tree_nodes": 0}
BASE, POOR = "off", "weak"  # the verifier alone, and the poor draft whose speedup picks the median run


def slow_lanes(session: Any, config: GenerationConfig, corrupt: float = CORRUPT) -> list[Lane]:
    """One lane of each kind: the verifier alone, the session's drafter, prompt lookup (when the drafter is a
    draft model) and the weakened drafter."""
    lanes = [engine_lane(BASE, "verifier alone", session.verifier, None, False)]
    good = session.drafter
    if good is not None:
        lanes.append(engine_lane("good", f"{session.drafter_name}", session.verifier, good, True))
    if isinstance(good, ModelDrafter):
        lanes.append(engine_lane("lookup", "prompt lookup (open chat)", session.verifier, PromptLookupDrafter(),
                                 True))
    weak = WeakenedDrafter(good, corrupt=corrupt, seed=config.seed)
    # Its drafting is forced (a fixed γ, no tree, the cost model off): left to itself the cost model stops drafting
    # where drafts do not pay, and the poor draft would never be seen costing anything.
    lanes.append(engine_lane(POOR, f"{session.drafter_name or 'random'}, weakened ({corrupt:.0%} random), "
                             f"drafting forced (γ {config.gamma}, cost model off)", session.verifier, weak, True,
                             FORCED_DRAFTING))
    return lanes


def repeated(kinds: list[Lane], repeats: int) -> list[Lane]:
    """`kinds` run `repeats` times, alternating: in order, then in reverse, ... (keys from run_key: "off",
    "weak", then "weak 2", "off 2", ...). Repeats of a kind share its run."""
    lanes = []
    for n in range(1, repeats + 1):
        order = kinds if n % 2 else list(reversed(kinds))
        lanes += [replace(lane, key=run_key(lane.key, n)) for lane in order]
    return lanes


def slow_events(session: Any, messages: list[dict], system: str | None, config: GenerationConfig, corrupt: float,
                repeats: int, controls: Any) -> Iterator[object]:
    """The slow demo as a job (app/host.py): PromptInfo, then its repeated lanes' events as LaneEvents."""
    ctx = RunContext(session, messages, system, config)
    lanes = repeated(slow_lanes(session, config, corrupt), repeats)
    return lane_events(ctx, lanes, controls, warm_up_tokens=min(WARM_UP_TOKENS, config.max_new_tokens))


def run_pairs(traces: dict[str, ReplyTrace], kind: str) -> list[tuple[float, float, int]]:
    """(verifier-alone tokens/s, `kind`'s tokens/s, the shorter reply's tokens) of each repeat in which both
    finished without an error."""
    pairs = []
    n = 1
    while run_key(kind, n) in traces and run_key(BASE, n) in traces:
        runs = traces[run_key(BASE, n)], traces[run_key(kind, n)]
        if all(tr.stats and not tr.error for tr in runs):
            tps = [float(tr.stats.get("tokens_per_s") or 0.0) for tr in runs]
            pairs.append((tps[0], tps[1], min(int(tr.stats.get("new_tokens") or 0) for tr in runs)))
        n += 1
    return pairs


def spreads(traces: dict[str, ReplyTrace], kinds: list[str]) -> dict[str, RaceSpread]:
    """Each kind's median speedup against the verifier alone of the same repeat, with its spread (`tps_on`: the
    kind's median tokens/s; for the verifier alone itself, a ratio of 1 and its own tokens/s)."""
    out = {}
    for kind in kinds:
        spread = race_spread(run_pairs(traces, kind))
        if spread is not None:
            out[kind] = spread
    return out


def slower_runs(traces: dict[str, ReplyTrace], kind: str) -> tuple[int, int]:
    """(repeats in which `kind` was slower than the verifier alone, repeats in which both finished)."""
    pairs = [p for p in run_pairs(traces, kind) if p[0] > 0 and p[1] > 0]
    return sum(on < off for off, on, _ in pairs), len(pairs)

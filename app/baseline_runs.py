"""The verifier alone against speculation, measured right after a load where the replies decode, Qt-free.

A reply's speedup is its tokens/s over the verifier alone's. The verifier alone measured once, at load, in the
app's process, as the models were first used, read 25-40 % off the races run minutes later, both ways (issue
55). So the window measures it where and how the replies run: as a job of its decoding process (app/host.py),
on the session's own engine, alternating short runs with speculation off and on (speedup.race_order), with the
window idle. The "on" runs are not baselines: they let the engine's cost model time the draft and the checks
warm before the user's first reply, so that reply is not priced on cold first passes.

The job yields one small `LaneResult` per run (no token events: the window has nothing to draw).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from app.session import CALIBRATION_PROMPT, Session
from app.speedup import race_order, step_s
from specdec_core.config import GenerationConfig
from specdec_core.events import Finished, RoundVerified, StopReason

AFTER_LOAD = "measured after loading"  # the BaselineSample source of these runs
# off, on, on, off, off, on: a machine that warms up during the runs favours neither side. Three runs of the verifier
# alone, not two: with the real pair (a 1.5B verifier at ~3.5 tok/s on 2 cores) two runs read 3.0 and 3.9 tok/s
# after two loads where the races right after read 3.5-3.6; the median of three is spread over twice as long.
PAIRS = 3
TOKENS = 32  # each run's reply: past the first, slower steps, and short enough to end within seconds
PROMPT = [{"role": "user", "content": CALIBRATION_PROMPT}]  # a short chat prompt, as a first message is


@dataclass(frozen=True)
class LaneResult:
    """One run of the measurement: what it decoded, how fast, at what prompt length."""

    speculate: bool
    tokens_per_s: float
    new_tokens: int
    prompt_tokens: int
    verify_s_per_token: float | None  # a plain run's: the verifier's median seconds per decode step (speedup.step_s)


def measure_config(config: GenerationConfig) -> GenerationConfig:
    """The replies' own settings, cut to a short run."""
    return config.with_(max_new_tokens=min(TOKENS, config.max_new_tokens))


def measure_events(session: Session, messages: list[dict], system: str | None, config: GenerationConfig, pairs: int,
                   controls: Any) -> Iterator[LaneResult]:
    """A job (app/host.py): `pairs` alternating off/on runs of `messages` on the session's engine, one LaneResult
    each; a run cancelled or failed ends the job (what ran before it is kept). Without a drafter only the runs
    with speculation off run."""
    from specdec_core.text.chat import build_prompt

    v = session.verifier
    ids = build_prompt(v.tokenizer, messages, system=system or None, context_length=v.context_length,
                       reserve_new_tokens=config.max_new_tokens).ids
    for _key, speculate in race_order(pairs):
        if controls.cancelled:
            return
        if speculate and session.drafter is None:
            continue
        run = config.with_(speculate=speculate)
        rounds = []
        for ev in session.engine.generate(ids, run, controls):
            if isinstance(ev, RoundVerified):
                rounds.append(ev)
            if not isinstance(ev, Finished):
                continue
            if ev.error or ev.stop_reason in (StopReason.CANCELLED, StopReason.ERROR):
                return
            st = ev.stats
            yield LaneResult(speculate, st.tokens_per_s, st.new_tokens, len(ids), None if speculate else step_s(rounds))

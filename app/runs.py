"""The runs the window and talk mode share, as Qt-free generators of events: a race of speculation off against
on, and lanes (the same prompt under several configurations, one after the other).

A `RunContext` is a loaded Session (the window's, or one built from `load_pair`) with the prompt and settings
to use. `lane_events` runs several configurations of the same prompt one after the other, never at once (a
two-core laptop would distort both timings), each on its own Engine over the same loaded models, so the
window's engine and its caches are left alone. The race runs as a job of the window's decoding process
(app/host.py); the windows run these generators on app.worker.EventWorker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from app.session import PromptInfo, Session
from app.speedup import RaceSpread, race_key, race_order, race_spread
from app.trace import ReplyTrace
from specdec_core.config import GenerationConfig

if TYPE_CHECKING:
    from app.host import Job, Runner
    from specdec_core.drafting.planner import DraftPlanner


@dataclass
class RunContext:
    session: Session
    messages: list[dict]  # the conversation up to and including the user's prompt
    system: str | None
    config: GenerationConfig
    # Where a race on these models runs (app/host.py: the window's decoding process, or this one); called on the
    # GUI thread as the race starts. None: in this process.
    runner: Callable[[], Runner] | None = None

    def race_source(self, pairs: int) -> Callable[[Any], Iterator[object]]:
        """(controls) -> the events of a race of `pairs` alternating off/on pairs on this prompt (race_events),
        decoded where `runner` says. Call on the GUI thread (it may fork the window's decoding process)."""
        return self.job_source(race_events, pairs)

    def job_source(self, job: Job, *args: Any) -> Callable[[Any], Iterator[object]]:
        """(controls) -> the events of `job` (a module-level generator function (session, messages, system,
        config, *args, controls), app/host.py) on this prompt, decoded where `runner` says: the window's decoding
        process, like the chat's replies, or this one. Call on the GUI thread (it may fork that process)."""
        from app.host import run_here

        run = self.runner() if self.runner is not None else partial(run_here, self.session)
        job_args = (self.messages, self.system, self.config, *args)
        return lambda controls: run(job, job_args, controls)

    def prompt_ids(self) -> list[int]:
        from specdec_core.text.chat import build_prompt

        v = self.session.verifier
        return build_prompt(v.tokenizer, self.messages, system=self.system or None,
                            context_length=v.context_length,
                            reserve_new_tokens=self.config.max_new_tokens).ids

    @property
    def prompt_text(self) -> str:
        return self.messages[-1]["content"] if self.messages else ""

    def with_prompt(self, text: str) -> RunContext:
        """The same models and settings on a new single-turn prompt."""
        return RunContext(self.session, [{"role": "user", "content": text}], self.system, self.config, self.runner)


# ---- lanes: the same prompt under several configurations, one after the other ----------------------
@dataclass(frozen=True)
class Lane:
    key: str  # "off", "on", "draft", "weak", ...
    title: str  # what the room reads above the lane
    run: Callable[[list[int], GenerationConfig, Any], Iterator[object]]  # (prompt ids, config, controls)


@dataclass(frozen=True)
class LaneEvent:
    lane: str
    event: object


def engine_lane(key: str, title: str, verifier: Any, drafter: Any, speculate: bool,
                overrides: dict[str, Any] | None = None, planner: DraftPlanner | None = None) -> Lane:
    """A lane on a fresh Engine over `verifier` (cold caches: every lane pays the same prefill); `overrides`:
    GenerationConfig fields this lane sets its own way; `planner`: the cost model each run of the lane starts
    from (a copy of it, so runs learn apart from it and from each other), else a new one."""

    def run(ids: list[int], config: GenerationConfig, controls: Any) -> Iterator[object]:
        from specdec_core.engine import Engine

        engine = Engine(verifier, drafter if speculate else None, planner.copy() if planner is not None else None)
        lane_config = config.with_(speculate=speculate and drafter is not None, **(overrides or {}))
        yield from engine.generate(ids, lane_config, controls)

    return Lane(key, title, run)


def race_lanes(verifier: Any, drafter: Any, pairs: int, planner: DraftPlanner | None = None) -> list[Lane]:
    """A race: the verifier alone and speculation, `pairs` times each, alternating (speedup.race_order).
    `planner`: what each speculation run's cost model starts from (chat_planner), else a new one."""
    return [engine_lane(key, "speculation on" if spec else "speculation off", verifier, drafter if spec else None,
                        spec, planner=planner if spec else None) for key, spec in race_order(pairs)]


def chat_planner(session: Session, messages: list[dict] | None = None, system: str | None = None
                 ) -> DraftPlanner | None:
    """The cost model of the chat's engine, where it drafts with the session's drafter: a race started from it
    drafts as the chat's next reply would. A race of the last reply's own prompt (`messages`, `system`) starts
    from the cost model as that reply began (Session.reply_planner): from the one after it, a reply whose drafts
    were all priced out was raced by lanes that each tried drafting again (its pause was long by then), 0.88x
    against the reply's 0.98x. A lane on a new planner drafts by other rules in its first rounds (a draft's cost
    taken as free until timed, no pause carried over), so its speedup is not the one the footer shows for a reply
    of the same prompt (bench/footer_vs_race.py). None: a new one."""
    engine = session.engine
    if engine is None or session.drafter is None or engine.drafter is not session.drafter:
        return None
    last = session.reply_planner
    if last is not None and messages is not None and last[0] == messages and last[1] == (system or None):
        return last[2]
    return engine.planner


def race_events(session: Session, messages: list[dict], system: str | None, config: GenerationConfig, pairs: int,
                controls: Any) -> Iterator[object]:
    """A race as a job (app/host.py): PromptInfo, then race_lanes' events as LaneEvents, lane after lane."""
    ctx = RunContext(session, messages, system, config)
    lanes = race_lanes(session.verifier, session.drafter, pairs, chat_planner(session, messages, system))
    return lane_events(ctx, lanes, controls)


def race_spread_of(traces: dict[str, ReplyTrace]) -> RaceSpread | None:
    """The median speedup and spread of a race's finished off/on pairs (keys from speedup.race_key)."""
    pairs = []
    for n in range(1, len(traces) + 1):
        off, on = traces.get(race_key(False, n)), traces.get(race_key(True, n))
        if off is None or on is None:
            break
        if not off.stats or not on.stats or off.error or on.error:
            continue
        pairs.append((float(off.stats.get("tokens_per_s") or 0.0), float(on.stats.get("tokens_per_s") or 0.0),
                      min(int(off.stats.get("new_tokens") or 0), int(on.stats.get("new_tokens") or 0))))
    return race_spread(pairs)


def lane_events(ctx: RunContext, lanes: list[Lane], controls: Any, warm_up_tokens: int = 0) -> Iterator[object]:
    """PromptInfo, then every lane's events wrapped in LaneEvent, lane after lane. With `warm_up_tokens`, each
    distinct lane run (lanes repeated share theirs) first runs that many tokens, not yielded: the first passes
    of a model on a new shape are the slow ones, and whichever lane came first would pay for all."""
    from specdec_core.text.chat import build_prompt

    v = ctx.session.verifier
    built = build_prompt(v.tokenizer, ctx.messages, system=ctx.system or None, context_length=v.context_length,
                         reserve_new_tokens=ctx.config.max_new_tokens)
    yield PromptInfo(len(built.ids), built.dropped_turns)
    if warm_up_tokens:
        warm_config = ctx.config.with_(max_new_tokens=warm_up_tokens)
        for run in {id(lane.run): lane.run for lane in lanes}.values():
            for _ev in run(built.ids, warm_config, controls):
                if controls.cancelled:
                    return
    for lane in lanes:
        if controls.cancelled:
            return
        for ev in lane.run(built.ids, ctx.config, controls):
            yield LaneEvent(lane.key, ev)

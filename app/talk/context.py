"""What a talk demo runs on, and the Qt-free runs it makes (plain generators of events).

A `TalkContext` is a loaded Session (the window's, or one built from `load_pair`) with the prompt and
settings to use. `lane_events` runs several configurations of the same prompt one after the other,
never at once (a two-core laptop would distort both timings), each on its own Engine over the same
loaded models, so the window's engine and its caches are left alone. The windows in this package
run these generators on app.worker.EventWorker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from app.session import PromptInfo, Session
from app.speedup import RaceSpread, race_key, race_order, race_spread
from app.trace import ReplyTrace
from specdec_core.config import GenerationConfig
from specdec_core.events import Finished, StopReason, TokenCommitted, TokenState
from specdec_core.stats import Stats

if TYPE_CHECKING:
    from app.host import Runner
    from app.ports import RunPort


@dataclass
class TalkContext:
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
        from app.host import RACE, run_here

        run = self.runner() if self.runner is not None else partial(run_here, self.session)
        args = (self.messages, self.system, self.config, pairs)
        return lambda controls: run(RACE, args, controls)

    def prompt_ids(self) -> list[int]:
        from specdec_core.text.chat import build_prompt

        v = self.session.verifier
        return build_prompt(v.tokenizer, self.messages, system=self.system or None,
                            context_length=v.context_length,
                            reserve_new_tokens=self.config.max_new_tokens).ids

    @property
    def prompt_text(self) -> str:
        return self.messages[-1]["content"] if self.messages else ""

    def with_prompt(self, text: str) -> TalkContext:
        """The same models and settings on a new single-turn prompt."""
        return TalkContext(self.session, [{"role": "user", "content": text}], self.system, self.config, self.runner)


def context_from_window(window: RunPort, prompt: str | None = None) -> TalkContext | str:
    """The window's session, prompt and settings, or a sentence saying why there is nothing to run.

    The prompt is `prompt`, else the composer's text, else the conversation up to its last user turn
    (what the window's own race uses)."""
    from app import session as session_mod
    from specdec_core.errors import SpecdecError

    session = window.session
    if session is None:
        return "Load the models first (Settings ▸ Load models)."
    if window.busy:
        return "Wait for the current reply (or load) to finish, or stop it (Esc)."
    messages = window.prompt_messages(prompt)
    if isinstance(messages, str):
        return messages
    try:
        config = session_mod.config_from_settings(window.settings)
    except SpecdecError as exc:
        return f"Check the generation settings: {exc}"
    return TalkContext(session, messages, window.conv.system, config, window.job_runner)


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
                overrides: dict[str, Any] | None = None) -> Lane:
    """A lane on a fresh Engine over `verifier` (cold caches: every lane pays the same prefill); `overrides`:
    GenerationConfig fields this lane sets its own way."""

    def run(ids: list[int], config: GenerationConfig, controls: Any) -> Iterator[object]:
        from specdec_core.engine import Engine

        engine = Engine(verifier, drafter if speculate else None)
        lane_config = config.with_(speculate=speculate and drafter is not None, **(overrides or {}))
        yield from engine.generate(ids, lane_config, controls)

    return Lane(key, title, run)


def race_lanes(verifier: Any, drafter: Any, pairs: int) -> list[Lane]:
    """A race: the verifier alone and speculation, `pairs` times each, alternating (speedup.race_order)."""
    return [engine_lane(key, "speculation on" if spec else "speculation off", verifier, drafter if spec else None,
                        spec) for key, spec in race_order(pairs)]


def race_events(session: Session, messages: list[dict], system: str | None, config: GenerationConfig, pairs: int,
                controls: Any) -> Iterator[object]:
    """A race as a job (app/host.py): PromptInfo, then race_lanes' events as LaneEvents, lane after lane."""
    ctx = TalkContext(session, messages, system, config)
    return lane_events(ctx, race_lanes(session.verifier, session.drafter, pairs), controls)


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


def lane_events(ctx: TalkContext, lanes: list[Lane], controls: Any) -> Iterator[object]:
    """PromptInfo, then every lane's events wrapped in LaneEvent, lane after lane."""
    from specdec_core.text.chat import build_prompt

    v = ctx.session.verifier
    built = build_prompt(v.tokenizer, ctx.messages, system=ctx.system or None, context_length=v.context_length,
                         reserve_new_tokens=ctx.config.max_new_tokens)
    yield PromptInfo(len(built.ids), built.dropped_turns)
    for lane in lanes:
        if controls.cancelled:
            return
        for ev in lane.run(built.ids, ctx.config, controls):
            yield LaneEvent(lane.key, ev)


def head_alone(verifier: Any, head: Any, ids: list[int], config: GenerationConfig, controls: Any
               ) -> Iterator[object]:
    """What a draft head writes with no verifier after the prompt: the verifier reads the prompt once
    (the head needs its hidden states), then the head continues on its own predicted states, token after
    token. Emitted as PLAIN tokens and a Finished, like a generation."""
    from specdec_core.drafting.drafters import DraftTarget, HeadDrafter
    from specdec_core.engine import Engine

    drafter = HeadDrafter(head)
    engine = Engine(verifier, drafter)  # attaches the head to the engine's verifier cache
    drafter.reset(config.seed)
    engine.verifier_forward.logits_for(ids)
    eos, vocab = verifier.eos_token_ids, engine.vocab_size
    # One proposal of the whole length (a few ms per token): the head's cache holds true states for the
    # prompt only, so it drafts every token from its own predictions.
    start = time.perf_counter()
    drafter.attach(DraftTarget(engine.verifier_forward, vocab, eos, config.with_(confidence_cutoff=0.0)))
    tokens = drafter.propose(ids, config.max_new_tokens).token_ids
    yield from _plain_reply(verifier.tokenizer, ids, lambda new: tokens[len(new)] if len(new) < len(tokens) else None,
                            config.max_new_tokens, controls, eos, time.perf_counter() - start)


def _plain_reply(tokenizer: Any, ids: list[int], next_token: Callable[[list[int]], int | None], max_new_tokens: int,
                 controls: Any, eos_token_ids: frozenset[int], seconds: float = 0.0) -> Iterator[object]:
    """Tokens from `next_token(tokens so far)` (None: it has nothing more) as PLAIN TokenCommitted events
    and a Finished, like a generation; its tokens/s counts `seconds` (work done ahead) and next_token's time."""
    from specdec_core.text.textstream import TextStream

    new: list[int] = []
    stream = TextStream(tokenizer, ids)
    stop = StopReason.MAX_TOKENS
    while len(new) < max_new_tokens:
        if controls.cancelled:
            stop = StopReason.CANCELLED
            break
        start = time.perf_counter()
        tok = next_token(new)
        seconds += time.perf_counter() - start
        if tok is None:
            stop = StopReason.EOS  # the drafter cannot go on by itself
            break
        new.append(tok)
        yield TokenCommitted(token_id=tok, text=stream.push(tok), state=TokenState.PLAIN, round_index=len(new) - 1,
                             position=0, draft_prob=1.0, target_prob=1.0, accept_prob=None)
        if tok in eos_token_ids:
            stop = StopReason.EOS
            break
    text = tokenizer.decode(new, skip_special_tokens=True, clean_up_tokenization_spaces=False)
    rate = len(new) / seconds if seconds else 0.0
    yield Finished(stop_reason=stop, text=text, token_ids=tuple(new),
                   stats=Stats(new_tokens=len(new), decode_s=seconds, tokens_per_s=rate))


def prompt_lookup_alone(tokenizer: Any, ids: list[int], config: GenerationConfig, controls: Any,
                        eos_token_ids: frozenset[int]) -> Iterator[object]:
    """What prompt lookup writes with no verifier: it copies earlier text while it finds a match, then
    has nothing to say. Emitted as PLAIN tokens and a Finished, like a generation."""
    from specdec_core.drafting.drafters import DraftTarget, PromptLookupDrafter

    drafter = PromptLookupDrafter()
    drafter.attach(DraftTarget(None, len(tokenizer), eos_token_ids, config))  # no verifier: it drafts alone

    def next_token(new: list[int]) -> int | None:
        # Nothing left to copy ends the reply: prompt lookup cannot go on by itself.
        draft = drafter.propose(list(ids) + new, 1)
        return draft.token_ids[0] if draft.token_ids else None

    yield from _plain_reply(tokenizer, ids, next_token, config.max_new_tokens, controls, eos_token_ids)

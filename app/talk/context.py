"""What a talk demo runs on (the window's `RunContext`), and the runs only talk mode makes: what a draft writes
alone, with no verifier (plain generators of events). The runs the window shares are app/runs.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from app.runs import RunContext
from specdec_core.config import GenerationConfig
from specdec_core.events import Finished, StopReason, TokenCommitted, TokenState
from specdec_core.stats import Stats

if TYPE_CHECKING:
    from app.ports import RunPort


def context_from_window(window: RunPort, prompt: str | None = None) -> RunContext | str:
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
    return RunContext(session, messages, window.conv.system, config, window.job_runner)


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

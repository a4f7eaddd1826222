"""A conversation -> the verifier's prompt token ids, fitted into its context window.

The chat template is tokenised once per turn. When the history no longer fits, the oldest turns are
dropped (user and assistant together) and the system prompt is kept; the caller is told how many were
dropped so the window can say so. The saved history is never touched here.

A chat template is a program from the model's repository. transformers runs it in a Jinja sandbox (no
file or attribute escapes), but a sandbox does not bound work: `'x ' * 20000000` or two nested
`range(100000)` loops would take gigabytes or never finish. Rendering here is bounded in time, memory
and output size, and any failure (including the template's own `raise_exception`) is a
ChatTemplateError with the template's message.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from specdec_core.errors import ChatTemplateError, PromptTooLongError

TEMPLATE_TIME_LIMIT_S = 5.0  # real templates render a long conversation in milliseconds
TEMPLATE_MEMORY_LIMIT = 1 << 30  # growth of the process's peak memory while rendering, in bytes
TEMPLATE_OUTPUT_SLACK = 1_000_000  # characters a template may add beyond twice its messages' text


@dataclass(frozen=True)
class PromptBuild:
    ids: list[int]
    dropped_turns: int  # oldest messages left out to fit the context


class _OverLimit(Exception):
    pass


def _peak_memory() -> int | None:
    try:
        import resource
    except ImportError:  # Windows: the time limit still applies
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB elsewhere


@contextmanager
def _bounded(what: str) -> Iterator[None]:
    """Abort the Python code run inside this block (in this thread) past the time or memory limit.

    A profile hook sees every Python function call, including each step of a Jinja loop, so it can stop
    a template that emits nothing for a long time; every 256th call it checks the clock and memory."""
    deadline = time.monotonic() + TEMPLATE_TIME_LIMIT_S
    start_peak = _peak_memory()
    calls = 0

    def check(frame, event, arg) -> None:
        nonlocal calls
        calls += 1
        if calls & 255:
            return
        if time.monotonic() > deadline:
            raise _OverLimit(f"{what} took longer than {TEMPLATE_TIME_LIMIT_S:g} s")
        if start_peak is not None and (_peak_memory() or 0) - start_peak > TEMPLATE_MEMORY_LIMIT:
            raise _OverLimit(f"{what} used more than {TEMPLATE_MEMORY_LIMIT >> 20} MiB of memory")

    previous = sys.getprofile()
    sys.setprofile(check)
    try:
        yield
    finally:
        sys.setprofile(previous)


def render_template(tokenizer, messages: list[dict]) -> str:
    """The chat template's text for `messages` plus the assistant's turn opening, within bounds."""
    limit = 2 * sum(len(str(m.get("content", ""))) for m in messages) + TEMPLATE_OUTPUT_SLACK
    try:
        with _bounded("the chat template"):
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    except _OverLimit as error:
        raise ChatTemplateError(f"{error}: the model's chat template looks broken or hostile") from None
    except MemoryError:
        raise ChatTemplateError("the model's chat template ran out of memory") from None
    except Exception as error:  # jinja2.TemplateError (raise_exception), or any error inside the template
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ChatTemplateError(f"the model's chat template refused this conversation: {message}") from error
    if not isinstance(text, str):
        raise ChatTemplateError(f"the model's chat template produced {type(text).__name__}, not text")
    if len(text) > limit:
        raise ChatTemplateError(f"the model's chat template produced {len(text):,} characters for "
                                f"{len(messages)} messages (more than {limit:,}): it looks broken or hostile")
    return text


def _render(tokenizer, messages: list[dict]) -> list[int]:
    if getattr(tokenizer, "chat_template", None):
        # Tokenised as apply_chat_template(tokenize=True) does: the template writes the special tokens.
        return list(tokenizer(render_template(tokenizer, messages), add_special_tokens=False).input_ids)
    # No template (a base model): a plain transcript the model can continue.
    text = "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant:"
    return list(tokenizer(text).input_ids)


def build_prompt(tokenizer, messages: list[dict], *, system: str | None = None, context_length: int,
                 reserve_new_tokens: int = 0) -> PromptBuild:
    """Token ids for `messages` (dicts with role and content) plus room for `reserve_new_tokens`."""
    head = [{"role": "system", "content": system}] if system else []
    turns = [m for m in messages if m.get("role") != "system"]
    budget = context_length - max(1, min(reserve_new_tokens, context_length // 2))
    dropped = 0
    while True:
        ids = _render(tokenizer, head + turns)
        if len(ids) <= budget:
            return PromptBuild(ids=ids, dropped_turns=dropped)
        if len(turns) <= 1:
            raise PromptTooLongError(
                f"the prompt is {len(ids)} tokens long but the verifier's context holds {context_length} "
                f"(with {context_length - budget} kept free for the reply)")
        # Drop the oldest message; keep dropping until the history starts on a user turn.
        turns = turns[1:]
        dropped += 1
        while len(turns) > 1 and turns[0].get("role") != "user":
            turns = turns[1:]
            dropped += 1


def raw_prompt(tokenizer, text: str) -> list[int]:
    """`--raw`: the text as is, with the tokenizer's BOS if it adds one, no chat template."""
    return list(tokenizer(text).input_ids)

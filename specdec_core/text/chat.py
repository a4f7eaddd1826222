"""A conversation -> the verifier's prompt token ids, fitted into its context window.

The chat template is tokenised once per turn. When the history no longer fits, the oldest turns are
dropped (user and assistant together) and the system prompt is kept; the caller is told how many were
dropped so the window can say so. The saved history is never touched here.

A chat template is a program from the model's repository. transformers runs it in a Jinja sandbox (no
file or attribute escapes), but a sandbox does not bound work: `'x ' * 20000000`, two nested loops over a
long string or `'x' * 3000000000` would take gigabytes or never finish, and a hook inside the process
only sees Python calls, which such loops do not make. So templates render in a child process
(template_process.py) under a wall-clock limit and an address-space cap, and their output size is
bounded; any failure (including the template's own `raise_exception`) is a ChatTemplateError with the
template's message.
"""

from __future__ import annotations

import atexit
import json
import threading
from dataclasses import dataclass
from typing import Protocol

from specdec_core.errors import ChatTemplateError, PromptTooLongError
from specdec_core.text.template_process import OverLimit, Rendered, TemplateProcess

TEMPLATE_TIME_LIMIT_S = 5.0  # real templates render a long conversation in milliseconds
TEMPLATE_MEMORY_LIMIT = 1 << 30  # the child renderer's address space beyond its imports, in bytes
TEMPLATE_OUTPUT_SLACK = 1_000_000  # characters a template may add beyond twice its messages' text


@dataclass(frozen=True)
class PromptBuild:
    ids: list[int]
    dropped_turns: int  # oldest messages left out to fit the context


class Renderer(Protocol):
    """What renders a chat template within its limits: TemplateProcess, or a stand-in that asks another process's."""

    def start(self) -> None: ...

    def render(self, template: str, messages: list, variables: dict, max_chars: int, time_limit: float
               ) -> Rendered: ...


_renderer: Renderer | None = None
_renderer_lock = threading.Lock()


def template_renderer() -> Renderer:
    """The process-wide child renderer, started (without waiting) on first use."""
    global _renderer
    with _renderer_lock:
        if _renderer is None:
            _renderer = TemplateProcess(TEMPLATE_MEMORY_LIMIT)
            atexit.register(_renderer.close)
        return _renderer


def use_renderer(renderer: Renderer) -> None:
    """Render this process's templates with `renderer` from now on. For a forked child (the app's decoding
    process): the renderer it inherited is its parent's (its pipes, its lock, perhaps held at the fork), and
    starting one of its own costs a Python start and transformers' imports before its first reply."""
    global _renderer, _renderer_lock
    _renderer, _renderer_lock = renderer, threading.Lock()


def render_template(tokenizer, messages: list[dict]) -> str:
    """The chat template's text for `messages` plus the assistant's turn opening, within bounds."""
    limit = 2 * sum(len(str(m.get("content", ""))) for m in messages) + TEMPLATE_OUTPUT_SLACK
    try:
        template = tokenizer.get_chat_template()
        variables = dict(tokenizer.special_tokens_map)  # what apply_chat_template passes (bos_token, ...)
        json.dumps([messages, variables])
    except (TypeError, ValueError) as error:
        raise ChatTemplateError(f"the model's chat template cannot be used: {error}") from None
    try:
        rendered = template_renderer().render(template, messages, variables, limit, TEMPLATE_TIME_LIMIT_S)
    except OverLimit as error:
        raise ChatTemplateError(f"the chat template {error}: the model's chat template looks broken or "
                                "hostile") from None
    if rendered.kind == "memory":
        raise ChatTemplateError(f"the model's chat template used more than {TEMPLATE_MEMORY_LIMIT >> 20} MiB "
                                "of memory: it looks broken or hostile")
    if rendered.kind == "output":
        raise ChatTemplateError(f"the model's chat template produced {rendered.error} characters for "
                                f"{len(messages)} messages (more than {limit:,}): it looks broken or hostile")
    if rendered.text is None:
        raise ChatTemplateError(f"the model's chat template refused this conversation: {rendered.error}")
    return rendered.text


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

"""A conversation -> the verifier's prompt token ids, fitted into its context window.

The chat template is tokenised once per turn. When the history no longer fits, the oldest turns are
dropped (user and assistant together) and the system prompt is kept; the caller is told how many were
dropped so the window can say so. The saved history is never touched here.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdec_core.errors import PromptTooLongError


@dataclass(frozen=True)
class PromptBuild:
    ids: list[int]
    dropped_turns: int  # oldest messages left out to fit the context


def _render(tokenizer, messages: list[dict]) -> list[int]:
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return list(ids)
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

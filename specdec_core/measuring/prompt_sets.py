"""Prompt sets: the bundled ones (assets/prompts) and the user's files, one chat prompt per line.

`specdec bench`, `specdec rank-drafts` and the app's draft ranking read them through `load_prompts`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec_core.errors import SpecdecError
from specdec_core.loading.resources import assets_dir

PROMPTS_DIR = assets_dir() / "prompts"
ALL_SETS = ("chat", "code", "rewrite", "multiturn")  # `--prompts all` runs these, in this order
# `tasks`: four prompts of each task kind a speculative-decoding benchmark usually covers (conversation,
# translation, summary, short-answer qa, math, rag). Kept out of `all`, whose figures the performance page
# compares across sessions.
# `code-heldout`: code in eight languages and shapes, written after the defaults were set and never used to
# tune them (the real-pairs benchmark: Qwen2.5-Coder 1.5B with its 0.5B draft).
# `independent-heldout`: 48 prompts written by hand independently of distill/prompts.py's templates and
# topics (everyday questions, other languages, translation, summary, rag, math, code, rewriting; the name of
# each starts with its category). Never trained on: distill.prompts.read_training_jsonl refuses it.
# `conversation-20`: one user's 20 turns, for `specdec bench --adapt` (online adaptation, adapt_bench.py).
# `photo-script-20`: a second one, a user writing their first Python script, each turn asking something new.
BUNDLED_SETS = (*ALL_SETS, "tasks", "code-heldout", "independent-heldout", "conversation-20", "photo-script-20")


class PromptSetError(SpecdecError):
    pass


@dataclass(frozen=True)
class PromptCase:
    name: str
    messages: tuple[dict, ...]  # the conversation so far, ending on a user turn
    system: str | None = None


def resolve_prompt_files(spec: str) -> list[Path]:
    """A file path, a bundled set's name (BUNDLED_SETS), or `all` (the four sets of ALL_SETS)."""
    path = Path(spec).expanduser()
    if path.is_file():
        return [path]
    names = ALL_SETS if spec == "all" else (spec,)
    files = [PROMPTS_DIR / f"{name}.jsonl" for name in names]
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise PromptSetError(f"no prompt file {spec!r}: pass a file (one chat prompt per line) or a bundled set "
                         f"({', '.join(BUNDLED_SETS)}, all)")
    return files


def load_prompts(spec: str) -> list[PromptCase]:
    """Read prompt files: one chat prompt per line.

    A line is plain text (one user message), or JSON: a string (a message with newlines), a list of
    messages, or an object with "messages" (or "prompt") and optional "name" and "system".
    Blank lines and lines starting with '#' are skipped.
    """
    cases: list[PromptCase] = []
    for path in resolve_prompt_files(spec):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            where = f"{path.name}:{number}"
            try:
                cases.append(_parse_prompt(text, f"{path.stem}-{len(cases) + 1}"))
            except (ValueError, TypeError, KeyError) as error:
                raise PromptSetError(f"{where}: not a prompt ({error})") from error
    if not cases:
        raise PromptSetError(f"{spec!r} holds no prompts")
    return cases


def _parse_prompt(text: str, default_name: str) -> PromptCase:
    if not text.startswith(("{", "[", '"')):
        return PromptCase(default_name, ({"role": "user", "content": text},))
    data = json.loads(text)
    name, system = default_name, None
    if isinstance(data, str):
        messages: Any = [{"role": "user", "content": data}]
    elif isinstance(data, list):
        messages = data
    elif isinstance(data, dict):
        messages = data.get("messages") or [{"role": "user", "content": data["prompt"]}]
        name = str(data.get("name", name))
        system = data.get("system")
    else:
        raise TypeError("expected text, a JSON string, list or object")
    if system is None and messages and messages[0].get("role") == "system":
        system, messages = messages[0]["content"], messages[1:]
    if not messages or messages[-1].get("role") != "user" or any("content" not in m for m in messages):
        raise ValueError("the conversation must end on a user message, each with a content")
    return PromptCase(name, tuple({"role": m["role"], "content": m["content"]} for m in messages), system)

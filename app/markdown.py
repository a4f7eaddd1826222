"""Markdown for one line of a reply, character by character, so that each token keeps its colour.

The chat view renders a reply as it streams: the line being written shows as typed, and when a line
ends it is drawn once more with its Markdown applied (this module says how). Markers are hidden, not
deleted: `MarkedLine.chars[j]` is what character j of the line shows ("" when hidden) and its inline
style, so the view can map every token's characters to what is on screen. Qt-free.

Supported, the subset replies use: fenced code blocks (```lang), headings (# to ######), bullets
(-, *, +), **bold**, *italic* and `inline code`. Anything else shows as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BOLD, ITALIC, CODE = 1, 2, 4

TEXT, HEADING, BULLET, FENCE_OPEN, FENCE_CLOSE, CODE_LINE = "text", "heading", "bullet", "fence_open", \
    "fence_close", "code"

_HEADING = re.compile(r"(#{1,6}) +")
_BULLET = re.compile(r"( *)([-*+]) +")
_INLINE_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_ITALIC = re.compile(r"(?<![*\w])\*(?=[^\s*])([^*]+?)(?<=[^\s*])\*(?![*\w])")


@dataclass(frozen=True)
class MarkedLine:
    kind: str  # TEXT, HEADING, BULLET, FENCE_OPEN, FENCE_CLOSE or CODE_LINE
    chars: tuple[tuple[str, int], ...]  # per character of the line: (what it shows, BOLD|ITALIC|CODE flags)
    level: int = 0  # a heading's level
    lang: str = ""  # a fence's language

    @property
    def shown(self) -> str:
        return "".join(s for s, _ in self.chars)


def mark_line(text: str, in_code: bool) -> tuple[MarkedLine, bool]:
    """How one line (without its newline) shows, and whether the next line is inside a code block."""
    stripped = text.strip()
    if in_code:
        if stripped.startswith("```"):
            return MarkedLine(FENCE_CLOSE, tuple(("", 0) for _ in text)), False
        return MarkedLine(CODE_LINE, tuple((c, CODE) for c in text)), True
    if stripped.startswith("```"):
        return MarkedLine(FENCE_OPEN, tuple(("", 0) for _ in text), lang=stripped[3:].strip()), True
    shown = list(text)
    flags = [0] * len(text)
    kind, level, body = TEXT, 0, 0
    m = _HEADING.match(text)
    if m:
        kind, level, body = HEADING, len(m.group(1)), m.end()
        shown[:body] = [""] * body
    else:
        m = _BULLET.match(text)
        if m:
            kind, body = BULLET, m.end()
            shown[m.start(2)] = "•"
    _inline(text, body, shown, flags)
    return MarkedLine(kind, tuple(zip(shown, flags)), level=level), False


def _inline(text: str, start: int, shown: list[str], flags: list[int]) -> None:
    """Hide the markers of inline code, bold and italic spans from `start` on and flag their text."""
    taken = [False] * len(text)  # inside inline code: no other markup applies there
    for m in _INLINE_CODE.finditer(text, start):
        shown[m.start()] = shown[m.end() - 1] = ""
        for j in range(m.start(), m.end()):
            flags[j] |= CODE
            taken[j] = True
    for pattern, flag, width in ((_BOLD, BOLD, 2), (_ITALIC, ITALIC, 1)):
        for m in pattern.finditer(text, start):
            if any(taken[m.start():m.end()]) or any(s == "" for s in shown[m.start():m.end()]):
                continue  # crosses inline code, or a marker already used
            for j in range(m.start(), m.end()):
                flags[j] |= flag
            for j in (*range(m.start(), m.start() + width), *range(m.end() - width, m.end())):
                shown[j] = ""

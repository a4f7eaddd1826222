"""Talk mode's look: large type and strong colours that survive a projector.

The token colours are the app's own (app.theme), drawn solid rather than tinted: a tint that reads on
a laptop screen washes out on a projector.
"""

from __future__ import annotations

import html

from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import QWidget

from app.theme import STATE_LABEL, STATE_SOLID
from specdec_core.events import TokenState

TALK_POINT_SIZE = 16  # body text in talk widgets; headlines are multiples of it

ACCEPTED = STATE_SOLID[TokenState.ACCEPTED.value]
REJECTED = STATE_SOLID[TokenState.REJECTED.value]
CORRECTED = STATE_SOLID[TokenState.CORRECTED.value]
BONUS = STATE_SOLID[TokenState.BONUS.value]
PLAIN = STATE_SOLID[TokenState.PLAIN.value]
VERIFIER = QColor(37, 99, 235)  # the verifier's pass
DRAFT = QColor(124, 92, 230)  # the draft's proposals, before they are judged
INK = QColor(17, 17, 17)
MUTED = QColor(90, 90, 90)
PAPER = QColor(255, 255, 255)

# Soft backgrounds for tokens in running text (stronger than the chat's tints).
STATE_BG = {
    TokenState.ACCEPTED.value: "rgba(46,160,67,0.35)",
    TokenState.REJECTED.value: "rgba(215,58,73,0.15)",
    TokenState.CORRECTED.value: "rgba(235,160,20,0.55)",
    TokenState.BONUS.value: "rgba(59,130,246,0.40)",
    TokenState.PLAIN.value: "transparent",
}


def big_font(scale: float = 1.0, bold: bool = False, base: QFont | None = None) -> QFont:
    f = QFont(base) if base is not None else QFont()
    f.setPointSizeF(TALK_POINT_SIZE * scale)
    f.setBold(bold)
    return f


def shown(text: str) -> str:
    """A token's text as a chip shows it: line breaks and tabs made visible, empty text as ∅."""
    if not text:
        return "∅"
    out = text.replace("\n", "↵").replace("\t", "⇥")
    return out if out.strip() else out.replace(" ", "␣")


def tokens_html(tokens, colored: bool = True) -> str:
    """Running text of token records, coloured by state (rejected drafts struck through)."""
    parts: list[str] = []
    for t in tokens:
        text = html.escape(t.text.replace("\n", "↵") if t.state == TokenState.REJECTED.value else t.text)
        if not text:
            continue
        text = text.replace("\n", "<br>")
        if not colored or t.state == TokenState.PLAIN.value:
            parts.append(text)
            continue
        style = f"background-color:{STATE_BG.get(t.state, 'transparent')};"
        if t.state == TokenState.REJECTED.value:
            style += f"color:{REJECTED.name()};text-decoration:line-through;"
        parts.append(f"<span style='{style}'>{text}</span>")
    return "".join(parts)


def legend_html() -> str:
    """The token legend, for a QLabel that stays on screen."""
    items = []
    for state in (TokenState.ACCEPTED, TokenState.REJECTED, TokenState.CORRECTED, TokenState.BONUS,
                  TokenState.PLAIN):
        c = STATE_SOLID[state.value]
        deco = "text-decoration:line-through;" if state is TokenState.REJECTED else ""
        items.append(f"<span style='color:{c.name()};font-size:large'>■</span>&nbsp;"
                     f"<span style='{deco}'>{STATE_LABEL[state.value]}</span>")
    return "&nbsp;&nbsp;&nbsp;".join(items)


def set_big(widget: QWidget, scale: float = 1.0, bold: bool = False) -> None:
    widget.setFont(big_font(scale, bold, widget.font()))


def fmt_p(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"

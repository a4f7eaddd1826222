"""How fenced code reads in a reply when its token colours are off (the default): plain text, with a thin mark.

Per-token backgrounds turn a code block into a barcode, indentation included. Plain code keeps what matters to a
reader of the code: where the verifier overruled the draft. Its correction gets a thin underline in the
correction's colour; the rejected draft itself is left out of the text (it is not part of the reply) and named in
the correction's tooltip, beside everything else the tooltip says.
"""

from __future__ import annotations

from PySide6.QtGui import QTextCharFormat

from app.theme import STATE_SOLID
from app.trace import ReplyTrace, TokenRecord
from specdec_core.events import TokenState

MARKED = (TokenState.CORRECTED.value,)  # the states plain code marks: where drafts were rejected and corrected


def code_token_format(state: str) -> QTextCharFormat:
    """A token's format inside plain code: no background; a correction underlined thinly in its colour."""
    fmt = QTextCharFormat()
    if state in MARKED:
        fmt.setUnderlineStyle(QTextCharFormat.UnderlineStyle.SingleUnderline)
        fmt.setUnderlineColor(STATE_SOLID[state])
    return fmt


def drawn_state(state: str, char: str, token_text: str) -> str:
    """The state a character of a token is drawn with in plain code: a correction's spaces are left unmarked (an
    underline under indentation reads as a misaligned line), unless the whole correction is spaces."""
    if state in MARKED and char.isspace() and not token_text.isspace():
        return TokenState.PLAIN.value
    return state


def replaced_drafts(tok: TokenRecord, trace: ReplyTrace | None) -> str:
    """The rejected draft tokens a correction replaced (its round's), as one text; "" for any other token."""
    if trace is None or tok.state != TokenState.CORRECTED.value:
        return ""
    return "".join(t.text for t in trace.tokens if t.round == tok.round and t.state == TokenState.REJECTED.value)

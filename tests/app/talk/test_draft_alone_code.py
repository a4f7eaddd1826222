"""Draft-alone marks where the draft parts from the verified reply without losing its code's monospace font and
indentation."""

from __future__ import annotations

from PySide6.QtGui import QTextCursor

from app.talk import style as ts
from app.talk.draft_alone import DraftAloneView, agreeing_prefix, mark_parting
from app.trace import ReplyTrace, TokenRecord

DRAFT = ["Here:\n", "```py", "thon\n", "def f(x):\n", "    return ", "x", " + 1\n", "```"]
VERIFIED = "Here:\n```python\ndef f(x):\n    return x * 2\n```"


def char_format(view, text: str, offset: int):
    cursor = QTextCursor(view.document())
    cursor.setPosition(view.toPlainText().index(text) + offset)
    return cursor.charFormat()


def test_draft_alone_keeps_code_in_monospace_with_its_indentation_and_marks_where_it_parts(qtbot):
    view = DraftAloneView()
    qtbot.addWidget(view)
    pane = view.panes["draft"]
    trace = ReplyTrace(stop_reason="eos")
    trace.tokens = [TokenRecord(i, text, "plain", i, 0, None, 0.5, None) for i, text in enumerate(DRAFT)]
    pane.bind(trace)
    pane.flush()
    n = agreeing_prefix(trace.text, VERIFIED)
    assert trace.text[:n].endswith("return x ")  # they part inside the token " + 1"
    mark_parting(pane.text, n)
    shown = pane.text.toPlainText()
    assert "\n    return x + 1" in shown  # the indentation is kept
    code = char_format(pane.text, "    return", 2)
    assert code.fontFamilies() == pane.text._mono  # the code is still monospace
    assert code.background().color().rgb() == ts.ACCEPTED.rgb()  # agreeing: green
    parted = char_format(pane.text, " + 1", 2)
    assert parted.foreground().color().rgb() == ts.REJECTED.rgb() and parted.fontFamilies() == pane.text._mono

"""Code in replies reads plain by default: no per-token colours inside fenced code, a thin mark at each
correction, the full colours one switch away, and the tooltip still telling everything."""

from __future__ import annotations

from PySide6.QtGui import QBrush, QTextCharFormat, QTextCursor

from app.chat_view import ChatView
from app.theme import STATE_SOLID, STATE_STYLE
from app.token_view import TokenTextView, token_tooltip
from app.trace import ReplyTrace, TokenRecord

# (text, state, round): the round's rejected draft and its correction share round 3
REPLY = [
    ("Here is ", "accepted", 0), ("**code**", "bonus", 0), (":\n```py", "accepted", 1), ("thon\n", "bonus", 1),
    ("def f(x):\n", "accepted", 2), ("    return ", "accepted", 3), ("y", "rejected", 3), ("x", "corrected", 3),
    ("\n", "accepted", 4), ("```", "accepted", 4), ("\nDone.", "bonus", 5),
]


def trace_of(tokens, finished: bool = True) -> ReplyTrace:
    trace = ReplyTrace(stop_reason="eos" if finished else None)
    trace.tokens = [TokenRecord(i, text, state, rnd, i, 0.5, 0.5, 0.5) for i, (text, state, rnd) in enumerate(tokens)]
    return trace


def fmt_at(view: TokenTextView, text: str, offset: int = 1) -> QTextCharFormat:
    cursor = QTextCursor(view.document())
    cursor.setPosition(view.toPlainText().index(text) + offset)
    return cursor.charFormat()


def test_code_blocks_are_plain_by_default_with_a_thin_mark_where_the_draft_was_corrected(qtbot):
    view = TokenTextView()
    qtbot.addWidget(view)
    view.set_trace(trace_of(REPLY), colored=True)
    text = view.toPlainText()
    assert "    return x" in text and "return yx" not in text  # the rejected draft is left out of the code
    code = fmt_at(view, "def f")
    assert code.background().style() == QBrush().style()  # no per-token background in the code
    assert code.fontFamilies() == view._mono
    assert fmt_at(view, "return").underlineStyle() == QTextCharFormat.UnderlineStyle.NoUnderline
    correction = fmt_at(view, "return x", len("return x"))
    assert correction.underlineStyle() == QTextCharFormat.UnderlineStyle.SingleUnderline
    assert correction.underlineColor().rgb() == STATE_SOLID["corrected"].rgb()
    assert correction.background().style() == QBrush().style()
    # Outside the code block the tokens keep their colours.
    assert fmt_at(view, "code").background().color().rgba() == STATE_STYLE["bonus"][0].rgba()


def test_the_code_switch_brings_back_every_tokens_colour_inside_code(qtbot):
    chat = ChatView()
    qtbot.addWidget(chat)
    bubble = chat.add_assistant(trace_of(REPLY), 1)
    assert "return yx" not in bubble.body.toPlainText()
    chat.set_code_colored(True)
    assert "    return yx" in bubble.body.toPlainText()
    assert fmt_at(bubble.body, "def f").background().color().rgba() == STATE_STYLE["accepted"][0].rgba()
    assert fmt_at(bubble.body, "return yx", len("return y")).fontStrikeOut()
    chat.set_code_colored(False)
    assert "return yx" not in bubble.body.toPlainText()


def test_a_corrections_tooltip_names_the_rejected_draft_that_plain_code_leaves_out():
    trace = trace_of(REPLY)
    correction = next(t for t in trace.tokens if t.state == "corrected")
    assert "replaced the rejected draft" in token_tooltip(correction, trace) and ">y<" in token_tooltip(correction,
                                                                                                       trace)
    accepted = trace.tokens[0]
    assert "replaced the rejected draft" not in token_tooltip(accepted, trace)


def test_plain_code_streams_to_the_same_document_as_the_whole_reply(qtbot):
    view = TokenTextView()
    qtbot.addWidget(view)
    trace = trace_of([], finished=False)
    view.set_trace(trace, colored=True)
    for i, (text, state, rnd) in enumerate(REPLY):
        trace.tokens.append(TokenRecord(i, text, state, rnd, i, 0.5, 0.5, 0.5))
        if i == len(REPLY) - 1:
            trace.stop_reason = "eos"
        view.render_pending()
    whole = TokenTextView()
    qtbot.addWidget(whole)
    whole.set_trace(trace, colored=True)
    assert view.toPlainText() == whole.toPlainText() and view._starts == whole._starts
    assert fmt_at(view, "return x", len("return x")).underlineStyle() == \
        QTextCharFormat.UnderlineStyle.SingleUnderline


def test_without_colours_code_has_no_marks_either(qtbot):
    view = TokenTextView()
    qtbot.addWidget(view)
    view.set_trace(trace_of(REPLY), colored=False)
    assert fmt_at(view, "return x", len("return x")).underlineStyle() == \
        QTextCharFormat.UnderlineStyle.NoUnderline


def test_the_window_keeps_the_code_switch_in_its_settings_view_menu_and_each_code_blocks_link(make_window):
    from PySide6.QtCore import QUrl

    from app.settings import Settings

    w = make_window(load=False)
    assert not w.settings.code_colored and not w.code_action.isChecked() and not w.chat.code_colored
    w.code_action.trigger()  # View ▸ Colour code blocks
    assert w.settings.code_colored and w.chat.code_colored
    assert Settings.load(w.store.root).code_colored  # saved
    bubble = w.chat.add_assistant(trace_of(REPLY), 1)
    assert "Plain code" in bubble.body.toPlainText()
    bubble.body._on_anchor(QUrl("code-colours:"))  # the block's own link
    assert not w.code_action.isChecked() and not w.settings.code_colored and not w.chat.code_colored
    assert "Colour code" in bubble.body.toPlainText() and "return yx" not in bubble.body.toPlainText()


def test_a_corrections_leading_spaces_are_not_underlined_so_the_mark_does_not_reach_into_the_indentation(qtbot):
    view = TokenTextView()
    qtbot.addWidget(view)
    view.set_trace(trace_of([("```\n", "accepted", 0), ("if a:\n", "accepted", 0), ("   ", "accepted", 1),
                             ("z", "rejected", 2), (" elif", "corrected", 2), (" b:\n", "accepted", 3),
                             ("\n  ", "corrected", 4), ("pass\n", "accepted", 5),
                             ("```", "accepted", 6)]), colored=True)
    assert "\n    elif b:" in view.toPlainText()
    space = fmt_at(view, "    elif", 4)  # the correction's own leading space
    assert space.underlineStyle() == QTextCharFormat.UnderlineStyle.NoUnderline
    assert fmt_at(view, "elif", 1).underlineStyle() == QTextCharFormat.UnderlineStyle.SingleUnderline
    spaces_only = fmt_at(view, "\n  pass", 2)  # a correction of nothing but spaces keeps its mark
    assert spaces_only.underlineStyle() == QTextCharFormat.UnderlineStyle.SingleUnderline

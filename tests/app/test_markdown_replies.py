"""Replies render their Markdown while every token keeps its colour, line by line as they stream."""

from __future__ import annotations

from PySide6.QtCore import QUrl
from PySide6.QtGui import QFontInfo, QGuiApplication, QTextCursor

from app.chat_view import ChatView
from app.markdown import BOLD, CODE, mark_line
from app.theme import STATE_STYLE
from app.token_view import TokenTextView
from app.trace import ReplyTrace, TokenRecord

REPLY = [  # (text, state) of a reply's tokens, as a streaming engine emits them
    ("# Title", "accepted"), ("\nHere is ", "bonus"), ("**bo", "accepted"), ("ld** and ", "corrected"),
    ("`x`", "accepted"), (":\n", "accepted"), ("- item", "plain"), ("\n```py", "accepted"), ("thon\n", "bonus"),
    ("print(", "accepted"), ("prunt", "rejected"), ("1)\n", "corrected"), ("```", "accepted"), ("\nDone.", "bonus"),
]
SHOWN = "Title\nHere is bold and x:\n• item\npython  Copy code  Plain code\nprint(prunt1)\n\nDone."


def trace_of(tokens, finished: bool = True) -> ReplyTrace:
    trace = ReplyTrace(stop_reason="eos" if finished else None)
    trace.tokens = [TokenRecord(i, text, state, i, 0, 0.5, 0.5, 0.5) for i, (text, state) in enumerate(tokens)]
    return trace


def char_format_at(view: TokenTextView, text: str):
    pos = view.toPlainText().index(text)
    cursor = QTextCursor(view.document())
    cursor.setPosition(pos + 1)
    return cursor.charFormat()


def test_a_line_shows_its_markdown_and_hides_its_markers():
    line, in_code = mark_line("- a **b** and `c*d*` *e*", False)
    assert line.shown == "• a b and c*d* e" and not in_code
    flags = dict(zip(line.shown, (f for s, f in line.chars if s)))
    assert flags["b"] & BOLD and flags["c"] & CODE and not flags["d"] & BOLD
    opened, in_code = mark_line("```python", False)
    assert opened.kind == "fence_open" and opened.lang == "python" and in_code
    code, in_code = mark_line("x = 2 ** 3  # *not* markdown", True)
    assert code.shown == "x = 2 ** 3  # *not* markdown" and in_code
    assert mark_line("```", True)[1] is False
    assert mark_line("2 * 3 * 4 is snake_case_here", False)[0].shown == "2 * 3 * 4 is snake_case_here"


def test_a_reply_renders_markdown_with_every_tokens_colour_and_a_monospace_code_block(qtbot):
    view = TokenTextView()
    qtbot.addWidget(view)
    view.set_trace(trace_of(REPLY), colored=True, code_colored=True)
    assert view.toPlainText() == SHOWN

    bold = char_format_at(view, "bold")
    assert bold.fontWeight() > 500 and bold.background().color().rgba() == STATE_STYLE["accepted"][0].rgba()
    assert char_format_at(view, "ld").background().color().rgba() == STATE_STYLE["corrected"][0].rgba()
    code = char_format_at(view, "print(")
    assert QFontInfo(code.font()).fixedPitch() or code.fontFamilies() == view._mono
    rejected = char_format_at(view, "prunt")
    assert rejected.fontStrikeOut() and rejected.fontFamilies() == view._mono
    # Sizes as the code sets them (point sizes resolved against the view's font), not laid-out pixels,
    # which depend on the machine's fonts.
    title, body = char_format_at(view, "Title").font().pointSizeF(), char_format_at(view, "Here").font().pointSizeF()
    assert body == view.font().pointSizeF() and title > 1.3 * body  # a level-1 heading is larger than the text
    bigger = view.font()
    bigger.setPointSizeF(bigger.pointSizeF() * 2)  # presenter mode's larger type
    view.setFont(bigger)
    assert char_format_at(view, "Title").font().pointSizeF() > 1.8 * title  # the heading grows with it

    # Every token is still found where it shows (hover), including those split across lines.
    shown = [view.trace.tokens[i].text for i in view._token_index]
    assert shown == [text for text, _ in REPLY]

    # The copy link copies the block's code, without its fences.
    view._on_anchor(QUrl("copy-code:0"))
    assert QGuiApplication.clipboard().text() == "print(1)"


def test_a_draft_rejected_where_a_code_block_opens_shows_apart_from_the_blocks_links(qtbot):
    """A reply that opens with a fence, where the draft had proposed prose ("Here's a"), shows that struck draft after
    the block's links with a gap, not run into them."""
    view = TokenTextView()
    qtbot.addWidget(view)
    view.set_trace(trace_of([("Here's a", "rejected"), ("```python\n", "corrected"), ("x = 1\n", "accepted"),
                             ("```", "accepted")]), colored=True, code_colored=True)
    header = view.toPlainText().split("\n")[0]
    assert header.endswith("Plain code  Here's a") and char_format_at(view, "Here's").fontStrikeOut()


def test_reading_mode_hides_rejected_drafts_and_keeps_the_colours(qtbot):
    chat = ChatView()
    qtbot.addWidget(chat)
    chat.code_colored = True  # plain code leaves rejected drafts out whatever the reading mode
    bubble = chat.add_assistant(trace_of(REPLY), 1)
    chat.set_reading(True)
    assert "prunt" not in bubble.body.toPlainText() and "print(1)" in bubble.body.toPlainText()
    assert char_format_at(bubble.body, "bold").background().style() != 0  # the token states stay coloured
    chat.set_reading(False)
    assert "prunt" in bubble.body.toPlainText()


def test_streaming_renders_the_same_reply_and_never_redraws_lines_that_ended(qtbot):
    """Fed a few tokens per flush, the document ends as the whole-reply rendering, and no flush changes
    the document before the start of the line that was open when it began."""
    view = TokenTextView()
    qtbot.addWidget(view)
    trace = trace_of([], finished=False)
    view.set_trace(trace, colored=True, code_colored=True)
    changes: list[tuple[int, int, int]] = []
    view.document().contentsChange.connect(lambda pos, removed, added: changes.append((pos, removed, added)))
    long_reply = REPLY + [(f" word{i}" + ("\n" if i % 7 == 6 else ""), "accepted") for i in range(60)]
    for i, (text, state) in enumerate(long_reply):
        trace.tokens.append(TokenRecord(i, text, state, i, 0, 0.5, 0.5, 0.5))
        if i % 3 == 2 or i == len(long_reply) - 1:
            open_line = view._line_pos
            changes.clear()
            if i == len(long_reply) - 1:
                trace.stop_reason = "eos"
            view.render_pending()
            assert changes and min(pos for pos, _, _ in changes) >= open_line
            assert sum(removed for _, removed, _ in changes) < 80  # at most the open line is redrawn
    whole = TokenTextView()
    qtbot.addWidget(whole)
    whole.set_trace(trace, colored=True, code_colored=True)
    assert view.toPlainText() == whole.toPlainText() and view._starts == whole._starts


def test_the_legend_shortens_its_texts_where_the_full_row_does_not_fit(qtbot):
    from PySide6.QtWidgets import QWidget

    from app.legend import Legend

    holder = QWidget()  # a child, as in the window: its parent's layout decides its width
    qtbot.addWidget(holder)
    legend = Legend(holder)
    holder.show()
    full = legend.sizeHint().width()
    legend.resize(full - 40, 30)
    qtbot.waitUntil(lambda: legend.reading.text() == "Reading")
    # it may be given less than its full row: its minimum is narrower (its preferred width stays the full row's)
    assert legend.check.text() == "Colours" and legend.minimumSizeHint().width() <= full - 40
    legend.resize(full + 20, 30)
    qtbot.waitUntil(lambda: legend.reading.text() == "Reading mode")

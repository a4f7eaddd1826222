"""The chat pane: message bubbles, the streaming reply coloured token by token, and the composer.

Rendering is incremental. A reply's tokens live in its `ReplyTrace` (the buffer the window's event
slot appends to); `ChatView.flush()`, called by the window's one timer, inserts only the tokens that
arrived since the last flush at the end of the bubble's QTextDocument, each with its state's char
format. A reply is rendered as a whole only when it is opened or the colour switch is flipped.
"""

from __future__ import annotations

import html
import time
from bisect import bisect_right
from collections.abc import Callable

from PySide6.QtCore import QEvent, QObject, QPointF, QSize, Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QGuiApplication,
    QKeyEvent,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
    QTextOption,
)
from PySide6.QtWidgets import (
    QCheckBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QScrollArea,
    QSizePolicy,
    QTextBrowser,
    QToolButton,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from app.code_marks import code_token_format, drawn_state, replaced_drafts
from app.fit import ElidedLabel
from app.markdown import BOLD, CODE, CODE_LINE, FENCE_CLOSE, FENCE_OPEN, HEADING, ITALIC, mark_line
from app.theme import STATE_LABEL, STATE_SOLID, STATE_STYLE, css_rgba, token_format
from app.trace import MAPPED_MARK, STATE_DESCRIPTIONS, ReplyTrace, TokenRecord, draft_figure
from app.tree_view import describe as describe_tree
from app.tree_view import emitted_text_of, tree_html
from specdec_core.events import TokenState


def visible(text: str) -> str:
    """A token's text with whitespace made visible, for tooltips."""
    return text.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


COPY_CODE = "copy-code:"  # the href of a code block's copy link
CODE_COLOURS = "code-colours:"  # the href of a code block's link that colours code blocks or makes them plain
HEADING_SIZE = {1: 2, 2: 1}  # headings' size steps by level (Qt's: 1.2x, 1.5x the text; deeper ones: bold only)


def _p(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


DRAFT_STOP_WORDS = {
    "gamma": "reached γ, the round's length limit",
    "draft_cap": "the draft model's cap on tokens per round (below γ)",
    "tree": "grew a tree of candidates as large as pays",
    "cost": "checking a draft would cost more than it brings on this machine (the cost model)",
    "probe": "a plain step, timed again so that the cost model weighs drafts against this machine's current speed",
    "confidence": "the draft's confidence fell under the cutoff",
    "eos": "the draft proposed end of text",
    "max_tokens": "the reply's token budget was nearly spent",
    "no_match": "prompt lookup found no earlier n-gram to copy",
    "off": "speculation off",
}


def token_tooltip(tok: TokenRecord, trace: ReplyTrace | None = None) -> str:
    state = tok.state
    drafted = state in (TokenState.ACCEPTED.value, TokenState.REJECTED.value)
    bg, _ = STATE_STYLE.get(state, (None, None))
    swatch = css_rgba(STATE_SOLID[state]) if state in STATE_SOLID else "gray"
    rows = [
        f"<div style='font-size:13px'><b style='font-family:monospace'>{html.escape(visible(tok.text))}</b>"
        f" &nbsp;<span style='color:{swatch}'>■</span> <b>{STATE_LABEL.get(state, state)}</b></div>",
        f"<div style='color:gray'>{html.escape(STATE_DESCRIPTIONS.get(state, ''))}</div>",
        "<table cellspacing=0 cellpadding=1>",
        f"<tr><td>round</td><td>&nbsp;{tok.round + 1}</td></tr>",
        f"<tr><td>position in round</td><td>&nbsp;{tok.position + 1}</td></tr>",
        f"<tr><td>draft probability</td><td>&nbsp;{draft_figure(tok.draft_prob, drafted)}</td></tr>",
        f"<tr><td>verifier probability</td><td>&nbsp;{_p(tok.target_prob)}</td></tr>",
    ]
    if tok.draft_source:  # a draft with another tokenizer: what it wrote, and the verifier token it became
        rows.append(f"<tr><td>{MAPPED_MARK} draft's own token(s)</td><td>&nbsp;<span style='font-family:monospace'>"
                    f"{html.escape(tok.draft_source)}</span></td></tr>")
        rows.append(f"<tr><td>became verifier token</td><td>&nbsp;<span style='font-family:monospace'>"
                    f"{html.escape(repr(tok.text))}</span> (id {tok.token_id})</td></tr>")
    rnd = trace.rounds[tok.round] if trace is not None and 0 <= tok.round < len(trace.rounds) else None
    tree = rnd is not None and rnd.index == tok.round and bool(rnd.tree)
    if tok.accept_prob is not None:
        rule = ("= the verifier's probability once the candidates checked before it are removed" if tree else
                "= the verifier's probability (a one-hot proposal)" if tok.draft_prob is None else
                "= min(1, verifier / draft)")
        rows.append(f"<tr><td>accept probability</td><td>&nbsp;{_p(tok.accept_prob)}"
                    f" <span style='color:gray'>{rule}</span></td></tr>")
    if tree:
        rows.append("</table>")
        rows.append(f"<div style='margin-top:4px'>{html.escape(describe_tree(rnd))} (γ {rnd.gamma} deep at most)"
                    f"</div><div>{tree_html(rnd, emitted_text_of(trace, rnd))}</div><table>")
    elif rnd is not None and rnd.index == tok.round:
        rows.append(f"<tr><td>round's draft</td><td>&nbsp;{rnd.accepted} of {rnd.drafted} accepted (γ {rnd.gamma})"
                    "</td></tr>")
        rows.append(f"<tr><td>drafting stopped</td><td>&nbsp;{html.escape(DRAFT_STOP_WORDS.get(rnd.stop, rnd.stop))}"
                    "</td></tr>")
    rows.append("</table>")
    replaced = replaced_drafts(tok, trace)
    if replaced:  # plain code leaves rejected drafts out of the text: the correction's tooltip names them
        rows.append(f"<div style='margin-top:4px'>replaced the rejected draft <span style='font-family:monospace;"
                    f"color:rgb(215,58,73);text-decoration:line-through'>{html.escape(visible(replaced))}</span>"
                    "</div>")
    if tok.alternatives:
        alts = "".join(
            f"<tr><td style='font-family:monospace'>{html.escape(visible(text))}</td>"
            f"<td>&nbsp;{prob:.3f}</td></tr>" for text, prob in tok.alternatives)
        rows.append(f"<div style='margin-top:4px'>verifier's top alternatives</div><table>{alts}</table>")
    return "".join(rows)


class TokenTextView(QTextBrowser):
    """A read-only text view that grows to fit its text and renders a trace's tokens incrementally.

    The line being written is appended token by token as it arrives; when a line ends it is drawn once more
    with its Markdown (app/markdown.py): headings, bullets, bold, italic, inline code and fenced code blocks
    in a monospace font, each with a "Copy code" link. Every token keeps its state's colour throughout, except
    inside fenced code unless `code_colored`: there the code reads plain, rejected drafts are left out and each
    correction has a thin underline (app/code_marks.py), and the block's "Colour code" link flips that for every
    reply; the tooltip still tells everything. No flush touches
    the document before the start of the line that is open (a long reply costs each tick only what arrived)."""

    code_copied = Signal(str)
    code_colours_requested = Signal(bool)  # a code block's "Colour code" / "Plain code" link: for every reply

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        self.setOpenLinks(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        # A bare "background: transparent" would cascade into this view's tooltips (they are its
        # children) and paint them black on black in a light theme: scope the rule to the view itself.
        self.setStyleSheet("QTextBrowser { background: transparent; }")
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse |
                                     Qt.TextInteractionFlag.TextSelectableByKeyboard |
                                     Qt.TextInteractionFlag.LinksAccessibleByMouse)
        self.anchorClicked.connect(self._on_anchor)
        opt = QTextOption()
        opt.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.document().setDefaultTextOption(opt)
        self.document().setDocumentMargin(2)
        font = self.font()
        font.setPointSizeF(font.pointSizeF() * 1.08)
        self.setFont(font)
        self._mono = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).families()
        self.document().documentLayout().documentSizeChanged.connect(self._fit)
        self.viewport().installEventFilter(_TokenTips(self))
        self.trace: ReplyTrace | None = None
        self.colored = True
        self.show_rejected = True  # rejected drafts inline (off in reading mode and without colours)
        self.code_colored = False  # fenced code coloured token by token too (else plain, with thin marks)
        self._reset()
        self._fit()

    def _reset(self) -> None:
        self.rendered = 0  # tokens of the trace already in the document
        self._starts: list[int] = []  # document position where each rendered, non-empty token starts
        self._token_index: list[int] = []  # the trace index of each entry in _starts
        self._line: list[tuple[int, str, bool]] = []  # the open line's pieces: (token index, text, rejected)
        self._raw = 0  # pieces of the open line already in the document (as typed)
        self._line_pos = 0  # document position where the open line starts
        self._line_mark = 0  # entries of _starts before the open line
        self._in_code = False  # the open line is inside a fenced code block
        self.code_blocks: list[list[str]] = []  # each fenced block's lines so far (what "Copy code" copies)
        self._done = False  # the last line of a finished reply is drawn

    def _fit(self, *_args) -> None:
        h = int(self.document().size().height()) + 2 * self.frameWidth() + 4
        if h != self.height():
            self.setFixedHeight(max(h, 24))

    def set_plain(self, text: str) -> None:
        self.trace = None
        self.setPlainText(text)

    def set_trace(self, trace: ReplyTrace, colored: bool, reading: bool = False, code_colored: bool = False) -> None:
        """Render a whole trace (used when opening a conversation or flipping the colour, reading or code switch)."""
        self.trace = trace
        self.colored = colored
        self.show_rejected = colored and not reading
        self.code_colored = code_colored
        self.clear()
        self._reset()
        self.render_pending()

    # -- formats --
    def _format(self, state: str, flags: int = 0, heading: int = 0, plain_code: bool = False) -> QTextCharFormat:
        if plain_code and self.colored:
            fmt = code_token_format(state)
        else:
            fmt = token_format(state if self.colored else TokenState.PLAIN.value, self.colored)
        if flags & CODE:
            fmt.setFontFamilies(self._mono)
        if flags & BOLD or heading:
            fmt.setFontWeight(QFont.Weight.Bold)
        if flags & ITALIC:
            fmt.setFontItalic(True)
        if heading:  # relative to the view's font, so presenter mode's larger type enlarges headings too
            fmt.setProperty(QTextFormat.Property.FontSizeAdjustment, HEADING_SIZE.get(heading, 0))
        return fmt

    def _block_format(self, code: bool) -> QTextBlockFormat:
        fmt = QTextBlockFormat()
        if code:
            fmt.setBackground(QColor(127, 127, 127, 30))
            fmt.setLeftMargin(6)
        return fmt

    @property
    def _plain_code(self) -> bool:
        """The open line is fenced code, shown plain (no per-token colours, rejected drafts left out)."""
        return self._in_code and not self.code_colored

    def _record(self, token: int, pos: int) -> None:
        """Where token `token` starts on screen (once per token, even when it spans lines)."""
        if not self._token_index or self._token_index[-1] != token:
            self._starts.append(pos)
            self._token_index.append(token)

    # -- rendering --
    def render_pending(self) -> int:
        """Append the trace's tokens that are not in the document yet (and draw each line that ended);
        returns how many tokens arrived."""
        trace = self.trace
        if trace is None:
            return 0
        new = trace.tokens[self.rendered:]
        finishing = trace.finished and not self._done
        if not new and not finishing:
            return 0
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        # One edit block per flush: the document tells its layout (and the bubble's height) once, at the end,
        # instead of after every run of one state (each a relayout of the open paragraph on the GUI thread).
        cursor.beginEditBlock()
        for i, tok in enumerate(new, start=self.rendered):
            rejected = tok.state == TokenState.REJECTED.value
            if rejected and (not self.show_rejected or self._plain_code):
                continue  # rejected drafts are not part of the reply (nor of plain code: their tooltip keeps them)
            if not tok.text:
                continue
            if rejected:
                self._line.append((i, tok.text.replace("\n", "↵"), True))
                continue
            for k, part in enumerate(tok.text.split("\n")):
                if k:  # a line ended inside this token: draw it with its Markdown
                    self._draw_line(cursor, breaking=i)
                if part:
                    self._line.append((i, part, False))
        if not finishing:  # a finished reply's last line is drawn with its Markdown right below: type nothing
            self._append_raw(cursor)
        self.rendered = len(trace.tokens)
        if trace.finished and not self._done:
            self._done = True
            if self._line:
                self._draw_line(cursor, breaking=None)
        cursor.setCharFormat(QTextCharFormat())  # a selection-copy picks up no stale format
        cursor.endEditBlock()
        return len(new)
    def _append_raw(self, cursor: QTextCursor) -> None:
        """The open line's new pieces as typed, each with its state's format (consecutive pieces of one
        state go in with one insertText: each call into Qt costs a GIL hand-off while the decoding thread
        runs). Token starts are counted here, in UTF-16 units as QTextDocument counts positions."""
        pieces = self._line[self._raw:]
        if not pieces:
            return
        flags = CODE if self._in_code else 0
        plain = self._plain_code
        pos = cursor.position()
        run: list[str] = []
        run_state: str | None = None
        for token, text, _rejected in pieces:
            state = self.trace.tokens[token].state
            if state != run_state and run:
                cursor.insertText("".join(run), self._format(run_state, flags, plain_code=plain))
                run.clear()
            run_state = state
            run.append(text)
            self._record(token, pos)
            pos += _utf16_len(text)
        cursor.insertText("".join(run), self._format(run_state, flags, plain_code=plain))
        self._raw = len(self._line)

    def _draw_line(self, cursor: QTextCursor, breaking: int | None) -> None:
        """The open line ended: replace its typed text with its Markdown rendering, then start the next line
        (`breaking`: the token whose newline ended it; None: the reply's last line)."""
        cursor.setPosition(self._line_pos)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        del self._starts[self._line_mark:]
        del self._token_index[self._line_mark:]
        text = "".join(piece for _, piece, rejected in self._line if not rejected)
        marked, in_code = mark_line(text, self._in_code)
        if marked.kind == FENCE_OPEN:
            self.code_blocks.append([])
            self._insert_copy_link(cursor, marked.lang, len(self.code_blocks) - 1)
        elif marked.kind == CODE_LINE and self.code_blocks:
            self.code_blocks[-1].append(text)
        elif marked.kind == FENCE_CLOSE:
            cursor.setBlockFormat(self._block_format(False))  # the block ended: its fence line is not code
        code = CODE if marked.kind == CODE_LINE else 0
        plain = bool(code) and not self.code_colored
        heading = marked.level if marked.kind == HEADING else 0
        # Runs of one (state, style) go in with one insertText each, as in _append_raw.
        pos, offset = cursor.position(), 0
        run: list[str] = []
        run_key: tuple[str, int] | None = None
        for token, piece, rejected in self._line:
            self._record(token, pos)
            token_state = self.trace.tokens[token].state
            chars = ((piece, code),) if rejected else marked.chars[offset:offset + len(piece)]
            offset += 0 if rejected else len(piece)
            for shown, flags in chars:
                if not shown:
                    continue
                state = drawn_state(token_state, shown, piece) if plain else token_state
                if run and (state, flags) != run_key:
                    cursor.insertText("".join(run), self._format(run_key[0], run_key[1], heading, plain))
                    run.clear()
                run_key = (state, flags)
                run.append(shown)
                pos += _utf16_len(shown)
        if run:
            cursor.insertText("".join(run), self._format(run_key[0], run_key[1], heading, plain))
        if breaking is not None:
            self._record(breaking, cursor.position())
            cursor.insertBlock(self._block_format(in_code), QTextCharFormat())
        self._in_code = in_code
        self._line = []
        self._raw = 0
        self._line_pos = cursor.position()
        self._line_mark = len(self._starts)

    def _insert_copy_link(self, cursor: QTextCursor, lang: str, block: int) -> None:
        muted = QTextCharFormat()
        muted.setForeground(QColor(127, 127, 127))
        muted.setFontFamilies(self._mono)
        if lang:
            cursor.insertText(f"{lang}  ", muted)
        link = QTextCharFormat()
        link.setAnchor(True)
        link.setAnchorHref(f"{COPY_CODE}{block}")
        link.setForeground(QColor(59, 130, 246))
        link.setToolTip("Copy this code block")
        cursor.insertText("Copy code", link)
        if self.colored:  # the switch for code's colours, where the code is (also View ▸ Colour code blocks)
            cursor.insertText("  ", muted)
            switch = QTextCharFormat(link)
            switch.setAnchorHref(CODE_COLOURS)
            switch.setToolTip("Code blocks plain, with a thin underline at each correction (hover a token for "
                              "everything)" if self.code_colored else "Colour the tokens inside code blocks too")
            cursor.insertText("Plain code" if self.code_colored else "Colour code", switch)

    def _on_anchor(self, url) -> None:
        href = url.toString()
        if href == CODE_COLOURS:
            self.code_colours_requested.emit(not self.code_colored)
        elif href.startswith(COPY_CODE):
            block = int(href[len(COPY_CODE):])
            if 0 <= block < len(self.code_blocks):
                text = "\n".join(self.code_blocks[block])
                QGuiApplication.clipboard().setText(text)
                self.code_copied.emit(text)

    def token_spans(self) -> list[tuple[int, int, int]]:
        """(trace index, document start, document end) of each token shown, in order."""
        ends = [*self._starts[1:], self.document().characterCount() - 1]
        return list(zip(self._token_index, self._starts, ends))

    def token_at(self, pos: QPointF) -> TokenRecord | None:
        if self.trace is None or not self._starts:
            return None
        doc_pos = pos + QPointF(self.horizontalScrollBar().value(), self.verticalScrollBar().value())
        char = self.document().documentLayout().hitTest(doc_pos, Qt.HitTestAccuracy.ExactHit)
        if char < 0:
            return None
        k = bisect_right(self._starts, char) - 1
        if k < 0:
            return None
        return self.trace.tokens[self._token_index[k]]


class _TokenTips(QObject):
    """A token view's tooltips, as an event filter on its viewport.

    Not an override of `viewportEvent`: every event of the viewport, each paint of the text included, would
    then run inside a Python call, and PySide holds the GIL across the C++ call it makes from there, so the
    decoding thread would wait for every repaint of a streaming reply. The filter returns at once for all but
    tooltip events, and the text is painted with the GIL released."""

    def __init__(self, view: TokenTextView) -> None:
        super().__init__(view)
        self.view = view

    def eventFilter(self, _obj, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if event.type() != QEvent.Type.ToolTip:
            return False
        view = self.view
        tok = view.token_at(QPointF(event.pos()))
        if tok is not None:
            QToolTip.showText(event.globalPos(), token_tooltip(tok, view.trace), view.viewport())
        else:
            QToolTip.hideText()
            event.ignore()
        return True



class MessageBubble(QFrame):
    copy_requested = Signal(object)  # self
    edit_requested = Signal(object)
    regenerate_requested = Signal(object)
    graphs_requested = Signal(object)
    branch_requested = Signal(object, int)  # self, -1 (the previous version) or +1 (the next)

    def __init__(self, role: str, index: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.role = role
        self.index = index  # the message's index in the conversation
        self.setObjectName(f"bubble_{role}")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 8, 12, 6)
        lay.setSpacing(2)
        head = QHBoxLayout()
        head.setSpacing(6)
        self.header = QLabel("You" if role == "user" else "Assistant")
        self.header.setObjectName("bubble_header")
        head.addWidget(self.header)
        # One line: a long pair name ends in "…" (the whole name is its tooltip) and never widens the bubble; wrapped,
        # it stood four lines tall beside the buttons in a 1024-px window.
        self.meta = ElidedLabel("")
        self.meta.setObjectName("muted")
        head.addWidget(self.meta, 1)
        self.actions: dict[str, QToolButton] = {}
        self.branch_label = QLabel("")
        self.branch_label.setObjectName("muted")
        self.branch_label.setToolTip("Regenerated: every version of this reply is kept")
        self.branch_buttons: list[QToolButton] = []
        for text, step, tip in (("‹", -1, "Show the earlier version of this reply"),
                                ("›", 1, "Show the later version of this reply")):
            b = QToolButton()
            b.setText(text)
            b.setObjectName("bubble_action")
            b.setToolTip(tip)
            b.clicked.connect(lambda _checked=False, step=step: self.branch_requested.emit(self, step))
            self.branch_buttons.append(b)
        names = ("Copy", "Edit") if role == "user" else ("Graphs", "Copy", "Regenerate")
        for name in names:
            b = QToolButton()
            b.setText(name)
            b.setObjectName("bubble_action")
            b.setCursor(Qt.CursorShape.PointingHandCursor)
            head.addWidget(b)
            self.actions[name] = b
        self.actions["Copy"].clicked.connect(lambda: self.copy_requested.emit(self))
        if "Edit" in self.actions:
            self.actions["Edit"].setToolTip("Edit this message and send it again (later messages are removed)")
            self.actions["Edit"].clicked.connect(lambda: self.edit_requested.emit(self))
        if "Regenerate" in self.actions:
            self.actions["Regenerate"].setToolTip("Generate this reply again")
            self.actions["Regenerate"].clicked.connect(lambda: self.regenerate_requested.emit(self))
        if "Graphs" in self.actions:
            self.actions["Graphs"].setToolTip("Show this reply's speculation graphs")
            self.actions["Graphs"].clicked.connect(lambda: self.graphs_requested.emit(self))
        lay.addLayout(head)
        self.body = TokenTextView(self)
        lay.addWidget(self.body)
        self.footer = QLabel("")
        self.footer.setObjectName("bubble_footer")
        self.footer.setWordWrap(True)
        self.footer.setVisible(False)
        # Under the reply, not in the header: the header's buttons already set the bubble's narrowest width.
        foot = QHBoxLayout()
        foot.setSpacing(4)
        for widget in (self.branch_buttons[0], self.branch_label, self.branch_buttons[1]):
            foot.addWidget(widget, 0, Qt.AlignmentFlag.AlignTop)
        foot.addWidget(self.footer, 1)
        lay.addLayout(foot)
        self.set_branch(1, 1)

    @property
    def trace(self) -> ReplyTrace | None:
        return self.body.trace

    def text(self) -> str:
        return self.trace.text if self.trace is not None else self.body.toPlainText()

    def set_streaming(self, streaming: bool) -> None:
        for name in ("Regenerate", "Edit"):
            if name in self.actions:
                self.actions[name].setEnabled(not streaming)
        self._streaming = streaming
        self.set_branch(*self.branch)

    def set_branch(self, which: int, count: int) -> None:
        """Which version of a regenerated reply this is (from 1) of how many; ‹ › flip between them."""
        self.branch = (which, count)
        streaming = getattr(self, "_streaming", False)
        for b in (*self.branch_buttons, self.branch_label):
            b.setVisible(count > 1)
        self.branch_label.setText(f"{which}/{count}")
        self.branch_buttons[0].setEnabled(which > 1 and not streaming)
        self.branch_buttons[1].setEnabled(which < count and not streaming)

    def update_footer(self) -> None:
        trace = self.trace
        if trace is None:
            return
        parts = []
        if trace.tokens or trace.finished:
            parts.append(trace.summary())
        if trace.dropped_turns:
            parts.append(f"{trace.dropped_turns} oldest turn{'s' if trace.dropped_turns > 1 else ''} "
                         "left out to fit the context")
        if trace.error:
            parts.append(f"error: {trace.error}")
        self.footer.setText(" · ".join(parts))
        self.footer.setVisible(bool(parts))
        if trace.baseline_tps and trace.baseline_source:
            self.footer.setToolTip(f"Speedup against the verifier alone on this machine "
                                   f"({trace.baseline_tps:.1f} tok/s): {trace.baseline_source}")
        if trace.finished:
            self.meta.setText(_models_line(trace))
        else:
            self.meta.setText("generating…" if not trace.tokens else f"generating… {_models_line(trace)}")


def _models_line(trace: ReplyTrace) -> str:
    if not trace.verifier:
        return ""
    if trace.drafter and trace.speculative:
        return f"{trace.verifier} ← {trace.drafter}"
    return trace.verifier


class Notice(QFrame):
    def __init__(self, text: str, kind: str = "info", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.kind = kind
        self.setObjectName(f"notice_{kind}")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 6, 10, 6)
        self._lay = lay
        self.label = QLabel(text)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.label, 1)
        self.buttons: dict[str, QToolButton] = {}
        close = QToolButton()
        close.setText("✕")
        close.setObjectName("bubble_action")
        close.setToolTip("Dismiss")
        close.clicked.connect(self.deleteLater)
        lay.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)

    def add_button(self, text: str, slot) -> QToolButton:
        """An action next to the text (e.g. Undo); using it dismisses the notice."""
        b = QToolButton()
        b.setText(text)
        b.setObjectName("bubble_action")
        b.clicked.connect(slot)
        b.clicked.connect(self.deleteLater)
        self._lay.insertWidget(1, b, 0, Qt.AlignmentFlag.AlignTop)
        self.buttons[text] = b
        return b


EARLIER_SLICE_S = 0.03  # drawing the bubbles above the open ones: about this long per event-loop turn
EARLIER_PER_BOX = 16  # bubbles drawn above share boxes of this many (one layout item per box)


class ChatView(QScrollArea):
    """The conversation as bubbles, with notices (errors, context drops) in between.

    A long conversation opens with its last bubbles drawn; the earlier ones are drawn above them on the event
    loop (`draw_earlier`), newest first, a slice per turn, so the window answers at once. A slice holds as
    many bubbles as building and laying them out took EARLIER_SLICE_S the turn before. What the view shows
    does not move while they arrive: once scrolled up, the distance to the end is kept."""

    copy_requested = Signal(object)
    edit_requested = Signal(object)
    regenerate_requested = Signal(object)
    graphs_requested = Signal(object)
    branch_requested = Signal(object, int)
    code_colours_requested = Signal(bool)  # a code block's link: colour code blocks (True) or make them plain

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chat_scroll")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        inner = QWidget()
        self._layout = QVBoxLayout(inner)
        self._layout.setContentsMargins(16, 12, 16, 12)
        self._layout.setSpacing(10)
        self._layout.addStretch(1)
        self.setWidget(inner)
        self.bubbles: list[MessageBubble] = []
        self.colored = True
        self.reading = False  # reading mode: rejected drafts hidden inline (tooltips, tree and replay keep them)
        self.code_colored = False  # fenced code coloured token by token (else plain, with thin marks)
        self._streaming: MessageBubble | None = None
        self._footer_stale = False  # tokens of the streaming reply arrived that its footer does not count yet
        self._stick = True  # follow the end of the reply while the user hasn't scrolled up
        self._earlier: list[Callable[[], object]] = []  # builders of bubbles still to draw above, oldest first
        self._earlier_timer = QTimer(self)
        self._earlier_timer.setInterval(0)
        self._earlier_timer.timeout.connect(self._draw_earlier_slice)
        self._from_end = 0  # the scrolled-up view's distance to the end (kept while bubbles arrive above)
        self._growing_above = False
        self._box: QVBoxLayout | None = None  # the top box of bubbles drawn above, while it has room
        self._in_box = 0  # bubbles in it
        self._last_slice: tuple[int, float, float] | None = None  # (bubbles, build seconds, when it ended)
        self.verticalScrollBar().rangeChanged.connect(self._on_range)
        self.verticalScrollBar().valueChanged.connect(self._on_scroll)
        self.empty = QLabel(
            "<div style='font-size:15px'><b>Chat with speculative decoding, token by token.</b></div>"
            "<div style='margin-top:6px'>Draft tokens the verifier <span style='background:rgba(46,160,67,89)'>"
            "accepted</span>, <span style='color:rgb(215,58,73);text-decoration:line-through'>rejected</span>,"
            " its <span style='background:rgba(235,160,20,115)'>corrections</span> and "
            "<span style='background:rgba(59,130,246,102)'>bonus</span> tokens are coloured as they stream."
            "<br>Hover a token for its probabilities. Enter sends, Shift+Enter starts a new line.</div>")
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setWordWrap(True)
        self.empty.setObjectName("muted")
        self._layout.insertWidget(0, self.empty)

    # -- building -----------------------------------------------------------------------------------
    def clear(self) -> None:
        for i in reversed(range(self._layout.count())):
            w = self._layout.itemAt(i).widget()
            if w is not None and w is not self.empty:
                # Out of the layout and hidden, but still parented until Qt deletes it: setParent(None)
                # handed the widget to its Python wrapper, which could free it with a deferred delete still
                # pending (a crash after some dozens of new chats).
                self._layout.removeWidget(w)
                w.hide()
                w.deleteLater()
        self.bubbles.clear()
        self._streaming = None
        self.empty.setVisible(True)
        self._stick = True
        self._earlier.clear()
        self._earlier_timer.stop()
        self._box, self._in_box, self._last_slice = None, 0, None

    def _insert(self, widget: QWidget, above: bool = False) -> None:
        self.empty.setVisible(False)
        if above and self._box is not None:  # an earlier bubble (_draw_earlier_slice)
            self._box.insertWidget(0, widget)
        else:
            self._layout.insertWidget(1 if above else self._layout.count() - 1, widget)  # 0: the empty label

    def _add_bubble(self, b: MessageBubble, margins: tuple[int, int], above: bool) -> None:
        wrap = QWidget()
        row = QHBoxLayout(wrap)
        row.setContentsMargins(margins[0], 0, margins[1], 0)
        row.addWidget(b)
        self._wire(b)
        self._insert(wrap, above)
        if above:
            self.bubbles.insert(0, b)
        else:
            self.bubbles.append(b)

    def add_user(self, text: str, index: int, above: bool = False) -> MessageBubble:
        """A user turn at the end (or, `above`, before every bubble drawn so far)."""
        b = MessageBubble("user", index)
        b.body.set_plain(text)
        self._add_bubble(b, (60, 0), above)
        return b

    def add_assistant(self, trace: ReplyTrace, index: int, streaming: bool = False,
                      above: bool = False) -> MessageBubble:
        b = MessageBubble("assistant", index)
        b.body.set_trace(trace, self.colored, self.reading, self.code_colored)
        b.update_footer()
        b.set_streaming(streaming)
        self._add_bubble(b, (0, 30), above)
        if streaming:
            self._streaming = b
            self._footer_stale = False
            self._stick = True
        return b

    def add_notice(self, text: str, kind: str = "info") -> Notice:
        n = Notice(text, kind)
        self._insert(n)
        self._stick = True
        return n

    def draw_earlier(self, builders: list[Callable[[], object]]) -> None:
        """Draw these bubbles above the others on the event loop, the last first, a slice per turn; each
        builder adds one (add_user/add_assistant with `above`). `clear` drops those not drawn yet."""
        self._earlier = list(builders)
        self._last_slice = None
        if self._earlier:
            self._earlier_timer.start()

    @property
    def drawing_earlier(self) -> bool:
        return bool(self._earlier)

    def _draw_earlier_slice(self) -> None:
        """One slice of earlier bubbles. They go into boxes of EARLIER_PER_BOX at the top, so putting one above
        re-lays out the boxes, not every bubble below it (that was quadratic). A bubble costs as much again to
        lay out as to build, after this turn: the slice's size comes from the last turn's whole cost."""
        start = time.perf_counter()
        count = len(self._earlier)
        if self._last_slice is not None:
            built, build_s, ended = self._last_slice
            per_bubble = (build_s + start - ended) / built
            count = max(1, int(EARLIER_SLICE_S / max(per_bubble, 1e-4)))
        self._growing_above = True
        built = 0
        while self._earlier and built < count and (built == 0 or time.perf_counter() - start < EARLIER_SLICE_S):
            if self._box is None or self._in_box >= EARLIER_PER_BOX:
                box = QWidget()
                self._box = QVBoxLayout(box)
                self._box.setContentsMargins(0, 0, 0, 0)
                self._box.setSpacing(self._layout.spacing())
                self._in_box = 0
                self._layout.insertWidget(1, box)  # 0: the empty label
            self._earlier.pop()()
            self._in_box += 1
            built += 1
        ended = time.perf_counter()
        self._last_slice = (built, ended - start, ended)
        if not self._earlier:
            self._earlier_timer.stop()
            QTimer.singleShot(500, self._done_growing)  # the last slice's layout lands after this turn

    def _done_growing(self) -> None:
        self._growing_above = bool(self._earlier)

    def _wire(self, b: MessageBubble) -> None:
        b.copy_requested.connect(self.copy_requested)
        b.edit_requested.connect(self.edit_requested)
        b.regenerate_requested.connect(self.regenerate_requested)
        b.graphs_requested.connect(self.graphs_requested)
        b.branch_requested.connect(self.branch_requested)
        b.body.code_colours_requested.connect(self.code_colours_requested)

    # -- streaming ----------------------------------------------------------------------------------
    @property
    def streaming_bubble(self) -> MessageBubble | None:
        return self._streaming

    def flush(self, figures: bool = True) -> int:
        """Render tokens that arrived since the last flush (called by the window's timer); with `figures`, also
        the footer's figures, if tokens arrived since they were last shown (always once the reply has ended)."""
        b = self._streaming
        if b is None:
            return 0
        n = b.body.render_pending()
        self._footer_stale = self._footer_stale or n > 0
        finished = b.trace is not None and b.trace.finished
        if finished or (figures and self._footer_stale):
            b.update_footer()
            self._footer_stale = False
        if finished:
            b.set_streaming(False)
            self._streaming = None
        return n

    def set_colored(self, colored: bool) -> None:
        if colored == self.colored:
            return
        self.colored = colored
        self._rerender()

    def set_reading(self, reading: bool) -> None:
        """Reading mode: the replies without their rejected drafts, as they read (colours stay)."""
        if reading == self.reading:
            return
        self.reading = reading
        self._rerender()

    def set_code_colored(self, on: bool) -> None:
        """Fenced code coloured token by token, or plain with a thin mark at each correction (the default)."""
        if on == self.code_colored:
            return
        self.code_colored = on
        self._rerender()

    def _rerender(self) -> None:
        for b in self.bubbles:
            if b.trace is not None:
                b.body.set_trace(b.trace, self.colored, self.reading, self.code_colored)

    # -- scrolling ----------------------------------------------------------------------------------
    def _on_scroll(self, value: int) -> None:
        sb = self.verticalScrollBar()
        self._stick = value >= sb.maximum() - 8
        self._from_end = sb.maximum() - value

    def _on_range(self, _lo: int, hi: int) -> None:
        if self._stick:
            self.verticalScrollBar().setValue(hi)
        elif self._growing_above:  # bubbles arrived above: what was in view stays in view
            self.verticalScrollBar().setValue(hi - self._from_end)

    def scroll_to_end(self) -> None:
        self._stick = True
        QTimer.singleShot(0, lambda: self.verticalScrollBar().setValue(self.verticalScrollBar().maximum()))


class Composer(QPlainTextEdit):
    """Enter sends, Shift+Enter starts a new line."""

    submitted = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("composer")
        self.setPlaceholderText("Message the model…   (Enter sends · Shift+Enter new line · Esc stops)")
        self.setTabChangesFocus(True)
        self.setFixedHeight(72)

    def keyPressEvent(self, e: QKeyEvent) -> None:  # noqa: N802 - Qt override
        if e.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not (e.modifiers() & Qt.KeyboardModifier.ShiftModifier):
            self.submitted.emit()
            return
        super().keyPressEvent(e)


COLOURS_HELP = (
    "Green: a draft token the verifier accepted.\nRed, struck through: a draft token the verifier "
    "rejected (kept where it was proposed; not part of the reply).\nAmber: the verifier's correction "
    "that replaced it.\nBlue: the bonus token the verifier adds after a fully accepted round.\n"
    "No colour: decoded by the verifier alone (speculation off).\n\nInside code blocks the tokens are not "
    "coloured (the Colour code link above a block, or View ▸ Colour code blocks): a thin amber underline marks each "
    "correction, and the rejected draft it replaced is in its tooltip.\n\nHover any token for its round, "
    "position, draft and verifier probabilities, acceptance probability and the verifier's top "
    "alternatives.")


class Legend(QWidget):
    """Swatches for the token states, the switch that turns colouring off, and reading mode's switch."""

    toggled = Signal(bool)
    reading_toggled = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(10)
        self.check = QCheckBox("Colour tokens")
        self.check.setChecked(True)
        self.check.setToolTip("Show each token's speculation state (hover a token for details)")
        self.check.toggled.connect(self.toggled)
        lay.addWidget(self.check)
        self.reading = QCheckBox("Reading mode")
        self.reading.setToolTip("Hide rejected drafts inside the replies, so they read as text (hover a token, "
                                "the tree view and the replay still show them)")
        self.reading.toggled.connect(self.reading_toggled)
        lay.addWidget(self.reading)
        self.swatches: list[QLabel] = []
        self._texts: list[tuple[QWidget, str, str]] = [(self.check, "Colour tokens", "Colours"),
                                                          (self.reading, "Reading mode", "Reading")]
        for state in (TokenState.ACCEPTED, TokenState.REJECTED, TokenState.CORRECTED, TokenState.BONUS,
                      TokenState.PLAIN):
            bg, fg = STATE_STYLE[state.value]
            style = f"background:{css_rgba(bg)};" if bg is not None else "border:1px solid rgba(127,127,127,128);"
            deco = "text-decoration:line-through;" if state is TokenState.REJECTED else ""
            color = f"color:{css_rgba(fg)};" if fg is not None else ""
            html_of = f"<span style='{style}{deco}{color} padding:1px 4px'>&nbsp;{{}}&nbsp;</span>".format
            label = STATE_LABEL[state.value]
            lbl = QLabel(html_of(label))
            # narrow: "verifier only" -> "verifier"
            self._texts.append((lbl, html_of(label), html_of(label.split()[0])))
            lbl.setToolTip(STATE_DESCRIPTIONS[state.value])
            lay.addWidget(lbl)
            self.swatches.append(lbl)
        lay.addStretch(1)
        self._hints: tuple[str, QSize, int] | None = None  # (font, the row's minimum with its short texts, full width)

    def _set_narrow(self, narrow: bool) -> None:
        for widget, full, short in self._texts:
            widget.setText(short if narrow else full)
        self.layout().setSpacing(6 if narrow else 10)

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        """The row with its shorter texts: a narrow window may give it less than the full row (resizeEvent)."""
        return self._measure()[0]

    def full_width(self) -> int:
        """How wide the row is with its full texts."""
        return self._measure()[1]

    def _measure(self) -> tuple[QSize, int]:
        """Measured once per font: measuring changes the texts, and a changed text asks for a new layout, which
        asks for the minimum size again."""
        key = self.check.font().key()
        if self._hints is None or self._hints[0] != key:
            narrow = self.check.text() != self._texts[0][1]
            self._set_narrow(True)
            short = self.layout().minimumSize()
            self._set_narrow(False)
            full = self.layout().sizeHint().width()
            self._set_narrow(narrow)
            self._hints = (key, short, full)
        return self._hints[1], self._hints[2]

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        """Shorter texts where the full row does not fit (presenter mode's large type on a small screen)."""
        super().resizeEvent(event)
        narrow = self.check.text() != self._texts[0][1]
        self._set_narrow(False)
        full = self.layout().sizeHint().width()
        self._set_narrow(narrow)
        if (event.size().width() < full) != narrow:
            self._set_narrow(not narrow)


def copy_text(text: str) -> None:
    QGuiApplication.clipboard().setText(text)

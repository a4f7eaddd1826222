"""A reply's text coloured token by token (`TokenTextView`), and what hovering a token says (`token_tooltip`).

Rendering is incremental. A reply's tokens live in its `ReplyTrace` (the buffer the window's event slot appends
to); `render_pending`, called through the chat view's flush on the window's one timer, inserts only the tokens
that arrived since the last call at the end of the QTextDocument, each with its state's char format. A reply is
rendered as a whole only when it is opened or the colour switch is flipped.
"""
from __future__ import annotations

import html
from bisect import bisect_right

from PySide6.QtCore import QEvent, QObject, QPointF, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QGuiApplication,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
    QTextOption,
)
from PySide6.QtWidgets import (
    QFrame,
    QSizePolicy,
    QTextBrowser,
    QToolTip,
    QWidget,
)

from app.code_marks import code_token_format, drawn_state, replaced_drafts
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
            if any(rejected for _, _, rejected in self._line):  # a draft the fence replaced: apart from the links
                cursor.insertText("  ", QTextCharFormat())
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

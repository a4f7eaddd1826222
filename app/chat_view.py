"""The chat pane: the message bubbles (app/bubbles.py) in a scroll area, the composer, and the colours' legend.

Rendering is incremental: `ChatView.flush()`, called by the window's one timer, asks the streaming bubble's
token view (app/token_view.py) to insert only the tokens that arrived since the last flush.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import (
    QGuiApplication,
    QKeyEvent,
)
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from app.bubbles import MessageBubble, Notice
from app.trace import ReplyTrace

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
        # The streaming reply's (tokens, rounds) its footer shows: either one growing makes the footer stale (a
        # round can land a tick after its tokens), so the footer and the graphs' header change on the same tick.
        self._footer_shows = (0, 0)
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
        self._spare: dict[str, MessageBubble] = {}  # a bubble of each role built ahead (prepare), not shown yet
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

    def prepare(self) -> None:
        """Build a bubble of each role ahead, for the next message and its reply (call it while the window idles:
        after a load, after a reply). Sending a message then only fills them in: building the two bubbles was
        a third of the work done in the event-loop turn of a Send, during which the window cannot repaint."""
        for role in ("user", "assistant"):
            if role not in self._spare:
                self._spare[role] = MessageBubble(role, 0)

    def _bubble(self, role: str, index: int) -> MessageBubble:
        """A bubble for message `index` at the end: the one built ahead (prepare), else a new one."""
        b = self._spare.pop(role, None)
        if b is None:
            return MessageBubble(role, index)
        b.index = index
        return b

    def add_user(self, text: str, index: int, above: bool = False) -> MessageBubble:
        """A user turn at the end (or, `above`, before every bubble drawn so far)."""
        b = MessageBubble("user", index) if above else self._bubble("user", index)
        b.body.set_plain(text)
        self._add_bubble(b, (60, 0), above)
        return b

    def add_assistant(self, trace: ReplyTrace, index: int, streaming: bool = False,
                      above: bool = False) -> MessageBubble:
        b = MessageBubble("assistant", index) if above else self._bubble("assistant", index)
        b.body.set_trace(trace, self.colored, self.reading, self.code_colored)
        b.update_footer()
        b.set_streaming(streaming)
        self._add_bubble(b, (0, 30), above)
        if streaming:
            self._streaming = b
            self._footer_shows = _footer_counts(b)
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
        the footer's figures, if tokens or rounds arrived since they were last shown (always once the reply has
        ended)."""
        b = self._streaming
        if b is None:
            return 0
        n = b.body.render_pending()
        counts = _footer_counts(b)
        finished = b.trace is not None and b.trace.finished
        if finished or (figures and counts != self._footer_shows):
            b.update_footer()
            self._footer_shows = counts
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
        QTimer.singleShot(0, self, lambda: self.verticalScrollBar().setValue(self.verticalScrollBar().maximum()))


def _footer_counts(b: MessageBubble) -> tuple[int, int]:
    """What a bubble's footer figures are made of: its trace's tokens and rounds so far."""
    return (len(b.trace.tokens), len(b.trace.rounds)) if b.trace is not None else (0, 0)


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

    def fill(self, text: str) -> None:
        """Put `text` here to edit, with the cursor at its end."""
        self.setPlainText(text)
        self.setFocus()
        cursor = self.textCursor()
        cursor.movePosition(cursor.MoveOperation.End)
        self.setTextCursor(cursor)


COLOURS_HELP = (
    "Green: a draft token the verifier accepted.\nRed, struck through: a draft token the verifier "
    "rejected (kept where it was proposed; not part of the reply).\nAmber: the verifier's correction "
    "that replaced it.\nBlue: the bonus token the verifier adds after a fully accepted round.\n"
    "No colour: decoded by the verifier alone (speculation off).\n\nInside code blocks the tokens are not "
    "coloured (the Colour code link above a block, or View ▸ Colour code blocks): a thin amber underline marks each "
    "correction, and the rejected draft it replaced is in its tooltip.\n\nHover any token for its round, "
    "position, draft and verifier probabilities, acceptance probability and the verifier's top "
    "alternatives.")


def copy_text(text: str) -> None:
    QGuiApplication.clipboard().setText(text)

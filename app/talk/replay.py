"""Replay a reply round by round, in three beats per round, at a pace the speaker controls.

`ReplayState` (rounds.py) is the deterministic model: an index into the beats of the reply. This
widget shows the beat (round_stage.py draws it) and owns the one QTimer that advances it while playing; tests
(and the GIF export) step the state directly and never wait on the timer.

Keys (when the replay has focus; presentation clickers send Page Up / Page Down):
Space play/pause · → or Page Down one beat on · ← or Page Up one beat back ·
Shift+→ / Shift+← next / previous round · Home / End start / end.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSlider,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.fit import ONE_LINE, available, fit_to_screen, give_rows, scrolling, wrap_labels
from app.talk import style as ts
from app.talk.round_stage import RoundStage, chip_label, draft_q
from app.talk.rounds import Beat, ReplayState, RoundStory, Step, is_greedy
from app.theme import STATE_SOLID
from app.trace import MAPPED_MARK, STRING_MATCH, ReplyTrace
from specdec_core.events import TokenState

BEAT_MS = {Beat.DRAFT: 650, Beat.VERIFY: 1200, Beat.RESOLVE: 2000}  # at speed 1×
SPEEDS = (0.25, 0.5, 1.0, 1.5, 2.0, 4.0)
TOKEN_COLUMN = 1  # the numbers' "token": what their columns leave over goes to it
REPLY_SHARE = 0.3  # the least of the numbers' row the reply so far keeps, however wide the numbers want to be


class NumbersTable(QTableWidget):
    """The numbers of the round on screen, filled in beat by beat."""

    COLUMNS = ("#", "token", "draft q", "verifier p", "min(1, p/q)", "verdict")
    TIPS = ("the draft's position in the round", "the drafted token", "the draft's probability of the token",
            "the verifier's probability of the token", "acceptance probability: min(1, verifier p / draft q)",
            "what the rule decided")
    # The widest figures and words the cells hold (a token: a common one's width, no bound), with the headers what
    # the columns must fit (`least_width`).
    WIDEST = ("+", "␣return", STRING_MATCH, "not checked", "1.000", "verifier alone")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(self.COLUMNS), parent)
        self.setHorizontalHeaderLabels(self.COLUMNS)
        for c, tip in enumerate(self.TIPS):  # a header cut on a narrow screen still says what it is
            self.horizontalHeaderItem(c).setToolTip(f"{self.COLUMNS[c]}: {tip}")
        self.verticalHeader().setVisible(False)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Fixed)  # fit_columns sizes them
        ts.set_big(self, 0.95)
        ts.set_big(self.horizontalHeader(), 0.8, bold=True)

    def column_needs(self) -> list[int]:
        """Each column's width with its header and its widest figure or word in full."""
        header, fm = self.horizontalHeader(), self.fontMetrics()
        cell_margin = 2 * self.style().pixelMetric(self.style().PixelMetric.PM_FocusFrameHMargin, None, self) + 8
        return [max(header.sectionSizeHint(c), fm.horizontalAdvance(self.WIDEST[c]) + cell_margin)
                for c in range(self.columnCount())]

    def least_width(self) -> int:
        """The table's width with every column's need met (and room for a scroll bar)."""
        return sum(self.column_needs()) + 2 * self.frameWidth() + self.verticalScrollBar().sizeHint().width()

    def fit_columns(self) -> None:
        """Each column its need, and the width left over to the tokens' (whose text no sample bounds); a table
        narrower than the needs shrinks them alike (a cut header's tooltip names it). Equal stretched columns cut
        "min(1, p/q)" at 1024 px while "token" had room to spare."""
        needs = self.column_needs()
        room = self.viewport().width()
        shrink = min(1.0, room / max(1, sum(needs)))
        header = self.horizontalHeader()
        for c, need in enumerate(needs):
            header.resizeSection(c, int(need * shrink) + (max(0, room - sum(needs)) if c == TOKEN_COLUMN else 0))

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self.fit_columns()

    def show_beat(self, story: RoundStory | None, step: Step | None, greedy: bool) -> None:
        self.setRowCount(0)
        if story is None or step is None:
            return
        beat = step.beat
        shown_n = step.i + 1 if beat is Beat.DRAFT else len(story.drafted)
        if story.tree_nodes and beat is Beat.DRAFT:
            shown_n = 0  # a tree's main line is known once the verifier has judged it
        rows = []
        for i, t in enumerate(story.drafted[:shown_n]):
            judged = beat is not Beat.DRAFT
            # After the first rejection the rule checks nothing more: no p, no min(1, p/q), as in the tree view.
            checked = story.first_rejected is None or i <= story.first_rejected
            verdict = ""
            if beat is Beat.RESOLVE:
                verdict = "accepted" if t.state == TokenState.ACCEPTED.value else (
                    "rejected" if i == story.first_rejected else "discarded")
            p, rule = (ts.fmt_p(t.target_prob), ts.fmt_p(t.accept_prob)) if checked else ("not checked", "–")
            rows.append((str(i + 1), chip_label(t), draft_q(t), p if judged else "?", rule if judged else "?",
                         verdict, t.state if beat is Beat.RESOLVE else None))
        em = story.emitted
        if beat is Beat.RESOLVE and em is not None:
            what = {TokenState.CORRECTED.value: "correction", TokenState.BONUS.value: "bonus"}.get(
                em.state, "verifier alone")
            rows.append(("+", ts.shown(em.text), "–", ts.fmt_p(em.target_prob), "–", what, em.state))
        sources = [t.draft_source for t in story.drafted[:shown_n]] + [None]  # the verifier's token: its own
        self.setRowCount(len(rows))
        for r, row in enumerate(rows):
            state = row[-1]
            for c, value in enumerate(row[:-1]):
                item = QTableWidgetItem(value)
                item.setTextAlignment(Qt.AlignmentFlag.AlignCenter)
                if c == 1 and sources[r]:
                    item.setToolTip(f"{MAPPED_MARK} the draft's own token(s): {sources[r]}")
                if state is not None and c in (1, 5):
                    if state == TokenState.REJECTED.value:
                        item.setForeground(ts.REJECTED)
                        f = item.font()
                        f.setStrikeOut(c == 1)
                        item.setFont(f)
                    elif state in STATE_SOLID and state != TokenState.PLAIN.value:
                        bg = QColor(STATE_SOLID[state])
                        bg.setAlpha(110)
                        item.setBackground(bg)
                self.setItem(r, c, item)
        note = ("greedy: a draft is accepted exactly when it is the verifier's top token (accept = 1 or 0)"
                if greedy else "sampling: accept with probability min(1, p/q); a rejection samples max(0, p − q)")
        self.setToolTip(note)


class ReplayWidget(QWidget):
    """Stage, caption, numbers and the reply so far, with transport controls and a speed choice."""

    beat_changed = Signal(int)  # the state's index after every change
    playing_changed = Signal(bool)

    def __init__(self, trace: ReplyTrace | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.state = ReplayState(trace or ReplyTrace())
        self.speed = 1.0
        self.greedy = True
        self.timer = QTimer(self)  # the only clock: advances one beat per timeout while playing
        self.timer.setSingleShot(True)
        self.timer.timeout.connect(self._tick)

        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 10, 10, 10)
        lay.setSpacing(8)
        self.legend = QLabel(ts.legend_html())
        self.legend.setTextFormat(Qt.TextFormat.RichText)
        ts.set_big(self.legend, 0.9)
        lay.addWidget(self.legend)
        lay.addWidget(self._build_views(), 1)
        # The transport controls: a widget of their own, so a dialog can keep them in view below a scrolled
        # replay (ReplayDialog), in two short rows that fit 1024×700 and scale 2.
        self.controls = QWidget()
        rows = QVBoxLayout(self.controls)
        rows.setContentsMargins(0, 0, 0, 0)
        rows.setSpacing(4)
        rows.addLayout(self._build_buttons())
        rows.addLayout(self._build_seek_row())
        lay.addWidget(self.controls)
        self._add_shortcuts()
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.set_trace(trace or ReplyTrace())

    def _build_views(self) -> QSplitter:
        """The stage and its caption above; the numbers and the reply so far side by side below."""
        self.stage = RoundStage()
        self.caption = QLabel("")
        self.caption.setWordWrap(True)
        ts.set_big(self.caption, 1.15, bold=True)
        self.caption.setMinimumHeight(int(self.caption.fontMetrics().lineSpacing() * 2.2))  # no jumps
        self.caption.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        self.numbers = NumbersTable()
        self.reply = QTextBrowser()
        self.reply.setOpenLinks(False)
        ts.set_big(self.reply, 1.0)
        split = QSplitter(Qt.Orientation.Vertical)
        top = QWidget()
        tl = QVBoxLayout(top)
        tl.setContentsMargins(0, 0, 0, 0)
        tl.addWidget(self.stage, 1)
        tl.addWidget(self.caption)
        split.addWidget(top)
        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.addWidget(self.numbers)
        bottom.addWidget(self.reply)
        bottom.setSizes([560, 520])
        bottom.setStretchFactor(0, 0)  # a wider window widens the reply: the numbers have theirs (_give_columns)
        bottom.setStretchFactor(1, 1)
        self.bottom = bottom
        bottom.installEventFilter(self)  # its own resizes: it takes its width after the replay's resize, at times
        split.addWidget(bottom)
        split.setSizes([520, 260])
        self.split = split
        return split

    def _build_buttons(self) -> QHBoxLayout:
        bar = QHBoxLayout()
        self.buttons: dict[str, QPushButton] = {}
        for name, text, tip, slot in (
            ("start", "|◀", "Back to the start (Home)", self.to_start),
            ("prev_round", "◀◀", "Previous round (Shift+←)", self.prev_round),
            ("back", "◀", "One beat back (← or Page Up)", self.step_back),
            ("play", "▶ Play", "Play / pause (Space)", self.toggle_play),
            ("forward", "▶", "One beat on (→ or Page Down)", self.step_forward),
            ("next_round", "▶▶", "Next round (Shift+→)", self.next_round),
            ("end", "▶|", "To the end (End)", self.to_end),
        ):
            b = QPushButton(text)
            b.setToolTip(tip)
            b.setFocusPolicy(Qt.FocusPolicy.NoFocus)
            ts.set_big(b, 1.0, bold=True)
            b.clicked.connect(slot)
            # No style minimum (about 80 px): seven buttons must fit a 512-pixel-wide screen (1024 at scale 2).
            b.setMinimumWidth(b.fontMetrics().horizontalAdvance(text) + 20)
            bar.addWidget(b)
            self.buttons[name] = b
        return bar

    def _build_seek_row(self) -> QHBoxLayout:
        """The slider over the beats, where it stands, and the speed."""
        seek = QHBoxLayout()
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.slider.valueChanged.connect(self._seek_from_slider)
        seek.addWidget(self.slider, 1)
        self.position = QLabel("")
        self.position.setProperty(ONE_LINE, True)  # "round 12/40 · beat 30/97" beside the slider, never in two
        ts.set_big(self.position, 0.9)
        seek.addWidget(self.position)
        speed_label = QLabel("speed")
        ts.set_big(speed_label, 0.9)
        seek.addWidget(speed_label)
        self.speed_box = QComboBox()
        self.speed_box.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        for s in SPEEDS:
            self.speed_box.addItem(f"{s:g}×", s)
        self.speed_box.setCurrentIndex(SPEEDS.index(1.0))
        self.speed_box.currentIndexChanged.connect(lambda i: self.set_speed(SPEEDS[i]))
        ts.set_big(self.speed_box, 0.9)
        seek.addWidget(self.speed_box)
        return seek

    def _add_shortcuts(self) -> None:
        ctx = Qt.ShortcutContext.WidgetWithChildrenShortcut
        for keys, slot in ((("Space",), self.toggle_play), (("Right", "PgDown"), self.step_forward),
                           (("Left", "PgUp"), self.step_back), (("Shift+Right",), self.next_round),
                           (("Shift+Left",), self.prev_round), (("Home",), self.to_start),
                           (("End",), self.to_end)):
            for key in keys:
                sc = QShortcut(QKeySequence(key), self)
                sc.setContext(ctx)
                sc.activated.connect(slot)

    # -- the trace -------------------------------------------------------------------------------------
    def set_trace(self, trace: ReplyTrace) -> None:
        self.pause()
        self.state = ReplayState(trace)
        self.greedy = is_greedy(trace)
        self.slider.blockSignals(True)
        self.slider.setRange(-1, max(-1, len(self.state) - 1))
        self.slider.blockSignals(False)
        self.render()

    @property
    def trace(self) -> ReplyTrace:
        return self.state.trace

    # -- transport --------------------------------------------------------------------------------------
    def step_forward(self) -> bool:
        moved = self.state.step_forward()
        self.render()
        return moved

    def step_back(self) -> bool:
        moved = self.state.step_back()
        self.render()
        return moved

    def next_round(self) -> None:
        self.state.next_round()
        self.render()

    def prev_round(self) -> None:
        self.state.prev_round()
        self.render()

    def to_start(self) -> None:
        self.state.seek(-1)
        self.render()

    def to_end(self) -> None:
        self.pause()
        self.state.seek(len(self.state) - 1)
        self.render()

    def seek(self, index: int) -> None:
        self.state.seek(index)
        self.render()

    def set_speed(self, speed: float) -> None:
        self.speed = max(0.05, float(speed))
        if speed in SPEEDS and self.speed_box.currentIndex() != SPEEDS.index(speed):
            self.speed_box.setCurrentIndex(SPEEDS.index(speed))

    @property
    def playing(self) -> bool:
        return self.timer.isActive()

    def play(self) -> None:
        if not len(self.state):
            return
        if self.state.at_end:
            self.state.seek(-1)
            self.render()
        self.buttons["play"].setText("❚❚ Pause")
        self._schedule()
        self.playing_changed.emit(True)

    def pause(self) -> None:
        was = self.timer.isActive()
        self.timer.stop()
        if hasattr(self, "buttons"):
            self.buttons["play"].setText("▶ Play")
        if was:
            self.playing_changed.emit(False)

    def toggle_play(self) -> None:
        self.pause() if self.playing else self.play()

    def beat_ms(self, step: Step | None) -> int:
        """How long the beat on screen stays before the next one, at the current speed."""
        base = BEAT_MS[step.beat] if step is not None else 400
        return max(20, int(base / self.speed))

    def _schedule(self) -> None:
        self.timer.start(self.beat_ms(self.state.step))

    def _tick(self) -> None:
        if self.state.step_forward():
            self.render()
        if self.state.at_end:
            self.pause()
        else:
            self._schedule()

    def _seek_from_slider(self, value: int) -> None:
        if value != self.state.index:
            self.state.seek(value)
            self.render()

    # -- drawing -----------------------------------------------------------------------------------------
    def heightForWidth(self, width: int) -> int:  # noqa: N802 - Qt override
        """The height a scroll area (ReplayDialog's) gives the replay: its wrapped labels' heights at `width`, with
        the stage and the numbers at their minimum. The splitter shares out whatever the window has beyond that
        (give_rows), and only a window under it scrolls. At the splitter's preferred height the area held the
        replay taller than a 1280×800 screen, so the numbers' last rows lay under the controls. The caption, in the
        splitter, counts at its height for `width` (a splitter asks no height for width): counted at its minimum
        of two lines, a three-line caption at 1024 px took its third line from the stage, whose tree shrank."""
        slack = self.split.sizeHint().height() - self.split.minimumSizeHint().height()
        least = max(self.minimumSizeHint().height(), super().heightForWidth(width) - max(0, slack))
        return least + self._wrapped(width)

    def _wrapped(self, width: int) -> int:
        """How much taller than its minimum the caption is at the replay's `width`."""
        margins = self.layout().contentsMargins()
        caption = self.caption.heightForWidth(width - margins.left() - margins.right())
        return max(0, caption - self.caption.minimumSizeHint().expandedTo(self.caption.minimumSize()).height())

    def _give_rows(self) -> None:
        """The numbers' rows in view, where the stage at its minimum and the caption at its width leave room."""
        top = self.split.widget(0)
        give_rows(self.split, self.numbers, top.minimumSizeHint().height() + self._wrapped(self.width()))

    def _give_columns(self) -> None:
        """The numbers as wide as their headers and figures need, taken from the reply beside them down to
        REPLY_SHARE of the row: at 1024 px an even split cut "verifier p" and "min(1, p/q)". A part dragged wider
        stays so."""
        sizes = self.bottom.sizes()
        total = sum(sizes)
        if len(sizes) != 2 or total <= 0:
            return
        want = min(self.numbers.least_width(), int(total * (1 - REPLY_SHARE)))
        if sizes[0] < want:
            self.bottom.setSizes([want, total - want])

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._give_rows()  # a larger window: room for more of the round's rows

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        # After the numbers' splitter has shared out its new width (the filter runs before it does): the widths
        # given as the replay was resized were undone when the splitter was laid out later, wider, at scale 2.
        if watched is self.bottom and event.type() == QEvent.Type.Resize:
            QTimer.singleShot(0, self, self._give_columns)
        return super().eventFilter(watched, event)

    def render(self) -> None:
        st = self.state
        self.stage.show_beat(st.story, st.step, len(st.rounds), self.greedy)
        self.numbers.show_beat(st.story, st.step, self.greedy)
        self.caption.setText(st.caption())  # first: the rows given below leave the stage room for its lines
        self._give_rows()  # every row of the round in view, where the stage can spare the room
        tokens = st.committed_tokens()
        self.reply.setHtml(f"<div>{ts.tokens_html(tokens)}</div>" if tokens else
                           "<span style='color:gray'>The reply appears here as rounds resolve.</span>")
        sb = self.reply.verticalScrollBar()
        sb.setValue(sb.maximum())
        self.slider.blockSignals(True)
        self.slider.setValue(st.index)
        self.slider.blockSignals(False)
        k = st.step.round + 1 if st.step else 0
        self.position.setText(f"round {k}/{len(st.rounds)} · beat {st.index + 1}/{len(st)}")
        self.buttons["back"].setEnabled(not st.at_start)
        self.buttons["forward"].setEnabled(not st.at_end)
        self.beat_changed.emit(st.index)


class ReplayDialog(QDialog):
    """A window around the replay widget, with GIF/MP4 export."""

    def __init__(self, trace: ReplyTrace, parent: QWidget | None = None, title: str = "") -> None:
        super().__init__(parent)
        self.setWindowTitle(title or "Replay: round by round")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.replay = ReplayWidget(trace)
        lay.addWidget(scrolling(self.replay), 1)  # fits small screens: the replay scrolls, not the dialog ...
        controls = QVBoxLayout()
        controls.setContentsMargins(10, 4, 10, 0)
        controls.addWidget(self.replay.controls)  # ... and its controls stay in view below it
        lay.addLayout(controls)
        row = QHBoxLayout()
        row.setContentsMargins(10, 0, 10, 10)
        self.info = QLabel(_trace_line(trace))
        self.info.setObjectName("muted")
        self.info.setWordWrap(True)  # a long pair name must not widen the dialog past the screen
        ts.set_big(self.info, 0.8)
        row.addWidget(self.info, 1)
        self.gif_button = QPushButton("Save as GIF…")
        self.gif_button.clicked.connect(lambda: self._export("gif"))
        self.mp4_button = QPushButton("Save as MP4…")
        self.mp4_button.clicked.connect(lambda: self._export("mp4"))
        from app.talk.export import mp4_available

        self.mp4_button.setEnabled(mp4_available())
        if not mp4_available():
            self.mp4_button.setToolTip("MP4 needs ffmpeg (on PATH, or pip install imageio-ffmpeg)")
        self.tree_button = QPushButton("Draft tree…")
        self.tree_button.setToolTip("This round's draft tree: every candidate the verifier checked in its one pass")
        self.tree_button.clicked.connect(self.open_tree)
        self.tree_button.setEnabled(any(r.tree for r in trace.rounds))
        for b in (self.tree_button, self.gif_button, self.mp4_button):
            row.addWidget(b)
        lay.addLayout(row)
        wrap_labels(self)
        fit_to_screen(self, QSize(1280, 800), available(parent) if parent is not None else None)
        self.replay.setFocus()

    def current_round_index(self) -> int | None:
        """The trace's index of the round on screen (the first round before the first beat)."""
        state = self.replay.state
        if not state.rounds:
            return None
        story = state.rounds[state.steps[state.index].round if state.index >= 0 else 0]
        return next((i for i, r in enumerate(state.trace.rounds) if r.index == story.index), None)

    def open_tree(self) -> QDialog:
        from app.tree_view import TreeDialog

        trace = self.replay.state.trace
        index = self.current_round_index()
        if index is not None and not trace.rounds[index].tree:  # a chain round: the nearest tree round after it
            index = next((i for i in range(index, len(trace.rounds)) if trace.rounds[i].tree), None)
        dlg = TreeDialog(trace, self, scale=1.4, round_index=index)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.show()
        return dlg

    def _export(self, kind: str) -> None:
        from PySide6.QtWidgets import QFileDialog, QMessageBox

        from app.talk.export import export_replay

        filt = "GIF animation (*.gif)" if kind == "gif" else "MP4 video (*.mp4)"
        path, _ = QFileDialog.getSaveFileName(self, "Save the replay", f"specdec-replay.{kind}", filt)
        if not path:
            return
        try:
            n = export_replay(self.replay, path)
        except (OSError, RuntimeError) as exc:
            QMessageBox.warning(self, "Export failed", str(exc))
            return
        self.info.setText(f"Saved {n} frames to {path}")


def _trace_line(trace: ReplyTrace) -> str:
    who = f"{trace.verifier} ← {trace.drafter}" if trace.drafter else trace.verifier
    summary = trace.summary() if trace.rounds else ""
    return " · ".join(x for x in (who, summary) if x)

"""`LiveGraphs`: the seven panels of one reply, in a grid of two columns (one when narrow), under the header's
figures and over the theory panel's words, and the open chat's `ChatAcceptance` after them.

Cost: the window's timer calls `flush()`; new rounds go into the figures' buffers (cheap), then while a reply
streams only the next panel with new data is redrawn (one per tick, so each panel repaints a few times a
second), axis ranges grow in steps so axes are re-laid out rarely, and nothing is drawn while the panel is
hidden. The header is a plain label (a plot title re-lays out its plot). A reply that has just started (no round
yet) redraws every panel at the next tick that draws panels and figures, not at once, and so does its baseline
given then: a reply starts in the event-loop turn that builds its bubbles (and learns its baseline as its prompt
is built), and drawing seven plots there too froze the window for that whole turn.
"""

from __future__ import annotations

import html
import time

import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QGridLayout, QLabel, QVBoxLayout, QWidget

from app.graphs import plots
from app.graphs.accepted import AcceptedPanel
from app.graphs.accepted_lengths import AcceptedLengthsPanel
from app.graphs.chat_acceptance import ChatAcceptance
from app.graphs.figures import ReplyFigures
from app.graphs.header import header_text, header_tooltip
from app.graphs.headline import Headline, headline_of
from app.graphs.panel import Panel
from app.graphs.plots import ONE_COLUMN_HEIGHT, PLOT_MIN_WIDTH, QWIDGETSIZE_MAX, LabelBox
from app.graphs.positions import PositionsPanel
from app.graphs.round_time import RoundTimePanel
from app.graphs.switch_marks import SwitchMarks
from app.graphs.theory import TheoryPanel
from app.graphs.throughput import ThroughputPanel
from app.graphs.verify_cost import VerifyCostPanel
from app.theme import is_dark
from app.trace import ReplyTrace

HEADER_LINES = 3  # a streaming reply's header: its figures (wrapped once in a narrow dock) and the baseline's line


def _label(name: str) -> QLabel:
    label = QLabel("")
    label.setObjectName(name)
    label.setWordWrap(True)
    label.setTextFormat(Qt.TextFormat.RichText)
    return label


class LiveGraphs(QWidget):
    """Seven panels bound to one reply trace at a time (and under them the open chat's `ChatAcceptance`)."""

    PANELS = ("tps", "acc", "time", "hist", "pos", "theory", "cost")
    headline_changed = Signal(object)  # the header's Headline (its two big figures), drawn with the header

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.trace: ReplyTrace | None = None
        self.figures = ReplyFigures()
        self.baseline_how = ""
        self.baseline_like = False  # a like-for-like baseline (speedup.Baseline.like_for_like): the ratio in colour
        self._drew_final = False
        self.updates = 0  # how many panel redraws happened (tests read this)
        self.speedup_label = ""
        self.headline = Headline()  # the header's figures for a room (presenter mode sets them large)
        self._dirty: list[str] = []
        self._ranges: dict[str, tuple] = {}
        self._columns = 0
        self._panel_at = 0.0  # perf_counter of the last panel redrawn while a reply streamed
        self._header_stale = False  # rounds arrived that the header does not show yet
        self._redraw_due = False  # every panel is redrawn at the next flush that draws panels and figures
        fg = QColor(220, 220, 220) if is_dark() else QColor(40, 40, 40)
        pg.setConfigOptions(antialias=False, foreground=fg, background=None)
        self._build_layout()
        self.theory = TheoryPanel()  # its words go under the plots
        panels: list[Panel] = [ThroughputPanel(fg), AcceptedPanel(), AcceptedLengthsPanel(), PositionsPanel(),
                               RoundTimePanel(), self.theory, VerifyCostPanel()]
        self.panels: dict[str, Panel] = {p.name: p for p in panels}
        self.plots = {name: panel.plot for name, panel in self.panels.items()}
        # the open chat's replies, one point each (not a panel of the reply: fed by `ChatAcceptance.show`)
        self.history = ChatAcceptance()
        self.switch_marks = SwitchMarks(self.plots)  # where speculation was switched mid-reply (Ctrl+D)
        self._set_ranges(force=True)
        self.set_columns(2)

    def _build_layout(self) -> None:
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(4)
        self.header = _label("graphs_header")
        self.header_box = LabelBox(self.header, lines=HEADER_LINES)
        outer.addWidget(self.header_box)
        self.grid = QGridLayout()
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setSpacing(4)
        outer.addLayout(self.grid, 1)
        self.words = _label("muted")
        self.words_box = LabelBox(self.words)  # rewritten with each theory redraw: kept out of the layout too
        outer.addWidget(self.words_box)

    # -- layout -------------------------------------------------------------------------------------
    def set_columns(self, columns: int) -> None:
        """Two columns of plots, or one when the panel is narrow (its scroll area then scrolls)."""
        if columns == self._columns:
            return
        self._columns = columns
        cells = [self.plots[name] for name in self.PANELS] + [self.history.plot]
        for plot in cells:
            self.grid.removeWidget(plot)
        for i, plot in enumerate(cells):
            self.grid.addWidget(plot, i // columns, i % columns)
            # One column scrolls: each plot a readable fixed height instead of stretching to fill.
            plot.setMaximumHeight(ONE_COLUMN_HEIGHT if columns == 1 else QWIDGETSIZE_MAX)
        panels = len(cells)
        for r in range(panels):
            self.grid.setRowStretch(r, 1 if r < -(-panels // columns) else 0)

    @staticmethod
    def columns_for(width: int) -> int:
        return 2 if width >= 2 * PLOT_MIN_WIDTH + 12 else 1

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        self.set_columns(self.columns_for(event.size().width()))
        super().resizeEvent(event)

    def showEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().showEvent(event)
        self._draw()  # nothing was drawn while hidden

    # -- the reply ----------------------------------------------------------------------------------
    def set_trace(self, trace: ReplyTrace | None, baseline_tps: float | None = None) -> None:
        """Show another reply (the streaming one, one picked from the history, or none)."""
        self.trace = trace
        baseline = baseline_tps if baseline_tps else (trace.baseline_tps if trace else None)
        self.figures = ReplyFigures(trace, baseline, self.figures.verify_s_per_token)
        self.baseline_how = trace.baseline_source if trace is not None else ""
        self.baseline_like = False  # until set_baseline says the baseline is like for like
        self._drew_final = False
        self.switch_marks.clear()
        self._ranges = {}
        self._copy_rounds()
        self._draw_at_tick()

    def set_baseline(self, tps: float | None, how: str = "", verify_s_per_token: float | None = None,
                     like_for_like: bool = False) -> None:
        self.figures.baseline_tps = tps
        self.baseline_like = like_for_like
        if how:
            self.baseline_how = how
        if verify_s_per_token:
            self.figures.verify_s_per_token = verify_s_per_token
        self._draw_at_tick()

    def _draw_at_tick(self) -> None:
        """Every panel: now, unless these shown graphs follow a reply that has just started (no round yet); then at
        the next flush that draws panels and figures (the window's tick), once however many changes came before it."""
        trace = self.trace
        if trace is not None and not trace.finished and not trace.rounds and self.isVisible():
            self._redraw_due = True
            self._header_stale = True
        else:
            self._draw()

    def _copy_rounds(self) -> bool:
        new = self.figures.copy_rounds()
        for r in new:
            self.switch_marks.observe(r)
        return bool(new)

    def flush(self, panels: bool = True, figures: bool = True) -> bool:
        """Copy new rounds into the buffers; with `figures`, show them in the header (only if rounds arrived);
        with `panels`, also redraw the next panel that has new data (all of them once the reply has finished).
        True if anything was drawn."""
        trace = self.trace
        if trace is None:
            return False
        new = self._copy_rounds()
        # The deferred redraw draws the header too: only on a tick that shows figures, as the chat's footer does.
        if (trace.finished and not self._drew_final) or (self._redraw_due and panels and figures and self.isVisible()):
            self._drew_final = trace.finished
            self._draw()
            return True
        if new:  # every panel is due again, in turn: the one redrawn last goes to the back of the queue
            self._dirty += [name for name in self.PANELS if name not in self._dirty]
            self._header_stale = True
        if not self.isVisible():
            if new and figures:
                self._show_headline()  # shown outside these graphs too (presenter mode), so kept up while hidden
            return False
        if self._header_stale and figures:
            self._draw_header()
        if self._dirty and panels and time.perf_counter() - self._panel_at >= plots.PANEL_EVERY_S:
            self._panel_at = time.perf_counter()
            self._draw_panel(self._dirty.pop(0))
            return True
        return False

    # -- drawing ------------------------------------------------------------------------------------
    def _draw(self) -> None:
        """Every panel at once (a new trace or baseline, the final figures, the panel shown again)."""
        self._dirty, self._redraw_due = [], False
        if not self.isVisible() and self.trace is not None and not self.trace.finished:
            self._dirty = list(self.PANELS)  # drawn when shown
            self._show_headline()
            return
        self._draw_header()
        for name in self.PANELS:
            self._draw_panel(name)

    def _draw_panel(self, name: str) -> None:
        self.updates += 1
        self.switch_marks.draw(name)
        self.panels[name].draw(self.figures)
        if name == "theory":
            self._show_theory_words()
        self._set_ranges(name)

    def _show_theory_words(self) -> None:
        caption, words = self.theory.caption, self.theory.words
        text = f"<b>Theory vs practice</b> ({caption}): {html.escape(words)}" if caption and words else ""
        if text != self.words.text():
            self.words.setText(text)
            self.words_box.fit()

    def _set_ranges(self, only: str | None = None, force: bool = False) -> None:
        """Axis ranges from the data, never below zero, growing in steps (app.speedup.nice_ceiling): an axis
        whose range did not change is not re-laid out."""
        for name, panel in self.panels.items():
            if only is not None and name != only:
                continue
            xr, yr = panel.ranges(self.figures)
            if force or self._ranges.get(name) != (xr, yr):
                self._ranges[name] = (xr, yr)
                panel.plot.getPlotItem().setRange(xRange=xr, yRange=yr, padding=0)

    def _draw_header(self) -> None:
        self._header_stale = False
        self._show_headline()
        text = header_text(self.figures, bool(self.switch_marks.switches), self.baseline_like, self.baseline_how)
        if text != self.speedup_label:
            self.speedup_label = text
            self.header.setText(text)
            self.header_box.fit()
            self.header.setToolTip(header_tooltip(self.figures, self.baseline_how))

    def _show_headline(self) -> None:
        headline = headline_of(self.figures, bool(self.switch_marks.switches), self.baseline_like)
        if headline != self.headline:
            self.headline = headline
            self.headline_changed.emit(headline)

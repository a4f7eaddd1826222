"""Live graphs of a reply's speculation, drawn with pyqtgraph.

Fed the way pyqtgraph's scrolling-plot examples are: the window's one timer calls `flush()`, which
copies the rounds that arrived since the last call from the reply's trace into growing numpy buffers
and calls `setData` on persistent curve items. Nothing here is redrawn per token.

Panels
- Throughput: tokens/s over engine time (running mean, and per round), the verifier-alone baseline
  measured on this machine as a dashed line, and the measured speedup.
- Accepted per round against the draft tokens checked (a tree round: all its candidates), with the running
  acceptance rate (accepted / checked) on the right axis.
- Accepted-length histogram: rounds that accepted 0, 1, ... γ draft tokens.
- Acceptance by position in the round.
- Time per round, stacked: draft, verify, overhead.
- Theory against practice: predicted speedup over γ for the measured α and c (Leviathan et al.),
  the measured point, and the break-even line (speedup = 1) under which speculation loses.
- The cost of checking k tokens on this machine: each verifier pass's time by the positions it fed, the
  curve the cost model reads from them (cost.VerifyCost: recent medians, never falling as k grows), and
  the verifier-alone step that the textbook formula assumes every check costs.
- Acceptance over the open chat (`ChatAcceptance`): each finished reply's acceptance rate and tokens per
  verifier call, marked where an adapted draft head drafted it; redrawn once per finished reply, not per round.
And the race: tokens over time for the same prompt with speculation off and on.
"""

from __future__ import annotations

import csv
import html
import io
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.speedup import (
    measured_costs,
    nice_ceiling,
    practical_speedup,
    tree_prediction,
    why_they_differ,
)
from app.theme import ACCENT, DRAFT_COLOR, OVERHEAD_COLOR, STATE_SOLID, VERIFY_COLOR, is_dark
from app.toggle_marks import SwitchMarks
from app.trace import MIN_SPEEDUP_TOKENS, ReplyTrace
from specdec_core.stats import StatsAccumulator, predicted_speedup
from specdec_core.verification.cost import VerifyCost

GAMMA_AXIS = np.arange(1, 17, dtype=float)
# While a reply streams, at most one panel is redrawn per this many seconds (and the race's curves once): a
# plot costs 10-30 ms to paint on a 2-core CPU, on the GUI thread, holding the GIL the decoding thread needs.
# Measured with bench/ui_latency.py --cli-ab: redrawing one panel every other 40 ms tick cost a tiny model's
# replies about a third of their tokens/s. Every panel is drawn once the reply has finished.
PANEL_EVERY_S = 0.5
HEADER_LINES = 3  # a streaming reply's header: its figures (wrapped once in a narrow dock) and the baseline's line
_MIN_RATE_S = 0.02  # engine seconds before a running tokens/s is drawn
PAUSED_ROUNDS = 8  # rounds in a row without a draft (the cost model's call) before the header says so


def _with_alpha(c: QColor, a: int) -> QColor:
    c = QColor(c)
    c.setAlpha(a)
    return c


class Buffer:
    """A growing float array: amortised O(1) append, a view of the filled part for setData."""

    def __init__(self, capacity: int = 256) -> None:
        self._a = np.zeros(capacity)
        self.n = 0

    def append(self, x: float) -> None:
        if self.n == len(self._a):
            self._a = np.concatenate([self._a, np.zeros(len(self._a))])
        self._a[self.n] = x
        self.n += 1

    def clear(self) -> None:
        self.n = 0

    @property
    def data(self) -> np.ndarray:
        return self._a[: self.n]


PLOT_MIN_WIDTH = 250  # fits the axes, their labels and the short titles
PLOT_MIN_HEIGHT = 150
ONE_COLUMN_HEIGHT = 220
QWIDGETSIZE_MAX = (1 << 24) - 1


class CountAxis(pg.AxisItem):
    """An axis of counts (tokens, rounds, positions): whole-number ticks only, never 0.5 of a round."""

    def tickSpacing(self, minVal, maxVal, size):  # noqa: N802, N803 - pyqtgraph override
        levels = super().tickSpacing(minVal, maxVal, size)
        out = [(max(1.0, round(spacing)), offset) for spacing, offset in levels]
        return out[:1] if out else [(1.0, 0.0)]


class _PlotWidget(pg.PlotWidget):
    """A plot whose preferred size is modest: a scroll area sizes its content by preferred heights, and
    the default (a 640×480 view) made the two-column panel three plots of ~500 px tall."""

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(PLOT_MIN_WIDTH + 40, ONE_COLUMN_HEIGHT)


def _plot(title: str, left: str, bottom: str, *, count_left: bool = False, count_bottom: bool = False
          ) -> pg.PlotWidget:
    axes = {}
    if count_left:
        axes["left"] = CountAxis("left")
    if count_bottom:
        axes["bottom"] = CountAxis("bottom")
    w = _PlotWidget(axisItems=axes)
    w.setMinimumSize(PLOT_MIN_WIDTH, PLOT_MIN_HEIGHT)
    pi = w.getPlotItem()
    pi.setTitle(f"<span style='font-size:10pt'>{title}</span>")
    pi.setLabel("left", left)
    pi.setLabel("bottom", bottom)
    pi.showGrid(x=False, y=True, alpha=0.12)
    pi.setMenuEnabled(False)
    pi.setMouseEnabled(x=False, y=False)  # ranges are set from the data (see LiveGraphs._ranges)
    pi.hideButtons()
    pi.disableAutoRange()
    font = QFont()
    font.setPointSize(8)
    for ax in ("left", "bottom"):
        pi.getAxis(ax).enableAutoSIPrefix(False)  # "seconds (x0.001)" reads worse than 0.2, 0.4, ...
        pi.getAxis(ax).setTickFont(font)
        pi.getAxis(ax).label.setFont(font)
    return w


class _LabelBox(QWidget):
    """Holds a label whose text changes on every tick, outside any layout.

    A label in a layout makes its parent's layout recompute on every setText: here the scrolled grid of seven
    plots, which cost a tiny model's replies about a quarter of their tokens/s (bench/ui_latency.py --cli-ab,
    graphs shown against hidden). In this box, with no layout of its own, the label's text changes touch nothing
    else; the box changes height (one re-layout) only when the text's line count does."""

    def __init__(self, label: QLabel, parent: QWidget | None = None, lines: int = 0) -> None:
        super().__init__(parent)
        self.label = label
        self.lines = lines  # with text, at least this many lines tall
        label.setParent(self)
        self.setFixedHeight(0)

    def fit(self, shrink: bool = False) -> None:
        """Tall enough for the text. It grows, but shrinks only when its width changes (`shrink`): a reply's
        header goes from empty to four lines and back to one, and each change of height re-lays out (and
        repaints) every plot under it. With text it is at least `lines` lines tall from the start, so that a
        streaming reply's header, which gains a line or two as its figures arrive, does not re-lay out (and
        repaint) the seven plots each time (in a tiny model's reply those repaints cost the decoding
        thread more than all the rest of the window)."""
        text = self.label.text()
        height = max(0, self.label.heightForWidth(self.width())) if text else 0
        if text and self.lines:
            height = max(height, self.lines * self.label.fontMetrics().lineSpacing()
                         + self.label.contentsMargins().top() + self.label.contentsMargins().bottom())
        if height > self.height() or (shrink and height != self.height()):
            self.setFixedHeight(height)
        self.label.setGeometry(0, 0, self.width(), max(height, self.height()))

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self.fit(shrink=event.size().width() != event.oldSize().width())


def live_tps(trace: ReplyTrace | None) -> float:
    """The one tokens/s figure of a reply, shown alike in the graphs' header and the bubble's footer:
    the engine's final figure once finished, else reply tokens per engine second so far."""
    if trace is None:
        return 0.0
    if trace.stats and trace.finished:
        return float(trace.stats.get("tokens_per_s") or 0.0)
    return trace.running_tps()


@dataclass(frozen=True)
class ReplyPoint:
    """One finished reply of the open chat, as its acceptance plot shows it: the figures of the bubble's footer
    (Stats.acceptance_rate and Stats.mean_accepted_length, specdec_core/stats.py); None where the reply drafted
    nothing (speculation off, no drafter, no trace), which the plot leaves as a gap, not a zero."""

    acceptance: float | None
    tokens_per_call: float | None
    adapted_tokens: int  # ReplyTrace.adapted_tokens: the draft head had learnt from this many (0: as loaded)
    drafter: str

    @property
    def words(self) -> str:
        if self.acceptance is None or self.tokens_per_call is None:
            return "nothing drafted (speculation off or no draft)"
        head = f"draft adapted on {self.adapted_tokens:,} tokens" if self.adapted_tokens else "draft as loaded"
        return f"acceptance {self.acceptance:.0%} · {self.tokens_per_call:.2f} tokens/call · {head}"  # as the footer


def reply_point(trace: ReplyTrace | None) -> ReplyPoint:
    """A finished reply's point: its final stats (a reply stopped before they came: its rounds, folded the same
    way, as the graphs' header folds them)."""
    if trace is None:
        return ReplyPoint(None, None, 0, "")
    stats = trace.get_stats() or (trace.tally().snapshot() if trace.rounds else None)
    adapted = max(0, trace.adapted_tokens)
    if stats is None or not stats.drafted:
        return ReplyPoint(None, None, adapted, trace.drafter)
    return ReplyPoint(stats.acceptance_rate, stats.mean_accepted_length, adapted, trace.drafter)


def chat_points(traces: Iterable[ReplyTrace | None]) -> list[ReplyPoint]:
    """The points of a chat's replies in order (None: a reply saved without a trace); one still streaming is
    left out."""
    return [reply_point(t) for t in traces if t is None or t.finished]


def resets(points: list[ReplyPoint]) -> list[int]:
    """Indices of the replies drafted by a head that had learnt less than the one before it, with the same draft:
    the adapted draft was reset (or, started with adaptation off, the head as loaded drafted again)."""
    return [i for i in range(1, len(points))
            if points[i].drafter == points[i - 1].drafter
            and points[i].adapted_tokens < points[i - 1].adapted_tokens]


def _gaps(values: list[float | None]) -> np.ndarray:
    """None as NaN: a line drawn with connect="finite" leaves a gap there."""
    return np.array([np.nan if v is None else v for v in values], dtype=float)


ADAPTED_SYMBOL, LOADED_SYMBOL = "d", "o"  # a diamond: drafted by the adapted head


class ChatAcceptance:
    """Acceptance over the open chat: each finished reply's acceptance rate (left axis) and tokens per verifier
    call (right), in order, the ones an adapted draft head drafted marked with a diamond, and a line where the
    adapted draft was reset. It shows whether the draft got better over the chat (app/adapt_controller.py).

    Cost: redrawn only by `show`, called when the chat's replies change (a reply finished, another chat opened,
    an edit or a regenerate), never per token, and only when its points changed."""

    TITLE = "Acceptance over this chat"

    def __init__(self) -> None:
        self.points: list[ReplyPoint] = []
        self.updates = 0  # redraws (tests read this)
        self.title = ""
        self.plot = _plot(self.TITLE, "acceptance rate", "reply", count_bottom=True)
        pi = self.plot.getPlotItem()
        # The title spans the axes' columns too: with an axis on each side, over the plot alone it would widen a
        # narrow plot past its column (a label's minimum width is its text's).
        pi.layout.removeItem(pi.titleLabel)
        pi.layout.addItem(pi.titleLabel, 0, 0, 1, 3)
        rate_color, calls_color = STATE_SOLID["accepted"], ACCENT
        pi.setLabel("left", "acceptance rate", color=rate_color.name())
        self.rate_line = pi.plot(pen=pg.mkPen(rate_color, width=2))
        self.rate_dots = pg.ScatterPlotItem(size=8, hoverable=True, tip=self._tip)
        pi.addItem(self.rate_dots)
        # Tokens per verifier call on a second view box, on the right axis (as the accepted-per-round panel).
        self.calls_vb = pg.ViewBox()
        self.calls_vb.setMouseEnabled(False, False)
        pi.showAxis("right")
        pi.scene().addItem(self.calls_vb)
        right = pi.getAxis("right")
        right.linkToView(self.calls_vb)
        right.setLabel("tokens per call", color=calls_color.name())
        right.enableAutoSIPrefix(False)
        font = QFont()
        font.setPointSize(8)
        right.setTickFont(font)
        right.label.setFont(font)
        self.calls_vb.setXLink(pi)
        self.calls_line = pg.PlotDataItem(pen=pg.mkPen(calls_color, width=2, style=Qt.PenStyle.DashLine))
        self.calls_dots = pg.ScatterPlotItem(size=8, hoverable=True, tip=self._tip)
        self.calls_vb.addItem(self.calls_line)
        self.calls_vb.addItem(self.calls_dots)
        pi.vb.sigResized.connect(lambda: self.calls_vb.setGeometry(pi.vb.sceneBoundingRect()))
        self._colors = (rate_color, calls_color)
        self.reset_lines: list[pg.InfiniteLine] = []
        self._small = QFont()
        self._small.setPointSize(7)
        self.plot.setToolTip(
            "Each finished reply of this chat, in order: its acceptance rate (accepted draft tokens / draft tokens "
            "checked, solid, left axis) and tokens per verifier call (dashed, right axis), the figures under its "
            "bubble. A reply that drafted nothing (speculation off) is a gap. A diamond: the reply was drafted by "
            "the draft head adapted to your chats (Generation ▸ Adapt the draft to my chats); a vertical line: "
            "the adapted draft was reset. The title says what the draft had learnt when it drafted the chat's "
            "latest diamond; the status bar, what it knows now.")
        self._draw()

    @staticmethod
    def _tip(x: float, y: float, data: object) -> str:
        return str(data)

    def show(self, traces: Iterable[ReplyTrace | None]) -> bool:
        """Show these replies (a chat's, in order); True if the plot changed."""
        points = chat_points(traces)
        if points == self.points:
            return False
        self.points = points
        self._draw()
        return True

    def _spots(self, values: list[float | None], color: QColor) -> list[dict]:
        return [{"pos": (i + 1, v), "data": f"reply {i + 1}: {p.words}",
                 "symbol": ADAPTED_SYMBOL if p.adapted_tokens else LOADED_SYMBOL,
                 "size": 10 if p.adapted_tokens else 7, "pen": pg.mkPen(color, width=1.5),
                 "brush": pg.mkBrush(color) if p.adapted_tokens else pg.mkBrush(_with_alpha(color, 60))}
                for i, (p, v) in enumerate(zip(self.points, values)) if v is not None]

    def _draw(self) -> None:
        self.updates += 1
        points = self.points
        x = np.arange(1, len(points) + 1, dtype=float)
        rate = [p.acceptance for p in points]
        calls = [p.tokens_per_call for p in points]
        self.rate_line.setData(x, _gaps(rate), connect="finite")
        self.calls_line.setData(x, _gaps(calls), connect="finite")
        self.rate_dots.setData(spots=self._spots(rate, self._colors[0]))
        self.calls_dots.setData(spots=self._spots(calls, self._colors[1]))
        pi = self.plot.getPlotItem()
        for line in self.reset_lines:
            pi.removeItem(line)
        self.reset_lines = []
        for i in resets(points):
            line = pg.InfiniteLine(pos=i + 0.5, angle=90, movable=False, label="reset",
                                   pen=pg.mkPen(STATE_SOLID["plain"], width=1.2, style=Qt.PenStyle.DotLine),
                                   # the label's top at the view's top, beside the line: inside the plot
                                   labelOpts={"position": 1.0, "anchors": [(0, 0), (1, 0)],
                                              "color": STATE_SOLID["plain"]})
            line.label.setFont(self._small)
            line.setZValue(-10)  # the points are drawn over its label
            pi.addItem(line)
            self.reset_lines.append(line)
        # Headroom above the points (a tenth of the height at least) for the reset lines' label.
        top = max([v for v in calls if v is not None], default=1.0)
        pi.setRange(xRange=(0.5, max(len(points), 5) + 0.5), yRange=(0.0, 1.1), padding=0)
        self.calls_vb.setYRange(0.0, nice_ceiling(max(top, 2.0) * 1.1), padding=0)
        self._set_title()

    def _set_title(self) -> None:
        adapted = [p.adapted_tokens for p in self.points if p.adapted_tokens]
        title = f"<span style='font-size:10pt'>{self.TITLE}</span>"
        if adapted:
            title += f"<br><span style='font-size:8pt'>◆ draft adapted on {adapted[-1]:,} tokens</span>"
        if title != self.title:
            self.title = title
            self.plot.getPlotItem().setTitle(title)


class LiveGraphs(QWidget):
    """Seven panels bound to one reply trace at a time (and under them the open chat's `ChatAcceptance`).

    Cost: the window's timer calls `flush()`; new rounds go into buffers (cheap), then while a reply
    streams only the next panel with new data is redrawn (one per tick, so each panel repaints a few
    times a second), axis ranges grow in steps so axes are re-laid out rarely, and nothing is
    drawn while the panel is hidden. The header is a plain label (a plot title re-lays out its plot).
    """

    PANELS = ("tps", "acc", "time", "hist", "pos", "theory", "cost")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.trace: ReplyTrace | None = None
        self.baseline_tps: float | None = None
        self.baseline_how = ""
        self.baseline_like = False  # a like-for-like baseline (speedup.Baseline.like_for_like): the ratio in colour
        self.verify_s_per_token: float | None = None
        self._n = 0  # rounds already copied into the buffers
        self._drew_final = False
        self.updates = 0  # how many panel redraws happened (tests read this)
        self.speedup_label = ""
        self.theory_caption = ""
        self.theory_words = ""
        self._dirty: list[str] = []
        self._ranges: dict[str, tuple] = {}
        self._bars_key: tuple = ()
        self._columns = 0
        self._panel_at = 0.0  # perf_counter of the last panel redrawn while a reply streamed
        self._header_stale = False  # rounds arrived that the header does not show yet
        self._reset_buffers()
        fg = QColor(220, 220, 220) if is_dark() else QColor(40, 40, 40)
        pg.setConfigOptions(antialias=False, foreground=fg, background=None)

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.setSpacing(4)
        self.header = QLabel("")
        self.header.setObjectName("graphs_header")
        self.header.setWordWrap(True)
        self.header.setTextFormat(Qt.TextFormat.RichText)
        self.header_box = _LabelBox(self.header, lines=HEADER_LINES)
        outer.addWidget(self.header_box)
        self.grid = QGridLayout()
        self.grid.setContentsMargins(0, 0, 0, 0)
        self.grid.setSpacing(4)
        outer.addLayout(self.grid, 1)
        self.words = QLabel("")
        self.words.setObjectName("muted")
        self.words.setWordWrap(True)
        self.words.setTextFormat(Qt.TextFormat.RichText)
        self.words_box = _LabelBox(self.words)  # rewritten with each theory redraw: kept out of the layout too
        outer.addWidget(self.words_box)

        # 1. throughput
        self.tps_plot = _plot("Throughput", "tokens/s", "seconds (engine time)")
        pi = self.tps_plot.getPlotItem()
        # Per-round rates spike (a fully accepted round is fast): drawn faintly, kept out of the y range.
        self.tps_round = pg.PlotDataItem(pen=pg.mkPen(_with_alpha(ACCENT, 90), width=1))
        pi.addItem(self.tps_round)
        self.tps_curve = pi.plot(pen=pg.mkPen(ACCENT, width=2.5), name="running mean")
        for c in (self.tps_round, self.tps_curve):
            c.setClipToView(True)
            c.setDownsampling(auto=True, method="peak")
        self.baseline_line = pg.InfiniteLine(angle=0, movable=False,
                                             pen=pg.mkPen(STATE_SOLID["plain"], width=1.5,
                                                          style=Qt.PenStyle.DashLine),
                                             label="", labelOpts={"position": 0.98, "color": fg,
                                                                  "anchors": [(1, 0), (1, 0)]})
        self.baseline_line.setVisible(False)
        pi.addItem(self.baseline_line)

        # 2. accepted per round + running acceptance rate (right axis)
        self.acc_plot = _plot("Accepted per round", "tokens", "round", count_left=True, count_bottom=True)
        pi = self.acc_plot.getPlotItem()
        self.drafted_curve = pi.plot(stepMode="center", fillLevel=0,
                                     brush=_with_alpha(STATE_SOLID["rejected"], 70), pen=None)
        self.accepted_curve = pi.plot(stepMode="center", fillLevel=0,
                                      brush=_with_alpha(STATE_SOLID["accepted"], 200), pen=None)
        self.rate_vb = pg.ViewBox()
        self.rate_vb.setMouseEnabled(False, False)
        pi.showAxis("right")
        pi.scene().addItem(self.rate_vb)
        pi.getAxis("right").linkToView(self.rate_vb)
        pi.getAxis("right").setLabel("acceptance rate")
        f = QFont()
        f.setPointSize(8)
        pi.getAxis("right").setTickFont(f)
        pi.getAxis("right").label.setFont(f)
        self.rate_vb.setXLink(pi)
        self.rate_vb.setYRange(0, 1.02, padding=0)
        self.rate_curve = pg.PlotDataItem(pen=pg.mkPen(ACCENT, width=2))
        self.rate_vb.addItem(self.rate_curve)
        pi.vb.sigResized.connect(lambda: self.rate_vb.setGeometry(pi.vb.sceneBoundingRect()))

        # 3. accepted-length histogram
        self.hist_plot = _plot("Accepted length per round", "rounds", "draft tokens accepted", count_left=True,
                               count_bottom=True)
        self.hist_bars = pg.BarGraphItem(x=[0], height=[0], width=0.8, brush=STATE_SOLID["accepted"])
        self.hist_plot.getPlotItem().addItem(self.hist_bars)

        # 4. acceptance by position
        self.pos_plot = _plot("Acceptance by draft position", "accepted / drafted", "draft position",
                              count_bottom=True)
        self.pos_bars = pg.BarGraphItem(x=[1], height=[0], width=0.8, brush=VERIFY_COLOR)
        self.pos_plot.getPlotItem().addItem(self.pos_bars)

        # 5. time per round, stacked
        self.time_plot = _plot("Time per round", "ms", "round", count_bottom=True)
        pi = self.time_plot.getPlotItem()
        pi.addLegend(offset=(-4, 4), labelTextSize="8pt", brush=pg.mkBrush(0, 0, 0, 0), colCount=3)
        self.total_curve = pi.plot(stepMode="center", fillLevel=0, brush=_with_alpha(OVERHEAD_COLOR, 170),
                                   pen=None, name="overhead")
        self.dv_curve = pi.plot(stepMode="center", fillLevel=0, brush=_with_alpha(VERIFY_COLOR, 200),
                                pen=None, name="verify")
        self.draft_curve = pi.plot(stepMode="center", fillLevel=0, brush=_with_alpha(DRAFT_COLOR, 220),
                                   pen=None, name="draft")

        # 6. theory vs practice: the textbook curve, the curve with this machine's measured costs, the
        # measured point, and break-even
        self.theory_plot = _plot("Theory vs practice", "speedup", "γ (draft length)", count_bottom=True)
        pi = self.theory_plot.getPlotItem()
        pi.addLegend(offset=(-4, 4), labelTextSize="7pt", brush=pg.mkBrush(0, 0, 0, 0), verSpacing=-6)
        self.theory_curve = pi.plot(pen=pg.mkPen(ACCENT, width=2, style=Qt.PenStyle.DashLine),
                                    name="textbook (checking costs 1 step)")
        self.practical_curve = pi.plot(pen=pg.mkPen(ACCENT, width=2.5), name="with measured costs")
        self.predicted_point = pi.plot(pen=None, symbol="o", symbolSize=8, symbolBrush=None,
                                       symbolPen=pg.mkPen(ACCENT, width=2))
        self.measured_point = pi.plot(pen=None, symbol="star", symbolSize=15,
                                      symbolBrush=STATE_SOLID["corrected"], symbolPen=None, name="measured")
        self.break_even = pg.InfiniteLine(pos=1.0, angle=0, movable=False,
                                          pen=pg.mkPen(STATE_SOLID["rejected"], width=1.2,
                                                       style=Qt.PenStyle.DashLine),
                                          )
        pi.addItem(self.break_even)
        pi.legend.addItem(pg.PlotDataItem(pen=self.break_even.pen), "break-even (1×)")

        # 7. the cost of checking k tokens: each pass, the cost model's curve, one plain step
        self.cost_plot = _plot("Cost of checking k tokens", "ms per pass", "tokens fed (k)", count_bottom=True)
        pi = self.cost_plot.getPlotItem()
        pi.addLegend(offset=(-4, 4), labelTextSize="7pt", brush=pg.mkBrush(0, 0, 0, 0), verSpacing=-6)
        self.cost_passes = pi.plot(pen=None, symbol="o", symbolSize=4, symbolPen=None,
                                   symbolBrush=_with_alpha(VERIFY_COLOR, 110), name="a pass")
        self.cost_curve = pi.plot(pen=pg.mkPen(ACCENT, width=2.5), symbol="o", symbolSize=6,
                                  symbolBrush=ACCENT, symbolPen=None, name="cost model")
        self.step_line = pg.InfiniteLine(angle=0, movable=False,
                                         pen=pg.mkPen(STATE_SOLID["plain"], width=1.5, style=Qt.PenStyle.DashLine))
        self.step_line.setVisible(False)
        pi.addItem(self.step_line)
        pi.legend.addItem(pg.PlotDataItem(pen=self.step_line.pen), "one step, verifier alone")
        self.cost_plot.setToolTip(
            "What one verifier pass cost in this reply, by the number of positions it fed (the last token and "
            "the drafts, or a tree's nodes). The line is what the cost model reads from these passes to size "
            "draft trees: the median of each k's recent passes, never falling as k grows. The textbook "
            "formula assumes every check costs one plain step (dashed).")
        self.plots = {"tps": self.tps_plot, "acc": self.acc_plot, "hist": self.hist_plot,
                      "pos": self.pos_plot, "time": self.time_plot, "theory": self.theory_plot,
                      "cost": self.cost_plot}
        # 8. the open chat's replies, one point each (not a panel of the reply: fed by `ChatAcceptance.show`)
        self.history = ChatAcceptance()
        self.switch_marks = SwitchMarks(self.plots)  # where speculation was switched mid-reply (Ctrl+D)
        self._set_ranges(force=True)
        self.set_columns(2)

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

    # -- buffers ------------------------------------------------------------------------------------
    def _reset_buffers(self) -> None:
        self.b_t = Buffer()
        self.b_tps = Buffer()
        self.b_tps_round = Buffer()
        self.b_drafted = Buffer()
        self.b_accepted = Buffer()
        self.b_rate = Buffer()
        self.b_draft_ms = Buffer()
        self.b_verify_ms = Buffer()
        self.b_total_ms = Buffer()
        self.b_rows = Buffer()  # positions each verifier pass fed (nan: none ran) ...
        self.b_pass_ms = Buffer()  # ... and what it took
        self.cost = VerifyCost()  # the cost model's reading of these passes, as the engine's sizer keeps it
        self.tally = StatsAccumulator()  # the engine's own tally, folded from the trace's rounds (stats.py)
        self._max_gamma = 0
        self._hist_bins = 0  # the histogram's x axis: up to the largest γ (or draft) seen
        self._hist: tuple[int, ...] = ()  # the tally's rounds by accepted length, that long (read per new round)

    def set_trace(self, trace: ReplyTrace | None, baseline_tps: float | None = None) -> None:
        """Show another reply (the streaming one, one picked from the history, or none)."""
        self.trace = trace
        self.baseline_tps = baseline_tps if baseline_tps else (trace.baseline_tps if trace else None)
        self.baseline_how = trace.baseline_source if trace is not None else ""
        self.baseline_like = False  # until set_baseline says the baseline is like for like
        self._n = 0
        self._drew_final = False
        self._reset_buffers()
        self.switch_marks.clear()
        self._ranges = {}
        self._copy_rounds()
        self._draw()

    def set_baseline(self, tps: float | None, how: str = "", verify_s_per_token: float | None = None,
                     like_for_like: bool = False) -> None:
        self.baseline_tps = tps
        self.baseline_like = like_for_like
        if how:
            self.baseline_how = how
        if verify_s_per_token:
            self.verify_s_per_token = verify_s_per_token
        self._draw()

    def _copy_rounds(self) -> bool:
        trace = self.trace
        if trace is None or self._n >= len(trace.rounds):
            return False
        for r in trace.rounds[self._n:]:
            self.b_t.append(r.t_end)
            # A rate over a few milliseconds is noise (the first token comes from the prefill's logits
            # and costs a round almost nothing): leave those points out rather than spike the axis.
            self.b_tps.append(r.tokens_after / r.t_end if r.t_end >= _MIN_RATE_S else np.nan)
            self.b_tps_round.append(r.emitted / r.total_s if r.t_end >= _MIN_RATE_S and r.total_s > 0 else np.nan)
            self.b_drafted.append(r.checked)  # a tree round: every candidate the verifier checked
            self.b_accepted.append(r.accepted)
            r.fold_into(self.tally)
            self.switch_marks.observe(r)
            self._max_gamma = max(self._max_gamma, r.gamma if r.drafted else 0, r.drafted)
            self.b_rate.append(self.tally.accepted / self.tally.drafted if self.tally.drafted else np.nan)
            self.b_draft_ms.append(r.draft_s * 1e3)
            self.b_verify_ms.append((r.draft_s + r.verify_s) * 1e3)
            self.b_total_ms.append(r.total_s * 1e3)
            rows = r.rows or (r.checked + 1 if r.index else 0)  # a trace saved before passes were counted
            self.b_rows.append(float(rows) if rows else np.nan)
            self.b_pass_ms.append(r.verify_s * 1e3 if rows else np.nan)
            self.cost.observe(rows, r.verify_s)
            if r.checked:
                self._hist_bins = max(self._hist_bins, r.gamma + 1, r.accepted + 1, r.drafted + 1)
        self._hist = self.tally.accepted_length_histogram(self._hist_bins)
        self._n = len(trace.rounds)
        return True

    def flush(self, panels: bool = True, figures: bool = True) -> bool:
        """Copy new rounds into the buffers; with `figures`, show them in the header (only if rounds arrived);
        with `panels`, also redraw the next panel that has new data (all of them once the reply has finished).
        True if anything was drawn."""
        trace = self.trace
        if trace is None:
            return False
        new = self._copy_rounds()
        if trace.finished and not self._drew_final:
            self._drew_final = True
            self._draw()
            return True
        if new:  # every panel is due again, in turn: the one redrawn last goes to the back of the queue
            self._dirty += [name for name in self.PANELS if name not in self._dirty]
            self._header_stale = True
        if not self.isVisible():
            return False
        if self._header_stale and figures:
            self._draw_header()
        if self._dirty and panels and time.perf_counter() - self._panel_at >= PANEL_EVERY_S:
            self._panel_at = time.perf_counter()
            self._draw_panel(self._dirty.pop(0))
            return True
        return False

    # -- figures ------------------------------------------------------------------------------------
    @property
    def alpha(self) -> float:
        return self.tally.snapshot().acceptance_rate

    @property
    def c(self) -> float:
        return self.tally.snapshot().c

    @property
    def mean_gamma(self) -> float:
        return self.tally.snapshot().mean_gamma

    @property
    def current_tps(self) -> float:
        return live_tps(self.trace)

    @property
    def measured_speedup(self) -> float | None:
        tps = self.current_tps
        if not self.baseline_tps or not tps:
            return None
        return tps / self.baseline_tps

    # -- drawing ------------------------------------------------------------------------------------
    def _draw(self) -> None:
        """Every panel at once (a new trace or baseline, the final figures, the panel shown again)."""
        self._dirty = []
        if not self.isVisible() and self.trace is not None and not self.trace.finished:
            self._dirty = list(self.PANELS)  # drawn when shown
            return
        self._draw_header()
        for name in self.PANELS:
            self._draw_panel(name)

    def _draw_panel(self, name: str) -> None:
        self.updates += 1
        self.switch_marks.draw(name)
        n = self.b_t.n
        edges = np.arange(n + 1, dtype=float) + 0.5  # step curves: round i spans [i+0.5, i+1.5]
        if name == "tps":
            self.tps_curve.setData(self.b_t.data, self.b_tps.data, connect="finite")
            self.tps_round.setData(self.b_t.data, self.b_tps_round.data, connect="finite")
            if self.baseline_tps:
                self.baseline_line.setValue(self.baseline_tps)
                self.baseline_line.label.setFormat(f"verifier alone {self.baseline_tps:.1f} tok/s")
                # At the right end, on the side of the line the running mean is not on: the text stays clear of
                # the curve it is read against (below it when speculation is faster, above when slower).
                means = self.b_tps.data[np.isfinite(self.b_tps.data)]
                side = (1, 0) if not len(means) or means[-1] >= self.baseline_tps else (1, 1)
                if self.baseline_line.label.anchors[0] != side:
                    self.baseline_line.label.anchors = [side, side]
                    self.baseline_line.label.updatePosition()
            self.baseline_line.setVisible(bool(self.baseline_tps))
        elif name == "acc":
            self.drafted_curve.setData(edges, self.b_drafted.data)
            self.accepted_curve.setData(edges, self.b_accepted.data)
            self.rate_curve.setData(np.arange(1, n + 1, dtype=float), self.b_rate.data, connect="finite")
        elif name == "time":
            self.draft_curve.setData(edges, self.b_draft_ms.data)
            self.dv_curve.setData(edges, self.b_verify_ms.data)
            self.total_curve.setData(edges, self.b_total_ms.data)
        elif name == "cost":
            self._draw_cost()
        elif name in ("hist", "pos"):
            bars_key = (self._hist, tuple(self.tally.drafted_at), tuple(self.tally.accepted_at))
            if bars_key != self._bars_key:  # bar items rebuild their picture on every setOpts
                self._bars_key = bars_key
                self._draw_bars()
        else:
            self._draw_theory()
        self._set_ranges(name)

    def _set_ranges(self, only: str | None = None, force: bool = False) -> None:
        """Axis ranges from the data, never below zero, growing in steps (app.speedup.nice_ceiling): an axis
        whose range did not change is not re-laid out."""
        n = self.b_t.n
        running = self.b_tps.data[np.isfinite(self.b_tps.data)]
        per_round = self.b_tps_round.data[np.isfinite(self.b_tps_round.data)]
        rounds_x = (0.5, nice_ceiling(max(n, 10)) + 0.5)
        wanted = {
            "tps": ((0.0, nice_ceiling(float(self.b_t.data[-1]) if n else 1.0)),
                    (0.0, nice_ceiling(1.12 * max(float(running.max()) if running.size else 0.0,
                                                  self.baseline_tps or 0.0,
                                                  float(np.percentile(per_round, 90)) if per_round.size else 0.0,
                                                  1.0)))),
            "acc": (rounds_x, (0.0, max(2, self._max_gamma) + 0.5)),
            "time": (rounds_x, (0.0, nice_ceiling(float(self.b_total_ms.data.max()) if n else 1.0))),
            "hist": ((-0.5, max(len(self._hist), 2) - 0.5),
                     (0.0, nice_ceiling(max(max(self._hist, default=0), 1)) * 1.05)),
            "pos": ((0.5, max(len(self.tally.drafted_at), 1) + 0.5), (0.0, 1.02)),
            "theory": ((1.0, float(GAMMA_AXIS[-1])), (0.0, self._theory_top)),
            "cost": self._cost_ranges(),
        }
        for name, (xr, yr) in wanted.items():
            if only is not None and name != only:
                continue
            if force or self._ranges.get(name) != (xr, yr):
                self._ranges[name] = (xr, yr)
                self.plots[name].getPlotItem().setRange(xRange=xr, yRange=yr, padding=0)

    _theory_top = 2.0

    def _draw_header(self) -> None:
        self._header_stale = False
        trace = self.trace
        tps = self.current_tps
        sp = self.measured_speedup
        parts = []
        if tps:
            parts.append(f"<b>{tps:.1f} tok/s</b>")
        spread = trace.rate_spread() if trace is not None else None
        if self.switch_marks.switches:  # tokens/s over decoding with and without speculation: no one ratio
            parts.append("mixed reply (speculation switched mid-reply): no single speedup")
        elif sp is not None and self.tally.drafted and spread is None:
            parts.append(f"too short for a speedup (under {MIN_SPEEDUP_TOKENS} tokens)")
        elif sp is not None and self.tally.drafted:
            if self.baseline_like:
                color = "rgb(46,160,67)" if sp >= 1.0 else "rgb(215,58,73)"
                parts.append(f"<b style='color:{color}'>{sp:.2f}×</b> ±{sp * spread:.2f} "
                             f"vs {self.baseline_tps:.1f} tok/s")
            else:  # a ratio against the load-time calibration is no verdict: said plainly, without colour
                parts.append(f"{sp:.2f}× ±{sp * spread:.2f} vs {self.baseline_tps:.1f} tok/s (not like for like)")
        elif sp is not None and not (trace is not None and trace.paused_rounds()):
            parts.append(f"speculation off ({sp:.2f}× the baseline)")
        if self.tally.drafted and self.tally.rounds:
            parts.append(f"{self.tally.snapshot().mean_accepted_length:.2f} tokens per verifier call")
        if trace is not None and not trace.finished and trace.rounds:
            parts.append("so far")
        paused = trace.paused_rounds() if trace is not None else 0
        if paused >= PAUSED_ROUNDS:
            parts.append("<b style='color:rgb(235,160,20)'>speculation paused: not paying here</b>")
        head = " · ".join(parts)
        how = self.baseline_how if (self.baseline_tps and trace is not None) else ""
        text = head + (f"<br><span style='font-size:8pt'>baseline: {html.escape(how)}</span>" if how and head else "")
        if text != self.speedup_label:
            self.speedup_label = text
            self.header.setText(text)
            self.header_box.fit()
            self.header.setToolTip("Tokens/s and the measured speedup of this reply against the verifier alone "
                                   "on this machine, and how far one verifier pass advanced the reply on average "
                                   "(the figure that does not depend on the machine). The ± is one standard error "
                                   "from this reply's own round-to-round spread (the baseline's is not in it); "
                                   f"replies under {MIN_SPEEDUP_TOKENS} tokens get no speedup. "
                                   + (f"Speculation paused: the last {paused} rounds drafted nothing, because on "
                                      "this machine checking a draft would cost more than it brings (the cost "
                                      "model); it drafts again as soon as a draft pays. " if paused >= PAUSED_ROUNDS
                                      else "")
                                   + (f"Baseline: {how}." if how else ""))

    def _draw_cost(self) -> None:
        self.cost_passes.setData(self.b_rows.data, self.b_pass_ms.data, connect="finite")
        curve = self.cost.seconds
        self.cost_curve.setData(np.array(list(curve), dtype=float), np.array(list(curve.values())) * 1e3)
        step = self.verify_s_per_token
        if step:
            self.step_line.setValue(step * 1e3)
        self.step_line.setVisible(bool(step))

    def _cost_ranges(self) -> tuple[tuple[float, float], tuple[float, float]]:
        rows = self.b_rows.data[np.isfinite(self.b_rows.data)]
        passes = self.b_pass_ms.data[np.isfinite(self.b_pass_ms.data)]
        # The y axis follows the cost model's medians (and the plain step), not a pass slowed by other work.
        top = max([*(s * 1e3 for s in self.cost.seconds.values()), (self.verify_s_per_token or 0.0) * 1e3,
                   float(np.percentile(passes, 90)) if passes.size else 0.0, 1.0])
        return (0.5, max(8.0, nice_ceiling(float(rows.max()) if rows.size else 1.0)) + 0.5), \
            (0.0, nice_ceiling(1.4 * top))

    def _draw_bars(self) -> None:
        if self._hist:
            self.hist_bars.setOpts(x=np.arange(len(self._hist)), height=np.array(self._hist, dtype=float))
        else:
            self.hist_bars.setOpts(x=[0], height=[0])
        if self.tally.drafted_at:
            rates = np.array(self.tally.accepted_at, dtype=float) / np.array(self.tally.drafted_at, dtype=float)
            self.pos_bars.setOpts(x=np.arange(1, len(rates) + 1), height=rates)
        else:
            self.pos_bars.setOpts(x=[1], height=[0])

    def _draw_theory(self) -> None:
        a, c, g = self.alpha, self.c, self.mean_gamma
        sp = self.measured_speedup
        trace = self.trace
        costs = measured_costs(trace.rounds[: self._n] if trace is not None else [], self.baseline_tps,
                               self.verify_s_per_token)
        top = 2.0
        if self.tally.drafted:
            pred = np.array([predicted_speedup(a, float(x), c) for x in GAMMA_AXIS])
            self.theory_curve.setData(GAMMA_AXIS, pred)
            top = max(top, float(pred.max()))
            self.predicted_point.setData([g], [predicted_speedup(a, g, c)])
            if costs is not None:
                practical = np.array([practical_speedup(a, float(x), costs) for x in GAMMA_AXIS])
                self.practical_curve.setData(GAMMA_AXIS, practical)
                top = max(top, float(practical.max()))
                self.theory_words = why_they_differ(a, g, c, costs, predicted_speedup(a, g, c),
                                                    practical_speedup(a, g, costs))
            else:
                self.practical_curve.setData([], [])
                self.theory_words = ("Without a verifier-alone baseline only the textbook curve can be drawn "
                                     "(it assumes checking γ+1 tokens costs one decode step).")
            if sp is not None:
                self.measured_point.setData([g], [sp])
                top = max(top, sp)
                if trace is not None and trace.finished:
                    verdict = "faster than" if sp >= 1.0 else "slower than"
                    self.theory_words += f" Measured: {sp:.2f}×, {verdict} the verifier alone."
            else:
                self.measured_point.setData([], [])
            best = int(GAMMA_AXIS[int(np.argmax(pred))])
            self.theory_caption = f"α {a:.2f} · c {c:.3f} · mean γ {g:.1f} · textbook best γ {best}"
            tree = tree_prediction(trace.rounds[: self._n] if trace is not None else [], costs)
            if tree is not None:  # the chain formula does not describe a tree: predict from the measured trees
                self.theory_caption = (f"draft trees, {tree.nodes:.1f} candidates a round · the curves are a "
                                       "chain's, for comparison")
                self.theory_words = tree.words(sp)
                if tree.speedup is not None:
                    self.predicted_point.setData([min(tree.nodes, float(GAMMA_AXIS[-1]))], [tree.speedup])
                    top = max(top, tree.speedup)
                if sp is not None:
                    self.measured_point.setData([min(tree.nodes, float(GAMMA_AXIS[-1]))], [sp])
        else:
            for item in (self.theory_curve, self.practical_curve, self.predicted_point, self.measured_point):
                item.setData([], [])
            self.theory_caption = "no draft tokens yet" if self._n else ""
            self.theory_words = ""
        self._theory_top = nice_ceiling(top * 1.5)  # room above the curves for the legend
        words = (f"<b>Theory vs practice</b> ({self.theory_caption}): {html.escape(self.theory_words)}"
                 if self.theory_caption and self.theory_words else "")
        if words != self.words.text():
            self.words.setText(words)
            self.words_box.fit()


def stats_csv(trace: ReplyTrace) -> str:
    out = io.StringIO()
    rows = [
        {"round": r.index + 1, "gamma": r.gamma, "drafted": r.drafted, "accepted": r.accepted,
         "emitted": r.emitted_state, "draft_stop": r.stop, "draft_ms": round(r.draft_s * 1e3, 3),
         # drafting done during the prefill that the round did not wait for (round 1 of a separate draft model)
         "draft_ahead_ms": round(r.hidden_draft_s * 1e3, 3),
         "verify_ms": round(r.verify_s * 1e3, 3), "overhead_ms": round(r.overhead_s * 1e3, 3),
         "t_end_s": round(r.t_end, 5), "tokens_after": r.tokens_after}
        for r in trace.rounds
    ]
    fieldnames = list(rows[0]) if rows else ["round"]
    w = csv.DictWriter(out, fieldnames=fieldnames)
    w.writeheader()
    w.writerows(rows)
    return out.getvalue()


def stats_json(trace: ReplyTrace) -> str:
    return json.dumps({"stats": trace.stats, "baseline_tps": trace.baseline_tps,
                       "measured_speedup": trace.speedup(), "verifier": trace.verifier,
                       "drafter": trace.drafter, "config": trace.config,
                       "rounds": [r.__dict__ for r in trace.rounds]}, indent=2)


class RacePlot(QWidget):
    """Tokens over time for the same prompt and seed with speculation off, then on."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.plot = _plot("Race: off vs on, same prompt and seed", "tokens", "seconds (engine time)",
                          count_left=True)
        pi = self.plot.getPlotItem()
        pi.enableAutoRange()
        pi.setLimits(xMin=0, yMin=0)  # no negative seconds or tokens, even on an empty plot
        pi.addLegend(offset=(8, 8), labelTextSize="9pt")
        self.off_curve = pi.plot(pen=pg.mkPen(STATE_SOLID["plain"], width=2.5), name="speculation off")
        self.on_curve = pi.plot(pen=pg.mkPen(ACCENT, width=2.5), name="speculation on")
        lay.addWidget(self.plot, 1)
        self.result = QLabel("Run a race (Generation ▸ Race) to measure speculation against the verifier "
                             "alone on this machine.")
        self.result.setWordWrap(True)
        self.result.setTextFormat(Qt.TextFormat.RichText)
        lay.addWidget(self.result)
        self.traces: dict[str, ReplyTrace] = {}
        self._drawn: dict[str, int] = {}
        self._drawn_at = 0.0

    def start(self, keys: list[str] | None = None) -> None:
        """A new race whose runs are `keys` (speedup.race_order); the curves show its first off/on pair."""
        self.traces = {key: ReplyTrace() for key in (keys or ["off", "on"])}
        self._drawn = {"off": -1, "on": -1}
        self.off_curve.setData([], [])
        self.on_curve.setData([], [])
        runs = len(self.traces) // 2
        self.result.setText(f"Racing… speculation off and on, {runs} time{'s' if runs > 1 else ''} each, "
                            "alternating, one after the other so they don't share the CPU.")

    def flush(self, final: bool = False) -> bool:
        """The curves, redrawn at most every PANEL_EVERY_S while racing (`final`: now)."""
        if not final and time.perf_counter() - self._drawn_at < PANEL_EVERY_S:
            return False
        self._drawn_at = time.perf_counter()
        changed = False
        for key, curve in (("off", self.off_curve), ("on", self.on_curve)):
            tr = self.traces.get(key)
            if tr is None or self._drawn.get(key) == len(tr.rounds):
                continue
            t = np.array([0.0] + [r.t_end for r in tr.rounds])
            n = np.array([0.0] + [float(r.tokens_after) for r in tr.rounds])
            curve.setData(t, n)
            self._drawn[key] = len(tr.rounds)
            changed = True
        return changed

    def finish(self, greedy: bool) -> str:
        from app.talk.context import race_spread_of

        self.flush(final=True)
        spread = race_spread_of(self.traces)
        on = self.traces.get("on")
        if spread is None or on is None or on.stats is None:
            self.result.setText("The race did not finish.")
            return "The race did not finish."
        sp = spread.speedup
        verdict = "faster" if sp >= 1.0 else "slower"
        figure = f"{sp:.2f}× ({verdict})" if spread.short_reply else f"<b>{sp:.2f}×</b> ({verdict})"
        parts = [f"{figure}, {spread.spread_words()} — off {spread.tps_off:.1f} tok/s, on {spread.tps_on:.1f} tok/s"
                 f"{' (medians)' if spread.pairs > 1 else ''}; {spread.tokens} tokens"
                 + (": too short to judge a speed" if spread.short_reply else "")]
        if on.stats.get("drafted"):
            parts.append(f"first run: acceptance {on.stats.get('acceptance_rate', 0):.0%}, "
                         f"{on.stats.get('mean_accepted_length', 0):.2f} tokens per verifier call")
        if greedy:
            texts = {tr.text for tr in self.traces.values() if tr.finished}
            parts.append("greedy: texts <b style='color:rgb(46,160,67)'>identical</b> token for token"
                         if len(texts) == 1 else "greedy: texts <b style='color:rgb(215,58,73)'>differ</b>")
        else:
            parts.append("sampling (temperature > 0): texts may differ; both follow the verifier's distribution")
        html = "<br>".join(parts)
        self.result.setText(html)
        return html


class GraphsPanel(QWidget):
    """The right-hand panel: live graphs and the race, with export buttons."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        self.tabs = QTabWidget()
        self.live = LiveGraphs()
        self.race = RacePlot()
        # In a scroll area: on a narrow screen the plots go to one column and scroll, instead of
        # widening the window past the screen.
        self.live_scroll = QScrollArea()
        self.live_scroll.setWidgetResizable(True)
        self.live_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.live_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.live_scroll.setWidget(self.live)
        self.tabs.addTab(self.live_scroll, "Live")
        self.tabs.addTab(self.race, "Race")
        lay.addWidget(self.tabs, 1)
        row = QHBoxLayout()
        self.caption = QLabel("")
        self.caption.setObjectName("muted")
        row.addWidget(self.caption, 1)
        self.export_png = QPushButton("Export PNG…")
        self.export_stats = QPushButton("Export stats…")
        row.addWidget(self.export_png)
        row.addWidget(self.export_stats)
        lay.addLayout(row)

    def flush(self, panels: bool = True, figures: bool = True) -> bool:
        a = self.live.flush(panels, figures)
        b = self.race.flush() if panels else False
        return a or b

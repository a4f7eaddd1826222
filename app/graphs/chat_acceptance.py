"""Acceptance over the open chat (`ChatAcceptance`): each finished reply's acceptance rate and tokens per
verifier call, marked where an adapted draft head drafted it; redrawn once per finished reply, not per round."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from app.graphs.plots import make_plot, right_axis_view, small_font, with_alpha
from app.speedup import nice_ceiling
from app.theme import ACCENT, STATE_SOLID
from app.trace import ReplyTrace


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
        self.plot = make_plot(self.TITLE, "acceptance rate", "reply", count_bottom=True)
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
        self.calls_vb = right_axis_view(pi, "tokens per call", color=calls_color.name())
        right = pi.getAxis("right")
        right.enableAutoSIPrefix(False)
        font = small_font()
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
        self._small = small_font(7)
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
                 "brush": pg.mkBrush(color) if p.adapted_tokens else pg.mkBrush(with_alpha(color, 60))}
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

"""The pieces the side-by-side demos share: a run of lanes on a worker, a text pane per lane, and a
tokens-over-time plot in large type.

Slots only fold events into each lane's ReplyTrace (a buffer); the view's one timer flushes new tokens
into the panes and new rounds into the persistent curves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget

from app.graphs.plots import cache_axes
from app.graphs.race_curves import curve_data
from app.runs import Lane, LaneEvent, RunContext, lane_events
from app.talk import style as ts
from app.token_view import TokenTextView
from app.trace import ReplyTrace
from app.worker import EventWorker
from specdec_core.events import Finished

FLUSH_MS = 40


class LaneRun(QObject):
    """Runs lanes one after the other on an EventWorker; each lane's events build its ReplyTrace."""

    lane_started = Signal(str)
    finished = Signal()  # after the last lane, an error or a stop
    errored = Signal(str)

    def __init__(self, lanes: list[Lane], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.lanes = lanes
        self.traces: dict[str, ReplyTrace] = {lane.key: ReplyTrace() for lane in lanes}
        self.current = ""
        self.errors: list[str] = []
        self.worker: EventWorker | None = None
        self.controls = None

    def start(self, ctx: RunContext, events: Callable[[Any], Iterator[object]] | None = None) -> None:
        """Run the lanes on `ctx`'s prompt; `events` ((controls) -> lane_events' events, e.g. a race decoded in
        the window's decoding process, RunContext.race_source) in place of running them here."""
        from specdec_core.engine import Controls

        self.controls = controls = Controls()
        config = ctx.config
        for lane in self.lanes:
            tr = self.traces[lane.key]
            tr.config = {"temperature": config.temperature, "gamma": config.gamma, "seed": config.seed}
        run = events or (lambda c: lane_events(ctx, self.lanes, c))
        worker = EventWorker(lambda: run(controls), on_abort=controls.cancel,
                             name="talk-lanes")
        worker.event.connect(self._on_event)
        worker.errored.connect(self._on_error)
        worker.finished.connect(self._on_finished)
        self.worker = worker
        worker.start()

    @property
    def running(self) -> bool:
        return self.worker is not None and self.worker.is_running

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.abort()

    def _on_event(self, ev: object) -> None:
        if not isinstance(ev, LaneEvent):
            return
        if ev.lane != self.current:
            self.current = ev.lane
            self.lane_started.emit(ev.lane)
        self.traces[ev.lane].apply(ev.event)
        if isinstance(ev.event, Finished) and ev.event.error:
            self._fail(f"{ev.lane}: {ev.event.error}")

    def _on_error(self, exc: BaseException) -> None:
        self._fail(f"{type(exc).__name__}: {exc}")

    def _fail(self, message: str) -> None:
        self.errors.append(message)
        self.errored.emit(message)

    def _on_finished(self) -> None:
        self.current = ""
        self.finished.emit()


class LanePane(QFrame):
    """One lane's reply, streaming, under its title and running figures."""

    def __init__(self, title: str, color: QColor, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("talk_lane")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(10, 8, 10, 8)
        self.title = QLabel(f"<span style='color:{color.name()}'>■</span> {title}")
        self.title.setTextFormat(Qt.TextFormat.RichText)
        ts.set_big(self.title, 1.15, bold=True)
        lay.addWidget(self.title)
        self.figures = QLabel("waiting…")
        ts.set_big(self.figures, 0.95)
        lay.addWidget(self.figures)
        self.text = TokenTextView()
        ts.set_big(self.text, 1.05)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        holder = QWidget()
        hl = QVBoxLayout(holder)
        hl.setContentsMargins(0, 0, 0, 0)
        hl.addWidget(self.text)
        hl.addStretch(1)
        scroll.setWidget(holder)
        self.scroll = scroll
        lay.addWidget(scroll, 1)

    def bind(self, trace: ReplyTrace) -> None:
        self.text.set_trace(trace, True)
        self.figures.setText("waiting…")

    def flush(self) -> bool:
        n = self.text.render_pending()
        tr = self.text.trace
        if tr is not None and (n or tr.finished):
            self.figures.setText(lane_figures(tr))
            sb = self.scroll.verticalScrollBar()
            sb.setValue(sb.maximum())
        return bool(n)


def lane_figures(tr: ReplyTrace) -> str:
    s = tr.stats or {}
    n = s.get("new_tokens") or (tr.rounds[-1].tokens_after if tr.rounds else 0)
    tps = s.get("tokens_per_s") or tr.running_tps()
    parts = [f"{n} tokens", f"{tps:.1f} tok/s" if tps else ""]
    if s.get("drafted"):
        parts.append(f"acceptance {s.get('acceptance_rate', 0):.0%}")
    if not tr.finished and tr.tokens:
        parts.append("running…")
    return " · ".join(p for p in parts if p)


def big_plot(title: str, left: str, bottom: str) -> pg.PlotWidget:
    """A white plot with large axis type, readable on a projector."""
    w = pg.PlotWidget(background="w")
    pi = w.getPlotItem()
    pi.setTitle(f"<span style='font-size:15pt;color:#111'>{title}</span>")
    font = QFont()
    font.setPointSize(13)
    for ax in ("left", "bottom"):
        axis = pi.getAxis(ax)
        axis.setTickFont(font)
        axis.setPen(pg.mkPen("#333"))
        axis.setTextPen(pg.mkPen("#111"))
    pi.setLabel("left", f"<span style='font-size:13pt;color:#111'>{left}</span>")
    pi.setLabel("bottom", f"<span style='font-size:13pt;color:#111'>{bottom}</span>")
    pi.showGrid(x=True, y=True, alpha=0.2)
    pi.setMenuEnabled(False)
    cache_axes(pi)
    w.setMinimumHeight(220)
    return w


def redraw_grown(curve, trace: ReplyTrace, drawn: dict[str, int], key: str) -> None:
    """Set `curve` from `trace` only when the trace has rounds the curve does not show yet (`drawn`: lane -> rounds
    shown). Setting the same data on every tick repainted the plot 25 times a second while lanes ran, and that
    painting on the GUI thread slowed the lanes being timed (bench/headline.py)."""
    if drawn.get(key) != len(trace.rounds):
        curve.setData(*curve_data(trace))
        drawn[key] = len(trace.rounds)

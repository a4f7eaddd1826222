"""What makes speculation slow: the same prompt with a well aligned drafter and with poorly aligned
ones, against the verifier alone, measured on this machine.

Every drafted token costs draft time and widens the verifier's pass; only accepted ones pay that
back. With low acceptance the extra work buys nothing and speculation loses to the verifier alone.
The poor drafters: prompt lookup on open chat (when the good one is a draft model) and a weakened
drafter that swaps most proposals for random tokens (talk/drafters.py; still exact, only slower).

Every lane kind runs several times, alternating, after a warm-up, in the window's decoding process
(slow_lanes.py); the figures are medians with their spread, and the curves drawn bold are the median run's.
"""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QSplitter, QVBoxLayout, QWidget

from app.graphs.plots import legend_below
from app.graphs.race_curves import RunCurves, run_of
from app.runs import Lane, RunContext
from app.speedup import RaceSpread, run_key
from app.talk import style as ts
from app.talk.lanes_ui import FLUSH_MS, LaneRun, big_plot, lane_figures
from app.talk.slow_lanes import (
    BASE,
    CORRUPT,
    POOR,
    SLOW_REPEATS,
    WARM_UP_TOKENS,
    repeated,
    run_pairs,
    slow_events,
    slow_lanes,
    slower_runs,
    spreads,
)
from app.theme import ACCENT, STATE_SOLID
from app.trace import ReplyTrace

LANE_COLORS = [STATE_SOLID["plain"], ACCENT, STATE_SOLID["corrected"], STATE_SOLID["rejected"]]
SHORT = {"off": "verifier alone", "good": "good drafter", "lookup": "prompt lookup", "weak": "weakened"}

# Prompt presets: prompt lookup shines when the reply repeats the prompt, and fails on open chat.
PRESETS = {
    "the current prompt": None,
    "open chat": "Tell me something surprising about octopuses.",
    "copy-heavy (rewrite)": ("Repeat this sentence exactly, then repeat it once more: The quick brown fox "
                             "jumps over the lazy dog while the cat watches from the warm windowsill."),
}


class SlowDemoView(QWidget):
    # {lane kind: (median tokens/s, the drawn run's acceptance rate, median speedup vs the verifier alone)}
    finished = Signal(object)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx: RunContext | None = None
        self.run: LaneRun | None = None
        self.lanes: list[Lane] = []  # one of each kind; the run's lanes are their repeats (slow_lanes.repeated)
        self.repeats = SLOW_REPEATS
        # The results' rows name each kind by its short name (its legend's), the full titles in their tooltip:
        # the demo says the poor one's in its headline's words, and the titles' four wrapped lines put its plots
        # under the fold at 1024×700.
        self.short_titles = False
        self.results: dict[str, tuple[float, float, float]] = {}
        self.spreads: dict[str, RaceSpread] = {}
        self.curves: RunCurves | None = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 10, 12, 10)
        lay.addLayout(self._build_top())
        self.rows = QLabel("")
        self.rows.setTextFormat(Qt.TextFormat.RichText)
        ts.set_big(self.rows, 1.2)
        lay.addWidget(self.rows)
        lay.addWidget(self._build_plots(), 1)
        self.note = QLabel("Every drafted token costs draft time and widens the verifier's pass; only accepted "
                           "tokens pay that back. Low acceptance → speculation loses.")
        self.note.setWordWrap(True)
        ts.set_big(self.note, 0.95)
        lay.addWidget(self.note)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        ts.set_big(self.status, 0.85)
        lay.addWidget(self.status)
        self.timer = QTimer(self)
        self.timer.setInterval(FLUSH_MS)
        self.timer.timeout.connect(self._tick)

    def _build_top(self) -> QHBoxLayout:
        top = QHBoxLayout()
        self.prompt = QLabel("")
        self.prompt.setWordWrap(True)
        ts.set_big(self.prompt, 0.95)
        top.addWidget(self.prompt, 1)
        self.preset = QComboBox()
        self.preset.addItems(list(PRESETS))
        ts.set_big(self.preset, 0.9)
        top.addWidget(self.preset)
        self.run_button = QPushButton("Run")
        ts.set_big(self.run_button, 0.95)
        self.run_button.clicked.connect(self._run_clicked)
        top.addWidget(self.run_button)
        return top

    def _build_plots(self) -> QSplitter:
        """Tokens over time (every run faint, the median run bold) beside each kind's median tokens/s, its spread
        and the verifier alone's line."""
        split = QSplitter(Qt.Orientation.Horizontal)
        self.curves_plot = big_plot("Tokens over time", "tokens", "seconds (engine time)")
        legend_below(self.curves_plot.getPlotItem(), 3, "12pt")
        self.bars_plot = big_plot("Tokens per second: median, range", "tokens/s", "")
        self.bars_plot.getPlotItem().getAxis("left").enableAutoSIPrefix(False)  # "0.5", not "500 (×0.001)"
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.6, brushes=[])
        self.bars_plot.getPlotItem().addItem(self.bars)
        self.ranges = pg.ErrorBarItem(x=np.array([]), y=np.array([]), beam=0.25, pen=pg.mkPen("#111", width=2))
        self.bars_plot.getPlotItem().addItem(self.ranges)
        # Named in a legend under the bars, not by words on the line: they lay over the middle bar.
        self.baseline = pg.InfiniteLine(angle=0, movable=False,
                                        pen=pg.mkPen(STATE_SOLID["rejected"], width=3, style=Qt.PenStyle.DashLine))
        self.baseline.setVisible(False)
        self.bars_plot.getPlotItem().addItem(self.baseline)
        legend_below(self.bars_plot.getPlotItem(), 1, "12pt").addItem(pg.PlotDataItem(pen=self.baseline.pen),
                                                                       "verifier alone (break-even)")
        split.addWidget(self.curves_plot)
        split.addWidget(self.bars_plot)
        return split

    def _run_clicked(self) -> None:
        if self.ctx is None:
            return
        text = PRESETS[self.preset.currentText()]
        self.start(self.ctx.with_prompt(text) if text else self.ctx, keep_context=True)

    def start(self, ctx: RunContext, keep_context: bool = False) -> None:
        if self.run is not None and self.run.running:
            return
        if not keep_context:
            self.ctx = ctx
        self.prompt.setText(f"<b>Prompt:</b> {html.escape(ctx.prompt_text[:160])}")
        self.lanes = slow_lanes(ctx.session, ctx.config, CORRUPT)
        lanes = repeated(self.lanes, self.repeats)
        self.run = LaneRun(lanes, self)
        self._new_curves([lane.key for lane in lanes])
        self.results, self.spreads = {}, {}
        self.bars.setOpts(x=[], height=[], brushes=[])
        self.ranges.setData(x=np.array([]), y=np.array([]))
        self.baseline.setVisible(False)
        self.status.setText(f"Warming up ({WARM_UP_TOKENS} tokens of each, not counted), then each lane "
                            f"{self.repeats} times, alternating…")
        self.run.lane_started.connect(self._lane_started)
        self.run.finished.connect(self._on_finished)
        # In the window's decoding process, as the chat's replies and the race (app/host.py).
        self.run.start(ctx, ctx.job_source(slow_events, CORRUPT, self.repeats))
        self.run_button.setEnabled(False)
        self.timer.start()

    def _new_curves(self, keys: list[str]) -> None:
        pi = self.curves_plot.getPlotItem()
        if self.curves is not None:
            for item in (*self.curves.bold.values(), self.curves.others, *self.curves.faint.values()):
                pi.removeItem(item)
        colors = {lane.key: color for lane, color in zip(self.lanes, LANE_COLORS)}
        names = {lane.key: SHORT.get(lane.key, lane.key) for lane in self.lanes}
        self.curves = RunCurves(pi, colors, names, 4, base=BASE, measured=POOR)
        self.curves.start(keys)

    def _lane_started(self, key: str) -> None:
        assert self.curves is not None
        self.curves.follow(key)
        title = next(la.title for la in self.lanes if la.key == key.split()[0])
        self.status.setText(f"Run {run_of(key)} of {self.repeats}: {title}…")

    def _tick(self) -> None:
        if self.run is None or self.curves is None:
            return
        self.curves.draw(self.run.traces)
        self._rows()

    def drawn_traces(self) -> dict[str, ReplyTrace]:
        """Each lane kind's run drawn bold: the running repeat's, then the median run's."""
        assert self.run is not None and self.curves is not None
        return {lane.key: self.run.traces[run_key(lane.key, self.curves.run)] for lane in self.lanes}

    def _rows(self) -> None:
        lines, titles = [], []
        for (kind, tr), color in zip(self.drawn_traces().items(), LANE_COLORS):
            if not tr.tokens:
                continue
            title = next(la.title for la in self.lanes if la.key == kind)
            name = SHORT.get(kind, title) if self.short_titles else title
            titles.append(f"{SHORT.get(kind, kind)}: {title}")
            lines.append(f"<span style='color:{color.name()}'>■</span> <b>{html.escape(name)}</b>: "
                         f"{lane_figures(tr)}{self._verdict(kind)}")
        self.rows.setText("<br>".join(lines))
        self.rows.setToolTip("\n".join(titles) if self.short_titles else "")

    def _verdict(self, kind: str) -> str:
        """A finished kind's median speedup with its spread, and how often the poor draft lost ("" before)."""
        sp = self.spreads.get(kind)
        if sp is None or kind == BASE:
            return ""
        color = (ts.ACCEPTED if sp.speedup >= 1 else ts.REJECTED).name()
        words = f"  <b style='color:{color}'>{sp.speedup:.2f}×</b>"
        if sp.pairs > 1:
            words += f" (median of {sp.pairs}, {sp.low:.2f}–{sp.high:.2f}×)"
        if kind == POOR and self.run is not None:
            slower, runs = slower_runs(self.run.traces, kind)
            words += f", slower than the verifier alone in {slower} of {runs} runs"
        return words

    def _on_finished(self) -> None:
        assert self.run is not None and self.curves is not None
        self.timer.stop()
        self.run_button.setEnabled(True)
        self.curves.finish(self.run.traces)
        kinds = [lane.key for lane in self.lanes]
        self.spreads = spreads(self.run.traces, kinds)
        for kind, tr in self.drawn_traces().items():
            sp = self.spreads.get(kind)
            if sp is not None:
                self.results[kind] = (sp.tps_on, float((tr.stats or {}).get("acceptance_rate") or 0.0), sp.speedup)
        self._tick()
        self._draw_bars()
        self.status.setText(f"Done: measured on this machine, same prompt, seed and settings for every lane, "
                            f"{self.repeats} runs each, alternating; the bold curves are the median run "
                            f"(run {self.curves.run}).")
        self.finished.emit(dict(self.results))

    def _draw_bars(self) -> None:
        """Each kind's median tokens/s, the range of its runs, and the verifier alone's median as break-even."""
        assert self.run is not None
        xs, hs, lows, highs, brushes = [], [], [], [], []
        for i, (lane, color) in enumerate(zip(self.lanes, LANE_COLORS)):
            tps = [on for _off, on, _n in run_pairs(self.run.traces, lane.key)]
            if lane.key not in self.results or not tps:
                continue
            median = self.results[lane.key][0]
            xs.append(i)
            hs.append(median)
            lows.append(median - min(tps))
            highs.append(max(tps) - median)
            brushes.append(QColor(color))
        x = np.array(xs, dtype=float)
        self.bars.setOpts(x=x, height=np.array(hs), brushes=brushes)
        self.ranges.setData(x=x, y=np.array(hs), bottom=np.array(lows), top=np.array(highs))
        ax = self.bars_plot.getPlotItem().getAxis("bottom")
        ax.setTicks([[(i, SHORT.get(la.key, la.key)) for i, la in enumerate(self.lanes)]])
        if BASE in self.results:
            self.baseline.setValue(self.results[BASE][0])
            self.baseline.setVisible(True)


"""What makes speculation slow: the same prompt with a well aligned drafter and with poorly aligned
ones, against the verifier alone, measured on this machine.

Every drafted token costs draft time and widens the verifier's pass; only accepted ones pay that
back. With low acceptance the extra work buys nothing and speculation loses to the verifier alone.
The poor drafters: prompt lookup on open chat (when the good one is a draft model) and a weakened
drafter that swaps most proposals for random tokens (talk/drafters.py; still exact, only slower).
"""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QSplitter, QVBoxLayout, QWidget

from app.runs import Lane, RunContext, engine_lane
from app.talk import style as ts
from app.talk.drafters import WeakenedDrafter
from app.talk.lanes_ui import FLUSH_MS, LaneRun, big_plot, lane_figures, redraw_grown
from app.theme import ACCENT, STATE_SOLID
from specdec_core.drafting.drafters import ModelDrafter, PromptLookupDrafter

LANE_COLORS = [STATE_SOLID["plain"], ACCENT, STATE_SOLID["corrected"], STATE_SOLID["rejected"]]

# Prompt presets: prompt lookup shines when the reply repeats the prompt, and fails on open chat.
PRESETS = {
    "the current prompt": None,
    "open chat": "Tell me something surprising about octopuses.",
    "copy-heavy (rewrite)": ("Repeat this sentence exactly, then repeat it once more: The quick brown fox "
                             "jumps over the lazy dog while the cat watches from the warm windowsill."),
}


FORCED_DRAFTING = {"cost_aware": False, "adaptive": False, "tree_nodes": 0}


def slow_lanes(ctx: RunContext, corrupt: float = 0.8) -> list[Lane]:
    s = ctx.session
    lanes = [engine_lane("off", "verifier alone", s.verifier, None, False)]
    good = s.drafter
    if good is not None:
        lanes.append(engine_lane("good", f"{s.drafter_name}", s.verifier, good, True))
    if isinstance(good, ModelDrafter):
        lanes.append(engine_lane("lookup", "prompt lookup (open chat)", s.verifier, PromptLookupDrafter(), True))
    weak = WeakenedDrafter(good, corrupt=corrupt, seed=ctx.config.seed)
    # Its drafting is forced (a fixed γ, no tree, the cost model off): left to itself the cost model stops drafting
    # where drafts do not pay, and the poor draft would never be seen costing anything.
    lanes.append(engine_lane("weak", f"{s.drafter_name or 'random'}, weakened ({corrupt:.0%} random), "
                             f"drafting forced (γ {ctx.config.gamma}, cost model off)", s.verifier, weak, True,
                             FORCED_DRAFTING))
    return lanes


class SlowDemoView(QWidget):
    finished = Signal(object)  # {lane key: (tokens/s, acceptance rate, speedup vs verifier alone)}

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx: RunContext | None = None
        self.run: LaneRun | None = None
        self.lanes: list[Lane] = []
        self.results: dict[str, tuple[float, float, float]] = {}
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 10, 12, 10)
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
        lay.addLayout(top)
        self.rows = QLabel("")
        self.rows.setTextFormat(Qt.TextFormat.RichText)
        ts.set_big(self.rows, 1.2)
        lay.addWidget(self.rows)
        split = QSplitter(Qt.Orientation.Horizontal)
        self.curves_plot = big_plot("Tokens over time", "tokens", "seconds (engine time)")
        self.curves_plot.getPlotItem().addLegend(offset=(10, 10), labelTextSize="12pt")
        self.bars_plot = big_plot("Tokens per second", "tokens/s", "")
        self.bars_plot.getPlotItem().getAxis("left").enableAutoSIPrefix(False)  # "0.5", not "500 (×0.001)"
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.6, brushes=[])
        self.bars_plot.getPlotItem().addItem(self.bars)
        self.baseline = pg.InfiniteLine(angle=0, movable=False,
                                        pen=pg.mkPen(STATE_SOLID["rejected"], width=3, style=Qt.PenStyle.DashLine),
                                        label="verifier alone (break-even)",
                                        labelOpts={"position": 0.5, "color": "#b91c1c",
                                                   "anchors": [(0.5, 1), (0.5, 1)]})
        self.baseline.setVisible(False)
        self.bars_plot.getPlotItem().addItem(self.baseline)
        split.addWidget(self.curves_plot)
        split.addWidget(self.bars_plot)
        lay.addWidget(split, 1)
        self.note = QLabel("Every drafted token costs draft time and widens the verifier's pass; only accepted "
                           "tokens pay that back. Low acceptance → speculation loses.")
        self.note.setWordWrap(True)
        ts.set_big(self.note, 0.95)
        lay.addWidget(self.note)
        self.status = QLabel("")
        ts.set_big(self.status, 0.85)
        lay.addWidget(self.status)
        self.curves: dict[str, pg.PlotDataItem] = {}
        self._drawn: dict[str, int] = {}  # lane -> the rounds its curve shows
        self.timer = QTimer(self)
        self.timer.setInterval(FLUSH_MS)
        self.timer.timeout.connect(self._tick)

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
        self.lanes = slow_lanes(ctx)
        self.run = LaneRun(self.lanes, self)
        pi = self.curves_plot.getPlotItem()
        for c in self.curves.values():
            pi.removeItem(c)
        self.curves, self._drawn = {}, {}
        for lane, color in zip(self.lanes, LANE_COLORS):
            self.curves[lane.key] = pi.plot(pen=pg.mkPen(color, width=4), name=lane.title)
        self.results = {}
        self.bars.setOpts(x=[], height=[], brushes=[])
        self.status.setText("Running each drafter on the same prompt, one after the other…")
        self.run.lane_started.connect(lambda k: self.status.setText(
            f"Running: {next(la.title for la in self.lanes if la.key == k)}…"))
        self.run.finished.connect(self._on_finished)
        self.run.start(ctx)
        self.run_button.setEnabled(False)
        self.timer.start()

    def _tick(self) -> None:
        if self.run is None:
            return
        for key, curve in self.curves.items():
            redraw_grown(curve, self.run.traces[key], self._drawn, key)
        self._rows()

    def _rows(self) -> None:
        assert self.run is not None
        base = (self.run.traces["off"].stats or {}).get("tokens_per_s") or 0.0
        lines = []
        for lane, color in zip(self.lanes, LANE_COLORS):
            tr = self.run.traces[lane.key]
            if not tr.tokens:
                continue
            tps = (tr.stats or {}).get("tokens_per_s") or 0.0
            sp = f"  <b style='color:{(ts.ACCEPTED if tps >= base else ts.REJECTED).name()}'>{tps / base:.2f}×</b>" \
                if base and tps and lane.key != "off" else ""
            lines.append(f"<span style='color:{color.name()}'>■</span> <b>{html.escape(lane.title)}</b>: "
                         f"{lane_figures(tr)}{sp}")
        self.rows.setText("<br>".join(lines))

    def _on_finished(self) -> None:
        self._tick()
        self.timer.stop()
        self.run_button.setEnabled(True)
        assert self.run is not None
        base = (self.run.traces["off"].stats or {}).get("tokens_per_s") or 0.0
        xs, hs, brushes = [], [], []
        for i, (lane, color) in enumerate(zip(self.lanes, LANE_COLORS)):
            s = self.run.traces[lane.key].stats or {}
            tps = float(s.get("tokens_per_s") or 0.0)
            self.results[lane.key] = (tps, float(s.get("acceptance_rate") or 0.0), tps / base if base else 0.0)
            xs.append(i)
            hs.append(tps)
            brushes.append(QColor(color))
        self.bars.setOpts(x=np.array(xs, dtype=float), height=np.array(hs), brushes=brushes)
        ax = self.bars_plot.getPlotItem().getAxis("bottom")
        ax.setTicks([[(i, SHORT.get(la.key, la.key)) for i, la in enumerate(self.lanes)]])
        if base:
            self.baseline.setValue(base)
            self.baseline.setVisible(True)
        self.status.setText("Done: measured on this machine, same prompt, seed and settings for every lane.")
        self.finished.emit(dict(self.results))


SHORT = {"off": "verifier alone", "good": "good drafter", "lookup": "prompt lookup", "weak": "weakened"}

"""The speedup formulas, filled in with live numbers, and a γ slider that moves the predicted point.

Leviathan et al. 2023 (eq. 1 and theorem 3.8), as specdec_core.stats defines them:
    expected tokens per verifier call  E = (1 − α^(γ+1)) / (1 − α)
    predicted speedup                  S = E / (γ·c + 1)
with α the acceptance rate, γ the draft length and c the cost of one draft token relative to one
verifier call. Speculation loses when S < 1: the break-even line.
"""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QPushButton, QSlider, QVBoxLayout, QWidget

from app.graphs.plots import legend_below
from app.speedup import TreePrediction, measured_costs, tree_prediction
from app.talk import style as ts
from app.talk.lanes_ui import big_plot
from app.theme import ACCENT, STATE_SOLID
from app.trace import ReplyTrace
from specdec_core.stats import expected_tokens_per_call, predicted_speedup

GAMMAS = np.arange(1, 17, dtype=float)


def break_even_alpha(gamma: float, c: float) -> float | None:
    """The acceptance rate above which speculation wins at this γ and c (None: it never does)."""
    if predicted_speedup(0.999, gamma, c) < 1.0:
        return None
    lo, hi = 0.0, 0.999
    if predicted_speedup(lo, gamma, c) >= 1.0:
        return 0.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if predicted_speedup(mid, gamma, c) >= 1.0:
            hi = mid
        else:
            lo = mid
    return hi


class Explainer(QWidget):
    values_changed = Signal(float, int, float)  # α, γ, c

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.alpha, self.gamma, self.c = 0.7, 4, 0.05
        self.measured: tuple[float, float] | None = None  # (mean γ, measured speedup)
        self.tree: TreePrediction | None = None  # a live reply that drafted trees: what its trees predict
        self.tree_measured: float | None = None
        self.tree_gamma = 0.0  # the trees' mean main line: where their prediction is plotted
        self.live_source = ""
        lay = QVBoxLayout(self)
        lay.setContentsMargins(14, 12, 14, 12)
        self.formulas = QLabel("")
        self.formulas.setTextFormat(Qt.TextFormat.RichText)
        ts.set_big(self.formulas, 1.35)
        lay.addWidget(self.formulas)
        self.verdict = QLabel("")
        self.verdict.setTextFormat(Qt.TextFormat.RichText)
        self.verdict.setWordWrap(True)
        ts.set_big(self.verdict, 1.05)
        lay.addWidget(self.verdict)
        lay.addLayout(self._build_sliders())
        lay.addWidget(self._build_plot(), 1)
        row = QHBoxLayout()
        self.source = QLabel("")
        self.source.setObjectName("muted")
        ts.set_big(self.source, 0.8)
        row.addWidget(self.source, 1)
        self.live_button = QPushButton("Use live values")
        self.live_button.setToolTip("Take α, γ and c from the reply shown in the graphs")
        self.live_button.setEnabled(False)
        row.addWidget(self.live_button)
        lay.addLayout(row)
        self.set_values(self.alpha, self.gamma, self.c)

    def _build_sliders(self) -> QGridLayout:
        """α, γ and c, each a slider with its value beside it, in one row: three rows of them put the plot under the
        fold of the demo's theory step at 1280×800."""
        grid = QGridLayout()
        self.sliders: dict[str, QSlider] = {}
        self.slider_labels: dict[str, QLabel] = {}
        for row, (name, lo, hi, tip) in enumerate((
            ("α", 0, 99, "acceptance rate: accepted / drafted"),
            ("γ", 1, 16, "draft length: tokens drafted per round"),
            ("c", 0, 100, "one draft token's cost, relative to one verifier call"),
        )):
            label = QLabel(name)
            ts.set_big(label, 1.2, bold=True)
            label.setToolTip(tip)
            s = QSlider(Qt.Orientation.Horizontal)
            s.setRange(lo, hi)
            s.setToolTip(tip)
            s.valueChanged.connect(self._from_sliders)
            value = QLabel("")
            ts.set_big(value, 1.1)
            value.setMinimumWidth(value.fontMetrics().horizontalAdvance("0.00 "))
            grid.addWidget(label, 0, 3 * row)
            grid.addWidget(s, 0, 3 * row + 1)
            grid.addWidget(value, 0, 3 * row + 2)
            grid.setColumnStretch(3 * row + 1, 1)
            self.sliders[name], self.slider_labels[name] = s, value
        return grid

    def _build_plot(self) -> pg.PlotWidget:
        """The predicted speedup over γ, the point at this γ, the measured one, and break-even."""
        self.plot = big_plot("Predicted speedup over γ", "speedup ×", "γ (draft length)")
        pi = self.plot.getPlotItem()
        legend = legend_below(pi, 4, "12pt")  # under the plot: over it, it covered the curve's high end
        self.curve = pi.plot(pen=pg.mkPen(ACCENT, width=4), name="predicted for α, c")
        self.point = pi.plot(pen=None, symbol="o", symbolSize=22, symbolBrush=ACCENT, symbolPen=pg.mkPen("k", width=2),
                             name="at this γ")
        self.measured_point = pi.plot(pen=None, symbol="star", symbolSize=26,
                                      symbolBrush=STATE_SOLID["corrected"], symbolPen=pg.mkPen("k", width=1),
                                      name="measured")
        # Named in the legend, not by a label on the line: wherever on the line a label sits, some α and c make the
        # curve cross 1× there, under the label's words.
        self.break_even = pg.InfiniteLine(pos=1.0, angle=0, movable=False,
                                          pen=pg.mkPen(STATE_SOLID["rejected"], width=3, style=Qt.PenStyle.DashLine))
        pi.addItem(self.break_even)
        legend.addItem(pg.PlotDataItem(pen=self.break_even.pen), "break-even: below it, speculation is slower")
        pi.setXRange(1, 16)
        return self.plot

    # -- values ----------------------------------------------------------------------------------------
    def set_values(self, alpha: float, gamma: int, c: float, source: str = "") -> None:
        self.alpha = min(max(alpha, 0.0), 0.99)
        self.gamma = int(min(max(round(gamma), 1), 16))
        self.c = min(max(c, 0.0), 1.0)
        for name, v in (("α", round(self.alpha * 100)), ("γ", self.gamma), ("c", round(self.c * 100))):
            s = self.sliders[name]
            s.blockSignals(True)
            s.setValue(v)
            s.blockSignals(False)
        if source:
            self.source.setText(source)
        self._draw()

    def set_gamma(self, gamma: int) -> None:
        self.sliders["γ"].setValue(gamma)

    def set_from_trace(self, trace: ReplyTrace | None) -> bool:
        """α, mean γ and c measured in a reply; its measured speedup too when it has a baseline."""
        s = trace.get_stats() if trace is not None else None
        if s is None or not s.drafted:
            return False
        gamma = s.mean_gamma or float((trace.config or {}).get("gamma", 4))
        sp = trace.speedup()
        costs = measured_costs(trace.rounds, trace.baseline_tps)
        self.tree = tree_prediction(trace.rounds, costs)
        self.tree_measured = sp
        if self.tree is not None:  # a tree's nodes are not a chain's γ: its main line is
            mains = [r.drafted for r in trace.rounds if r.tree]
            gamma = sum(mains) / len(mains)
            self.tree_gamma = gamma
        self.measured = (gamma, sp) if sp else None
        self.set_values(s.acceptance_rate, round(gamma), s.c,
                        f"live: α, γ and c measured in the reply by {trace.verifier or 'the verifier'}"
                        f"{' ← ' + trace.drafter if trace.drafter else ''}")
        return True

    def _from_sliders(self) -> None:
        self.alpha = self.sliders["α"].value() / 100
        self.gamma = self.sliders["γ"].value()
        self.c = self.sliders["c"].value() / 100
        self._draw()

    # -- drawing ---------------------------------------------------------------------------------------
    def expected_tokens(self) -> float:
        return expected_tokens_per_call(self.alpha, self.gamma)

    def predicted(self) -> float:
        return predicted_speedup(self.alpha, self.gamma, self.c)

    def _draw(self) -> None:
        a, g, c = self.alpha, self.gamma, self.c
        e = expected_tokens_per_call(a, g)
        sp = predicted_speedup(a, g, c)
        # A reply that drafted trees is predicted from its trees (the words below): the chain's figures are only
        # for comparison, named so and not coloured as a verdict.
        chain = "a chain's " if self.tree is not None else ""
        color = ts.MUTED if chain else ts.ACCEPTED if sp >= 1 else ts.REJECTED
        # A formula never breaks across lines ("(1 − α)" split after its "−" reads as two formulas); each is
        # filled in on the line under it, so that a 1024-pixel window holds them at this size.
        verdict = f"<b style='color:{color.name()}'>{sp:.2f}×</b>"
        rows = ((f"{chain}tokens per verifier call&nbsp;", "E = (1 − α<sup>γ+1</sup>) / (1 − α)"),
                ("", f"&nbsp;&nbsp;= (1 − {a:.2f}<sup>{g + 1}</sup>) / (1 − {a:.2f}) = <b>{e:.2f}</b>"),
                (f"{chain}speedup", "S = E / (γ·c + 1)"),
                ("", f"&nbsp;&nbsp;= {e:.2f} / ({g} × {c:.2f} + 1) = {verdict}"))
        self.formulas.setText("<table cellspacing=4>" + "".join(
            f"<tr><td>{name}</td><td style='white-space:nowrap'>{formula}</td></tr>" for name, formula in rows)
            + "</table>")
        be = break_even_alpha(g, c)
        best = int(GAMMAS[int(np.argmax([predicted_speedup(a, x, c) for x in GAMMAS]))])
        if be is None:
            words = f"At γ = {g} and c = {c:.2f}, even perfect acceptance cannot pay for drafting."
        else:
            words = (f"At γ = {g} and c = {c:.2f}, speculation wins when α > <b>{be:.2f}</b>"
                     f" (now {a:.2f}: <b style='color:{color.name()}'>{'faster' if sp >= 1 else 'slower'}</b>).")
        if self.tree is not None:
            words = ("This reply drafted <b>trees</b>: the chain formula above is for comparison only. "
                     + html.escape(self.tree.words(self.tree_measured)))
            self.verdict.setText(words)
        else:
            self.verdict.setText(f"{words} Best γ for these α and c: <b>{best}</b>.")
        for name, text in (("α", f"{a:.2f}"), ("γ", str(g)), ("c", f"{c:.2f}")):
            self.slider_labels[name].setText(text)
        curve = np.array([predicted_speedup(a, x, c) for x in GAMMAS])
        self.curve.setData(GAMMAS, curve)
        self._draw_point(g, sp)
        if self.measured is not None:
            self.measured_point.setData([self.measured[0]], [self.measured[1]])
        else:
            self.measured_point.setData([], [])
        shown = self.point.getData()[1]
        top = max(float(curve.max()), float(shown[0]) if shown is not None and len(shown) else sp,
                  self.measured[1] if self.measured else 0.0, 1.2)
        self.plot.getPlotItem().setYRange(0, top * 1.1)
        self.values_changed.emit(a, g, c)

    def _draw_point(self, gamma: int, chain: float) -> None:
        """The dot: the chain's prediction at this γ; for a reply that drafted trees, what its trees predict (none
        without the measured costs a tree's prediction needs), beside the measured star."""
        legend = self.plot.getPlotItem().legend
        label = legend.getLabel(self.point) if legend is not None else None
        if self.tree is None:
            self.point.setData([gamma], [chain])
            text = "at this γ"
        elif self.tree.speedup is not None:
            self.point.setData([self.tree_gamma], [self.tree.speedup])
            text = "predicted from its trees"
        else:
            self.point.setData([], [])
            text = "predicted from its trees (needs a baseline)"
        if label is not None and label.text != text:
            label.setText(text)

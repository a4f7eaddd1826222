"""Theory against practice: the predicted speedup over γ for the measured α and c (Leviathan et al.), the same
curve with this machine's measured costs, the measured point, and the break-even line (speedup = 1) under which
speculation loses. A reply of draft trees is predicted from its measured trees; the curves stay a chain's, for
comparison. The panel also writes the sentence under the plots that says why theory and practice differ."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from app.graphs.figures import ReplyFigures
from app.graphs.panel import Range
from app.graphs.plots import legend_below, make_plot
from app.speedup import measured_costs, nice_ceiling, practical_speedup, tree_prediction, why_they_differ
from app.theme import ACCENT, STATE_SOLID
from specdec_core.stats import predicted_speedup

GAMMA_AXIS = np.arange(1, 17, dtype=float)


class TheoryPanel:
    name = "theory"

    def __init__(self) -> None:
        self.plot = make_plot("Theory vs practice", "speedup", "γ (draft length)", count_bottom=True)
        pi = self.plot.getPlotItem()
        legend_below(pi, 2, "7pt")
        self.theory_curve = pi.plot(pen=pg.mkPen(ACCENT, width=2, style=Qt.PenStyle.DashLine),
                                    name="textbook")
        self.practical_curve = pi.plot(pen=pg.mkPen(ACCENT, width=2.5), name="measured costs")
        self.predicted_point = pi.plot(pen=None, symbol="o", symbolSize=8, symbolBrush=None,
                                       symbolPen=pg.mkPen(ACCENT, width=2))
        self.measured_point = pi.plot(pen=None, symbol="star", symbolSize=15,
                                      symbolBrush=STATE_SOLID["corrected"], symbolPen=None, name="measured")
        self.break_even = pg.InfiniteLine(pos=1.0, angle=0, movable=False,
                                          pen=pg.mkPen(STATE_SOLID["rejected"], width=1.2,
                                                       style=Qt.PenStyle.DashLine),
                                          )
        pi.addItem(self.break_even)
        pi.legend.addItem(pg.PlotDataItem(pen=self.break_even.pen), "break-even")
        self.plot.setToolTip(
            "The predicted speedup over γ for the measured α and c. Textbook (dashed): if checking γ+1 tokens cost one "
            "decode step (Leviathan et al.). Measured costs: with this machine's measured draft and check costs. The "
            "star is the measured speedup; under break-even (1×) speculation is slower than the verifier alone.")
        self.caption = ""  # α, c, γ of the drawn reply (or what it drafted)
        self.words = ""  # why theory and practice differ, in words
        self.top = 2.0  # the y axis's top

    def draw(self, f: ReplyFigures) -> None:
        top = 2.0
        if f.tally.drafted:
            top = self._draw_drafted(f)
        else:
            for item in (self.theory_curve, self.practical_curve, self.predicted_point, self.measured_point):
                item.setData([], [])
            self.caption = "no draft tokens yet" if f.n else ""
            self.words = ""
        self.top = nice_ceiling(top * 1.15)  # a little room above the highest point; the legend is under the plot

    def _draw_drafted(self, f: ReplyFigures) -> float:
        """The curves, points and words of a reply that drafted; returns the highest speedup drawn."""
        a, c, g = f.alpha, f.c, f.mean_gamma
        sp = f.measured_speedup
        costs = measured_costs(f.rounds_so_far(), f.baseline_tps, f.verify_s_per_token)
        pred = np.array([predicted_speedup(a, float(x), c) for x in GAMMA_AXIS])
        self.theory_curve.setData(GAMMA_AXIS, pred)
        top = max(2.0, float(pred.max()))
        self.predicted_point.setData([g], [predicted_speedup(a, g, c)])
        if costs is not None:
            practical = np.array([practical_speedup(a, float(x), costs) for x in GAMMA_AXIS])
            self.practical_curve.setData(GAMMA_AXIS, practical)
            top = max(top, float(practical.max()))
            self.words = why_they_differ(a, g, c, costs, predicted_speedup(a, g, c), practical_speedup(a, g, costs))
        else:
            self.practical_curve.setData([], [])
            self.words = ("Without a verifier-alone baseline only the textbook curve can be drawn "
                          "(it assumes checking γ+1 tokens costs one decode step).")
        if sp is not None:
            self.measured_point.setData([g], [sp])
            top = max(top, sp)
            if f.trace is not None and f.trace.finished:
                verdict = "faster than" if sp >= 1.0 else "slower than"
                self.words += f" Measured: {sp:.2f}×, {verdict} the verifier alone."
        else:
            self.measured_point.setData([], [])
        best = int(GAMMA_AXIS[int(np.argmax(pred))])
        self.caption = f"α {a:.2f} · c {c:.3f} · mean γ {g:.1f} · textbook best γ {best}"
        return self._draw_tree(f, costs, sp, top)

    def _draw_tree(self, f: ReplyFigures, costs: object, sp: float | None, top: float) -> float:
        """A reply of draft trees: the chain formula does not describe a tree, so the points and words are
        predicted from the measured trees (the curves stay a chain's, for comparison)."""
        tree = tree_prediction(f.rounds_so_far(), costs)
        if tree is None:
            return top
        self.caption = f"draft trees, {tree.nodes:.1f} candidates a round · the curves are a chain's, for comparison"
        self.words = tree.words(sp)
        x = min(tree.nodes, float(GAMMA_AXIS[-1]))
        if tree.speedup is not None:
            self.predicted_point.setData([x], [tree.speedup])
            top = max(top, tree.speedup)
        if sp is not None:
            self.measured_point.setData([x], [sp])
        return top

    def ranges(self, f: ReplyFigures) -> tuple[Range, Range]:
        return (1.0, float(GAMMA_AXIS[-1])), (0.0, self.top)

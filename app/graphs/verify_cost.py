"""The cost of checking k tokens on this machine: each verifier pass's time by the positions it fed, the curve
the cost model reads from them (cost.VerifyCost: recent medians, never falling as k grows), and the
verifier-alone step that the textbook formula assumes every check costs."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt

from app.graphs.figures import ReplyFigures
from app.graphs.panel import Range
from app.graphs.plots import legend_below, make_plot, with_alpha
from app.speedup import nice_ceiling
from app.theme import ACCENT, STATE_SOLID, VERIFY_COLOR


class VerifyCostPanel:
    name = "cost"

    def __init__(self) -> None:
        self.plot = make_plot("Cost of checking k tokens", "ms per pass", "tokens fed (k)", count_bottom=True)
        pi = self.plot.getPlotItem()
        legend_below(pi, 3, "7pt")
        self.passes = pi.plot(pen=None, symbol="o", symbolSize=4, symbolPen=None,
                              symbolBrush=with_alpha(VERIFY_COLOR, 110), name="a pass")
        self.curve = pi.plot(pen=pg.mkPen(ACCENT, width=2.5), symbol="o", symbolSize=6,
                             symbolBrush=ACCENT, symbolPen=None, name="cost model")
        self.step_line = pg.InfiniteLine(angle=0, movable=False,
                                         pen=pg.mkPen(STATE_SOLID["plain"], width=1.5, style=Qt.PenStyle.DashLine))
        self.step_line.setVisible(False)
        pi.addItem(self.step_line)
        pi.legend.addItem(pg.PlotDataItem(pen=self.step_line.pen), "verifier-alone step")
        self.plot.setToolTip(
            "What one verifier pass cost in this reply, by the number of positions it fed (the last token and "
            "the drafts, or a tree's nodes). The line is what the cost model reads from these passes to size "
            "draft trees: the median of each k's recent passes, never falling as k grows. The textbook "
            "formula assumes every check costs one plain step (dashed).")

    def draw(self, f: ReplyFigures) -> None:
        self.passes.setData(f.rows.data, f.pass_ms.data, connect="finite")
        curve = f.cost.seconds
        self.curve.setData(np.array(list(curve), dtype=float), np.array(list(curve.values())) * 1e3)
        step = f.verify_s_per_token
        if step:
            self.step_line.setValue(step * 1e3)
        self.step_line.setVisible(bool(step))

    def ranges(self, f: ReplyFigures) -> tuple[Range, Range]:
        rows = f.rows.data[np.isfinite(f.rows.data)]
        passes = f.pass_ms.data[np.isfinite(f.pass_ms.data)]
        # The y axis follows the cost model's medians (and the plain step), not a pass slowed by other work.
        top = max([*(s * 1e3 for s in f.cost.seconds.values()), (f.verify_s_per_token or 0.0) * 1e3,
                   float(np.percentile(passes, 90)) if passes.size else 0.0, 1.0])
        return (0.5, max(8.0, nice_ceiling(float(rows.max()) if rows.size else 1.0)) + 0.5), \
            (0.0, nice_ceiling(1.4 * top))

"""Time per round, stacked: draft, verify, overhead."""

from __future__ import annotations

import numpy as np

from app.graphs.figures import ReplyFigures
from app.graphs.panel import Range
from app.graphs.plots import legend_below, make_plot, with_alpha
from app.speedup import nice_ceiling
from app.theme import DRAFT_COLOR, OVERHEAD_COLOR, VERIFY_COLOR


class RoundTimePanel:
    name = "time"

    def __init__(self) -> None:
        self.plot = make_plot("Time per round", "ms", "round", count_bottom=True)
        pi = self.plot.getPlotItem()
        legend_below(pi, 3)
        self.total_curve = pi.plot(stepMode="center", fillLevel=0, brush=with_alpha(OVERHEAD_COLOR, 170),
                                   pen=None, name="overhead")
        self.verify_curve = pi.plot(stepMode="center", fillLevel=0, brush=with_alpha(VERIFY_COLOR, 200),
                                    pen=None, name="verify")
        self.draft_curve = pi.plot(stepMode="center", fillLevel=0, brush=with_alpha(DRAFT_COLOR, 220),
                                   pen=None, name="draft")

    def draw(self, f: ReplyFigures) -> None:
        edges = np.arange(f.t.n + 1, dtype=float) + 0.5  # step curves: round i spans [i+0.5, i+1.5]
        self.draft_curve.setData(edges, f.draft_ms.data)
        self.verify_curve.setData(edges, f.verify_ms.data)
        self.total_curve.setData(edges, f.total_ms.data)

    def ranges(self, f: ReplyFigures) -> tuple[Range, Range]:
        return f.rounds_x(), (0.0, nice_ceiling(float(f.total_ms.data.max()) if f.t.n else 1.0))

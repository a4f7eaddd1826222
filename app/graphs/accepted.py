"""Accepted per round against the draft tokens checked (a tree round: all its candidates), with the running
acceptance rate (accepted / checked) on the right axis."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from app.graphs.figures import ReplyFigures
from app.graphs.panel import Range
from app.graphs.plots import make_plot, right_axis_view, small_font, with_alpha
from app.theme import ACCENT, STATE_SOLID


class AcceptedPanel:
    name = "acc"

    def __init__(self) -> None:
        self.plot = make_plot("Accepted per round", "tokens", "round", count_left=True, count_bottom=True)
        pi = self.plot.getPlotItem()
        self.drafted_curve = pi.plot(stepMode="center", fillLevel=0,
                                     brush=with_alpha(STATE_SOLID["rejected"], 70), pen=None)
        self.accepted_curve = pi.plot(stepMode="center", fillLevel=0,
                                      brush=with_alpha(STATE_SOLID["accepted"], 200), pen=None)
        self.rate_vb = right_axis_view(pi, "acceptance rate")
        f = small_font()
        pi.getAxis("right").setTickFont(f)
        pi.getAxis("right").label.setFont(f)
        self.rate_vb.setXLink(pi)
        self.rate_vb.setYRange(0, 1.02, padding=0)
        self.rate_curve = pg.PlotDataItem(pen=pg.mkPen(ACCENT, width=2))
        self.rate_vb.addItem(self.rate_curve)
        pi.vb.sigResized.connect(lambda: self.rate_vb.setGeometry(pi.vb.sceneBoundingRect()))

    def draw(self, f: ReplyFigures) -> None:
        edges = np.arange(f.t.n + 1, dtype=float) + 0.5  # step curves: round i spans [i+0.5, i+1.5]
        self.drafted_curve.setData(edges, f.drafted.data)
        self.accepted_curve.setData(edges, f.accepted.data)
        self.rate_curve.setData(np.arange(1, f.t.n + 1, dtype=float), f.rate.data, connect="finite")

    def ranges(self, f: ReplyFigures) -> tuple[Range, Range]:
        return f.rounds_x(), (0.0, max(2, f.max_gamma) + 0.5)

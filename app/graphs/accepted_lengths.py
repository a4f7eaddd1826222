"""Accepted-length histogram: rounds that accepted 0, 1, ... γ draft tokens (the engine's own tally)."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from app.graphs.figures import ReplyFigures
from app.graphs.panel import Range
from app.graphs.plots import make_plot
from app.speedup import nice_ceiling
from app.theme import STATE_SOLID


class AcceptedLengthsPanel:
    name = "hist"

    def __init__(self) -> None:
        self.plot = make_plot("Accepted length per round", "rounds", "draft tokens accepted", count_left=True,
                              count_bottom=True)
        self.bars = pg.BarGraphItem(x=[0], height=[0], width=0.8, brush=STATE_SOLID["accepted"])
        self.plot.getPlotItem().addItem(self.bars)
        self._drawn: tuple[int, ...] | None = None

    def draw(self, f: ReplyFigures) -> None:
        if f.hist == self._drawn:  # a bar item rebuilds its picture on every setOpts
            return
        self._drawn = f.hist
        if f.hist:
            self.bars.setOpts(x=np.arange(len(f.hist)), height=np.array(f.hist, dtype=float))
        else:
            self.bars.setOpts(x=[0], height=[0])

    def ranges(self, f: ReplyFigures) -> tuple[Range, Range]:
        return (-0.5, max(len(f.hist), 2) - 0.5), (0.0, nice_ceiling(max(max(f.hist, default=0), 1)) * 1.05)

"""Acceptance by position in the round: of the draft tokens at position k, the share the verifier accepted."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg

from app.graphs.figures import ReplyFigures
from app.graphs.panel import Range
from app.graphs.plots import make_plot
from app.theme import VERIFY_COLOR


class PositionsPanel:
    name = "pos"

    def __init__(self) -> None:
        self.plot = make_plot("Acceptance by draft position", "accepted / drafted", "draft position",
                              count_bottom=True)
        self.bars = pg.BarGraphItem(x=[1], height=[0], width=0.8, brush=VERIFY_COLOR)
        self.plot.getPlotItem().addItem(self.bars)
        self._drawn: tuple | None = None

    def draw(self, f: ReplyFigures) -> None:
        key = (tuple(f.tally.drafted_at), tuple(f.tally.accepted_at))
        if key == self._drawn:  # a bar item rebuilds its picture on every setOpts
            return
        self._drawn = key
        if f.tally.drafted_at:
            rates = np.array(f.tally.accepted_at, dtype=float) / np.array(f.tally.drafted_at, dtype=float)
            self.bars.setOpts(x=np.arange(1, len(rates) + 1), height=rates)
        else:
            self.bars.setOpts(x=[1], height=[0])

    def ranges(self, f: ReplyFigures) -> tuple[Range, Range]:
        return (0.5, max(len(f.tally.drafted_at), 1) + 0.5), (0.0, 1.02)

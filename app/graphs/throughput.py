"""Throughput: tokens/s over engine time (running mean, and per round), with the verifier-alone baseline
measured on this machine as a dashed line."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from app.graphs.figures import ReplyFigures
from app.graphs.panel import Range
from app.graphs.plots import make_plot, with_alpha
from app.speedup import nice_ceiling
from app.theme import ACCENT, STATE_SOLID


class ThroughputPanel:
    name = "tps"

    def __init__(self, foreground: QColor) -> None:
        self.plot = make_plot("Throughput", "tokens/s", "seconds (engine time)")
        pi = self.plot.getPlotItem()
        # Per-round rates spike (a fully accepted round is fast): drawn faintly, kept out of the y range.
        self.round_curve = pg.PlotDataItem(pen=pg.mkPen(with_alpha(ACCENT, 90), width=1))
        pi.addItem(self.round_curve)
        self.curve = pi.plot(pen=pg.mkPen(ACCENT, width=2.5), name="running mean")
        for c in (self.round_curve, self.curve):
            c.setClipToView(True)
            c.setDownsampling(auto=True, method="peak")
        self.baseline_line = pg.InfiniteLine(angle=0, movable=False,
                                             pen=pg.mkPen(STATE_SOLID["plain"], width=1.5,
                                                          style=Qt.PenStyle.DashLine),
                                             label="", labelOpts={"position": 0.98, "color": foreground,
                                                                  "anchors": [(1, 0), (1, 0)]})
        self.baseline_line.setVisible(False)
        pi.addItem(self.baseline_line)

    def draw(self, f: ReplyFigures) -> None:
        self.curve.setData(f.t.data, f.tps.data, connect="finite")
        self.round_curve.setData(f.t.data, f.tps_round.data, connect="finite")
        # Shown first: a hidden line's label ignores a new value (a baseline that lands after the reply kept the
        # last reply's figure in its label).
        self.baseline_line.setVisible(bool(f.baseline_tps))
        if f.baseline_tps:
            self.baseline_line.setValue(f.baseline_tps)
            self.baseline_line.label.setFormat(f"verifier alone {f.baseline_tps:.1f} tok/s")
            # At the right end, on the side of the line the running mean is not on: the text stays clear of
            # the curve it is read against (below it when speculation is faster, above when slower).
            means = f.tps.data[np.isfinite(f.tps.data)]
            side = (1, 0) if not len(means) or means[-1] >= f.baseline_tps else (1, 1)
            if self.baseline_line.label.anchors[0] != side:
                self.baseline_line.label.anchors = [side, side]
                self.baseline_line.label.updatePosition()

    def ranges(self, f: ReplyFigures) -> tuple[Range, Range]:
        running = f.tps.data[np.isfinite(f.tps.data)]
        per_round = f.tps_round.data[np.isfinite(f.tps_round.data)]
        top = max(float(running.max()) if running.size else 0.0, f.baseline_tps or 0.0,
                  float(np.percentile(per_round, 90)) if per_round.size else 0.0, 1.0)
        return (0.0, nice_ceiling(float(f.t.data[-1]) if f.t.n else 1.0)), (0.0, nice_ceiling(1.12 * top))

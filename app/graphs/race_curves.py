"""Repeated runs on one plot: tokens over time for every run of every lane kind on one shared clock, each run
faint, one run of each kind bold. While the runs go on, the bold run is the one going on; once they have finished,
the median run (the one whose speedup is the headline's median, app/speedup.median_run), so the lanes the room sees
agree with the figure beside them, and the faint runs around them show the spread. The window's Race tab, talk
mode's race and "What makes it slow" share it."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtGui import QColor

from app.graphs.plots import with_alpha
from app.speedup import median_run, run_key
from app.trace import ReplyTrace

FAINT_ALPHA = 80  # the other runs: visible as a spread, not read as the result


def run_of(key: str) -> int:
    """The run a lane key belongs to (app/speedup.run_key): "off" and "weak" are run 1, "off 2" run 2, ..."""
    _kind, _, n = key.partition(" ")
    return int(n) if n else 1


def kind_of(key: str) -> str:
    return key.partition(" ")[0]


class RunCurves:
    """One bold curve per lane kind (named: they make the legend) over a faint curve per run.

    `base` and `measured` are the two kinds whose ratio picks the median run (the verifier alone and speculation
    in a race)."""

    def __init__(self, pi: pg.PlotItem, colors: dict[str, QColor], names: dict[str, str], width: float,
                 base: str = "off", measured: str = "on") -> None:
        self.pi = pi
        self.colors = colors
        self.width = width
        self.base, self.measured = base, measured
        self.bold = {kind: pi.plot(pen=pg.mkPen(colors[kind], width=width), name=names[kind]) for kind in colors}
        for curve in self.bold.values():
            curve.setZValue(2)
        first = next(iter(colors.values()))
        self.others = pi.plot(pen=pg.mkPen(with_alpha(first, FAINT_ALPHA * 2), width=max(1.0, width / 2)),
                              name="other runs")  # a legend sample only: the runs are drawn per lane below
        self.faint: dict[str, pg.PlotDataItem] = {}
        self.run = 1  # the run drawn bold
        self.median: int | None = None  # the median run, once every run has finished
        self._drawn: dict[str, int] = {}  # curve -> the rounds it shows (a curve is redrawn only when it grew)

    def start(self, keys: list[str]) -> None:
        """New runs whose lanes are `keys` (run_key's): a faint curve for each, none drawn yet."""
        for curve in self.faint.values():
            self.pi.removeItem(curve)
        self.faint = {}
        for key in keys:
            pen = pg.mkPen(with_alpha(self.colors[kind_of(key)], FAINT_ALPHA), width=max(1.0, self.width / 2))
            self.faint[key] = curve = self.pi.plot(pen=pen)
            curve.setZValue(1)
        for curve in (*self.bold.values(), self.others):
            curve.setData([], [])
        self.run, self.median, self._drawn = 1, None, {}

    @property
    def runs(self) -> int:
        return max((run_of(key) for key in self.faint), default=0)

    def follow(self, key: str) -> None:
        """Draw the run of the lane that has just started bold (while the runs go on)."""
        if key in self.faint:
            self._bold(run_of(key))

    def finish(self, traces: dict[str, ReplyTrace]) -> int | None:
        """Every run has finished: the median run bold (None when none finished: the bold run stays)."""
        self.median = median_run(traces, self.base, self.measured)
        if self.median is not None:
            self._bold(self.median)
        self.draw(traces)
        return self.median

    def forget(self) -> None:
        """Redraw every curve at the next `draw` (something else cut them, e.g. a replay)."""
        self._drawn = {}

    def _bold(self, run: int) -> None:
        if run != self.run:
            self.run = run
            for kind in self.bold:
                self._drawn.pop(f"bold {kind}", None)

    def draw(self, traces: dict[str, ReplyTrace]) -> list[str]:
        """Redraw the curves whose lane has rounds not drawn yet; returns the names of the curves redrawn (a lane
        key, or "bold " and its kind)."""

        redrawn = []
        items = [(key, key, curve) for key, curve in self.faint.items()]
        items += [(f"bold {kind}", run_key(kind, self.run), curve) for kind, curve in self.bold.items()]
        for name, key, curve in items:
            trace = traces.get(key)
            if trace is None or self._drawn.get(name) == len(trace.rounds):
                continue
            curve.setData(*curve_data(trace))
            self._drawn[name] = len(trace.rounds)
            redrawn.append(name)
        return redrawn

    def words(self, traces: dict[str, ReplyTrace]) -> str:
        """Which pair of a race is bold, and its own figures: the lanes drawn, in numbers ("" before the race
        finished)."""
        if self.median is None:
            return ""
        tps_off, tps_on = (float((traces[run_key(kind, self.median)].stats or {}).get("tokens_per_s") or 0.0)
                           for kind in (self.base, self.measured))
        which = f"pair {self.median} of {self.runs}, the median" if self.runs > 1 else "the one pair"
        return f"bold: {which}: {tps_off:.1f} → {tps_on:.1f} tok/s ({tps_on / tps_off:.2f}×)"


def race_curves(pi: pg.PlotItem, colors: dict[str, QColor], width: float) -> RunCurves:
    """A race's curves: speculation off and on (`colors` by "off" and "on")."""
    return RunCurves(pi, colors, {"off": "speculation off", "on": "speculation on"}, width)


def curve_data(tr: ReplyTrace, until: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(engine seconds, reply tokens) at the end of each round, from (0, 0); cut at `until` if given."""
    rounds = [r for r in tr.rounds if until is None or r.t_end <= until]
    t = np.array([0.0] + [r.t_end for r in rounds])
    n = np.array([0.0] + [float(r.tokens_after) for r in rounds])
    return t, n

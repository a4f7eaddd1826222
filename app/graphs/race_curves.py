"""A race's curves: tokens over time for every run of a race on one shared clock, each run faint, one off/on pair
bold. While the race runs, the bold pair is the one running; once it has finished, the median pair (the pair whose
speedup is the headline's median, app/runs.median_run), so the lanes the room sees agree with the figure beside
them, and the faint runs around them show the spread. The window's Race tab and talk mode's race share it."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtGui import QColor

from app.graphs.plots import with_alpha
from app.runs import median_run, run_key
from app.trace import ReplyTrace

SIDES = ("off", "on")
FAINT_ALPHA = 80  # the other runs: visible as a spread, not read as the result


def pair_of(key: str) -> int:
    """The pair a race lane key belongs to: "off" and "on" are pair 1, "off 2" pair 2, ..."""
    _side, _, n = key.partition(" ")
    return int(n) if n else 1


class RaceCurves:
    """The bold pair's two curves (named: they make the legend) over a faint curve per run of the race."""

    def __init__(self, pi: pg.PlotItem, colors: dict[str, QColor], width: float) -> None:
        self.pi = pi
        self.colors = colors
        self.width = width
        self.bold = {side: pi.plot(pen=pg.mkPen(colors[side], width=width), name=f"speculation {side}")
                     for side in SIDES}
        for curve in self.bold.values():
            curve.setZValue(2)
        self.others = pi.plot(pen=pg.mkPen(with_alpha(colors["off"], FAINT_ALPHA * 2), width=max(1.0, width / 2)),
                              name="the other runs")  # a legend sample only: the runs are drawn per lane below
        self.faint: dict[str, pg.PlotDataItem] = {}
        self.pair = 1  # the pair drawn bold
        self.median: int | None = None  # the median pair, once the race has finished
        self._drawn: dict[str, int] = {}  # curve -> the rounds it shows (a curve is redrawn only when it grew)

    def start(self, keys: list[str]) -> None:
        """A new race whose lanes are `keys` (speedup.race_order): a faint curve for each, none drawn yet."""
        for curve in self.faint.values():
            self.pi.removeItem(curve)
        self.faint = {}
        for key in keys:
            side = key.split()[0]
            self.faint[key] = curve = self.pi.plot(pen=pg.mkPen(with_alpha(self.colors[side], FAINT_ALPHA),
                                                                width=max(1.0, self.width / 2)))
            curve.setZValue(1)
        for curve in (*self.bold.values(), self.others):
            curve.setData([], [])
        self.pair, self.median, self._drawn = 1, None, {}

    def follow(self, key: str) -> None:
        """Draw the pair of the lane that has just started bold (while the race runs)."""
        if key in self.faint:
            self._bold(pair_of(key))

    def finish(self, traces: dict[str, ReplyTrace]) -> int | None:
        """The race has finished: the median pair bold (None when no pair finished: the bold pair stays)."""
        self.median = median_run(traces, "off", "on")
        if self.median is not None:
            self._bold(self.median)
        self.draw(traces)
        return self.median

    def forget(self) -> None:
        """Redraw every curve at the next `draw` (something else cut them, e.g. a replay)."""
        self._drawn = {}

    def _bold(self, pair: int) -> None:
        if pair != self.pair:
            self.pair = pair
            for side in SIDES:
                self._drawn.pop(f"bold {side}", None)

    def draw(self, traces: dict[str, ReplyTrace], until: float | None = None) -> list[str]:
        """Redraw the curves whose lane has rounds not drawn yet (`until`: engine seconds, cut there, as a replay
        does, redrawing all); returns the lane keys of the curves redrawn."""
        from app.talk.lanes_ui import curve_data

        redrawn = []
        items = [(key, key, curve) for key, curve in self.faint.items()]
        items += [(f"bold {side}", run_key(side, self.pair), curve) for side, curve in self.bold.items()]
        for name, key, curve in items:
            trace = traces.get(key)
            if trace is None:
                continue
            if until is None and self._drawn.get(name) == len(trace.rounds):
                continue
            curve.setData(*curve_data(trace, until))
            self._drawn[name] = -1 if until is not None else len(trace.rounds)
            redrawn.append(name)
        return redrawn

    def words(self, traces: dict[str, ReplyTrace]) -> str:
        """Which pair is bold, and its own figures: the lanes drawn, in numbers ("" before the race finished)."""
        if self.median is None:
            return ""
        off, on = traces[run_key("off", self.median)], traces[run_key("on", self.median)]
        tps_off, tps_on = (float((t.stats or {}).get("tokens_per_s") or 0.0) for t in (off, on))
        pairs = len(self.faint) // 2
        which = f"pair {self.median} of {pairs}, the median" if pairs > 1 else "the one pair"
        return f"bold: {which}: {tps_off:.1f} → {tps_on:.1f} tok/s ({tps_on / tps_off:.2f}×)"

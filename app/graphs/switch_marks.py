"""The live graphs' marks where speculation was switched on or off mid-reply (app/toggles.py finds them).

One dashed vertical line per switch on each plot with a time or round axis: on the throughput plot at the engine
second of the switch, labelled with what it switched to; on the per-round plots between the last round before it
and the first after. Lines are added as switches arrive and removed when the graphs show another reply.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt

from app.theme import STATE_SOLID
from app.toggles import Switch, switch_between
from app.trace import RoundRecord

TIME_PLOTS = ("tps",)  # x: engine seconds
ROUND_PLOTS = ("acc", "time")  # x: round number, round i (from 0) spanning [i + 0.5, i + 1.5]


class SwitchMarks:
    def __init__(self, plots: dict[str, pg.PlotWidget]) -> None:
        self.plots = {name: plots[name] for name in (*TIME_PLOTS, *ROUND_PLOTS)}
        self.switches: list[Switch] = []
        self.lines: dict[str, list[pg.InfiniteLine]] = {name: [] for name in self.plots}
        self._last: RoundRecord | None = None
        self._seen = 0

    def clear(self) -> None:
        """Another reply: no switches, and no lines."""
        for name, lines in self.lines.items():
            for line in lines:
                self.plots[name].getPlotItem().removeItem(line)
            lines.clear()
        self.switches, self._last, self._seen = [], None, 0

    def observe(self, record: RoundRecord) -> None:
        """The reply's next round (in order): a switch before it is remembered, and drawn by `draw`."""
        found = switch_between(self._last, record, self._seen)
        if found is not None:
            self.switches.append(found)
        self._last, self._seen = record, self._seen + 1

    def draw(self, name: str) -> None:
        """Add the lines of the switches plot `name` does not show yet."""
        lines = self.lines.get(name)
        if lines is None:
            return
        for switch in self.switches[len(lines):]:
            word = "speculation on" if switch.on else "speculation off"
            x = switch.t if name in TIME_PLOTS else switch.position + 0.5
            line = pg.InfiniteLine(
                pos=x, angle=90, movable=False,
                pen=pg.mkPen(STATE_SOLID["plain"], width=1.5, style=Qt.PenStyle.DashLine),
                label=word if name in TIME_PLOTS else None,
                labelOpts={"position": 0.92, "anchors": [(0, 0), (0, 0)]})
            line.setToolTip(f"{word} here (Ctrl+D mid-reply)")
            self.plots[name].getPlotItem().addItem(line)
            lines.append(line)

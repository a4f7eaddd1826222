"""The race: tokens over time for the same prompt and seed with speculation off, then on, and the verdict."""

from __future__ import annotations

import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.graphs import plots
from app.graphs.plots import make_plot
from app.runs import race_spread_of
from app.theme import ACCENT, STATE_SOLID
from app.trace import ReplyTrace


class RacePlot(QWidget):
    """Tokens over time for the same prompt and seed with speculation off, then on."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.plot = make_plot("Race: off vs on, same prompt and seed", "tokens", "seconds (engine time)",
                          count_left=True)
        pi = self.plot.getPlotItem()
        pi.enableAutoRange()
        pi.setLimits(xMin=0, yMin=0)  # no negative seconds or tokens, even on an empty plot
        pi.addLegend(offset=(8, 8), labelTextSize="9pt")
        self.off_curve = pi.plot(pen=pg.mkPen(STATE_SOLID["plain"], width=2.5), name="speculation off")
        self.on_curve = pi.plot(pen=pg.mkPen(ACCENT, width=2.5), name="speculation on")
        lay.addWidget(self.plot, 1)
        self.result = QLabel("Run a race (Generation ▸ Race) to measure speculation against the verifier "
                             "alone on this machine.")
        self.result.setWordWrap(True)
        self.result.setTextFormat(Qt.TextFormat.RichText)
        lay.addWidget(self.result)
        self.traces: dict[str, ReplyTrace] = {}
        self._drawn: dict[str, int] = {}
        self._drawn_at = 0.0

    def start(self, keys: list[str] | None = None) -> None:
        """A new race whose runs are `keys` (speedup.race_order); the curves show its first off/on pair."""
        self.traces = {key: ReplyTrace() for key in (keys or ["off", "on"])}
        self._drawn = {"off": -1, "on": -1}
        self.off_curve.setData([], [])
        self.on_curve.setData([], [])
        runs = len(self.traces) // 2
        self.result.setText(f"Racing… speculation off and on, {runs} time{'s' if runs > 1 else ''} each, "
                            "alternating, one after the other so they don't share the CPU.")

    def flush(self, final: bool = False) -> bool:
        """The curves, redrawn at most every PANEL_EVERY_S while racing (`final`: now)."""
        if not final and time.perf_counter() - self._drawn_at < plots.PANEL_EVERY_S:
            return False
        self._drawn_at = time.perf_counter()
        changed = False
        for key, curve in (("off", self.off_curve), ("on", self.on_curve)):
            tr = self.traces.get(key)
            if tr is None or self._drawn.get(key) == len(tr.rounds):
                continue
            t = np.array([0.0] + [r.t_end for r in tr.rounds])
            n = np.array([0.0] + [float(r.tokens_after) for r in tr.rounds])
            curve.setData(t, n)
            self._drawn[key] = len(tr.rounds)
            changed = True
        return changed

    def finish(self, greedy: bool) -> str:
        self.flush(final=True)
        spread = race_spread_of(self.traces)
        on = self.traces.get("on")
        if spread is None or on is None or on.stats is None:
            self.result.setText("The race did not finish.")
            return "The race did not finish."
        sp = spread.speedup
        verdict = "faster" if sp >= 1.0 else "slower"
        figure = f"{sp:.2f}× ({verdict})" if spread.short_reply else f"<b>{sp:.2f}×</b> ({verdict})"
        parts = [f"{figure}, {spread.spread_words()} — off {spread.tps_off:.1f} tok/s, on {spread.tps_on:.1f} tok/s"
                 f"{' (medians)' if spread.pairs > 1 else ''}; {spread.tokens} tokens"
                 + (": too short to judge a speed" if spread.short_reply else "")]
        if on.stats.get("drafted"):
            parts.append(f"first run: acceptance {on.stats.get('acceptance_rate', 0):.0%}, "
                         f"{on.stats.get('mean_accepted_length', 0):.2f} tokens per verifier call")
        if greedy:
            texts = {tr.text for tr in self.traces.values() if tr.finished}
            parts.append("greedy: texts <b style='color:rgb(46,160,67)'>identical</b> token for token"
                         if len(texts) == 1 else "greedy: texts <b style='color:rgb(215,58,73)'>differ</b>")
        else:
            parts.append("sampling (temperature > 0): texts may differ; both follow the verifier's distribution")
        html = "<br>".join(parts)
        self.result.setText(html)
        return html

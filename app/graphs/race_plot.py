"""The race: tokens over time for the same prompt and seed with speculation off, then on, and the verdict."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.graphs import plots
from app.graphs.plots import legend_below, make_plot
from app.graphs.race_curves import race_curves
from app.runs import race_spread_of
from app.speedup import race_key
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
        legend_below(pi, 3)
        self.curves = race_curves(pi, {"off": STATE_SOLID["plain"], "on": ACCENT}, 2.5)
        lay.addWidget(self.plot, 1)
        self.result = QLabel("Run a race (Generation ▸ Race) to measure speculation against the verifier "
                             "alone on this machine.")
        self.result.setWordWrap(True)
        self.result.setTextFormat(Qt.TextFormat.RichText)
        lay.addWidget(self.result)
        self.traces: dict[str, ReplyTrace] = {}
        self._drawn_at = 0.0

    def start(self, keys: list[str] | None = None) -> None:
        """A new race whose runs are `keys` (speedup.race_order): each run's curve drawn faint as it runs, the
        running pair bold, and once it has finished the median pair bold."""
        self.traces = {key: ReplyTrace() for key in (keys or ["off", "on"])}
        self.curves.start(list(self.traces))
        runs = len(self.traces) // 2
        self.result.setText(f"Racing… speculation off and on, {runs} time{'s' if runs > 1 else ''} each, "
                            "alternating, one after the other so they don't share the CPU.")

    def flush(self, final: bool = False) -> bool:
        """The curves, redrawn at most every PANEL_EVERY_S while racing (`final`: now)."""
        if not final and time.perf_counter() - self._drawn_at < plots.PANEL_EVERY_S:
            return False
        self._drawn_at = time.perf_counter()
        running = [key for key, tr in self.traces.items() if tr.tokens and not tr.finished]
        if running:
            self.curves.follow(running[-1])
        return bool(self.curves.draw(self.traces))

    def finish(self, greedy: bool) -> str:
        self.flush(final=True)
        pair = self.curves.finish(self.traces)
        spread = race_spread_of(self.traces)
        on = self.traces.get(race_key(True, pair or 1))
        if spread is None or on is None or on.stats is None:
            self.result.setText("The race did not finish.")
            return "The race did not finish."
        sp = spread.speedup
        verdict = "faster" if sp >= 1.0 else "slower"
        figure = f"{sp:.2f}× ({verdict})" if spread.short_reply else f"<b>{sp:.2f}×</b> ({verdict})"
        parts = [f"{figure}, {spread.spread_words()} — off {spread.tps_off:.1f} tok/s, on {spread.tps_on:.1f} tok/s"
                 f"{' (medians)' if spread.pairs > 1 else ''}; {spread.tokens} tokens"
                 + (": too short to judge a speed" if spread.short_reply else "")]
        drawn = self.curves.words(self.traces) or "the first pair"
        if on.stats.get("drafted"):
            drawn += (f"; acceptance {on.stats.get('acceptance_rate', 0):.0%}, "
                      f"{on.stats.get('mean_accepted_length', 0):.2f} tokens per verifier call")
        parts.append(drawn)
        if greedy:
            texts = {tr.text for tr in self.traces.values() if tr.finished}
            parts.append("greedy: texts <b style='color:rgb(46,160,67)'>identical</b> token for token"
                         if len(texts) == 1 else "greedy: texts <b style='color:rgb(215,58,73)'>differ</b>")
        else:
            parts.append("sampling (temperature > 0): texts may differ; both follow the verifier's distribution")
        html = "<br>".join(parts)
        self.result.setText(html)
        return html

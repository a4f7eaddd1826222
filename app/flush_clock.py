"""The window's one timer: every FLUSH_MS it delivers the running reply's and race's events (app/run_controller.py),
then flushes new tokens into the chat view and new rounds into the graphs. Slots elsewhere only fold events into
traces (buffers); this tick is what draws them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, QTimer

if TYPE_CHECKING:
    from app.chat_view import ChatView
    from app.graphs.graphs_panel import GraphsPanel
    from app.run_controller import RunController

FLUSH_MS = 40
# While a reply streams, the graphs redraw one panel on every GRAPH_EVERY-th tick (app/graphs/live.py), so each
# of the six repaints about twice a second: plots cost tens of milliseconds to paint on a 2-core CPU
# (and hold the GIL the decoding thread needs), text does not. The last flush draws everything.
GRAPH_EVERY = 2
# The figures (the graphs' header, the bubble's footer) are rewritten on every FIGURES_EVERY-th tick, about four
# times a second, and only when tokens arrived: each rewrite is a label's text and size (a millisecond or
# more on the GUI thread, holding the GIL the decoding thread needs), and on every 40 ms tick it cost a slow
# verifier's replies a few percent of their tokens/s. The text itself streams on every tick.
FIGURES_EVERY = 6


class FlushClock(QObject):
    """THE flush timer: runs' events in, tokens into the chat, rounds into the graphs."""

    def __init__(self, runs: list[RunController], chat: ChatView, graphs: GraphsPanel,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.runs, self.chat, self.graphs = runs, chat, graphs
        self.timer = QTimer(self)
        self.timer.setInterval(FLUSH_MS)
        self.timer.timeout.connect(lambda: self.flush(final=False))
        self._ticks = 0

    def start(self) -> None:
        self.timer.start()

    def stop(self) -> None:
        self.timer.stop()

    def flush(self, final: bool = True) -> None:
        """New tokens into the chat and new rounds into the graphs (the timer's tick; final: every panel)."""
        for run in self.runs:
            run.deliver()  # the reply's (or the race's) events since the last tick
        self._ticks += 1
        figures = final or self._ticks % FIGURES_EVERY == 0  # the header's and the footer's, at the same tick
        self.chat.flush(figures=figures)
        self.graphs.flush(panels=final or self._ticks % GRAPH_EVERY == 0, figures=figures)

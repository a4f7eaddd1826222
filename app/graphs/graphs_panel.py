"""The window's right-hand panel: the live graphs and the race in two tabs, with export buttons."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QScrollArea, QTabWidget, QVBoxLayout, QWidget

from app.graphs.live import LiveGraphs
from app.graphs.race_plot import RacePlot


class GraphsPanel(QWidget):
    """The right-hand panel: live graphs and the race, with export buttons."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        self.tabs = QTabWidget()
        self.live = LiveGraphs()
        self.race = RacePlot()
        # In a scroll area: on a narrow screen the plots go to one column and scroll, instead of
        # widening the window past the screen.
        self.live_scroll = QScrollArea()
        self.live_scroll.setWidgetResizable(True)
        self.live_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        self.live_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.live_scroll.setWidget(self.live)
        self.tabs.addTab(self.live_scroll, "Live")
        self.tabs.addTab(self.race, "Race")
        lay.addWidget(self.tabs, 1)
        row = QHBoxLayout()
        self.caption = QLabel("")
        self.caption.setObjectName("muted")
        row.addWidget(self.caption, 1)
        self.export_png = QPushButton("Export PNG…")
        self.export_stats = QPushButton("Export stats…")
        row.addWidget(self.export_png)
        row.addWidget(self.export_stats)
        lay.addLayout(row)

    def flush(self, panels: bool = True, figures: bool = True) -> bool:
        a = self.live.flush(panels, figures)
        b = self.race.flush() if panels else False
        return a or b

"""The small protocol every panel of the live graphs follows (one panel per file in this package).

A panel owns one plot and its persistent items. `draw` calls setData on those items from the reply's figures;
`ranges` says which axis ranges the figures want, and the live graphs apply them only when they change (an
axis re-laid out on every tick costs more than the drawing)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import pyqtgraph as pg

    from app.graphs.figures import ReplyFigures

Range = tuple[float, float]


class Panel(Protocol):
    name: str  # its key in LiveGraphs.PANELS and in the switch marks
    plot: pg.PlotWidget

    def draw(self, figures: ReplyFigures) -> None: ...

    def ranges(self, figures: ReplyFigures) -> tuple[Range, Range]: ...

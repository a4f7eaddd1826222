"""What every plot of the graphs shares: a modest preferred size, whole-number count axes, small axis fonts,
no mouse, ranges set from the data; and `LabelBox`, which holds a label whose text changes on every tick."""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import QSize, Qt, QTimer
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import QGraphicsItem, QLabel, QSizePolicy, QWidget

PLOT_MIN_WIDTH = 250  # fits the axes, their labels and the short titles (a longer title clips)
PLOT_MIN_HEIGHT = 150
ONE_COLUMN_HEIGHT = 220
QWIDGETSIZE_MAX = (1 << 24) - 1
# While a reply streams, at most one panel is redrawn per this many seconds (and the race's curves once): a
# plot costs 10-30 ms to paint on a 2-core CPU, on the GUI thread, holding the GIL the decoding thread needs.
# Measured with bench/ui_latency.py --cli-ab: redrawing one panel every other 40 ms tick cost a tiny model's
# replies about a third of their tokens/s. Every panel is drawn once the reply has finished.
PANEL_EVERY_S = 0.5


def with_alpha(c: QColor, a: int) -> QColor:
    c = QColor(c)
    c.setAlpha(a)
    return c


def small_font(points: int = 8) -> QFont:
    font = QFont()
    font.setPointSize(points)
    return font


def _title_sets_no_minimum_width(label: pg.LabelItem) -> None:
    """A plot's title is clipped rather than widening the plot: measured in the machine's own font, a title one font
    family draws in 250 px takes 285 in another, and the window would no longer fit 1024 px. Every new text measures
    the title again (pyqtgraph's `updateMin`), so the minimum is dropped after each measure, not once."""
    measure = label.updateMin

    def measure_height_only() -> None:
        measure()
        label.setMinimumWidth(0)
        label._sizeHint[Qt.SizeHint.MinimumSize] = (0, label._sizeHint[Qt.SizeHint.MinimumSize][1])
        label.updateGeometry()

    label.updateMin = measure_height_only
    measure_height_only()


class CountAxis(pg.AxisItem):
    """An axis of counts (tokens, rounds, positions): whole-number ticks only, never 0.5 of a round."""

    def tickSpacing(self, minVal, maxVal, size):  # noqa: N802, N803 - pyqtgraph override
        levels = super().tickSpacing(minVal, maxVal, size)
        out = [(max(1.0, round(spacing)), offset) for spacing, offset in levels]
        return out[:1] if out else [(1.0, 0.0)]


class _PlotWidget(pg.PlotWidget):
    """A plot whose preferred size is modest: a scroll area sizes its content by preferred heights, and
    the default (a 640×480 view) made the two-column panel three plots of ~500 px tall."""

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(PLOT_MIN_WIDTH + 40, ONE_COLUMN_HEIGHT)


def make_plot(title: str, left: str, bottom: str, *, count_left: bool = False, count_bottom: bool = False
              ) -> pg.PlotWidget:
    axes = {}
    if count_left:
        axes["left"] = CountAxis("left")
    if count_bottom:
        axes["bottom"] = CountAxis("bottom")
    w = _PlotWidget(axisItems=axes, enableMenu=False)  # no menus: not even built (a fifth of a plot's making)
    w.setMinimumSize(PLOT_MIN_WIDTH, PLOT_MIN_HEIGHT)
    pi = w.getPlotItem()
    pi.setTitle(f"<span style='font-size:10pt'>{title}</span>")
    _title_sets_no_minimum_width(pi.titleLabel)
    pi.setLabel("left", left)
    pi.setLabel("bottom", bottom)
    pi.showGrid(x=False, y=True, alpha=0.12)
    pi.setMenuEnabled(False)
    pi.setMouseEnabled(x=False, y=False)  # ranges are set from the data (see each panel's `ranges`)
    pi.hideButtons()
    pi.disableAutoRange()
    font = small_font()
    for ax in ("left", "bottom"):
        pi.getAxis(ax).enableAutoSIPrefix(False)  # "seconds (x0.001)" reads worse than 0.2, 0.4, ...
        pi.getAxis(ax).setTickFont(font)
        pi.getAxis(ax).label.setFont(font)
    cache_axes(pi)
    return w


def cache_axes(plot_item: pg.PlotItem) -> None:
    """Each axis drawn once into a pixmap, and again only when it changes (its range, its size). An axis with a grid
    draws it across the whole plot, so without the cache every new point of a curve repainted its tick labels: half
    of a plot's repaint time, on the GUI thread, while a reply decodes on the same cores. The pixels are the same."""
    for name in ("left", "bottom"):
        plot_item.getAxis(name).setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)


LEGEND_ROW = 4  # PlotItem's layout: title 0, top axis 1, the view and side axes 2, bottom axis 3; the legend's row


class RowLegend(pg.LegendItem):
    """A legend laid out in its plot's own layout, in a row under the bottom axis: outside the data area, so it
    never covers a curve, whatever the data and the plot's size (an anchored legend covers whatever is drawn in
    its corner). It cannot be dragged back over the data."""

    most = 1  # entries a row where they fit (legend_below's `columns`)

    def updateSize(self) -> None:  # noqa: N802 - pyqtgraph override
        # pyqtgraph's sets a geometry at (0, 0) of the parent, over the title; here the plot's layout places it.
        self.updateGeometry()

    def mouseDragEvent(self, ev) -> None:  # noqa: N802 - pyqtgraph override
        ev.ignore()

    def addItem(self, item, name) -> None:  # noqa: N802 - pyqtgraph override
        super().addItem(item, name)
        self.fit_columns()

    def fit_columns(self) -> None:
        """As many entries a row as fit the width of the data area above, at most `most` (legend_below's columns):
        a narrow plot wraps its legend onto more rows rather than clipping its last entries."""
        view = self.parentItem().vb if self.parentItem() is not None else None
        if view is None or view.width() <= 0:
            return
        widths = [sample.effectiveSizeHint(Qt.SizeHint.PreferredSize).width()
                  + label.effectiveSizeHint(Qt.SizeHint.PreferredSize).width() + 2 * self.layout.horizontalSpacing()
                  for sample, label in self.items]
        columns = max(1, min(self.most, len(widths)))
        while columns > 1 and _row_width(widths, columns) > view.width():
            columns -= 1
        if columns != self.columnCount:
            self.setColumnCount(columns)


def _row_width(widths: list[float], columns: int) -> float:
    """The width of a legend laid out `columns` entries a row: the sum of each column's widest entry."""
    return sum(max(widths[c::columns]) for c in range(columns))


def legend_below(pi: pg.PlotItem, columns: int, text_size: str = "8pt", row_spacing: int = -4) -> RowLegend:
    """`pi`'s legend, in a row of its own under the x axis, up to `columns` entries a row (fewer where they do not
    fit the plot's width: RowLegend.fit_columns); plots added with a name join it, as with PlotItem.addLegend. It
    sets no minimum width: a plot too narrow for its widest entry clips it rather than widening the window (see
    _title_sets_no_minimum_width)."""
    legend = RowLegend(offset=None, labelTextSize=text_size, colCount=columns, frame=False, horSpacing=4,
                       verSpacing=row_spacing)
    legend.layout.setContentsMargins(0, 2, 0, 0)
    legend.setSizePolicy(QSizePolicy.Policy.Maximum, QSizePolicy.Policy.Fixed)  # its own size, centred
    legend.setParentItem(pi)
    pi.layout.addItem(legend, LEGEND_ROW, 1, Qt.AlignmentFlag.AlignHCenter)
    pi.layout.setRowStretchFactor(LEGEND_ROW, 0)
    legend.setMinimumWidth(0)
    legend.most = columns
    # After the layout pass that resized the view, not inside it: refitting changes the legend's size in that layout.
    pi.vb.sigResized.connect(lambda _vb: QTimer.singleShot(0, legend, legend.fit_columns))
    pi.legend = legend
    return legend


def right_axis_view(pi: pg.PlotItem, label: str, **label_style: object) -> pg.ViewBox:
    """A second view box on `pi`'s right axis, sharing its x axis (a rate beside counts)."""
    view = pg.ViewBox()
    view.setMouseEnabled(False, False)
    pi.showAxis("right")
    pi.scene().addItem(view)
    right = pi.getAxis("right")
    right.linkToView(view)
    right.setLabel(label, **label_style)
    return view


class LabelBox(QWidget):
    """Holds a label whose text changes on every tick, outside any layout.

    A label in a layout makes its parent's layout recompute on every setText: here the scrolled grid of seven
    plots, which cost a tiny model's replies about a quarter of their tokens/s (bench/ui_latency.py --cli-ab,
    graphs shown against hidden). In this box, with no layout of its own, the label's text changes touch nothing
    else; the box changes height (one re-layout) only when the text's line count does."""

    def __init__(self, label: QLabel, parent: QWidget | None = None, lines: int = 0) -> None:
        super().__init__(parent)
        self.label = label
        self.lines = lines  # with text, at least this many lines tall
        label.setParent(self)
        self.setFixedHeight(0)

    def fit(self, shrink: bool = False) -> None:
        """Tall enough for the text. It grows, but shrinks only when its width changes (`shrink`): a reply's
        header goes from empty to four lines and back to one, and each change of height re-lays out (and
        repaints) every plot under it. With text it is at least `lines` lines tall from the start, so that a
        streaming reply's header, which gains a line or two as its figures arrive, does not re-lay out (and
        repaint) the seven plots each time (in a tiny model's reply those repaints cost the decoding
        thread more than all the rest of the window)."""
        text = self.label.text()
        height = max(0, self.label.heightForWidth(self.width())) if text else 0
        if text and self.lines:
            height = max(height, self.lines * self.label.fontMetrics().lineSpacing()
                         + self.label.contentsMargins().top() + self.label.contentsMargins().bottom())
        if height > self.height() or (shrink and height != self.height()):
            self.setFixedHeight(height)
        self.label.setGeometry(0, 0, self.width(), max(height, self.height()))

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self.fit(shrink=event.size().width() != event.oldSize().width())


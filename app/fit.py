"""Windows and dialogs that fit the screen they open on (1024×700 laptops, HiDPI at scale 2).

`available(widget)` is the screen's available area in the widget's logical pixels (Qt divides by the
scale factor: 2560×1600 at QT_SCALE_FACTOR=2 is 1280×800). `fit_to_screen` sizes a top-level widget
to its preferred size or the available area, whichever is smaller, and keeps it on that area. Views
whose content cannot shrink that far go in a `scrolling` area instead of widening the window.
A line of text that must share its row (the status bar's) is an `ElidedLabel`.
"""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QPainter
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QSizePolicy, QSplitter, QTableView, QWidget

# Window decorations (title bar, frame) a window manager adds outside a top-level widget's geometry,
# before the window has been shown once and Qt knows them.
DECORATION = QSize(8, 32)


def available(widget: QWidget) -> QRect:
    screen = widget.screen()
    return screen.availableGeometry() if screen is not None else QRect(0, 0, 1024, 700)


def fit_to_screen(widget: QWidget, preferred: QSize, area: QRect | None = None) -> QSize:
    """Resize (and move if needed) `widget` to fit `area` (default: its screen's available area)."""
    area = area or available(widget)
    extra = widget.frameGeometry().size() - widget.geometry().size()
    if widget.isWindow() and not widget.isVisible():
        extra = extra.expandedTo(DECORATION)
    room = QSize(max(1, area.width() - extra.width()), max(1, area.height() - extra.height()))
    size = preferred.boundedTo(room)
    widget.resize(size)
    frame = widget.frameGeometry()
    if widget.isWindow() and not area.contains(frame):
        x = min(max(frame.x(), area.x()), area.right() + 1 - frame.width())
        y = min(max(frame.y(), area.y()), area.bottom() + 1 - frame.height())
        widget.move(max(x, area.x()), max(y, area.y()))
    return size


def scrolling(view: QWidget) -> QScrollArea:
    """`view` in a frameless scroll area: the area's minimum size no longer includes the view's."""
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidget(view)
    area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
    return area


def fits(widget: QWidget, area: QSize) -> bool:
    """Whether `widget` can be made as small as `area` (its minimum size, decorations included)."""
    need = widget.minimumSizeHint().expandedTo(widget.minimumSize())
    return need.width() + DECORATION.width() <= area.width() and need.height() + DECORATION.height() <= area.height()


# A label property: wrap_labels leaves the label on one line. For short text of bounded width (a counter) that
# shares a row with a stretching widget: wrapped, it broke onto two lines however wide the row.
ONE_LINE = "one_line"


def wrap_labels(root: QWidget) -> None:
    """Let every text label under `root` wrap (but those marked ONE_LINE): a label that does not wrap is as wide
    as its longest line (a pair name, a sentence of results), which is what made the talk views 1,200–2,100 px
    wide."""
    for label in root.findChildren(QLabel):
        if label.pixmap().isNull() and not label.wordWrap() and not label.property(ONE_LINE):
            label.setWordWrap(True)


class ElidedLabel(QLabel):
    """One line of plain text that fits whatever width its row leaves it: what does not fit ends in "…",
    and then the whole text is the tooltip. `text()` is always the whole text. It asks for its text's
    width but can shrink to a few characters, so in a row with fixed neighbours it gives way first."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 - Qt override
        super().setText(text)
        self._update_tip()

    def shown_text(self) -> str:
        """The text as it is drawn at the current width."""
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, self.contentsRect().width())

    def is_elided(self) -> bool:
        return self.shown_text() != self.text()

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(self.fontMetrics().horizontalAdvance("Xxxx…"), super().minimumSizeHint().height())

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt override
        super().resizeEvent(event)
        self._update_tip()

    def _update_tip(self) -> None:
        self.setToolTip(self.text() if self.is_elided() else "")

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt override
        painter = QPainter(self)
        self.style().drawItemText(painter, self.contentsRect(), int(self.alignment()), self.palette(),
                                  self.isEnabled(), self.shown_text(), self.foregroundRole())


def rows_height(table: QTableView) -> int:
    """How tall `table` is with every row in view: its header, its rows and its frame."""
    return table.horizontalHeader().sizeHint().height() + table.verticalHeader().length() + 2 * table.frameWidth() + 2


def give_rows(split: QSplitter, table: QTableView, top_least: int = 0) -> None:
    """In a vertical `split` with `table` in its lower part, grow that part to show every row, taking the height
    from the part above down to its minimum (or `top_least` where more: what its wrapped text needs at its width,
    which a splitter does not ask): the replay's numbers stayed at three rows on a full screen. It shrinks that
    part only to give the part above `top_least`; else a part dragged larger stays so."""
    sizes = split.sizes()
    total = sum(sizes)
    if len(sizes) != 2 or total <= 0:
        return
    top = split.widget(0)
    top_min = max(top_least, top.minimumSizeHint().expandedTo(top.minimumSize()).height())
    bottom_min = split.widget(1).minimumSizeHint().height()
    bottom = min(rows_height(table), total - top_min)
    if bottom > sizes[1] or (sizes[0] < top_min and sizes[1] > bottom_min):
        split.setSizes([total - max(bottom, bottom_min), max(bottom, bottom_min)])

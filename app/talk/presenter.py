"""Presenter mode for the main window: full screen, large type, a high-contrast projector theme, the
token legend always visible, the reply's tokens/s and speedup set large over the chat (presenter_headline.py)
and the graphs enlarged. Everything stays live, and leaving the mode puts
every changed property back as it was.

It works from the outside, through the window's public attributes (`legend`, `graphs`, `left_dock`,
`right_dock`), so window.py needs no changes: `PresenterMode(window).toggle()`. `PresentedWindow` names all
that it touches (and puts back) of the window.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QByteArray, QEvent, QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QColor, QFont, QPalette
from PySide6.QtWidgets import QBoxLayout, QDockWidget, QWidget

from app.talk.presenter_headline import HeadlineBar

if TYPE_CHECKING:
    from app.graphs.graphs_panel import GraphsPanel

SCALE = 1.6  # type size multiplier
# Of the window's width, for the graphs dock. The chat keeps the rest: at 1.6× type a code line of a reply wrapped
# in the 55 % it had when the graphs took 45 %.
GRAPHS_SHARE = 0.35


def graphs_width(window_width: int, graphs_minimum: int) -> int:
    """The graphs dock's width in presenter mode: its share of the window, or its minimum where that is more."""
    return max(graphs_minimum, int(window_width * GRAPHS_SHARE))


def projector_palette(base: QPalette) -> QPalette:
    """Black on white, with dark "muted" text: light greys and tints vanish on a projector."""
    pal = QPalette(base)
    roles = {
        QPalette.ColorRole.Window: QColor(255, 255, 255),
        QPalette.ColorRole.WindowText: QColor(0, 0, 0),
        QPalette.ColorRole.Base: QColor(255, 255, 255),
        QPalette.ColorRole.AlternateBase: QColor(240, 240, 240),
        QPalette.ColorRole.Text: QColor(0, 0, 0),
        QPalette.ColorRole.Button: QColor(232, 232, 232),
        QPalette.ColorRole.ButtonText: QColor(0, 0, 0),
        QPalette.ColorRole.Highlight: QColor(29, 78, 216),
        QPalette.ColorRole.HighlightedText: QColor(255, 255, 255),
        QPalette.ColorRole.PlaceholderText: QColor(55, 55, 55),
        QPalette.ColorRole.ToolTipBase: QColor(255, 255, 224),
        QPalette.ColorRole.ToolTipText: QColor(0, 0, 0),
    }
    for group in (QPalette.ColorGroup.Active, QPalette.ColorGroup.Inactive):
        for role, color in roles.items():
            pal.setColor(group, role, color)
    return pal


def presenter_style_sheet(point_size: float) -> str:
    """Rules appended to the window's own style sheet; later rules of equal specificity win."""
    body = round(point_size * 1.25)
    small = round(point_size * 0.85)
    return f"""
    QFrame#bubble_user QTextBrowser, QFrame#bubble_assistant QTextBrowser {{ font-size: {body}pt; }}
    QFrame#bubble_user, QFrame#bubble_assistant {{ border: 2px solid rgb(60,60,60); }}
    QLabel#bubble_header {{ font-size: {round(point_size)}pt; }}
    QLabel#bubble_footer {{ font-size: {small}pt; color: rgb(30,30,30); }}
    QLabel#muted {{ color: rgb(40,40,40); }}
    QPlainTextEdit#composer {{ font-size: {round(point_size)}pt; border: 2px solid rgb(60,60,60); }}
    QPushButton {{ font-size: {round(point_size)}pt; }}
    QMenuBar, QMenu, QStatusBar QLabel {{ font-size: {small}pt; }}
    QToolTip {{ font-size: {small}pt; }}
    QMainWindow, QMenuBar, QStatusBar, QDockWidget {{ background: #ffffff; }}
    QScrollArea#chat_scroll, QScrollArea#chat_scroll > QWidget > QWidget {{ background: #ffffff; }}
    QTabWidget::pane {{ background: #ffffff; border: 1px solid rgb(60,60,60); }}
    """


class PresentedWindow(Protocol):
    """What presenter mode changes on the main window, and puts back: its docks, legend and graphs, and these
    of its QMainWindow properties."""

    left_dock: QDockWidget
    right_dock: QDockWidget
    legend: QWidget  # the chat column's legend: the headline goes under it
    graphs: GraphsPanel  # its live graphs' headline is what the headline shows

    def window(self) -> QWidget: ...  # the top-level widget (Qt's QWidget.window()): this mode's parent
    def installEventFilter(self, watcher: QObject) -> None: ...  # noqa: N802 - Qt's names, here and below
    def styleSheet(self) -> str: ...  # noqa: N802
    def setStyleSheet(self, sheet: str) -> None: ...  # noqa: N802
    def palette(self) -> QPalette: ...
    def setPalette(self, palette: QPalette) -> None: ...  # noqa: N802
    def font(self) -> QFont: ...
    def setFont(self, font: QFont) -> None: ...  # noqa: N802
    def testAttribute(self, attribute: Qt.WidgetAttribute) -> bool: ...  # noqa: N802
    def setAttribute(self, attribute: Qt.WidgetAttribute, on: bool = True) -> None: ...  # noqa: N802
    def windowState(self) -> Qt.WindowState: ...  # noqa: N802
    def setWindowState(self, state: Qt.WindowState) -> None: ...  # noqa: N802
    def saveGeometry(self) -> QByteArray: ...  # noqa: N802
    def restoreGeometry(self, geometry: QByteArray) -> bool: ...  # noqa: N802
    def saveState(self, version: int = 0) -> QByteArray: ...  # noqa: N802
    def restoreState(self, state: QByteArray, version: int = 0) -> bool: ...  # noqa: N802
    def size(self) -> QSize: ...
    def resize(self, size: QSize) -> None: ...
    def width(self) -> int: ...
    def showFullScreen(self) -> None: ...  # noqa: N802
    def showNormal(self) -> None: ...  # noqa: N802
    def resizeDocks(self, docks: list[QDockWidget], sizes: list[int], orientation: Qt.Orientation) -> None: ...  # noqa: N802


@dataclass
class _Saved:
    style_sheet: str = ""
    palette: QPalette | None = None
    palette_set: bool = False
    font: QFont | None = None
    font_set: bool = False
    window_state: Any = None
    geometry: Any = None
    left_visible: bool | None = None
    right_visible: bool | None = None
    legend_visible: bool | None = None
    main_state: Any = None  # QMainWindow.saveState(): docks, their places and sizes
    dock_widths: list[tuple[QDockWidget, int]] = field(default_factory=list)  # the docks shown
    size: Any = None
    axes: list[tuple[Any, QFont | None, QFont | None]] = field(default_factory=list)
    backgrounds: list[tuple[Any, QBrush]] = field(default_factory=list)


class PresenterMode(QObject):
    """Toggles presenter mode on the main window; `toggled(bool)` follows it."""

    toggled = Signal(bool)

    def __init__(self, window: PresentedWindow, scale: float = SCALE, full_screen: bool = True) -> None:
        super().__init__(window.window())
        self.window = window
        self.scale = scale
        self.full_screen = full_screen
        self._saved: _Saved | None = None
        self.headline: HeadlineBar | None = None  # the reply's figures set large, while the mode is on
        window.installEventFilter(self)

    @property
    def active(self) -> bool:
        return self._saved is not None

    def toggle(self) -> None:
        self.set_active(not self.active)

    def set_active(self, on: bool) -> None:
        if on == self.active:
            return
        self._enter() if on else self._leave()
        self.toggled.emit(on)

    # -- entering and leaving ----------------------------------------------------------------------------
    def _enter(self) -> None:
        w = self.window
        s = _Saved(style_sheet=w.styleSheet(), palette=QPalette(w.palette()),
                   palette_set=w.testAttribute(Qt.WidgetAttribute.WA_SetPalette), font=QFont(w.font()),
                   font_set=w.testAttribute(Qt.WidgetAttribute.WA_SetFont), window_state=w.windowState(),
                   geometry=w.saveGeometry(), main_state=w.saveState(), size=w.size(),
                   dock_widths=[(dock, dock.width()) for dock in (w.left_dock, w.right_dock) if dock.isVisible()])
        self._saved = s
        base = w.font().pointSizeF()
        if base <= 0:
            base = 10.0
        point = base * self.scale
        font = QFont(w.font())
        font.setPointSizeF(point)
        w.setFont(font)
        w.setPalette(projector_palette(w.palette()))
        w.setStyleSheet(s.style_sheet + presenter_style_sheet(point))

        s.left_visible = w.left_dock.isVisible()
        w.left_dock.hide()  # the sidebar is for the speaker, not the room
        s.right_visible = w.right_dock.isVisible()
        w.right_dock.show()
        s.legend_visible = w.legend.isVisible()
        w.legend.show()
        self._show_headline()
        self._enlarge_plots(point)
        if self.full_screen:
            w.showFullScreen()
        QTimer.singleShot(0, self._fit_docks)

    def _leave(self) -> None:
        w, s = self.window, self._saved
        assert s is not None
        self._saved = None
        self._remove_headline()
        for pw, brush in s.backgrounds:
            pw.setBackgroundBrush(brush)
        for axis, label_font, tick_font in s.axes:
            axis.setTickFont(tick_font)
            if label_font is not None:
                axis.label.setFont(label_font)
        w.setStyleSheet(s.style_sheet)
        if s.palette is not None:
            w.setPalette(s.palette)
        if s.font is not None:
            w.setFont(s.font)
        if not s.palette_set:
            w.setAttribute(Qt.WidgetAttribute.WA_SetPalette, False)
        if not s.font_set:
            w.setAttribute(Qt.WidgetAttribute.WA_SetFont, False)
        for widget, visible in ((w.left_dock, s.left_visible), (w.right_dock, s.right_visible),
                                (w.legend, s.legend_visible)):
            if visible is not None:
                widget.setVisible(visible)
        if self.full_screen:
            w.setWindowState(s.window_state)
            if not (s.window_state & (Qt.WindowState.WindowFullScreen | Qt.WindowState.WindowMaximized)):
                w.showNormal()
                w.restoreGeometry(s.geometry)
                if s.size is not None and w.size() != s.size:
                    w.resize(s.size)  # restoreGeometry shrinks a window that was larger than the screen
        # The docks' widths: _fit_docks gave the graphs their share of a full screen; put back what they were,
        # now and once the window manager has applied the old geometry (leaving full screen is async).
        # The window is the timers' context: a window closed meanwhile (a test's, or the app quitting) drops them.
        self._restore_docks(s)
        QTimer.singleShot(0, w, lambda: self._restore_docks(s))
        QTimer.singleShot(100, w, lambda: self._restore_docks(s))

    def _restore_docks(self, s: _Saved) -> None:
        if self.active:
            return  # entered again meanwhile
        w = self.window
        if s.main_state is not None:
            w.restoreState(s.main_state)
        docks = [(d, width) for d, width in s.dock_widths if d.isVisible()]
        if docks:
            w.resizeDocks([d for d, _ in docks], [width for _, width in docks], Qt.Orientation.Horizontal)

    # -- the headline ---------------------------------------------------------------------------------
    def _show_headline(self) -> None:
        """The shown reply's tokens/s and speedup, set large in the chat column under the legend, following the
        live graphs' figures."""
        w = self.window
        column = w.legend.parentWidget().layout()
        assert isinstance(column, QBoxLayout)
        self.headline = HeadlineBar()
        column.insertWidget(column.indexOf(w.legend) + 1, self.headline)
        self.headline.show_headline(w.graphs.live.headline)
        w.graphs.live.headline_changed.connect(self.headline.show_headline)

    def _remove_headline(self) -> None:
        bar, self.headline = self.headline, None
        if bar is not None:
            self.window.graphs.live.headline_changed.disconnect(bar.show_headline)
            bar.hide()
            bar.setParent(None)
            bar.deleteLater()

    # -- graphs -----------------------------------------------------------------------------------------
    def _plots(self) -> list[Any]:
        try:
            import pyqtgraph as pg
        except ImportError:
            return []
        return self.window.graphs.findChildren(pg.PlotWidget)

    def _enlarge_plots(self, point: float) -> None:
        assert self._saved is not None
        tick = QFont()
        tick.setPointSizeF(max(11.0, point * 0.75))
        label = QFont()
        label.setPointSizeF(max(11.0, point * 0.8))
        for pw in self._plots():
            self._saved.backgrounds.append((pw, QBrush(pw.backgroundBrush())))
            pw.setBackground("w")
            pi = pw.getPlotItem()
            for name in ("left", "bottom", "right"):
                axis = pi.getAxis(name)
                old_tick = axis.style.get("tickFont")
                self._saved.axes.append((axis, QFont(axis.label.font()),
                                         QFont(old_tick) if old_tick is not None else None))
                axis.setTickFont(tick)
                axis.label.setFont(label)

    def _fit_docks(self) -> None:
        """Give the graphs their share of the width and the chat the rest (again after every resize)."""
        w = self.window
        if not self.active or not w.right_dock.isVisible():
            return
        width = graphs_width(w.width(), w.right_dock.minimumSizeHint().width())
        w.resizeDocks([w.right_dock], [width], Qt.Orientation.Horizontal)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
        if obj is self.window and event.type() == QEvent.Type.Resize and self.active:
            QTimer.singleShot(0, self._fit_docks)
        return False

"""The main window's screens, built once: the chat column in the middle, the conversations and settings dock on
the left, the graphs dock on the right, the status bar and the menus. Each builder sets the widgets it makes as
the window's public attributes (its surface: app/window.py's `MainWindow` docstring) and wires them to the
window's public slots and its controllers.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QHBoxLayout,
    QLabel,
    QMenu,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.chat_view import COLOURS_HELP, ChatView, Composer, copy_text
from app.fit import ElidedLabel, fit_to_screen
from app.graphs.graphs_panel import GraphsPanel
from app.legend import Legend
from app.models_line import llama_cpp_tooltip, models_line
from app.session import Busy
from app.settings_panel import SettingsPanel
from app.sidebar import ConversationSidebar

# The window these build: app.window.MainWindow (not imported here: it imports this module).
Window = Any
SPEC_TIP = "Turn speculative decoding on or off (Ctrl+D); applies from the next round, even in the middle of a reply"


def build_chat_column(w: Window) -> None:
    """The models' line and the speculation switch, the legend, the chat, and the composer with its buttons."""
    central = QWidget()
    v = QVBoxLayout(central)
    v.setContentsMargins(8, 6, 8, 8)
    v.setSpacing(6)
    v.addLayout(_models_row(w))
    w.legend = Legend()
    w.legend.check.setChecked(w.settings.colored)
    w.legend.toggled.connect(w.settings_controller.set_colored)
    w.legend.reading.setChecked(w.settings.reading)
    w.legend.reading_toggled.connect(w.settings_controller.set_reading)
    v.addWidget(w.legend)
    w.chat = ChatView()
    w.chat.colored = w.settings.colored
    w.chat.reading = w.settings.reading
    w.chat.code_colored = w.settings.code_colored
    w.chat.copy_requested.connect(lambda b: copy_text(b.text()))
    w.chat.edit_requested.connect(w.conversations.edit)
    w.chat.regenerate_requested.connect(w.regenerate)
    w.chat.branch_requested.connect(w.conversations.flip_branch)
    w.chat.graphs_requested.connect(w.conversations.show_graphs_for)
    v.addWidget(w.chat, 1)
    v.addLayout(_composer_row(w))
    w.setCentralWidget(central)


def _models_row(w: Window) -> QHBoxLayout:
    top = QHBoxLayout()
    w.model_label = QLabel("No models loaded")
    w.model_label.setObjectName("muted")
    w.model_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    w.model_label.setWordWrap(True)  # a long pair name wraps instead of squeezing the graphs dock
    top.addWidget(w.model_label, 1)
    w.spec_button = QPushButton("Speculation ON")
    w.spec_button.setObjectName("spec_toggle")
    w.spec_button.setCheckable(True)
    w.spec_button.setChecked(w.settings.speculate)
    w.spec_button.setToolTip(SPEC_TIP)
    w.spec_button.toggled.connect(w.settings_controller.set_speculation)
    top.addWidget(w.spec_button)
    return top


def _composer_row(w: Window) -> QHBoxLayout:
    row = QHBoxLayout()
    w.composer = Composer()
    w.composer.submitted.connect(w.send_from_composer)
    row.addWidget(w.composer, 1)
    buttons = QVBoxLayout()
    w.send_button = QPushButton("Send")
    w.send_button.setObjectName("send")
    w.send_button.clicked.connect(w.send_from_composer)
    w.stop_button = QPushButton("Stop")
    w.stop_button.setObjectName("stop")
    w.stop_button.setToolTip("Stop generating (Esc)")
    w.stop_button.clicked.connect(w.stop)
    w.race_button = QPushButton("Race")
    w.race_button.setToolTip("Run the last prompt (or the composer's text) with speculation off, then "
                             "on, same seed; compare speed and, when greedy, the texts (Ctrl+Shift+R)")
    w.race_button.clicked.connect(w.racer.race)
    buttons.addWidget(w.send_button)
    buttons.addWidget(w.stop_button)
    buttons.addWidget(w.race_button)
    row.addLayout(buttons)
    return row


def raise_dialog(dialog: QWidget) -> None:
    """Show a dialog the window keeps (made once) and bring it to the front."""
    dialog.show()
    dialog.raise_()


def build_left_dock(w: Window) -> None:
    """Conversations and settings, in two tabs."""
    w.left_tabs = QTabWidget()
    w.sidebar = ConversationSidebar(w.store)
    w.sidebar.new_requested.connect(w.new_chat)
    w.sidebar.open_requested.connect(w.conversations.open)
    w.sidebar.renamed.connect(lambda _id: w.conversations.refresh_sidebar())
    w.sidebar.deleted.connect(w.conversations.deleted)
    w.sidebar.failed.connect(w.show_error)
    w.conv_list = w.sidebar.list
    w.left_tabs.addTab(w.sidebar, "Chats")
    w.settings_panel = SettingsPanel(w.settings)
    w.settings_panel.changed.connect(w.save_settings)
    w.settings_panel.models_changed.connect(w.settings_controller.models_changed)
    w.settings_panel.system.textChanged.connect(w.settings_controller.system_edited)
    w.settings_panel.load_requested.connect(w.loader.load)
    w.left_tabs.addTab(w.settings_panel, "Settings")
    w.left_dock = QDockWidget("Conversations", w)
    w.left_dock.setObjectName("left_dock")
    w.left_dock.setWidget(w.left_tabs)
    w.left_dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable |
                            QDockWidget.DockWidgetFeature.DockWidgetClosable)
    w.left_dock.setTitleBarWidget(QWidget())
    w.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, w.left_dock)


def build_right_dock(w: Window) -> None:
    """The graphs, with their export buttons."""
    w.graphs = GraphsPanel()
    w.graphs.export_png.clicked.connect(w.exporter.export_graphs_png)
    w.graphs.export_stats.clicked.connect(w.exporter.export_stats)
    w.right_dock = QDockWidget("Speculation", w)
    w.right_dock.setObjectName("right_dock")
    w.right_dock.setWidget(w.graphs)
    w.right_dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable |
                             QDockWidget.DockWidgetFeature.DockWidgetClosable)
    w.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, w.right_dock)
    w.resizeDocks([w.left_dock, w.right_dock], [350, 560], Qt.Orientation.Horizontal)


class FractionBar(QProgressBar):
    """A progress bar set by the fraction done."""

    def set_fraction(self, fraction: float | None) -> None:
        """`fraction` done (0 to 1), or None for a bar that only says "working"."""
        if fraction is None:
            self.setRange(0, 0)
        else:
            self.setRange(0, 1000)
            self.setValue(int(1000 * max(0.0, min(1.0, fraction))))


def build_status_bar(w: Window) -> None:
    """The message line, and a model load's progress with a cancel button."""
    sb = w.statusBar()
    w.progress = FractionBar()
    w.progress.setFixedWidth(220)
    w.progress.setTextVisible(False)
    w.progress.setVisible(False)
    w.cancel_load_button = QToolButton()
    w.cancel_load_button.setText("Cancel")
    w.cancel_load_button.setVisible(False)
    w.cancel_load_button.clicked.connect(w.loader.cancel)
    # The message line gives way to the permanent widgets on the right (the progress bar, the draft's
    # adaptation): what does not fit a narrow window ends in "…" and the whole message is its tooltip.
    w.status_label = ElidedLabel("")
    sb.addWidget(w.status_label, 1)
    sb.addPermanentWidget(w.progress)
    sb.addPermanentWidget(w.cancel_load_button)


def fit_window(w: Window, default_size: Any, area: QRect | None = None) -> None:
    """Fit the window to the screen's available area (at most `default_size`) and share the width out: on a
    narrow screen the sidebar narrows and the graphs go to one scrolling column."""
    size = fit_to_screen(w, default_size, area)
    width = size.width()
    # The sidebar as wide as its Settings tab needs (no sideways scrolling); the graphs what the chat column
    # leaves with its legend's full row, and at least 300 px (the legend then takes its short texts).
    left = 350 if width >= 1400 else max(180, int(width * 0.19), w.left_tabs.minimumSizeHint().width())
    margins = w.centralWidget().layout().contentsMargins()
    room = width - left - w.legend.full_width() - margins.left() - margins.right() - 12  # the separators
    right = max(300, min(560 if width >= 1400 else int(width * 0.34), room))
    w.resizeDocks([w.left_dock, w.right_dock], [left, right], Qt.Orientation.Horizontal)


def show_controls(w: Window, baseline: Any | None) -> None:
    """The buttons and the models' line from the window's `busy` and session; `baseline`: the verifier-alone
    baseline the next reply compares with (app.speedup.Baseline), if any."""
    generating = w.busy in (Busy.REPLY, Busy.RACE)
    w.send_button.setVisible(not generating)
    w.stop_button.setVisible(generating)
    # A message sent while the models load (or the baseline is measured) goes once they end.
    w.send_button.setEnabled(w.busy in (Busy.IDLE, Busy.LOAD, Busy.MEASURE))
    w.race_button.setEnabled(w.busy == Busy.IDLE and w.session is not None)
    s = w.session
    # Without a usable drafter the engine decodes with the verifier alone, whatever the switch says:
    # the button says so instead of staying green. The setting itself is kept for the next pair.
    no_drafter = s is not None and s.drafter is None and w.busy != Busy.LOAD
    w.spec_button.setEnabled(not no_drafter)
    if no_drafter:
        w.spec_button.setText("Speculation unavailable")
        w.spec_button.setToolTip("No usable drafter for this verifier, so replies use the verifier alone. "
                                 + (s.verdict or ""))
    else:
        w.spec_button.setText("Speculation ON" if w.spec_button.isChecked() else "Speculation OFF")
        w.spec_button.setToolTip(SPEC_TIP)
    if w.busy == Busy.LOAD:
        return
    if s is None:
        w.model_label.setText("No models loaded — Settings ▸ Load models")
        return
    w.model_label.setText(models_line(s, baseline))
    tip = f"Baseline for the speedup: {baseline.how}" if baseline else ""
    notes = [*getattr(s.verifier, "notes", ()), *getattr(s.draft, "notes", ())]  # a format fallen back from
    llama_cpp = llama_cpp_tooltip(getattr(s, "llama_cpp", None))
    w.model_label.setToolTip("\n".join(t for t in (tip, llama_cpp, w.hosts.note, *notes) if t))  # where replies decode


# ---- menus ---------------------------------------------------------------------------------------
def action(w: Window, menu: QMenu, text: str, slot, shortcut=None) -> QAction:
    a = QAction(text, w)
    if shortcut is not None:
        a.setShortcut(QKeySequence(shortcut))
    if slot is not None:
        a.triggered.connect(slot)
    menu.addAction(a)
    return a


def build_menus(w: Window) -> None:
    mb = w.menuBar()
    _file_menu(w, mb.addMenu("&File"))
    _generation_menu(w, mb.addMenu("&Generation"))
    _view_menu(w, mb.addMenu("&View"))
    h = mb.addMenu("&Help")
    action(w, h, "About the colours", lambda: QMessageBox.information(w, "Token colours", COLOURS_HELP))


def _file_menu(w: Window, f: QMenu) -> None:
    action(w, f, "New chat", w.new_chat, QKeySequence.StandardKey.New)
    f.addSeparator()
    export = w.exporter
    action(w, f, "Export conversation as Markdown…", lambda: export.export_conversation("md"))
    action(w, f, "Export conversation as HTML (with colours)…", lambda: export.export_conversation("html"))
    action(w, f, "Export conversation as JSON trace…", lambda: export.export_conversation("json"))
    action(w, f, "Export graphs as PNG…", export.export_graphs_png)
    action(w, f, "Export reply stats (CSV/JSON)…", export.export_stats)
    action(w, f, "Export as web page (replays in any browser)…", lambda: w.talk.export_web_page())
    f.addSeparator()
    action(w, f, "Quit", w.close, QKeySequence.StandardKey.Quit)


def _generation_menu(w: Window, g: QMenu) -> None:
    w.stop_action = action(w, g, "Stop", w.stop, "Esc")
    w.stop_action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
    action(w, g, "Regenerate last reply", lambda: w.regenerate(None), "Ctrl+R")
    w.toggle_action = action(w, g, "Toggle speculation", lambda: w.spec_button.toggle(), "Ctrl+D")
    action(w, g, "Race: speculation off vs on", w.racer.race, "Ctrl+Shift+R")
    g.addSeparator()
    action(w, g, "Load models", w.loader.load, "Ctrl+L")
    action(w, g, "Re-measure baseline (verifier alone)", w.loader.remeasure_baseline)
    action(w, g, "Rank drafts for this verifier…", w.rank_drafts)
    action(w, g, "Models (install, remove, use a pair)…", w.show_models)


def _view_menu(w: Window, v: QMenu) -> None:
    v.addAction(w.left_dock.toggleViewAction())
    w.left_dock.toggleViewAction().setText("Sidebar")
    v.addAction(w.right_dock.toggleViewAction())
    w.right_dock.toggleViewAction().setText("Graphs")
    colour = action(w, v, "Colour tokens", None, "Ctrl+Shift+C")
    colour.setCheckable(True)
    colour.setChecked(w.settings.colored)
    colour.toggled.connect(w.legend.check.setChecked)
    w.legend.check.toggled.connect(colour.setChecked)
    # Code blocks plain (a thin mark at each correction) or coloured token by token; each block's own link
    # flips it too.
    w.code_action = action(w, v, "Colour code blocks", None, "Ctrl+Shift+K")
    w.code_action.setCheckable(True)
    w.code_action.setChecked(w.settings.code_colored)
    w.code_action.toggled.connect(w.settings_controller.set_code_colored)
    w.chat.code_colours_requested.connect(w.code_action.setChecked)
    action(w, v, "Settings", lambda: (w.left_dock.show(), w.left_tabs.setCurrentIndex(1)), "Ctrl+,")

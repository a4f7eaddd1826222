"""Generation → Models: `specdec models` inside the app.

Every model known by name, installed or not, with its size and licence; Install fetches, checks and converts
one in the background with a progress bar (catalog.install, the same as `specdec models install`), Remove
deletes it, and each known pair (verifier + draft) can be put into the settings and loaded in one click.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QSize, Signal
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from app.disk_use import size_cell
from app.fit import fit_to_screen
from app.worker import FunctionWorker
from specdec_core.loading import catalog

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.loading import LoadController
    from app.settings_panel import SettingsPanel

COLUMNS = ("model", "parameters", "size", "licence", "state")


class ModelsWindow(Protocol):
    """What the Models dialog uses of the window: the settings to put a pair into, and the loader."""

    settings_panel: SettingsPanel
    loader: LoadController

    def window(self) -> QWidget: ...  # the top-level widget (Qt's QWidget.window()): the dialog's parent


class ModelsDialog(QDialog):
    installed = Signal(str)  # a model's name, once it is installed and converted

    def __init__(self, window: ModelsWindow, cache_dir: Path | None = None) -> None:
        super().__init__(window.window())
        from specdec_core.loading.gguf_cache import default_cache_dir

        self.window_ = window
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.setWindowTitle("Models")
        self.worker: FunctionWorker | None = None

        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.status = QLabel("Models known by name: install one, or use a pair as verifier + draft.")
        self.status.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setVisible(False)

        self.install_button = QPushButton("Install")
        self.install_button.clicked.connect(self.install_selected)
        self.remove_button = QPushButton("Remove")
        self.remove_button.clicked.connect(self.remove_selected)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        close = QPushButton("Close")
        close.clicked.connect(self.close)
        buttons = QHBoxLayout()
        for button in (self.install_button, self.remove_button, self.cancel_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(close)

        self.pairs = QVBoxLayout()
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addWidget(QLabel("Pairs (verifier + draft):"))
        layout.addLayout(self.pairs)
        layout.addWidget(self.status)
        layout.addWidget(self.progress)
        layout.addLayout(buttons)
        self.refresh()
        fit_to_screen(self, QSize(760, 420))

    # ------------------------------------------------------------------ listing

    def refresh(self) -> None:
        rows = catalog.listing(self.cache_dir)
        self.names = [row.model.name for row in rows]
        self.table.setRowCount(len(rows))
        for index, row in enumerate(rows):
            model = row.model
            size, size_tip = size_cell(model, self.cache_dir)  # the download, or what it takes here once installed
            state = ("installed" + (", converted" if row.converted else "")) if row.installed else "not installed"
            for column, text in enumerate((model.name, model.parameters, size, model.licence, state)):
                item = QTableWidgetItem(text)
                item.setToolTip(size_tip if column == 2 else f"{model.title}: {model.summary}")
                self.table.setItem(index, column, item)
        self.table.resizeColumnsToContents()
        self._fill_pairs()
        self._selection_changed()

    def _fill_pairs(self) -> None:
        while self.pairs.count():
            item = self.pairs.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        for verifier, draft, ready in catalog.pairings(self.cache_dir):
            button = QPushButton(f"Use {verifier} + {draft}" if ready else f"Install and use {verifier} + {draft}")
            button.setToolTip("Puts the pair into the settings and loads it" if ready
                              else "Installs what is missing first (it can take a few minutes)")
            button.clicked.connect(lambda _=False, v=verifier, d=draft: self.use_pair(v, d))
            self.pairs.addWidget(button)

    def selected(self) -> catalog.KnownModel | None:
        rows = self.table.selectionModel().selectedRows()
        return catalog.KNOWN[self.names[rows[0].row()]] if rows else None

    def _selection_changed(self) -> None:
        model = self.selected()
        busy = self.running
        downloadable = model is not None and model.download is not None
        installed = model is not None and catalog.is_installed(model, self.cache_dir)
        self.install_button.setEnabled(not busy and downloadable and not installed)
        self.remove_button.setEnabled(not busy and downloadable and installed)

    # ------------------------------------------------------------------ install / remove

    @property
    def running(self) -> bool:
        return self.worker is not None and self.worker.is_running

    def install_selected(self) -> None:
        model = self.selected()
        if model is not None:
            self.install([model.name])

    def install(self, names: list[str], then=None) -> None:
        """Install `names` one after the other in the background; `then()` runs once all are installed."""
        missing = [name for name in names if not catalog.is_installed(catalog.KNOWN[name], self.cache_dir)]
        if not missing:
            if then is not None:
                then()
            return
        cache = self.cache_dir

        def work(progress, cancelled):
            for name in missing:
                if cancelled():
                    break
                catalog.install(name, cache, progress=lambda step, name=name: progress((name, step)))
            return missing

        self.worker = worker = FunctionWorker(work, name="install-models")
        worker.progress.connect(self._on_progress)
        worker.returned.connect(lambda done: self._installed(done, then))
        worker.errored.connect(lambda error: self.status.setText(f"Install failed: {error}"))
        worker.finished.connect(self._finished)
        self.progress.setValue(0)
        self.progress.setVisible(True)
        self.cancel_button.setEnabled(True)
        self.status.setText(f"Installing {', '.join(missing)}…")
        worker.start()
        self._selection_changed()

    def _on_progress(self, update) -> None:
        name, step = update
        self.status.setText(f"{name}: {step.message}")
        if step.fraction is None:
            self.progress.setRange(0, 0)  # busy indicator
        else:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(step.fraction * 1000))

    def _installed(self, names: list[str], then) -> None:
        self.status.setText(f"Installed {', '.join(names)}.")
        for name in names:
            self.installed.emit(name)
        if then is not None:
            then()

    def _finished(self) -> None:
        self.progress.setVisible(False)
        self.cancel_button.setEnabled(False)
        if self.worker is not None and self.worker.abort_requested:
            self.status.setText("Cancelled: the next install resumes from the parts already fetched.")
        self.refresh()

    def cancel(self) -> None:
        if self.worker is not None:
            self.worker.abort()

    def remove_selected(self) -> None:
        model = self.selected()
        if model is None:
            return
        answer = QMessageBox.question(self, "Remove model", f"Delete {model.name} and its converted copy from "
                                                            f"{self.cache_dir}?")
        if answer != QMessageBox.StandardButton.Yes:
            return
        from specdec_core.errors import SpecdecError

        try:
            catalog.remove(model.name, self.cache_dir)
            self.status.setText(f"Removed {model.name}.")
        except (SpecdecError, OSError) as error:
            self.status.setText(f"Could not remove {model.name}: {error}")
        self.refresh()

    # ------------------------------------------------------------------ use a pair

    def use_pair(self, verifier: str, draft: str) -> None:
        """Install what is missing, then put the pair into the settings and load it."""
        self.install([verifier, draft], then=lambda: self._load_pair(verifier, draft))

    def _load_pair(self, verifier: str, draft: str) -> None:
        panel = self.window_.settings_panel
        panel.verifier.setEditText(verifier)
        panel.draft.setEditText(draft)
        panel.use_model.setChecked(True)
        self.status.setText(f"Loading {verifier} with {draft} as its draft…")
        self.window_.loader.load()

    def closeEvent(self, event) -> None:  # noqa: N802
        # An install keeps running when the dialog closes (it resumes anyway); only the window's close stops it.
        super().closeEvent(event)

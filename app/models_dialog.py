"""Generation → Models: `specdec models` inside the app.

Every model known by name, installed or not, with its size and licence; Install fetches, checks and converts
one in the background with a progress bar (catalog.install, the same as `specdec models install`), Remove
deletes it, and each known pair (verifier + draft) can be put into the settings and loaded in one click.

Below, the models found on this machine (discovery.py, as `specdec models list`): one can be put into the
settings as verifier or draft, or loaded as verifier with the best draft found for it (pairs/suggestions.py,
worked out in the background), and a folder of the user's can be added to the search.
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
    QWidget,
)

from app.disk_use import size_cell
from app.fit import fit_to_screen
from app.worker import FunctionWorker
from specdec_core.loading import catalog, discovery

FOUND_COLUMNS = ("found model", "parameters", "size", "architecture", "quantisation", "where")

if TYPE_CHECKING:
    from app.found_offers import FoundOffers
    from app.loading import LoadController
    from app.settings import Settings
    from app.settings_panel import SettingsPanel

COLUMNS = ("model", "parameters", "size", "licence", "state")


class ModelsWindow(Protocol):
    """What the Models dialog uses of the window: the settings to put a pair into, and the loader."""

    settings_panel: SettingsPanel
    loader: LoadController
    settings: Settings  # its model_dirs are searched too
    found_offers: FoundOffers  # told when a folder is added: the settings' drop-downs offer what it holds

    def save_settings(self) -> None: ...

    def window(self) -> QWidget: ...  # the top-level widget (Qt's QWidget.window()): the dialog's parent


class ModelsDialog(QDialog):
    installed = Signal(str)  # a model's name, once it is installed and converted
    # Every known model's row and the found table's first rows in view; at 760×420 the known models showed one
    # row and a half, on any screen. fit_to_screen caps it to a smaller screen (1024×700, scale 2).
    PREFERRED = QSize(900, 640)

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
        layout.addWidget(self.table, 2)  # the known models first: the found table is often empty
        layout.addWidget(QLabel("Pairs (verifier + draft):"))
        layout.addLayout(self.pairs)
        layout.addWidget(QLabel("Found on this machine (LM Studio, Ollama, Hugging Face cache, GPT4All, Jan, your "
                                "folders):"))
        layout.addWidget(self._build_found(), 1)
        layout.addWidget(self.status)
        layout.addWidget(self.progress)
        layout.addLayout(buttons)
        self.refresh()
        fit_to_screen(self, self.PREFERRED)

    # ------------------------------------------------------------------ listing

    def refresh(self) -> None:
        rows = catalog.listing(self.cache_dir)
        self.names = [row.model.name for row in rows]
        self.table.setRowCount(len(rows))
        for index, row in enumerate(rows):
            model = row.model
            size, size_tip = size_cell(model, self.cache_dir)  # the download, or what it takes here once installed
            for column, text in enumerate((model.name, model.parameters, size, model.licence, row.state)):
                item = QTableWidgetItem(text)
                item.setToolTip(size_tip if column == 2 else f"{model.title}: {model.summary}")
                self.table.setItem(index, column, item)
        self.table.resizeColumnsToContents()
        self._fill_pairs()
        self._selection_changed()
        self.refresh_found()

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
        path, damage = catalog.install_state(model, self.cache_dir) if downloadable else (None, None)
        self.install_button.setEnabled(not busy and downloadable and path is None)
        self.remove_button.setEnabled(not busy and (path is not None or damage is not None))  # damaged: removable

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

    # ------------------------------------------------------------------ found on this machine

    def _build_found(self) -> QWidget:
        self.found: list[discovery.FoundModel] = []
        self.found_table = QTableWidget(0, len(FOUND_COLUMNS))
        self.found_table.setHorizontalHeaderLabels(FOUND_COLUMNS)
        self.found_table.horizontalHeader().setStretchLastSection(True)
        self.found_table.verticalHeader().setVisible(False)
        self.found_table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.found_table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.found_table.setSelectionMode(QTableWidget.SelectionMode.SingleSelection)
        self.found_table.itemSelectionChanged.connect(self._found_selection_changed)
        self.found_note = QLabel()
        self.found_note.setWordWrap(True)
        self.use_verifier_button = QPushButton("Use as verifier")
        self.use_verifier_button.clicked.connect(lambda: self.use_found("verifier"))
        self.use_draft_button = QPushButton("Use as draft")
        self.use_draft_button.clicked.connect(lambda: self.use_found("draft"))
        self.best_pair_button = QPushButton("Load with its best draft")
        self.best_pair_button.setToolTip("Finds the best draft on this machine for the selected model (its own "
                                         "tokenizer first, smallest first) and loads the pair")
        self.best_pair_button.clicked.connect(self.use_best_pair)
        add_folder = QPushButton("Add a folder…")
        add_folder.clicked.connect(self.add_folder)
        buttons = QHBoxLayout()
        for button in (self.use_verifier_button, self.use_draft_button, self.best_pair_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(add_folder)
        box = QWidget()
        column = QVBoxLayout(box)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.found_table, 1)
        column.addWidget(self.found_note)
        column.addLayout(buttons)
        return box

    def _model_dirs(self) -> list[str]:
        return list(self.window_.settings.model_dirs)

    def refresh_found(self) -> None:
        """List the models found on this machine again (headers only: quick)."""
        from specdec_core.commands.models_cli import bytes_text

        listing = discovery.find_models(self._model_dirs())
        self.found = list(listing.models)
        self.found_table.setRowCount(len(self.found))
        for index, model in enumerate(self.found):
            facts = model.facts
            cells = (model.name, facts.parameters_text(), bytes_text(facts.size), facts.architecture or "?",
                     facts.quantisation or "?", model.where)
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(f"{model.name}\nvocabulary {facts.vocabulary_hash or 'unknown'}\n{model.path}")
                self.found_table.setItem(index, column, item)
        self.found_table.resizeColumnsToContents()
        note = f"{len(self.found)} found." if self.found else "Nothing found: add a folder that holds models."
        if listing.skipped:
            note += f" {len(listing.skipped)} skipped (hover for why)."
        self.found_note.setText(note)
        self.found_note.setToolTip("\n".join(discovery.skipped_summary(listing.skipped)))  # a tooltip, not a wall
        self._found_selection_changed()

    def selected_found(self) -> discovery.FoundModel | None:
        rows = self.found_table.selectionModel().selectedRows()
        return self.found[rows[0].row()] if rows else None

    def _found_selection_changed(self) -> None:
        chosen = self.selected_found() is not None and not self.running
        for button in (self.use_verifier_button, self.use_draft_button, self.best_pair_button):
            button.setEnabled(chosen)

    def use_found(self, role: str) -> None:
        """Put the selected found model into the settings as verifier or draft (loaded with the next message)."""
        model = self.selected_found()
        if model is None:
            return
        panel = self.window_.settings_panel
        (panel.verifier if role == "verifier" else panel.draft).setEditText(model.name)
        if role == "draft":
            panel.use_model.setChecked(True)
        self.status.setText(f"{model.name} is the {role} in the settings: it loads with your next message.")

    def use_best_pair(self) -> None:
        """Find the best draft for the selected model in the background, then load the pair."""
        model = self.selected_found()
        if model is None:
            return
        from specdec_core.pairs.suggestions import suggest_drafts

        extra = self._model_dirs()
        self.worker = worker = FunctionWorker(
            lambda progress, cancelled: suggest_drafts(model.name, discovery.find_models(extra)), name="pair-drafts")
        worker.returned.connect(self._paired)
        worker.errored.connect(lambda error: self.status.setText(f"No draft found: {error}"))
        worker.finished.connect(lambda: (self._selection_changed(), self._found_selection_changed()))
        self.status.setText(f"Looking for a draft for {model.name}…")
        worker.start()
        self._found_selection_changed()

    def _paired(self, found) -> None:
        best = found.best
        if best is None:
            self.status.setText(f"No draft on this machine suits {found.verifier.name}: it needs a smaller model "
                                "with a tokenizer the doctor accepts.")
            return
        self._load_pair(found.verifier.name, best.draft.name)
        self.status.setText(f"Loading {found.verifier.name} with {best.draft.name} ({best.verdict.summary()})…")

    def add_folder(self, folder: str | None = None) -> None:
        """Search a folder of the user's too (kept in the settings)."""
        if not folder:
            from PySide6.QtWidgets import QFileDialog

            folder = QFileDialog.getExistingDirectory(self, "A folder that holds models")
        if not folder:
            return
        if folder not in self.window_.settings.model_dirs:
            self.window_.settings.model_dirs.append(folder)
            self.window_.save_settings()
        self.refresh_found()
        self.window_.found_offers.refresh()  # the settings' drop-downs offer what this folder holds too

    def closeEvent(self, event) -> None:  # noqa: N802
        # An install keeps running when the dialog closes (it resumes anyway); only the window's close stops it.
        super().closeEvent(event)

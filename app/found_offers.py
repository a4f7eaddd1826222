"""The models found on this machine, offered where the settings choose a verifier and a draft.

In the background (headers only, nothing loaded): discovery.py lists the models other apps keep (Ollama, LM
Studio, the Hugging Face cache, GPT4All, Jan, the user's folders), and pairs/suggestions.py picks the pair to
offer first (the largest model with a smaller draft of its own vocabulary). The settings panel then lists every
found model in both drop-downs under the name discovery gives it (`ollama:qwen2.5-coder:1.5b`), which loads like
any spec, and offers that pair in one click. The app starts a search when it opens (app/main.py) and again when
the Models dialog searches another folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject, Signal

from app.ports import WindowPort
from app.worker import FunctionWorker, error_text

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.settings_panel import SettingsPanel
    from specdec_core.loading.discovery import Listing
    from specdec_core.pairs.suggestions import Suggestions


class FoundWindow(WindowPort, Protocol):
    """What the found offers use of the window: its settings (model_dirs) and the panel that shows them."""

    settings_panel: SettingsPanel

    def window(self) -> QWidget: ...  # the top-level widget (Qt's QWidget.window()): this controller's parent


@dataclass(frozen=True)
class FoundReport:
    listing: Listing
    pair: Suggestions | None  # the pair to offer first, or None when no two found models pair


def find_and_pair(model_dirs: list[str]) -> FoundReport:
    """The models found (and in `model_dirs`) and the pair to offer first: Qt-free, for the worker."""
    from specdec_core.loading import discovery
    from specdec_core.pairs.suggestions import best_pair

    listing = discovery.find_models(model_dirs)
    return FoundReport(listing, best_pair(listing))


def model_note(model) -> str:
    """What a drop-down shows beside a found model's name: where it was found, its parameters and quantisation."""
    from specdec_core.loading.discovery import SOURCES

    facts = model.facts
    size = f"{facts.parameters_text()} parameters" if facts.parameters or facts.size_label else ""
    parts = [SOURCES[model.source], size, facts.quantisation]
    return ", ".join(p for p in parts if p)


class FoundOffers(QObject):
    """Searches in the background and hands what it found to the settings panel."""

    offered = Signal(object)  # the FoundReport, once the settings show it
    failed = Signal(str)

    def __init__(self, window: FoundWindow) -> None:
        super().__init__(window.window())
        self.window = window
        self.worker: FunctionWorker | None = None
        self.report: FoundReport | None = None

    def refresh(self) -> None:
        """Search again (a search already running is dropped for this one)."""
        if self.worker is not None and self.worker.is_running:
            self.worker.abort()
        dirs = list(self.window.settings.model_dirs)
        worker = FunctionWorker(lambda progress, cancelled: find_and_pair(dirs), name="find-models")
        worker.returned.connect(self._found)
        worker.errored.connect(lambda error: self.failed.emit(f"Looking for models failed: {error_text(error)}"))
        self.worker = worker
        worker.start()

    def _found(self, report: FoundReport) -> None:
        if self.window.closing:
            return
        self.report = report
        panel = self.window.settings_panel
        panel.offer_found([(m.name, model_note(m)) for m in report.listing.models])
        pair = report.pair
        if pair is not None and pair.best is not None:
            panel.offer_pair(pair.verifier.name, pair.best.draft.name, pair.best.verdict.summary())
        self.offered.emit(report)

"""Generation → Rank drafts: `specdec rank-drafts` inside the app, for the loaded verifier.

Each candidate draft (and prompt lookup) gets the doctor's verdict, then the measured acceptance rate,
c and speedup at each γ on a bundled prompt set. Candidates are ranked one at a time, so each one's rows
join the table (kept sorted by speedup) as soon as it is measured, and a progress bar counts the
replies measured. The work runs on a FunctionWorker with its own Engine (the chat's engine and caches
are left alone); the window is marked busy (`set_busy`) so it does not start a reply meanwhile.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QSize, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from app.fit import fit_to_screen
from app.worker import FunctionWorker
from specdec_core.measuring.prompt_sets import BUNDLED_SETS

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.session import Busy, Session

PROMPT_SETS = ("all", *BUNDLED_SETS)
COLUMNS = ("#", "draft", "speedup", "best γ", "acceptance", "c", "tokens/s", "doctor")


class RankWindow(Protocol):
    """What the ranking uses of the window: the loaded pair, and the engine's `busy`, held while it ranks."""

    session: Session | None

    @property
    def busy(self) -> Busy: ...
    def set_busy(self, state: Busy | str) -> None: ...
    def window(self) -> QWidget: ...  # the top-level widget (Qt's QWidget.window()): the dialog's parent


class RankDialog(QDialog):
    ranked = Signal(object)  # the ranking dict, as `specdec rank-drafts --json` writes it

    def __init__(self, window: RankWindow) -> None:
        super().__init__(window.window())
        self.window_ = window
        self.setWindowTitle("Rank drafts for this verifier")
        self.worker: FunctionWorker | None = None
        self.result: dict | None = None

        form = self._build_form(window)
        self.status = QLabel("Measures each draft with speculation off and on, on this machine.")
        self.status.setWordWrap(True)
        self.progress = QProgressBar()
        self.progress.setVisible(False)
        self.progress.setFormat("%v of %m replies measured")
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.run_button = QPushButton("Rank")
        self.run_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        close = QPushButton("Close")
        close.clicked.connect(self.close)

        buttons = QHBoxLayout()
        buttons.addWidget(self.run_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        buttons.addWidget(close)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.status)
        layout.addWidget(self.progress)
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)
        self.rows: list[dict] = []
        fit_to_screen(self, QSize(900, 460))

    def _build_form(self, window: RankWindow) -> QFormLayout:
        """What to rank: the drafts (the loaded one and the shipped one), the prompts, γ, the reply length."""
        session = window.session
        drafts = [session.request.draft] if session and session.request.draft else []
        if "smollm2-135m-draft" not in drafts:
            drafts.append("smollm2-135m-draft")
        self.drafts = QLineEdit(" ".join(drafts))
        self.drafts.setToolTip("Model specs separated by spaces; prompt lookup is always ranked too")
        self.prompts = QComboBox()
        self.prompts.addItems(PROMPT_SETS)
        self.prompts.setCurrentText("chat")
        self.gammas = QLineEdit("2,4")
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(8, 512)
        self.max_tokens.setValue(48)
        self.hybrid = QCheckBox("also each draft with prompt lookup (1 draft token where nothing matches)")
        self.hybrid.setChecked(True)
        self.hybrid.setToolTip("The embedded pair's default drafter is such a hybrid; this doubles the time")

        form = QFormLayout()
        form.addRow("Drafts", self.drafts)
        form.addRow("Prompt set", self.prompts)
        form.addRow("γ values", self.gammas)
        form.addRow("New tokens per prompt", self.max_tokens)
        form.addRow("Hybrids", self.hybrid)
        return form

    @property
    def running(self) -> bool:
        return self.worker is not None and self.worker.is_running

    def start(self) -> None:
        from specdec_core.config import GenerationConfig
        from specdec_core.errors import SpecdecError
        from specdec_core.measuring.prompt_sets import load_prompts
        from specdec_core.measuring.rank import Candidate, parse_gammas

        window = self.window_
        session = window.session
        if session is None:
            self.status.setText("Load a verifier first (Generation → Load models).")
            return
        if window.busy:
            self.status.setText("Wait for the current reply (or loading) to finish, then rank.")
            return
        try:
            gammas = parse_gammas(self.gammas.text())
            cases = load_prompts(self.prompts.currentText())
        except SpecdecError as error:
            self.status.setText(str(error).replace("--gammas", "γ values"))
            return
        candidates = [Candidate(None)] + [Candidate(spec) for spec in self.drafts.text().split() if spec]
        config = GenerationConfig(max_new_tokens=self.max_tokens.value(), top_alternatives=0)
        verifier, request = session.verifier, session.request
        hybrid_tokens = 1 if self.hybrid.isChecked() else None

        work = _ranking_work(verifier, request, candidates, cases, config, gammas, hybrid_tokens)

        # Replies to measure: each measured row runs every prompt (speculation off and on at each γ).
        models = len(candidates) - 1
        self.progress.setRange(0, (1 + models * (2 if hybrid_tokens else 1)) * len(cases))
        self.progress.setValue(0)
        self.progress.setVisible(True)
        self.rows = []
        self.table.setRowCount(0)
        self.worker = worker = FunctionWorker(work, name="rank-drafts")
        worker.progress.connect(self._on_progress)
        worker.returned.connect(self._show)
        worker.errored.connect(lambda error: self.status.setText(f"Ranking failed: {error}"))
        worker.finished.connect(self._finished)
        self.run_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        window.set_busy("rank")
        self.status.setText("Ranking…")
        worker.start()

    def _on_progress(self, update) -> None:
        if isinstance(update, list):  # one candidate's rows, measured
            self.rows = sort_rows(self.rows + update)
            self._fill(self.rows)
            return
        message = str(update)
        self.status.setText(message)
        if re.search(r"prompt \d+/\d+", message):
            self.progress.setValue(min(self.progress.maximum(), self.progress.value() + 1))

    def cancel(self) -> None:
        if self.worker is not None:
            self.worker.abort()
            self.status.setText("Cancelling after the current reply…")

    def _finished(self) -> None:
        self.run_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        self.progress.setVisible(False)
        if self.window_.busy == "rank":
            self.window_.set_busy("")
        if self.worker is not None and self.worker.abort_requested:
            self.status.setText("Cancelled.")

    def _show(self, result: dict) -> None:
        self.result = result
        rows = result["ranking"]
        self._fill(rows)
        best = next((r for r in rows if "speedup" in r), None)
        self.status.setText(f"Fastest here: {best['draft']} at {best['speedup']:.2f}× of the verifier alone "
                            f"(γ {best['best_gamma']})." if best else "No draft could be measured.")
        self.ranked.emit(result)

    def _fill(self, rows: list[dict]) -> None:
        self.table.setRowCount(len(rows))
        for index, row in enumerate(rows):
            measured = "speedup" in row
            cells = [str(index + 1) if measured else "–", row["draft"],
                     f"{row['speedup']:.2f}×" if measured else "–", str(row.get("best_gamma", "–")),
                     f"{row['acceptance_rate']:.0%}" if measured else "–", f"{row['c']:.3f}" if measured else "–",
                     f"{row['tokens_per_s']:.1f}" if measured else "–", row["verdict"]]
            for column, text in enumerate(cells):
                self.table.setItem(index, column, QTableWidgetItem(text))
        self.table.resizeColumnsToContents()

    def closeEvent(self, event) -> None:  # noqa: N802
        self.cancel()
        super().closeEvent(event)


def sort_rows(rows: list[dict]) -> list[dict]:
    """Measured rows by speedup, fastest first; then those that could not be measured (as rank_drafts)."""
    return sorted(rows, key=lambda r: (not r.get("compatible") or "speedup" not in r, -r.get("speedup", 0.0)))


def _ranking_work(verifier, request, candidates: list, cases: list, config, gammas: list[int],
                  hybrid_tokens: int | None):
    """The ranking as a worker's function (progress, cancelled) -> the ranking dict: the candidates measured one
    at a time on a fresh Engine over the loaded verifier, each one's rows reported as soon as it is measured."""

    def work(progress, cancelled):
        from specdec_core.engine import Engine
        from specdec_core.loading.models import load_model
        from specdec_core.measuring.rank import rank_drafts
        from specdec_core.pairs.pairing import draft_dtype_for

        engine = Engine(verifier)
        result: dict = {"ranking": []}
        for candidate in candidates:  # one at a time: each one's rows reach the table when measured
            if cancelled():
                break
            part = rank_drafts(engine, verifier, [candidate], cases, config, gammas, 1,
                               load=lambda spec: load_model(spec, device=request.device,
                                                            dtype=draft_dtype_for(request.dtype)),
                               progress=progress, hybrid_tokens=hybrid_tokens)
            progress(part["ranking"])
            result = {"setup": part["setup"], "ranking": result["ranking"] + part["ranking"]}
        result["ranking"] = sort_rows(result["ranking"])
        return result

    return work

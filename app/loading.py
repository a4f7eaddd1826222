"""Loading the model pair the settings name, on a worker, without blocking the window.

The window owns the session; this controller replaces it when a load succeeds and keeps the current
pair until then. It drives the status bar's progress and Cancel button, the model label and the settings
panel's verdict, and starts the verifier-alone baselines afresh when the verifier changes. What the
window does next (send a message queued meanwhile) hangs on `loaded`, `failed` and `finished`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject, QTimer, Signal

from app import session as session_mod
from app.ports import WindowPort
from app.session import Busy, LoadRequest, LoadStep, Session
from app.worker import FunctionWorker, error_text
from specdec_core import defaults

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.graphs.graphs_panel import GraphsPanel
    from app.host import HostKeeper
    from app.settings_panel import SettingsPanel
    from app.speedup import BaselineBook


class LoadWindow(WindowPort, Protocol):
    """What loading uses of the window besides the shared port."""

    settings_panel: SettingsPanel  # the pair's verdict, the drafts on offer, the settings since the load
    graphs: GraphsPanel  # told the new baseline
    baselines: BaselineBook  # the verifier-alone measurements, started afresh for another verifier
    hosts: HostKeeper  # its decoding process, forked from the previous session's models: ended on a load

    def window(self) -> QWidget: ...  # the top-level widget (Qt's QWidget.window()): this controller's parent
    def set_progress(self, fraction: float | None) -> None: ...
    def show_progress(self, on: bool) -> None: ...
    def set_models_text(self, text: str) -> None: ...
    def update_controls(self) -> None: ...
    def save_settings(self) -> None: ...
    def stop(self) -> None: ...


class LoadController(QObject):
    loaded = Signal(object)  # the new Session, once the window shows it
    failed = Signal(str)  # the message shown to the user
    finished = Signal()  # after loaded or failed (or a cancel), once the window is idle again

    def __init__(self, window: LoadWindow) -> None:
        super().__init__(window.window())
        self.window = window
        self.worker: FunctionWorker | None = None  # the running load; None once it has finished
        self.drafts_worker: FunctionWorker | None = None  # the latest look for installed drafts (_offer_drafts)
        self._remeasure = False  # the next load measures the baseline again, even for the same verifier
        self._stopping = False  # a load is waiting for the reply or race it stopped

    def request(self) -> LoadRequest:
        s = self.window.settings
        # No calibration during the load: the baseline is measured after it, where the replies decode
        # (app/baseline_controller.py), when the settings ask for it.
        return LoadRequest(verifier=s.verifier, draft=s.draft, drafter=s.drafter, draft_tokens=s.draft_tokens,
                           device=s.device, dtype=s.dtype, calibrate=False)

    def load(self) -> None:
        """Load the models named in the settings, in the background (keeps the current pair until done)."""
        w = self.window
        if w.busy == Busy.RANK:
            w.say("A draft ranking is running: cancel it (Generation ▸ Rank drafts) to reload.")
            return
        if w.busy in (Busy.REPLY, Busy.RACE, Busy.MEASURE):
            # Said once, however many times the load waits for the round to end (a measurement goes unsaid).
            if not self._stopping and w.busy != Busy.MEASURE:
                what = "reply" if w.busy == Busy.REPLY else "race"
                w.show_info(f"Loading the models stopped the {what} that was running"
                            + ("; what it wrote so far is kept." if what == "reply" else "."))
            self._stopping = True
            w.stop()
            QTimer.singleShot(100, self.load)
            return
        self._stopping = False
        if self.worker is not None and self.worker.is_running:
            self.worker.abort()
        request = self.request()
        previous = w.session
        worker = FunctionWorker(lambda progress, cancelled: session_mod.load_session(request, progress, cancelled,
                                                                              previous), name="load")
        worker.progress.connect(self._on_progress)
        worker.returned.connect(self._on_loaded)
        worker.errored.connect(self._on_error)
        worker.finished.connect(lambda wk=worker: self._on_finished(wk))
        self.worker = worker
        w.busy = Busy.LOAD
        w.set_progress(None)
        w.show_progress(True)
        w.say(f"Loading {request.verifier}…")
        drafted_by = {defaults.MODEL: f" ← {request.draft}",
                      defaults.HYBRID: f" ← {request.draft} + prompt lookup"}
        w.set_models_text(f"Loading <b>{request.verifier}</b>"
                          + drafted_by.get(request.drafter, " ← prompt lookup") + "…")
        w.settings_panel.set_verdict("Checking the pair once the models are loaded…"
                                     if request.drafter in defaults.USES_DRAFT else "", None)
        w.update_controls()
        worker.start()

    def cancel(self) -> None:
        if self.worker is not None and self.worker.is_running:
            self.worker.abort()
            self.window.say("Loading cancelled")

    def remeasure_baseline(self) -> None:
        """Load the same pair again and measure the verifier alone afresh."""
        w = self.window
        if w.session is None or w.busy:
            return
        w.session.baseline_tps = None
        self._remeasure = True
        self.load()

    def _on_progress(self, step: LoadStep) -> None:
        self.window.set_progress(step.fraction)
        pct = f" {step.fraction:.0%}" if step.fraction is not None else ""
        self.window.say(f"{step.what}: {step.message}{pct}")

    def _on_loaded(self, session: Session) -> None:
        w = self.window
        if w.closing:
            return
        previous, w.session = w.session, session
        w.hosts.close()  # forked from the previous session: the next reply forks one for this one
        if previous is None or previous.verifier is not session.verifier or self._remeasure:
            w.baselines.clear()  # measurements of another verifier (or asked to measure again)
        self._remeasure = False
        w.settings_panel.set_dirty(False)
        w.settings_panel.set_verdict(session.verdict, session.verdict_ok, session.verdict_report)
        if not session.verdict_ok:
            w.show_error(f"The draft cannot be used with this verifier. {session.verdict}\n"
                         "Replies use the verifier alone until you pick another draft or prompt lookup.")
        s = w.settings
        for spec in (s.verifier, s.draft if s.drafter in defaults.USES_DRAFT else ""):
            if spec and spec != defaults.VERIFIER and spec not in s.recent_specs:
                s.recent_specs = ([spec] + s.recent_specs)[:10]
        w.save_settings()
        w.graphs.live.set_baseline(session.baseline_tps, session.baseline_source)
        load_s = getattr(session.verifier, "load_s", None)
        w.say(f"Ready · verifier loaded in {load_s:.1f} s" if load_s else "Ready")
        self._offer_drafts(session)
        self.loaded.emit(session)

    def _offer_drafts(self, session: Session) -> None:
        """In the background: the installed models (and recent specs) that could draft for this verifier,
        offered in the settings with their vocabulary overlap (tokenizers only; nothing is downloaded)."""
        from specdec_core.loading.catalog import installed_names
        from specdec_core.pairs.draft_candidates import draft_candidates, installed_hub_models

        tokenizer = session.verifier.tokenizer
        specs = list(self.window.settings.recent_specs)
        exclude = self.window.settings.verifier
        # installed_names() on the worker too: an installed file changed since its last check is hashed first
        worker = FunctionWorker(lambda progress, cancelled: draft_candidates(
            tokenizer, installed_hub_models() + installed_names() + specs, exclude=exclude, cancelled=cancelled),
            name="drafts")
        worker.returned.connect(self.window.settings_panel.offer_drafts)
        self.drafts_worker = worker
        worker.start()

    def _on_error(self, exc: BaseException) -> None:
        w = self.window
        if w.closing:
            return
        msg = f"Could not load the models: {error_text(exc)}"
        w.settings_panel.set_verdict(error_text(exc), False)
        w.show_error(msg)
        self.failed.emit(msg)

    def _on_finished(self, worker: FunctionWorker) -> None:
        if worker is not self.worker:
            return
        w = self.window
        self.worker = None
        w.busy = Busy.IDLE
        if w.closing:
            return
        w.show_progress(False)
        w.update_controls()
        self.finished.emit()

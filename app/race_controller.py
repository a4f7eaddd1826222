"""The window's race: the last prompt with speculation off and on, alternating, several times (the verdict is
their median and spread), same seed, into the Race graphs.

It runs the same lanes as the Talk menu's race (`lane_events` in app/runs.py): one race
implementation. Each off run is a verifier-alone run, so it joins the window's baselines, marked as run
with the live graphs hidden (the Race tab covers them).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject, Signal

from app import session as session_mod
from app.ports import RunPort, WindowPort
from app.session import Busy, PromptInfo
from app.speedup import RACE_PAIRS
from app.worker import EventWorker, error_text
from specdec_core.errors import SpecdecError
from specdec_core.events import Finished

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.graphs.graphs_panel import GraphsPanel
    from app.trace import ReplyTrace


class RaceWindow(WindowPort, RunPort, Protocol):
    """What the race uses of the window besides the shared port."""

    graphs: GraphsPanel  # the Race tab's curves and verdict

    def window(self) -> QWidget: ...  # the top-level widget (Qt's QWidget.window()): this controller's parent
    def show_graphs(self, tab: int) -> None: ...
    def start_worker(self, worker: EventWorker, busy: Busy, status: str) -> None: ...
    def stop_flushing(self) -> None: ...
    def update_controls(self) -> None: ...
    def add_baseline(self, trace: ReplyTrace, source: str, graphs_live: bool | None = None) -> None: ...


class RaceController(QObject):
    finished = Signal(str)  # the verdict in plain text ("… faster", and whether the texts match)

    def __init__(self, window: RaceWindow) -> None:
        super().__init__(window.window())
        self.window = window
        self.worker: EventWorker | None = None  # the running race; None once it has finished
        self._prompt_tokens = 0
        self._greedy = True
        self.pairs = RACE_PAIRS  # runs of each side, alternating; the verdict is their median and spread

    def race(self) -> None:
        w = self.window
        if w.busy or w.session is None:
            if w.session is None:
                w.show_error("Load the models first (Settings ▸ Load models).")
            return
        messages = w.prompt_messages()
        if isinstance(messages, str):
            w.show_error(messages.rstrip(".") + " to race speculation off against on.")
            return
        try:
            config = session_mod.config_from_settings(w.settings)
        except SpecdecError as exc:
            w.show_error(f"Check the generation settings: {exc}")
            return
        if w.session.drafter is None:
            w.show_error("There is no usable drafter, so there is nothing to race. " + w.session.verdict)
            return
        from app.runs import RunContext
        from app.speedup import race_order
        from specdec_core.engine import Controls

        self._greedy = config.greedy
        controls = Controls()
        # In the window's decoding process where there is one (app/host.py), as the chat's replies.
        events = RunContext(w.session, messages, w.conv.system, config, w.job_runner).race_source(self.pairs)
        w.graphs.race.start([key for key, _speculate in race_order(self.pairs)])
        w.show_graphs(1)
        worker = EventWorker(lambda: events(controls), on_abort=controls.cancel, name="race",
                             polled=True)  # the window's flush tick delivers its events
        worker.event.connect(self._on_event)
        worker.errored.connect(lambda exc: w.show_error(f"Race failed: {error_text(exc)}"))
        worker.finished.connect(lambda wk=worker: self._on_finished(wk))
        self.worker = worker
        w.start_worker(worker, Busy.RACE, "Racing: speculation off, then on…")

    def _on_event(self, ev: object) -> None:
        from app.runs import LaneEvent

        if isinstance(ev, PromptInfo):
            self._prompt_tokens = ev.prompt_tokens
        if isinstance(ev, LaneEvent):
            self.window.graphs.race.traces[ev.lane].apply(ev.event)
            if isinstance(ev.event, Finished) and ev.event.error:
                self.window.show_error(f"Race ({ev.lane}) failed: {ev.event.error}")

    def _on_finished(self, worker: EventWorker) -> None:
        if worker is not self.worker:
            return
        w = self.window
        self.worker = None
        if w.closing:
            return
        w.busy = Busy.IDLE
        w.stop_flushing()
        html = w.graphs.race.finish(self._greedy)
        for key, trace in w.graphs.race.traces.items():
            if key.startswith("off") and trace.stats and not trace.error and w.session is not None:
                trace.prompt_tokens = trace.prompt_tokens or self._prompt_tokens
                # The Live graphs sat hidden behind the Race tab meanwhile: a baseline with the graphs hidden.
                w.add_baseline(trace, "race", graphs_live=False)
        plain = html.replace("<br>", " · ")
        plain = re.sub(r"<[^>]+>", "", plain)
        w.show_info(f"Race: {plain}")
        w.say(f"Race: {plain}")
        w.update_controls()
        if not w.closing:
            self.finished.emit(plain)

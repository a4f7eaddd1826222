"""The window's run layer: a job (app/runs.py, app/session.py) started where the session's models decode, its
events folded into traces, and what happened reported to the one that started it.

The chat's reply (app/reply_controller.py) and the race (app/race_controller.py) are two uses of it. Each owns a
`RunController` and is its report (`ports.RunReport`): the controller starts the job on an EventWorker, in the
window's decoding process where there is one (app/host.py: the window's `job_runner`), marks the window busy and
starts its flush timer. The window's flush tick delivers the run's events (the worker is polled, so the decoding
thread hands the GIL over once per tick); each one is folded into its lane's trace, then reported. The end is
reported once, for the run that is current: a run replaced before its worker ended reports nothing more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QObject

from app.ports import RunPort, RunReport, WindowPort
from app.runs import LaneEvent
from app.session import Busy, PromptInfo
from app.worker import EventWorker

if TYPE_CHECKING:
    from app.host import Job, Runner
    from app.trace import ReplyTrace

SOLE = ""  # the lane of a run's events that come unwrapped (a reply's): its only trace


class RunWindow(WindowPort, RunPort, Protocol):
    """What a run uses of the window besides the shared ports."""

    def update_controls(self) -> None: ...
    def start_flushing(self) -> None: ...  # the flush timer delivers the run's events and repaints what they change


class RunController(QObject):
    """One kind of run (the reply, the race), one at a time: its worker, its controls and its traces."""

    def __init__(self, window: RunWindow, report: RunReport, name: str, busy: Busy) -> None:
        super().__init__()
        self.window = window
        self.report = report
        self.name = name  # the worker thread's name
        self.busy = busy  # what the window's engine is doing while this run runs
        self.worker: EventWorker | None = None  # the running job's; None once its end is reported
        self.controls: Any = None  # the running (or last) job's engine Controls: Stop, speculation on or off
        self.traces: dict[str, ReplyTrace] = {}  # lane -> the trace its events are folded into (SOLE: a reply's)
        self.prompt: PromptInfo | None = None  # the prompt as the job built it

    def start(self, job: Job, args: tuple, traces: dict[str, ReplyTrace], status: str, *,
              runner: Runner | None = None, controls: Any = None) -> None:
        """Run `job(session, *args, controls)` where `runner` says (default: the window's `job_runner()`, on the GUI
        thread: it may fork the decoding process), folding its events into `traces`; say `status` meanwhile."""
        from specdec_core.engine import Controls

        w = self.window
        run = runner if runner is not None else w.job_runner()
        self.controls = controls = controls if controls is not None else Controls()
        self.traces, self.prompt = traces, None
        worker = EventWorker(lambda: run(job, args, controls), on_abort=controls.cancel, name=self.name,
                             polled=True)  # the window's flush tick delivers its events
        worker.event.connect(self._fold)
        worker.errored.connect(self.report.run_failed)
        worker.finished.connect(lambda wk=worker: self._ended(wk))
        self.worker = worker
        w.busy = self.busy
        w.say(status)
        w.update_controls()
        w.start_flushing()
        worker.start()

    @property
    def running(self) -> bool:
        """A job started and its end not reported yet."""
        return self.worker is not None

    def deliver(self) -> None:
        """The events the job yielded since the last call, folded and reported (the flush tick calls this)."""
        if self.worker is not None:
            self.worker.deliver()

    def stop(self) -> bool:
        """Ask the running job to stop (the engine ends its round first); True if one was running."""
        if self.worker is not None and self.worker.is_running:
            self.worker.abort()
            return True
        return False

    def detach(self) -> None:
        """The rest of the run's events reach neither a trace nor the report (its end and errors still do)."""
        self.traces = {}

    def _fold(self, ev: object) -> None:
        if not self.traces:
            return  # detached
        if isinstance(ev, PromptInfo):
            self.prompt = ev
            self.report.run_prompt(ev)
            return
        lane, event = (ev.lane, ev.event) if isinstance(ev, LaneEvent) else (SOLE, ev)
        trace = self.traces.get(lane)
        if trace is not None:
            trace.apply(event)
        self.report.run_event(lane, event)

    def _ended(self, worker: EventWorker) -> None:
        if worker is not self.worker:
            return  # a run this one replaced
        self.worker = None
        self.report.run_ended()

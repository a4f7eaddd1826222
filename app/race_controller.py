"""The window's race: the last prompt with speculation off and on, alternating, several times (the verdict is
their median and spread), same seed, into the Race graphs.

It runs the same lanes as the Talk menu's race (`lane_events` in app/runs.py): one race
implementation, started as a run (app/run_controller.py) where the chat's replies decode. Each off run is a
verifier-alone run, so it joins the window's baselines, marked as run with the live graphs hidden (the Race tab
covers them).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject, Signal

from app import session as session_mod
from app.run_controller import RunController, RunWindow
from app.runs import race_events
from app.session import Busy, PromptInfo
from app.speedup import RACE_PAIRS, race_order
from app.worker import error_text
from specdec_core.errors import SpecdecError
from specdec_core.events import Finished

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.baseline_controller import BaselineController
    from app.graphs.graphs_panel import GraphsPanel


class RaceWindow(RunWindow, Protocol):
    """What the race uses of the window besides a run's port."""

    graphs: GraphsPanel  # the Race tab's curves and verdict
    baseline: BaselineController  # the off lanes join the verifier-alone baselines

    def window(self) -> QWidget: ...  # the top-level widget (Qt's QWidget.window()): this controller's parent
    def show_graphs(self, tab: int) -> None: ...
    def stop_flushing(self) -> None: ...


class RaceController(QObject):
    """The race as a run (app/run_controller.py): it checks there is something to race, starts `race_events`
    and, as its report, shows the lanes' failures and the verdict."""

    finished = Signal(str)  # the verdict in plain text ("… faster", and whether the texts match)

    def __init__(self, window: RaceWindow) -> None:
        super().__init__(window.window())
        self.window = window
        self.run = RunController(window, self, "race", Busy.RACE)
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
        self._greedy = config.greedy
        # In the window's decoding process where there is one (app/host.py), as the chat's replies.
        runner = w.job_runner()
        w.graphs.race.start([key for key, _speculate in race_order(self.pairs)])
        w.show_graphs(1)
        self.run.start(race_events, (messages, w.conv.system, config, self.pairs), w.graphs.race.traces,
                       "Racing: speculation off, then on…", runner=runner)

    # -- the run's report (ports.RunReport) ------------------------------------------------------------
    def run_prompt(self, info: PromptInfo) -> None:
        pass  # the off lanes that join the baselines take its length (run.prompt) at the end

    def run_event(self, lane: str, event: object) -> None:
        if isinstance(event, Finished) and event.error:
            self.window.show_error(f"Race ({lane}) failed: {event.error}")

    def run_failed(self, error: BaseException) -> None:
        self.window.show_error(f"Race failed: {error_text(error)}")

    def run_ended(self) -> None:
        w = self.window
        if w.closing:
            return
        w.busy = Busy.IDLE
        w.stop_flushing()
        html = w.graphs.race.finish(self._greedy)
        prompt_tokens = self.run.prompt.prompt_tokens if self.run.prompt is not None else 0
        for key, trace in w.graphs.race.traces.items():
            if key.startswith("off") and trace.stats and not trace.error and w.session is not None:
                trace.prompt_tokens = trace.prompt_tokens or prompt_tokens
                # The Live graphs sat hidden behind the Race tab meanwhile: a baseline with the graphs hidden.
                w.baseline.add(trace, "race", graphs_live=False)
        plain = html.replace("<br>", " · ")
        plain = re.sub(r"<[^>]+>", "", plain)
        w.show_info(f"Race: {plain}")
        w.say(f"Race: {plain}")
        w.update_controls()
        if not w.closing:
            self.finished.emit(plain)

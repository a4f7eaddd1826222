"""Which verifier-alone baseline a reply's speedup is shown against, and measuring one after each load.

A speedup is shown only against a like-for-like baseline (speedup.BaselineBook.pick: a run of the verifier alone
at a similar prompt length, under the same UI load). Until one exists the reply shows its tokens/s alone and
says why: the baseline is being measured, or none fits this reply yet. After a load the window measures one in
the background (app/baseline_runs.py: short alternating runs with speculation off and on, where the replies
decode, the window idle); meanwhile the window is `Busy.MEASURE`, and a message sent cancels the measurement
and goes as soon as it has stopped (one round). When it lands, the replies that were waiting for it get their
speedup, in their footers and in the graphs' header.
"""

from __future__ import annotations

import statistics
import weakref
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject, Signal

from app import baseline_runs
from app.ports import RunPort, WindowPort
from app.session import Busy, config_from_settings
from app.speedup import BaselineSample, pace, pace_words, step_s
from app.warm_up import warm_up
from app.worker import EventWorker

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.chat_view import ChatView
    from app.graphs.graphs_panel import GraphsPanel
    from app.host import HostKeeper
    from app.speedup import BaselineBook
    from app.trace import ReplyTrace

MEASURING = "speedup being measured (tokens/s alone until then)"
NONE_YET = "no like-for-like baseline for this prompt yet: race it, or send one with speculation off"
COLD = "no speedup for the first run of a fresh decoding process: it runs slower while it warms up"


class BaselineWindow(WindowPort, RunPort, Protocol):
    """What picking and measuring baselines use of the window besides the shared ports."""

    baselines: BaselineBook  # the verifier-alone measurements (app/speedup.py)
    hosts: HostKeeper  # whether the replies decode apart from the window (then its repainting does not slow them)
    graphs: GraphsPanel  # the live graphs' header shows the baseline of the reply it shows
    chat: ChatView  # the bubbles whose footers wait for a baseline

    def set_busy(self, state: Busy | str) -> None: ...
    def window(self) -> QWidget: ...  # the top-level widget (a rehearsed bubble's parent)
    def graphs_shown(self) -> bool: ...  # the live graphs' dock is shown, on its live tab


class BaselineController(QObject):
    landed = Signal()  # a measurement added baselines (the waiting replies have their speedup now)
    finished = Signal()  # a measurement ended (landed, failed or cancelled), the window idle again

    def __init__(self, window: BaselineWindow) -> None:
        super().__init__()
        self.window = window
        self.worker: EventWorker | None = None
        self.due = False  # a load asked for a measurement that has not run yet
        self._results: list[baseline_runs.LaneResult] = []
        self._prompt: tuple[list[dict], str | None] | None = None  # what to measure on (None: a short first message)
        self._warmed_in: list[weakref.ref] = []  # decoding processes (or sessions decoding here) that ran a job
        self.warming = False  # the window rehearses a reply after its first load (app/warm_up.py), then measures
        self._warmed = False

    # -- which baseline a reply is shown against ------------------------------------------------------
    def graphs_live(self) -> bool:
        """Whether the window's repainting slows a reply (the UI load a speed is measured under): the live graphs
        shown, and the replies decoded in this process (a host's, app/host.py, are not slowed by them)."""
        return self._live_host() is None and self.window.graphs_shown()

    def _live_host(self) -> object | None:
        """The window's decoding process (app/host.py) while it runs, else None (replies decode here)."""
        host = self.window.hosts.host
        return host if host is not None and host.alive else None

    def pick_for(self, trace: ReplyTrace, prompt_tokens: int) -> None:
        """Compare `trace` with verifier-alone runs at a similar prompt length under the same UI load; with none,
        it gets no baseline, and its footer says why (being measured, or none fits)."""
        w = self.window
        if trace.baseline_note != COLD and not trace.rounds and w.settings.calibrate and not self._is_warm():
            # Its first passes, kernels and caches are cold: no figure to compare. (With the after-load measurement
            # off nothing is warmed before the first reply either, and no reply is held back.)
            trace.baseline_note = COLD
        b = w.baselines.pick(prompt_tokens, self.graphs_live())
        if trace.baseline_note == COLD:
            trace.baseline_tps, trace.baseline_source = None, ""
        elif b is not None and b.like_for_like:
            trace.baseline_tps, trace.baseline_source, trace.baseline_note = b.tokens_per_s, b.how, b.short
        else:
            trace.baseline_tps, trace.baseline_source = None, ""
            trace.baseline_note = MEASURING if self.running or self.due else NONE_YET
        if w.graphs.live.trace is trace:
            w.graphs.live.set_baseline(trace.baseline_tps, trace.baseline_source,
                                       b.verify_s_per_token if b is not None else None,
                                       like_for_like=trace.baseline_tps is not None)

    def _where(self) -> object:
        """Where the next job runs: the host, else this process's session."""
        host = self._live_host()
        return host if host is not None else self.window.session

    def _is_warm(self) -> bool:
        where = self._where()
        return any(ref() is where for ref in self._warmed_in)

    def _ran_here(self) -> None:
        """A job ran where the next one runs: it is warm (its first passes, kernels and caches are behind it)."""
        if not self._is_warm() and self._where() is not None:
            self._warmed_in = [ref for ref in self._warmed_in if ref() is not None] + [weakref.ref(self._where())]

    def add(self, trace: ReplyTrace, source: str, graphs_live: bool | None = None) -> None:
        """A verifier-alone run (a reply with speculation off, a race's off lane) joins the baselines."""
        st = trace.get_stats()
        if st is None or st.new_tokens < 8 or not st.tokens_per_s or trace.baseline_note == COLD:
            return
        live = self.graphs_live() if graphs_live is None else graphs_live
        self.window.baselines.add(BaselineSample(st.tokens_per_s, trace.prompt_tokens or st.prompt_tokens, source,
                                                 graphs_live=live, verify_s_per_token=step_s(trace.rounds)))

    def to_reply_pace(self, trace: ReplyTrace) -> None:
        """A speculative reply that ended: where its own plain steps (rounds that drafted nothing) show the machine
        running at another pace than when its baseline was measured (speedup.pace), the baseline is scaled to the
        reply's pace, and its footer's tooltip and the graphs say so. Once per reply: the baseline it was shown
        against must still be the one the book gives."""
        w = self.window
        if not (trace.speculative or trace.paused_rounds()) or not trace.baseline_tps or trace.baseline_note == COLD:
            return
        b = w.baselines.pick(trace.prompt_tokens, self.graphs_live())
        if b is None or b.tokens_per_s != trace.baseline_tps or not b.verify_s_per_token:
            return
        reply_step = step_s(trace.rounds)
        ratio = pace(b.verify_s_per_token, reply_step)
        if ratio is None:
            return
        trace.baseline_tps = b.tokens_per_s / ratio
        trace.baseline_source = f"{trace.baseline_source} · {pace_words(ratio, b.verify_s_per_token, reply_step)}"
        if w.graphs.live.trace is trace:
            w.graphs.live.set_baseline(trace.baseline_tps, trace.baseline_source, reply_step, like_for_like=True)
        for bubble in w.chat.bubbles:
            if bubble.trace is trace:
                bubble.update_footer()

    # -- measuring after a load -----------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.worker is not None

    def after_load(self, _session: object) -> None:
        """A load succeeded: measure once the window is idle (start_if_due)."""
        self.due = True
        if not self._warmed and self.window.settings.calibrate:
            self._warmed, self.warming = True, True
            warm_up(self.window, then=self._warmed_up)

    def after_reply(self, trace: ReplyTrace | None) -> None:
        """A reply ended (the window idle again). One that found no like-for-like baseline at its prompt's length
        has one measured now on its own prompt, where a measurement can be like for like (the replies decode apart
        from the window); it says so, and gets its speedup when it lands. Then whatever is due runs."""
        w = self.window
        if trace is not None and trace.rounds:
            self._ran_here()
        if (trace is not None and trace.baseline_note == NONE_YET and trace.speculative and w.settings.calibrate
                and self._live_host() is not None and not w.closing):
            messages = w.prompt_messages("")
            if not isinstance(messages, str):
                self.due, self._prompt = True, (messages, w.conv.system)
                trace.baseline_note = MEASURING
                for bubble in w.chat.bubbles:
                    if bubble.trace is trace:
                        bubble.update_footer()
        self.start_if_due()

    def _warmed_up(self) -> None:
        self.warming = False
        self.start_if_due()

    def start_if_due(self) -> None:
        """Measure now if a load asked for it and the window is idle (else at the next call: a reply's end)."""
        w = self.window
        if not self.due or self.warming or self.worker is not None or w.busy or w.session is None or w.closing:
            return
        self.due = False
        if not w.settings.calibrate:
            return
        try:
            config = baseline_runs.measure_config(config_from_settings(w.settings))
        except Exception:  # noqa: BLE001 - settings the replies will refuse: nothing to measure them against
            return
        run = w.job_runner()  # forks the decoding process now, not on the first reply
        self._results = []
        from specdec_core.engine import Controls

        controls = Controls()
        messages, system = self._prompt or (baseline_runs.PROMPT, None)
        args = (messages, system, config, baseline_runs.PAIRS)
        worker = EventWorker(lambda: run(baseline_runs.measure_events, args, controls), on_abort=controls.cancel,
                             name="baseline")
        worker.event.connect(self._results.append)
        worker.finished.connect(lambda wk=worker: self._on_finished(wk))
        self.worker = worker
        w.set_busy(Busy.MEASURE)
        w.say("Measuring the verifier alone and speculation in the background, for the speedup…")
        worker.start()

    def cancel(self) -> None:
        """Stop the measurement (a message was sent, a load or Stop asked): it runs again when the window is idle."""
        if self.worker is not None:
            self.due = True
            self.worker.abort()

    def _on_finished(self, worker: EventWorker) -> None:
        if worker is not self.worker:
            return
        self.worker = None
        w = self.window
        if any(r.speculate for r in self._results) or (self._results and w.session and w.session.drafter is None):
            self._ran_here()
        off = [r for r in self._results if not r.speculate and r.new_tokens >= 8 and r.tokens_per_s > 0]
        for r in off:
            # The window sat idle meanwhile: in a host, as its replies run; in this process, unlike replies
            # beside the repainting graphs (BaselineBook keeps them apart).
            w.baselines.add(BaselineSample(r.tokens_per_s, r.prompt_tokens, baseline_runs.AFTER_LOAD,
                                           graphs_live=False, verify_s_per_token=r.verify_s_per_token))
        if w.closing:
            return
        if w.busy == Busy.MEASURE:
            w.set_busy(Busy.IDLE)
        if off:
            self._prompt = None
            self._remember_in_session(off)
            self.refresh_waiting()
            w.say("Ready · the speedup's baseline is measured")
            self.landed.emit()
        elif w.busy == Busy.IDLE:
            w.say("Ready")
        self.finished.emit()  # the window sends a message that waited, else starts what is due (start_if_due)

    def _remember_in_session(self, off: list[baseline_runs.LaneResult]) -> None:
        s = self.window.session
        if s is None:
            return
        s.baseline_tps = statistics.median_high(r.tokens_per_s for r in off)
        s.baseline_source = f"verifier alone, {len(off)} short runs {baseline_runs.AFTER_LOAD}"
        verify = [r.verify_s_per_token for r in off if r.verify_s_per_token]
        s.baseline_verify_s = statistics.median_high(verify) if verify else s.baseline_verify_s

    def refresh_waiting(self) -> None:
        """The replies shown without a baseline pick one again (the streaming one and those finished)."""
        for bubble in self.window.chat.bubbles:
            trace = bubble.trace
            if trace is None or trace.baseline_tps is not None or trace.baseline_note != MEASURING:
                continue
            self.pick_for(trace, trace.prompt_tokens)
            bubble.update_footer()

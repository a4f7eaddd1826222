"""The pages of the scripted demo (demo.py), one per kind of step: a single run (the verifier alone, the draft
alone, speculation), the best round in replay, the race, what makes it slow, theory against measured, and the
figure beside llama.cpp. Each page starts its own work, says its headline figure as it goes and when done, and
gives the web export its scene (app/web/recording.py).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QShortcut
from PySide6.QtWidgets import QLabel, QSplitter, QVBoxLayout, QWidget

from app.runs import Lane, RunContext, engine_lane
from app.talk import style as ts
from app.talk.demo_script import TALK_RACE_PAIRS, DemoStep, LlamaFigure, llama_figure
from app.talk.lanes_ui import FLUSH_MS, LanePane, LaneRun
from app.talk.recorder import race_view_scene, slow_view_scene
from app.theme import ACCENT, STATE_SOLID
from app.trace import ReplyTrace
from app.web.recording import best_round, note_scene, reply_scene


@dataclass
class DemoResults:
    """What earlier steps measured, for the later ones: replies by step key, and the verifier alone's tok/s."""

    traces: dict[str, ReplyTrace] = field(default_factory=dict)

    @property
    def alone_tps(self) -> float:
        trace = self.traces.get("alone")
        return float((trace.stats or {}).get("tokens_per_s") or 0.0) if trace is not None else 0.0


class StepPage(QWidget):
    """One step's page. `begin` starts it once; `headline` carries its big figure as it changes, and `detail` the
    few words that say what the figure is; `done` fires when it has its result (or failed: `error` says why)."""

    headline = Signal(str)
    detail = Signal(str)
    done = Signal()

    def __init__(self, step: DemoStep, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.step = step
        self.finished = False
        self.error = ""
        self.last_headline = self.last_detail = ""
        # The height the page's plots, one above another, can give up: their preferred height over their minimum.
        # Set once they are built: a plot's sizeHint asked in the middle of a layout pass crashed pyqtgraph.
        self.give = 0
        self.headline.connect(self._keep_headline)
        self.detail.connect(self._keep_detail)
        self.lay = QVBoxLayout(self)
        self.lay.setContentsMargins(0, 0, 0, 0)

    @property
    def running(self) -> bool:
        return False

    def begin(self, ctx: RunContext, results: DemoResults) -> None:
        raise NotImplementedError

    def height_for(self, width: int) -> int:
        """The height the page asks at `width` in the demo's scroll area (DemoView.heightForWidth)."""
        return max(self.heightForWidth(width), self.minimumSizeHint().height())

    def least_height(self, width: int) -> int:
        """The least height the page needs at `width`: what it asks, less what its plots can give up (`give`).
        Below it the layout overlaps its rows (the theory step's last row lay over its plot's axis)."""
        return max(self.minimumSizeHint().height(), self.height_for(width) - self.give)

    def stop(self) -> None:
        """Stop a run that goes on (leaving the step early)."""

    def scene(self) -> dict | None:
        """The step as a scene of the web page (None: nothing to replay)."""
        return None

    def _keep_headline(self, text: str) -> None:
        self.last_headline = text

    def _keep_detail(self, text: str) -> None:
        self.last_detail = text

    def _finish(self, headline: str, detail: str = "", error: str = "") -> None:
        self.finished, self.error = True, error
        self.headline.emit(headline)
        self.detail.emit(detail)
        self.done.emit()


def tps_of(trace: ReplyTrace) -> float:
    return float((trace.stats or {}).get("tokens_per_s") or trace.running_tps())


class RunPage(StepPage):
    """One reply of the step's prompt, streamed into a pane: the verifier alone, the draft alone, or speculation."""

    def __init__(self, step: DemoStep, parent: QWidget | None = None) -> None:
        super().__init__(step, parent)
        self.pane = LanePane(step.title, ACCENT if step.key == "spec" else STATE_SOLID["plain"])
        self.lay.addWidget(self.pane)
        view = self.pane.text  # its code blocks' "Colour code" / "Plain code" switch
        view.code_colours_requested.connect(lambda on: view.set_trace(view.trace, True, code_colored=on))
        self.run: LaneRun | None = None
        self.results: DemoResults | None = None
        self.prompt = ""
        self.timer = QTimer(self)
        self.timer.setInterval(FLUSH_MS)
        self.timer.timeout.connect(self._tick)

    @property
    def running(self) -> bool:
        return self.run is not None and self.run.running

    def lane(self, ctx: RunContext) -> Lane:
        from app.talk.draft_alone import draft_lane

        s = ctx.session
        if self.step.key == "draft":
            return draft_lane(ctx)
        if self.step.key == "spec":
            return engine_lane("spec", f"speculation: {s.verifier_name} ← {s.drafter_name}", s.verifier, s.drafter,
                               True)
        return engine_lane(self.step.key, f"{s.verifier_name} alone", s.verifier, None, False)

    def begin(self, ctx: RunContext, results: DemoResults) -> None:
        self.results, self.prompt = results, ctx.prompt_text
        lane = self.lane(ctx)
        self.pane.title.setText(f"{html.escape(lane.title)}<br><span style='font-weight:normal'>Prompt: "
                                f"{html.escape(ctx.prompt_text)}</span>")
        self.run = LaneRun([lane], self)
        self.pane.bind(self.run.traces[lane.key])
        # Speculation's step is about the colours: its code is coloured token by token too, not plain as in chat.
        self.pane.text.set_trace(self.run.traces[lane.key], True, code_colored=self.step.key == "spec")
        self.run.finished.connect(self._on_finished)
        self.run.start(ctx)
        self.timer.start()

    def stop(self) -> None:
        if self.run is not None:
            self.run.stop()

    def _words(self, trace: ReplyTrace) -> str:
        words = f"{tps_of(trace):.1f} tok/s"
        alone = self.results.alone_tps if self.results is not None else 0.0
        if self.step.key == "spec" and alone and tps_of(trace):
            words += f" · {tps_of(trace) / alone:.2f}×"
        return words

    def _detail(self, trace: ReplyTrace) -> str:
        n = sum(1 for t in trace.tokens if t.in_reply)
        if self.step.key == "spec":
            s = trace.stats or {}
            return (f"{n} tokens; × against step 1, the same prompt (one run each); "
                    f"{s.get('accepted', 0)} of {s.get('drafted', 0)} drafts accepted")
        return f"{n} tokens, " + ("decoded by the draft alone" if self.step.key == "draft"
                                  else "one forward pass of the verifier each")

    def _tick(self) -> None:
        self.pane.flush()
        trace = self.pane.text.trace
        if trace is not None and trace.rounds:
            self.headline.emit(self._words(trace))

    def _on_finished(self) -> None:
        self._tick()
        self.timer.stop()
        assert self.run is not None and self.results is not None
        trace = next(iter(self.run.traces.values()))
        if self.step.key == "spec" and self.results.alone_tps:
            # Like for like: the verifier alone on this prompt, in this process, a step earlier.
            trace.baseline_tps = self.results.alone_tps
            trace.baseline_source = "step 1: the verifier alone on the same prompt"
        self.results.traces[self.step.key] = trace
        self._finish(self._words(trace), self._detail(trace), "; ".join(self.run.errors))

    def scene(self) -> dict | None:
        trace = self.results.traces.get(self.step.key) if self.results is not None else None
        return None if trace is None else reply_scene(self.step.title, trace, self.prompt, self.step.note)


class ReplayPage(StepPage):
    """Step 3's reply in the round-by-round replay, playing its best round (a tree round first, then the one that
    accepted the most) beat by beat, and holding at its end."""

    def __init__(self, step: DemoStep, parent: QWidget | None = None) -> None:
        from app.talk.replay import ReplayWidget

        super().__init__(step, parent)
        self.replay = ReplayWidget()
        for shortcut in self.replay.findChildren(QShortcut):  # → and Space move the demo on, not the replay's beat
            shortcut.setEnabled(False)
        self.lay.addWidget(self.replay)
        self.last_beat = -1
        self.beats = QTimer(self)  # the round's own clock: the replay's would play on into the next rounds
        self.beats.setSingleShot(True)
        self.beats.timeout.connect(self._advance)

    @property
    def playing(self) -> bool:
        return self.beats.isActive()

    def height_for(self, width: int) -> int:
        """The replay's own height for a scroll area (ReplayWidget.heightForWidth): its stage and numbers at their
        minimum, the splitter sharing out whatever the window has beyond that."""
        return self.replay.heightForWidth(width)

    def least_height(self, width: int) -> int:
        return self.replay.heightForWidth(width)

    def begin(self, ctx: RunContext, results: DemoResults) -> None:
        trace = results.traces.get("spec")
        record = best_round(trace) if trace is not None else None
        if trace is None or record is None:
            self._finish("no round", error="step 3 has no speculative reply to replay")
            return
        self.replay.set_trace(trace)
        state = self.replay.state
        mine = [i for i, s in enumerate(state.steps) if state.rounds[s.round].index == record.index]
        if not mine:
            self._finish("no round", error=f"round {record.index + 1} has no tokens to replay")
            return
        self.last_beat = mine[-1]
        self.replay.seek(mine[0])
        self.beats.start(self.replay.beat_ms(state.step))
        kind = f"a tree of {len(record.tree)} candidates" if record.tree else f"a chain of {record.drafted} drafts"
        self._finish(f"{record.accepted} of {record.drafted} accepted",
                     f"round {state.steps[mine[0]].round + 1} of step 3's reply, {kind}: the best one")

    def stop(self) -> None:
        self.beats.stop()

    def _advance(self) -> None:
        if self.replay.state.index < self.last_beat and self.replay.step_forward():
            self.beats.start(self.replay.beat_ms(self.replay.state.step))


class ViewPage(StepPage):
    """A step that is one of talk mode's own views (the race, what makes it slow)."""

    def __init__(self, step: DemoStep, parent: QWidget | None = None) -> None:
        super().__init__(step, parent)
        self.view: QWidget | None = None
        self._scene: dict | None = None

    @property
    def running(self) -> bool:
        run = getattr(self.view, "run", None)
        return run is not None and run.running

    def begin(self, ctx: RunContext, results: DemoResults) -> None:
        from app.talk.race import RaceView
        from app.talk.slow_demo import SlowDemoView

        if self.step.key == "race":
            view = RaceView()
            view.pairs = TALK_RACE_PAIRS
            view.headline.setVisible(False)  # the demo's own headline shows the median, larger, with its spread
            view.spread.setVisible(False)
            view.pair_words = False  # and its words, the median pair's figures
            for split in view.findChildren(QSplitter):
                if split.orientation() == Qt.Orientation.Vertical:  # the replies above, the curves below
                    split.setSizes([500, 400])  # the curves in view at 800 px, under the demo's headline
            view.finished.connect(lambda result: self._race_done(view, result))
        else:
            view = SlowDemoView()
            view.ctx = ctx
            view.short_titles = True  # the poor one's full title is in the headline's words
            view.note.setVisible(False)  # the step's own note says it, under the demo
            view.finished.connect(lambda results_: self._slow_done(view, results_))
        self.view = view
        view.layout().setContentsMargins(0, 0, 0, 0)  # the demo's margins are around it already
        view.layout().setSpacing(2)  # and rows a few pixels closer: the race's buttons were under the fold
        self.lay.setSpacing(2)
        self.lay.addWidget(view)
        # The race's replies over its curves, the slow demo's two plots side by side (splitters in the view's own
        # layout): what they can give up below what they ask, so the page shrinks them into the dialog before it
        # scrolls. The slow demo's plots at the height they ask put their lower half under the fold at 1024×700.
        parts = [s for s in view.findChildren(QSplitter) if s.parentWidget() is view]
        self.give = sum(max(0, p.sizeHint().height() - p.minimumSizeHint().expandedTo(p.minimumSize()).height())
                        for p in parts)
        controls = getattr(view, "controls", None)
        if isinstance(controls, QWidget):  # a race's buttons live outside its scrolled part in a dialog
            self.lay.addWidget(controls)
        self.headline.emit("running…")
        view.start(ctx)
        # Where the runs stand goes in the headline's words, not on a line of the view's own under its plots
        # (two lines at 1024 px); the demo's status line says what to do.
        status = view.status
        status.setVisible(False)
        view.run.lane_started.connect(lambda _key: self.detail.emit(status.text()))
        if self.step.key == "race":  # short titles: the pair's names (step 3 showed them) took four lines at 1024 px
            for key, side in (("off", "OFF"), ("on", "ON")):
                color = ACCENT if key == "on" else STATE_SOLID["plain"]
                view.panes[key].title.setText(f"<span style='color:{color.name()}'>■</span> Speculation {side}")

    def stop(self) -> None:
        run = getattr(self.view, "run", None)
        if run is not None:
            run.stop()

    def _race_done(self, view, result) -> None:
        self._scene = race_view_scene(view)
        if result is None:
            self._finish("no result", error="the race did not finish")
            return
        off, on = result.pair_tps  # the pair drawn: the median one, whose ratio is the headline
        self._finish(f"{result.speedup:.2f}×", f"{off:.1f} → {on:.1f} tok/s (the median pair); "
                     + result.spread.spread_words())

    def _slow_done(self, view, results: dict) -> None:
        self._scene = slow_view_scene(view)
        poor = next((lane for lane in view.lanes if lane.key == "weak"), None)
        if poor is None or poor.key not in results:
            self._finish("no poor draft", error="no poorly aligned drafter ran")
            return
        from app.talk.slow_lanes import slower_runs

        slower, runs = slower_runs(view.run.traces, poor.key)
        self._finish(f"{results[poor.key][2]:.2f}×", f"{poor.title}, against the verifier alone; "
                     f"{view.spreads[poor.key].spread_words()}; slower in {slower} of {runs}")

    def scene(self) -> dict | None:
        return self._scene


class TheoryPage(StepPage):
    """The explainer's formulas on step 3's reply: predicted speedup against the measured one."""

    def __init__(self, step: DemoStep, parent: QWidget | None = None) -> None:
        from app.talk.explainer import Explainer

        super().__init__(step, parent)
        self.explainer = Explainer()
        # Its source line and "Use live values" (idle here): the demo's headline words say where the figures come
        # from, and the row put the page under the fold at 1280×800.
        self.explainer.source.setVisible(False)
        self.explainer.live_button.setVisible(False)
        self.lay.addWidget(self.explainer)
        plot = self.explainer.plot
        self.give = max(0, plot.sizeHint().height() - plot.minimumHeight())
        self.lines: list[str] = []
        self._compact = False

    # A demo window shorter than this sets the formulas and the verdict in smaller type: in the explainer's own
    # sizes the theory step's plot lay under the fold at 1024×700 (the headline keeps its size).
    COMPACT_BELOW = 760

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt's name
        super().resizeEvent(event)
        compact = self.window().height() < self.COMPACT_BELOW
        if compact != self._compact:
            self._compact = compact
            ts.set_big(self.explainer.formulas, 0.9 if compact else 1.35)
            ts.set_big(self.explainer.verdict, 0.8 if compact else 1.05)
            self.updateGeometry()

    def begin(self, ctx: RunContext, results: DemoResults) -> None:
        if not self.explainer.set_from_trace(results.traces.get("spec")):
            self._finish("nothing measured", error="step 3 has no speculative reply to explain")
            return
        e = self.explainer
        measured = e.measured[1] if e.measured else None
        # A reply that drafted trees is predicted from its trees; the chain formula is shown for comparison only.
        trees = e.tree is not None and e.tree.speedup is not None
        predicted = e.tree.speedup if trees else e.predicted()
        source = "predicted from its draft trees" if trees else "predicted by the formula"
        self.lines = [f"α (acceptance) {e.alpha:.2f}, γ {e.gamma}, c {e.c:.2f}",
                      f"{source}: {predicted:.2f}×"
                      + (f", measured {measured:.2f}× against step 1" if measured else ", no measured figure")]
        self._finish(f"{predicted:.2f}×" + (f" vs {measured:.2f}×" if measured else ""),
                     source + (", against measured in step 3" if measured else ""))

    def scene(self) -> dict | None:
        return note_scene(self.step.title, self.lines, self.step.note) if self.lines else None


class LlamaPage(StepPage):
    """Step 8: the bench's figures beside llama.cpp's, or a plain sentence saying there are none."""

    def __init__(self, step: DemoStep, parent: QWidget | None = None) -> None:
        super().__init__(step, parent)
        self.text = QLabel("")
        self.text.setWordWrap(True)
        self.text.setTextFormat(Qt.TextFormat.PlainText)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        ts.set_big(self.text, 1.4)
        self.lay.addWidget(self.text)
        self.lay.addStretch(1)
        self.figure: LlamaFigure | str = ""

    def begin(self, ctx: RunContext, results: DemoResults) -> None:
        from app.data_files import data_dir

        self.figure = llama_figure(ctx.session.verifier_name, data_dir())
        if isinstance(self.figure, str):
            self.text.setText(self.figure)
            self._finish("no figure", "no llama.cpp bench result for this verifier")
            return
        self.text.setText("\n".join(self.figure.lines()))
        f = self.figure
        if f.llama_alone is None:
            self._finish(f"{f.ours_speculative:.1f} tok/s", "specdec speculative; llama.cpp alone did not run")
            return
        self._finish(f"{f.ours_speculative:.1f} vs {f.llama_alone:.1f}",
                     "tok/s: specdec speculative vs llama.cpp alone, from the bench result below")

    def scene(self) -> dict | None:
        if isinstance(self.figure, LlamaFigure):
            return note_scene(self.step.title, self.figure.lines(), self.step.note)
        return note_scene(self.step.title, [self.figure], self.step.note) if self.figure else None


PAGES = {"alone": RunPage, "draft": RunPage, "spec": RunPage, "round": ReplayPage, "race": ViewPage,
         "slow": ViewPage, "theory": TheoryPage, "llama": LlamaPage}

"""The race: the same prompt and seed with speculation off, then on, on one shared clock.

The two runs go one after the other (on a two-core laptop, running them at once would make each slow
the other), and both are plotted on engine time from their own start: the curves share a clock. When
both are done, "Replay together" plays them side by side in real time, so the room sees the
speculative reply pull ahead. With greedy decoding the texts must be identical: the view checks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSplitter, QVBoxLayout, QWidget

from app.graphs.plots import legend_below
from app.graphs.race_curves import curve_data, race_curves
from app.runs import RunContext, race_lanes, race_spread_of
from app.speedup import RACE_PAIRS, RaceSpread, race_key
from app.talk import style as ts
from app.talk.lanes_ui import FLUSH_MS, LanePane, LaneRun, big_plot
from app.theme import ACCENT, STATE_SOLID
from app.trace import ReplyTrace


@dataclass(frozen=True)
class RaceResult:
    spread: RaceSpread  # the median speedup of the off/on pairs, and their spread
    identical: bool | None  # greedy: did every pair's texts match token for token? None when sampling
    text_off: str
    text_on: str
    pair: int = 1  # the pair on screen (its texts above): the median one
    pair_tps: tuple[float, float] = (0.0, 0.0)  # that pair's tokens/s, off and on: their ratio is the headline's

    @property
    def speedup(self) -> float:
        return self.spread.speedup

    @property
    def tps_off(self) -> float:
        return self.spread.tps_off

    @property
    def tps_on(self) -> float:
        return self.spread.tps_on

    def headline(self) -> str:
        return f"{self.speedup:.2f}× {'faster' if self.speedup >= 1 else 'slower'}"


def race_result(traces: dict[str, ReplyTrace], greedy: bool, pair: int = 1) -> RaceResult | None:
    """The race's median and spread, and pair `pair`'s two texts (the pair on screen)."""
    spread = race_spread_of(traces)
    if spread is None:
        return None
    off, on = traces[race_key(False, pair)], traces[race_key(True, pair)]
    texts = {tuple(t.token_id for t in tr.tokens if t.in_reply) for tr in traces.values() if tr.finished}
    tps = tuple(float((t.stats or {}).get("tokens_per_s") or 0.0) for t in (off, on))
    return RaceResult(spread, len(texts) == 1 if greedy else None, off.text, on.text, pair, tps)


class RaceView(QWidget):
    finished = Signal(object)  # RaceResult, or None if the race did not finish

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx: RunContext | None = None
        self.pairs = RACE_PAIRS  # runs of each side, alternating; the headline is their median
        # The identity line names the bold pair and its figures (the demo says them in its headline's words)
        self.pair_words = True
        self.run: LaneRun | None = None
        self.result: RaceResult | None = None
        self._replay_start = 0.0
        self._shown: dict[str, ReplyTrace] = {}

        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 10, 12, 10)
        lay.addLayout(self._build_head())
        self.identity = QLabel("")
        self.identity.setTextFormat(Qt.TextFormat.RichText)
        ts.set_big(self.identity, 1.1)
        lay.addWidget(self.identity)
        lay.addWidget(self._build_lanes(), 1)
        lay.addWidget(self._build_controls())
        self.timer = QTimer(self)  # the one timer: flushes panes and curves, and drives the together-replay
        self.timer.setInterval(FLUSH_MS)
        self.timer.timeout.connect(self._tick)
        self._update_buttons()

    def _build_head(self) -> QHBoxLayout:
        """The prompt, and the headline speedup with its spread on the right."""
        head = QHBoxLayout()
        self.prompt = QLabel("")
        self.prompt.setWordWrap(True)
        ts.set_big(self.prompt, 1.0)
        head.addWidget(self.prompt, 1)
        result = QVBoxLayout()
        result.setSpacing(0)
        self.headline = QLabel("")
        self.headline.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        ts.set_big(self.headline, 3.0, bold=True)
        result.addWidget(self.headline)
        self.spread = QLabel("")  # how many runs the headline is the median of, and their spread
        self.spread.setAlignment(Qt.AlignmentFlag.AlignRight)
        ts.set_big(self.spread, 0.9)
        result.addWidget(self.spread)
        head.addLayout(result)
        return head

    def _build_lanes(self) -> QSplitter:
        """The two lanes' text side by side, over their tokens on a shared clock."""
        split = QSplitter(Qt.Orientation.Vertical)
        panes = QSplitter(Qt.Orientation.Horizontal)
        self.panes = {"off": LanePane("Speculation OFF — the verifier alone", STATE_SOLID["plain"]),
                      "on": LanePane("Speculation ON", ACCENT)}
        for p in self.panes.values():
            panes.addWidget(p)
        split.addWidget(panes)
        self.plot = big_plot("", "tokens", "seconds from each start (engine time: one clock for both)")
        pi = self.plot.getPlotItem()
        pi.setTitle(None)  # its axes say it: a title's line left the legend under the fold in the demo at 1024×700
        legend_below(pi, 3, "13pt")
        self.race_curves = race_curves(pi, {"off": STATE_SOLID["plain"], "on": ACCENT}, 4)
        self.curves = self.race_curves.bold  # the pair drawn bold: the running one, then the median one
        split.addWidget(self.plot)
        split.setSizes([300, 380])  # the curves, with every run's spread, in view at 700 px
        return split

    def _build_controls(self) -> QWidget:
        # The status and buttons: a widget of their own, which TalkDialog keeps in view below the scrolled view.
        # One row, the status beside the buttons: on a line of its own it put the demo's plot under the fold at
        # 1024×700.
        self.controls = QWidget()
        row = QHBoxLayout(self.controls)
        row.setContentsMargins(0, 0, 0, 0)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        ts.set_big(self.status, 0.9)
        row.addWidget(self.status, 1)
        row.addStretch()  # the buttons to the right where the status is hidden (the demo's)
        self.run_button = QPushButton("Run race")
        self.run_button.setToolTip("Race speculation off against on, several times each, alternating")
        self.run_button.clicked.connect(lambda: self.start(self.ctx) if self.ctx else None)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(self.stop)
        self.replay_button = QPushButton("Replay together")
        self.replay_button.setToolTip("Play both replies side by side in real time, at the speed each was generated")
        self.replay_button.clicked.connect(self.replay_together)
        self.png_button = QPushButton("Save PNG…")
        self.png_button.clicked.connect(self._save_png)
        for b in (self.run_button, self.stop_button, self.replay_button, self.png_button):
            ts.set_big(b, 0.85)
            b.setMinimumWidth(b.fontMetrics().horizontalAdvance(b.text()) + 20)  # no style minimum: fits scale 2
            row.addWidget(b)
        return self.controls

    # -- running ---------------------------------------------------------------------------------------
    def set_context(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.prompt.setText(f"<b>Prompt:</b> {_short(ctx.prompt_text)}")
        s = ctx.session
        self.panes["on"].title.setText(
            f"<span style='color:{ACCENT.name()}'>■</span> Speculation ON — {s.verifier_name} ← "
            f"{s.drafter_name or 'no drafter'}")
        self._update_buttons()

    def start(self, ctx: RunContext) -> None:
        if self.run is not None and self.run.running:
            return
        self.set_context(ctx)
        s = ctx.session
        lanes = race_lanes(s.verifier, s.drafter, self.pairs)
        self.run = LaneRun(lanes, self)
        for key, pane in self.panes.items():
            pane.bind(self.run.traces[key])
        self.race_curves.start([lane.key for lane in lanes])
        self.result = None
        self.headline.setText("")
        self.spread.setText("")
        self.identity.setText("")
        self.status.setText(f"Racing: speculation off and on, {self.pairs} times each, alternating (one after "
                            "the other, so neither steals the other's CPU)…")
        self.run.lane_started.connect(self._lane_started)
        self.run.errored.connect(lambda m: self.status.setText(f"Error: {m}"))
        self.run.finished.connect(self._on_finished)
        self.run.start(ctx, ctx.race_source(self.pairs))  # where the chat's replies decode (app/host.py)
        self.timer.start()
        self._update_buttons()

    def _lane_started(self, key: str) -> None:
        """The lane that has just started streams into its side's pane, and its pair is drawn bold."""
        assert self.run is not None
        order = [lane.key for lane in self.run.lanes]
        side = key.split()[0]
        self.status.setText(f"Run {order.index(key) + 1} of {len(order)}: speculation {side.upper()}…")
        if side in self.panes:
            self.panes[side].bind(self.run.traces[key])
        self.race_curves.follow(key)

    def stop(self) -> None:
        if self.run is not None:
            self.run.stop()
        self._shown = {}

    @property
    def running(self) -> bool:
        return self.run is not None and self.run.running

    def _on_finished(self) -> None:
        self._tick()
        self.timer.stop()
        run = self.run
        assert run is not None
        greedy = self.ctx.config.greedy if self.ctx else True
        pair = self.race_curves.finish(run.traces) or 1
        self.result = race_result(run.traces, greedy, pair)
        for side, pane in self.panes.items():  # the panes show the pair the curves draw bold: the median one
            pane.bind(run.traces[race_key(side == "on", pair)])
            pane.flush()
        self._show_result()
        self._update_buttons()
        self.finished.emit(self.result)

    def _show_result(self) -> None:
        r = self.result
        if r is None:
            self.status.setText("The race did not finish." + (f" {self.run.errors[-1]}" if self.run and
                                                                   self.run.errors else ""))
            return
        sp = r.spread
        if sp.short_reply:  # a ratio of a few tokens' speeds is noise: no verdict colour
            self.headline.setText(f"<span>{r.speedup:.2f}×</span>")
        else:
            color = ts.ACCEPTED if r.speedup >= 1 else ts.REJECTED
            self.headline.setText(f"<span style='color:{color.name()}'>{r.speedup:.2f}×</span>")
        self.spread.setText(sp.spread_words() + (f" · only {sp.tokens} tokens: too short to judge"
                                                 if sp.short_reply else ""))
        self.headline.setToolTip(f"speculation on {r.tps_on:.1f} tok/s ÷ off {r.tps_off:.1f} tok/s (medians of "
                                 f"{sp.pairs} runs each, alternating off/on so a machine that warms up or gets "
                                 "busier favours neither)")
        if r.identical is None:
            self.identity.setText("Sampling (temperature > 0): the texts may differ; both follow the verifier's "
                                  "distribution exactly.")
        elif r.identical:
            pair = f" — {self.race_curves.words(self.run.traces)}" if self.pair_words else ""
            self.identity.setText(f"<b style='color:{ts.ACCEPTED.name()}'>✓ Identical text</b>, token for token "
                                  f"(greedy){pair}")
        else:
            self.identity.setText(f"<b style='color:{ts.REJECTED.name()}'>✗ The texts differ</b> (greedy): "
                                  "this should not happen in float32; in float16 near-ties can part.")
        self.status.setText("Done. “Replay together” plays both at the speed they were generated.")

    # -- drawing ---------------------------------------------------------------------------------------
    def _tick(self) -> None:
        if self._shown:
            self._replay_tick()
            return
        if self.run is None:
            return
        for pane in self.panes.values():
            pane.flush()
        self.race_curves.draw(self.run.traces)

    def replay_together(self) -> None:
        """Both replies again, side by side, each token appearing when it was generated (engine time)."""
        if self.run is None or self.running:
            return
        pair = self.race_curves.run  # the pair drawn bold: the median one
        self._shown = {race_key(side == "on", pair): ReplyTrace(config=dict(self.run.traces[side].config))
                       for side in self.panes}
        for key, shown in self._shown.items():
            self.panes[key.split()[0]].bind(shown)
        self.race_curves.forget()  # the replay cuts the bold curves: whatever ends it, they are drawn whole again
        self._replay_start = time.perf_counter()
        self.status.setText("Replaying both at the speed they were generated…")
        self.timer.start()

    def _replay_tick(self) -> None:
        assert self.run is not None
        now = time.perf_counter() - self._replay_start
        done = True
        for key, shown in self._shown.items():
            full = self.run.traces[key]
            while len(shown.tokens) < len(full.tokens) and full.tokens[len(shown.tokens)].t <= now:
                shown.tokens.append(full.tokens[len(shown.tokens)])
            shown.rounds = [r for r in full.rounds if r.t_end <= now]
            if len(shown.tokens) < len(full.tokens):
                done = False
            else:
                shown.stats, shown.stop_reason = full.stats, full.stop_reason
            self.panes[key.split()[0]].flush()
            self.curves[key.split()[0]].setData(*curve_data(full, until=now))
        if done:
            self.timer.stop()
            self._shown = {}
            self.status.setText("Replay done.")

    def _update_buttons(self) -> None:
        running = self.running
        self.run_button.setEnabled(self.ctx is not None and not running)
        self.stop_button.setEnabled(running)
        self.replay_button.setEnabled(self.result is not None and not running)

    def _save_png(self) -> None:
        from PySide6.QtWidgets import QFileDialog

        from app.talk.export import export_png

        path, _ = QFileDialog.getSaveFileName(self, "Save the race", "specdec-race.png", "PNG image (*.png)")
        if path:
            export_png(self, path)


def _short(text: str, n: int = 160) -> str:
    import html

    text = " ".join(text.split())
    return html.escape(text if len(text) <= n else text[: n - 1] + "…")

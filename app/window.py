"""The main window: conversations on the left, the chat in the middle, live graphs on the right.

Threads: model loading, replies and races run on workers (app/worker.py); their slots here only fold
events into the reply's trace (a buffer). One QTimer (40 ms) flushes new tokens into the chat view and
new rounds into the graphs. The engine runs one generation at a time, so loading, replying, racing and
ranking are mutually exclusive: `busy` (a `Busy`) says which one is running; other modules change it
only through `set_busy`, and build prompts with `prompt_messages`.

The window keeps the layout, the menus and the reply flow; controllers in their own modules do the rest
through its public surface (`MainWindow`'s docstring): loading (app/loading.py), the race
(app/race_controller.py), the conversation's life outside a reply (app/conversations.py) and exports
(app/export.py).
"""

from __future__ import annotations

from dataclasses import asdict

from PySide6.QtCore import QRect, QSize, QTimer, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QMainWindow,
)

from app import branches, gc_pin, window_layout
from app import session as session_mod
from app.adapt_controller import AdaptController
from app.baseline_controller import BaselineController
from app.bubbles import MessageBubble
from app.conversation import Conversation, Message
from app.conversations import ConversationController
from app.export import ExportController
from app.found_offers import FoundOffers
from app.host import HostKeeper, Runner
from app.loading import LoadController
from app.race_controller import RaceController
from app.session import Busy, PromptInfo, Session, reply_events
from app.settings import Settings
from app.speedup import BaselineBook
from app.store import ConversationStore
from app.talk import install_talk_mode
from app.theme import style_sheet
from app.trace import ReplyTrace
from app.worker import EventWorker, error_text, wait_all
from specdec_core.errors import SpecdecError
from specdec_core.events import Finished, StopReason

FLUSH_MS = 40
# While a reply streams, the graphs redraw one panel on every GRAPH_EVERY-th tick (app/graphs/live.py), so each
# of the six repaints about twice a second: plots cost tens of milliseconds to paint on a 2-core CPU
# (and hold the GIL the decoding thread needs), text does not. The last flush draws everything.
GRAPH_EVERY = 2
# The figures (the graphs' header, the bubble's footer) are rewritten on every FIGURES_EVERY-th tick, about four
# times a second, and only when tokens arrived: each rewrite is a label's text and size (a millisecond or
# more on the GUI thread, holding the GIL the decoding thread needs), and on every 40 ms tick it cost a slow
# verifier's replies a few percent of their tokens/s. The text itself streams on every tick.
FIGURES_EVERY = 6
PREPARE_AFTER_MS = 300  # a reply ended: the next message's bubbles are built this much later (ChatView.prepare)
CLOSE_WAIT_S = 0.3  # how long closing waits for a reply to end its round (its text is saved before)
DEFAULT_SIZE = QSize(1480, 900)


class MainWindow(QMainWindow):
    """The main window and its public surface, which the controllers, app/talk, the rank dialog and main.py
    use (nothing else of it): the signals below; the state `settings`, `store`, `session`, `conv`,
    `baselines`, `busy` (changed through `set_busy`), `closing`; the widgets built in `_build`; the
    methods `prompt_messages`, `show_error`, `show_info`, `update_controls`, `save_settings`, `flush`,
    `add_baseline`, `graphs_shown`, `job_runner`, `start_worker`, `send`, `stop`, `new_chat`; and the
    controllers `loader`, `racer`, `baseline`, `conversations`, `exporter` and `talk`. The controllers and
    dialogs see it through ports (app/ports.py), each a Protocol naming the part of this surface it uses, and
    change its widgets through verbs (`say`, `set_progress`, `show_graphs`, `fill_composer`…) rather than
    reaching into them."""

    models_loaded = Signal(object)  # Session
    load_failed = Signal(str)
    reply_finished = Signal(object)  # ReplyTrace (flushed into the view and graphs)
    race_finished = Signal(str)
    error_shown = Signal(str)
    generation_event = Signal(object)  # every event of the streaming reply, after it is folded in
    busy_changed = Signal(object)  # Busy
    save_failed = Signal(str)  # a background save's error (emitted from the store's writer thread)

    def __init__(self, settings: Settings | None = None, store: ConversationStore | None = None,
                 *, persist_settings: bool = True) -> None:
        super().__init__()
        gc_pin.collector().acquire()  # released by the first closeEvent; see app/gc_pin.py
        self.store = store or ConversationStore()
        self.settings = settings or Settings.load(self.store.root)
        self.persist_settings = persist_settings
        self.session: Session | None = None
        self.conv = Conversation(system=self.settings.system_prompt)
        self._busy = Busy.IDLE
        self.baselines = BaselineBook()  # verifier-alone measurements of the loaded verifier (app/speedup.py)
        self._last_prompt_tokens = 0
        self._queued_in_composer = False
        self._gen_worker: EventWorker | None = None  # the streaming reply's worker
        self.hosts = HostKeeper()  # the process that decodes the replies, where one can (app/host.py)
        self._controls = None
        self._trace: ReplyTrace | None = None  # the streaming reply's trace
        self._message: Message | None = None
        self._pending_prompt: str | None = None  # sent once the models are loaded
        self._closing = False
        self._close_refused = False  # a close was refused once: the chat could be neither saved nor recovered
        self._regens = 0
        self._earlier_versions: list = []  # a regenerated reply's earlier versions, until the new one starts

        self.loader = LoadController(self)
        self.loader.failed.connect(self._drop_pending_prompt)
        self.loader.loaded.connect(self.models_loaded)
        self.loader.failed.connect(self.load_failed)
        self.loader.finished.connect(self._send_pending_prompt)
        self.racer = RaceController(self)
        self.baseline = BaselineController(self)  # which baseline a reply is shown against; measured after loads
        self.loader.loaded.connect(self.baseline.after_load)
        self.baseline.finished.connect(self._send_pending_prompt)
        self.racer.finished.connect(self.race_finished)
        self.racer.finished.connect(lambda _text: self.baseline.start_if_due())  # a measurement that waited
        self.conversations = ConversationController(self)
        self.exporter = ExportController(self)

        self.setWindowTitle("specdec")
        self.resize(DEFAULT_SIZE)
        self.setStyleSheet(style_sheet())
        self._build()
        window_layout.build_menus(self)
        self.talk = install_talk_mode(self)  # presenter mode, replay, race, demos for talks
        self.adaptation = AdaptController(self)  # the draft head learns from the chats (app/adapt_controller.py)
        self.found_offers = FoundOffers(self)  # models found on this machine, in the settings' drop-downs

        self.timer = QTimer(self)  # THE flush timer: tokens into the chat, rounds into the graphs
        self.timer.setInterval(FLUSH_MS)
        self.timer.timeout.connect(lambda: self.flush(final=False))
        self._ticks = 0

        self.conversations.refresh_sidebar()
        self.update_controls()
        self.save_failed.connect(lambda text: self.show_error(
            f"Could not save the conversation: {text}. It stays open here; earlier saves are intact."))
        for notice in (*getattr(self.settings, "notices", ()), *self.store.notices):  # files refused at start
            self.show_info(notice)

    # ------------------------------------------------------------------------------------ layout --
    def _build(self) -> None:
        window_layout.build_chat_column(self)
        window_layout.build_left_dock(self)
        self.settings_panel.models_changed.connect(self._models_changed)
        self.settings_panel.system.textChanged.connect(self._system_edited)
        window_layout.build_right_dock(self)
        window_layout.build_status_bar(self)

    def rank_drafts(self) -> None:
        """Which draft is fastest with the loaded verifier on this machine (app/rank_dialog.py)."""
        from app.rank_dialog import RankDialog

        if getattr(self, "rank_dialog", None) is None:
            self.rank_dialog = RankDialog(self)
        self.rank_dialog.show()
        self.rank_dialog.raise_()

    def show_models(self) -> None:
        """Known models, installed or not, and their pairs (app/models_dialog.py)."""
        from app.models_dialog import ModelsDialog

        if getattr(self, "models_dialog", None) is None:
            self.models_dialog = ModelsDialog(self)
        self.models_dialog.refresh()
        self.models_dialog.show()
        self.models_dialog.raise_()

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(DEFAULT_SIZE)

    # ----------------------------------------------------------------------------- public surface --
    @property
    def busy(self) -> Busy:
        """What the engine is doing; every change is announced on `busy_changed`."""
        return self._busy

    @busy.setter
    def busy(self, state: Busy | str) -> None:
        state = Busy(state)
        if state != self._busy:
            self._busy = state
            if not self._closing:
                self.busy_changed.emit(state)

    def set_busy(self, state: Busy | str) -> None:
        """Say what the engine is doing (the rank dialog and talk mode use this too); updates the controls."""
        self.busy = Busy(state)
        if not self._closing:
            self.update_controls()

    @property
    def closing(self) -> bool:
        """The window is closing or closed: slots keep their data and touch no widget (they may be deleted)."""
        return self._closing

    def prompt_messages(self, prompt: str | None = None) -> list[dict] | str:
        """The chat messages a race or a talk demo runs: the conversation plus `prompt` (else the
        composer's text), or the conversation up to its last user turn; else a sentence saying why not."""
        messages = self.conv.chat_messages()
        text = (prompt if prompt is not None else self.composer.toPlainText()).strip()
        if text:
            return messages + [{"role": "user", "content": text}]
        last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
        if last_user is None:
            return "Type a prompt in the composer (or send one first)."
        return messages[: last_user + 1]

    def fit_to(self, area: QRect | None = None) -> None:
        """Fit the window to the screen's available area (at most its default size) and share the width
        out: on a narrow screen the sidebar narrows and the graphs go to one scrolling column."""
        window_layout.fit_window(self, DEFAULT_SIZE, area)

    # ------------------------------------------------------------------------------------ status --
    def update_controls(self) -> None:
        """Buttons and the model label from `busy` and the session."""
        baseline = self.baselines.pick(self._last_prompt_tokens, self.baseline.graphs_live()) if self.session else None
        window_layout.show_controls(self, baseline)

    def show_error(self, text: str) -> None:
        if self._closing:
            return  # a worker reporting after the window closed: its widgets may be deleted
        self.chat.add_notice(text, "error")
        self.status_label.setText(text.splitlines()[0][:160])
        self.error_shown.emit(text)

    def show_info(self, text: str) -> None:
        if self._closing:
            return
        self.chat.add_notice(text, "info")

    # The verbs through which the controllers (their ports: app/ports.py) change the window's widgets.
    def say(self, text: str) -> None:
        """Put `text` on the status line."""
        self.status_label.setText(text)

    def set_progress(self, fraction: float | None) -> None:
        """The status bar's progress: `fraction` done (0 to 1), or None for a bar that only says "working"."""
        if fraction is None:
            self.progress.setRange(0, 0)
        else:
            self.progress.setRange(0, 1000)
            self.progress.setValue(int(1000 * max(0.0, min(1.0, fraction))))

    def show_progress(self, on: bool) -> None:
        """Show or hide the load's progress bar and its Cancel button."""
        self.progress.setVisible(on)
        self.cancel_load_button.setVisible(on)

    def set_models_text(self, text: str) -> None:
        """The line above the chat that names the models (rich text)."""
        self.model_label.setText(text)

    def show_graphs(self, tab: int) -> None:
        """The graphs' dock, on tab `tab` (0: the live graphs, 1: the race)."""
        self.graphs.tabs.setCurrentIndex(tab)
        self.right_dock.show()

    def fill_composer(self, text: str) -> None:
        """Put `text` in the composer to edit, with the cursor at its end."""
        self.composer.setPlainText(text)
        self.composer.setFocus()
        cursor = self.composer.textCursor()
        cursor.movePosition(cursor.MoveOperation.End)
        self.composer.setTextCursor(cursor)

    def clear_composer(self) -> None:
        self.composer.clear()

    def focus_composer(self) -> None:
        self.composer.setFocus()

    def stop_flushing(self) -> None:
        """Stop the flush timer (the run it repainted for has ended)."""
        self.timer.stop()

    # --------------------------------------------------------------------------------- baselines --
    def graphs_shown(self) -> bool:
        """The live graphs are shown, not behind the Race tab (what a reply decoded in this process competes with)."""
        return self.right_dock.isVisible() and self.graphs.tabs.currentIndex() == 0

    def add_baseline(self, trace: ReplyTrace, source: str, graphs_live: bool | None = None) -> None:
        """A verifier-alone run (a reply with speculation off, a race's off lane) joins the baselines.
        `graphs_live`: whether the live graphs repainted while it ran (default: whether they do now)."""
        self.baseline.add(trace, source, graphs_live)

    # -------------------------------------------------------------------------------- generation --
    def send_from_composer(self) -> None:
        text = self.composer.toPlainText().strip()
        if not text:
            return
        if self.busy in ("reply", "race"):
            return
        if self.busy == "rank":
            self.status_label.setText("A draft ranking is running (Generation ▸ Rank drafts): send when it ends.")
            return
        if self.busy == Busy.LOAD or self.session is None or self.settings_panel.dirty:
            # Queued until the models are loaded: the text stays in the composer (locked) meanwhile, so it
            # is visibly waiting, and is still there to edit if loading fails or is cancelled.
            self.composer.setReadOnly(True)
            self._queued_in_composer = True
            self.send(text)
            self.status_label.setText("Queued: your message is sent as soon as the models are loaded…")
            return
        self.composer.clear()
        self.send(text)

    def send(self, text: str) -> None:
        """Add a user message and start the reply (queued until the models are loaded)."""
        if self.busy in (Busy.LOAD, Busy.MEASURE) or (self.session is None and self.loader.worker is not None):
            self._pending_prompt = text
            self.baseline.cancel()  # a measurement after the load gives way, and runs after the reply
            self.status_label.setText("The message will be sent once the models are loaded…" if self.busy == Busy.LOAD
                                      else "Sending…")
            return
        if self.session is None or self.settings_panel.dirty:
            # Model settings changed since the load: the reply uses the pair they name, loaded first.
            self._pending_prompt = text
            self.loader.load()
            return
        self.conversations.undo = None  # the edited message is sent: the removed turns are gone for good
        self.conv.messages.append(Message("user", text))
        self.conv.auto_title()
        self.conversations.save()  # the chat shows in the sidebar from its first message, not its first reply
        self.chat.add_user(text, len(self.conv.messages) - 1)
        self.chat.scroll_to_end()
        self._start_reply()

    def _drop_pending_prompt(self) -> None:
        self._pending_prompt = None  # loading failed: a message waiting for it is not sent

    def _send_pending_prompt(self) -> None:
        """Loading ended: send the message that waited for it, if the models are there."""
        queued, self._queued_in_composer = self._queued_in_composer, False
        self.composer.setReadOnly(False)
        if self._pending_prompt is not None and self.session is not None:
            text, self._pending_prompt = self._pending_prompt, None
            if queued:
                self.composer.clear()
            self.send(text)
        else:
            self._pending_prompt = None  # loading failed or was cancelled: the text is still in the composer
        self.baseline.start_if_due()

    def _start_reply(self) -> None:
        assert self.session is not None
        try:
            config = session_mod.config_from_settings(self.settings)
        except SpecdecError as exc:
            self.show_error(f"Check the generation settings: {exc}")
            self._restore_earlier_versions()
            return
        if self._regens and config.temperature > 0:
            config = config.with_(seed=config.seed + self._regens)  # a regenerated sample differs
        from specdec_core.engine import Controls

        s = self.session
        # Where it decodes (forking the host on the first reply of a session) before the baseline is picked: a
        # reply decoded apart from the window compares with runs the window did not slow either.
        run = self.job_runner()
        messages = self.conv.chat_messages()
        trace = ReplyTrace(verifier=s.verifier_name, drafter=s.drafter_name, config=asdict(config),
                           baseline_tps=s.baseline_tps, baseline_source=s.baseline_source, seed=config.seed,
                           adapted_tokens=self.adaptation.head_tokens)  # which head drafts it (the chat's plot)
        self.baseline.pick_for(trace, self._last_prompt_tokens)  # refined when the prompt is built
        message = Message("assistant", "", trace)
        branches.attach(message, self._earlier_versions)
        self._earlier_versions = []
        self.conv.messages.append(message)
        self._trace, self._message = trace, message
        bubble = self.chat.add_assistant(trace, len(self.conv.messages) - 1, streaming=True)
        bubble.set_branch(*branches.position(message))
        self.graphs.live.set_trace(trace)
        self.graphs.tabs.setCurrentIndex(0)
        self._controls = Controls(speculate=self.spec_button.isChecked())
        controls = self._controls
        system = self.conv.system  # the chat's own (Settings ▸ System shows the open chat's)
        worker = EventWorker(lambda: run(reply_events, (messages, system, config), controls),
                             on_abort=controls.cancel, name="reply", polled=True)  # flush() delivers its events
        worker.event.connect(self._on_event)
        worker.errored.connect(self._on_gen_error)
        worker.finished.connect(lambda w=worker: self._on_gen_finished(w))
        self._gen_worker = worker
        self.start_worker(worker, Busy.REPLY, "Generating…")

    def job_runner(self) -> Runner:
        """Where a run on the session's models decodes now: the host's process where one can (forked here on the
        first run after a load), else this one (app/host.py). Call on the GUI thread."""
        adapting = self.adaptation.enabled and self.adaptation.drafter is not None  # a head learning between replies
        return self.hosts.runner(self.session, head_version=self.adaptation.head_tokens, adapting=adapting)

    def _restore_earlier_versions(self) -> None:
        """A regenerate that could not start: the reply it set aside is shown again."""
        versions, self._earlier_versions = self._earlier_versions, []
        if branches.restore(self.conv.messages, versions):
            self.conversations.render()

    def start_worker(self, worker: EventWorker, busy: Busy, status: str) -> None:
        """Mark the window busy, say so, and start `worker` with the repaint timer running."""
        self.busy = busy
        self.status_label.setText(status)
        self.update_controls()
        self.timer.start()
        worker.start()

    def _on_event(self, ev: object) -> None:
        trace = self._trace
        if trace is None:
            return
        if isinstance(ev, PromptInfo):
            trace.dropped_turns = ev.dropped_turns
            self._last_prompt_tokens = ev.prompt_tokens
            self.baseline.pick_for(trace, ev.prompt_tokens)
            if ev.dropped_turns:
                self.show_info(f"This conversation is longer than the verifier's context: the "
                               f"{ev.dropped_turns} oldest message{'s are' if ev.dropped_turns > 1 else ' is'} "
                               "left out of what the models see (the system prompt is kept). The saved "
                               "history keeps everything.")
            return
        trace.apply(ev)
        if isinstance(ev, Finished) and self._message is not None:
            self._message.content = ev.text
        if self._closing:
            return  # the window is closed (its widgets may be deleted): keep the data, touch no widget
        self.generation_event.emit(ev)
        if isinstance(ev, Finished) and (ev.stop_reason is StopReason.ERROR or ev.error):
            self.show_error(f"Generation failed: {ev.error or 'unknown error'}")

    def _on_gen_error(self, exc: BaseException) -> None:
        """The engine refused the input (prompt too long, bad settings, incompatible pair) or crashed."""
        trace = self._trace
        if trace is not None:
            trace.error = error_text(exc)
            trace.stop_reason = StopReason.ERROR.value
        self.show_error(error_text(exc))

    def _on_gen_finished(self, worker: EventWorker) -> None:
        if worker is not self._gen_worker:
            return
        self._gen_worker = None
        trace, message = self._trace, self._message
        if trace is not None and trace.stop_reason is None:
            trace.stop_reason = StopReason.CANCELLED.value  # the worker stopped before Finished arrived
        if message is not None and trace is not None and not message.content:
            message.content = trace.text
        if self._closing:
            # The reply ended after the window closed (closeEvent waits only 1 s): save what it
            # wrote, and touch no widget, since they may be deleted by now.
            self.conversations.store_quietly()
            return
        # A reply that produced nothing (error before the first token) leaves no empty bubble behind.
        if message is not None and trace is not None and not trace.tokens and trace.error:
            if self.conv.messages and self.conv.messages[-1] is message:
                branches.drop_failed(self.conv.messages, message)  # a regenerated one: the earlier version again
                self.conversations.render()
        self.flush()  # final flush of text and graphs
        self.busy = Busy.IDLE
        self._regens = 0
        if trace is not None and trace.all_plain and trace.stop_reason in ("eos", "max_tokens", "stop_string") \
                and (trace.get_stats() or None) and trace.get_stats().new_tokens >= 8 and self.session:
            # A reply with speculation off is one more verifier-alone measurement: it joins the others
            # (a median of comparable runs is the baseline) instead of replacing them.
            self.add_baseline(trace, "speculation-off reply")
        self.conversations.save()
        self.update_controls()
        self.status_label.setText(trace.summary() if trace is not None and trace.rounds else "Ready")
        self.timer.stop()
        if trace is not None and not self._closing:
            self.reply_finished.emit(trace)
        # The next message's bubbles, built once the window has settled (not in this turn, which redraws the reply).
        QTimer.singleShot(PREPARE_AFTER_MS, self.chat, self.chat.prepare)
        self.baseline.after_reply(trace)

    def flush(self, final: bool = True) -> None:
        """New tokens into the chat and new rounds into the graphs (the timer's tick; final: every panel)."""
        for worker in (self._gen_worker, self.racer.worker):
            if worker is not None:
                worker.deliver()  # the reply's (or the race's) events since the last tick
        self._ticks += 1
        figures = final or self._ticks % FIGURES_EVERY == 0  # the header's and the footer's, at the same tick
        self.chat.flush(figures=figures)
        self.graphs.flush(panels=final or self._ticks % GRAPH_EVERY == 0, figures=figures)

    def stop(self) -> None:
        """Stop the reply or the race that is running (or the baseline's measurement)."""
        self.baseline.cancel()
        for worker in (self._gen_worker, self.racer.worker):
            if worker is not None and worker.is_running:
                worker.abort()
                self.status_label.setText("Stopping…")

    def set_speculation(self, on: bool) -> None:
        self.settings.speculate = on
        if self._controls is not None and self.busy == Busy.REPLY:  # a race's lanes keep their own setting
            self._controls.speculate = on  # the engine reads it at the start of the next round
        self.update_controls()
        self.save_settings()

    def set_colored(self, on: bool) -> None:
        self.settings.colored = on
        self.chat.set_colored(on)
        self.save_settings()

    def set_code_colored(self, on: bool) -> None:
        self.settings.code_colored = on
        self.chat.set_code_colored(on)
        self.save_settings()

    def set_reading(self, on: bool) -> None:
        self.settings.reading = on
        self.chat.set_reading(on)
        self.save_settings()

    def regenerate(self, bubble: MessageBubble | None) -> None:
        if self.busy or self.session is None:
            return
        msgs = self.conv.messages
        if bubble is None:
            idx = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].role == "assistant"), None)
        else:
            idx = bubble.index
        if idx is None or idx >= len(msgs) or msgs[idx].role != "assistant":
            return
        self._earlier_versions = branches.set_aside(msgs, idx)  # flip back to them with ‹ › on the new reply
        self._regens += 1
        self.conversations.render()
        self.conversations.show_graphs_of_last_reply()
        if float(self.settings.temperature) == 0:
            self.show_info("Temperature is 0 (greedy): the verifier always picks its most likely token, so "
                           "regenerating writes the same reply. Raise the temperature (Settings) for a "
                           "different one.")
        self._start_reply()

    # ------------------------------------------------------------------------------ conversations --
    def new_chat(self) -> None:
        """Stop a running reply or race and start an empty conversation."""
        if self.busy in (Busy.REPLY, Busy.RACE):
            self.stop()
        self._trace = None  # the stopping reply's last events no longer reach the view
        self.conversations.new()

    # ---------------------------------------------------------------------------------- settings --
    def _system_edited(self) -> None:
        """The settings' System box edits the open chat's system prompt, saved with the chat."""
        self.conv.system = self.settings_panel.system.toPlainText()
        if self.conv.messages and not self.conv.read_only:
            self.conversations.store_quietly()

    def _models_changed(self) -> None:
        self.settings_panel.set_dirty(True)
        if not self.busy:
            self.status_label.setText("Model settings changed: they are loaded when you send your next message "
                                      "(or now: Load models)")
        self.save_settings()

    def save_settings(self) -> None:
        if not self.persist_settings:
            return
        try:
            self.settings.save(self.store.root)
        except OSError:
            pass

    # ----------------------------------------------------------------------------------- closing --
    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        """Save, stop whatever runs and leave at once: the partial reply is saved first, then workers get
        CLOSE_WAIT_S to end (a reply stops within a round; a model load may not, and main() exits anyway)."""
        first_close = not self._closing
        self._closing = True
        self.timer.stop()
        if self.busy == Busy.REPLY and self._trace is not None and self._message is not None:
            if self._trace.stop_reason is None:
                self._trace.stop_reason = StopReason.CANCELLED.value
            self._message.content = self._message.content or self._trace.text
        # Keep what was generated so far, and whatever a failed background save left unwritten; what the
        # database refuses goes to a recovery file. If even that fails, the window stays open (once).
        if self.conversations.save_at_close() is not None and not self._close_refused:
            self._closing = False
            self._close_refused = True
            if self.busy in (Busy.REPLY, Busy.RACE):
                self.timer.start()
            self.show_error(self.conversations.lost.get(self.conv.id, ""))  # (nothing is shown while closing)
            event.ignore()
            return
        self.save_settings()
        wait_all(CLOSE_WAIT_S)
        self.hosts.close()
        if first_close:
            gc_pin.collector().release()
        event.accept()

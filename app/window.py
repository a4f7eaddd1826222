"""The main window, the app's composition root: conversations on the left, the chat in the middle, live graphs on
the right, and the controllers that do the work, each in its own module, wired together here. The reply
(app/reply_controller.py) and the race (app/race_controller.py) are runs (app/run_controller.py) whose events one
timer draws (app/flush_clock.py). The engine does one thing at a time (load, reply, race, rank...): `busy` says
which. The screens are built by app/window_layout.py; the controllers reach the window through ports (app/ports.py).
"""

from __future__ import annotations

from PySide6.QtCore import QRect, QSize, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QMainWindow

from app import gc_pin, window_layout
from app.adapt_controller import AdaptController
from app.baseline_controller import BaselineController
from app.bubbles import MessageBubble
from app.conversation import Conversation
from app.conversations import ConversationController
from app.export import ExportController
from app.flush_clock import FlushClock
from app.found_offers import FoundOffers
from app.host import HostKeeper, Runner
from app.loading import LoadController
from app.race_controller import RaceController
from app.reply_controller import ReplyController
from app.session import Busy, Session
from app.settings import Settings
from app.settings_controller import SettingsController
from app.speedup import BaselineBook
from app.store import ConversationStore
from app.talk import install_talk_mode
from app.theme import style_sheet
from app.worker import wait_all

CLOSE_WAIT_S = 0.3  # how long closing waits for a reply to end its round (its text is saved before)
DEFAULT_SIZE = QSize(1480, 900)


class MainWindow(QMainWindow):
    """The main window and its public surface, which the controllers, app/talk, the dialogs and main.py use
    (nothing else of it): the signals below; the state `settings`, `store`, `session`, `conv`, `baselines`, `busy`
    (changed through `set_busy`), `closing`; the widgets built in `_build`; the methods below; and the controllers
    `replies`, `loader`, `racer`, `baseline`, `conversations`, `exporter`, `settings_controller` and `talk`. They see
    it through ports (app/ports.py), each a Protocol naming the part of this surface it uses, and change its
    widgets through verbs (`say`, `set_progress`, `show_graphs`, `fill_composer`…) rather than reaching into them."""

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
        self.hosts = HostKeeper()  # the process that decodes the replies, where one can (app/host.py)
        self._closing = False
        self._close_refused = False  # a close was refused once: the chat could be neither saved nor recovered

        self.replies = ReplyController(self)  # Send to the saved reply (app/reply_controller.py)
        self.loader = LoadController(self)
        self.loader.failed.connect(self.replies.drop_pending_prompt)
        self.loader.loaded.connect(self.models_loaded)
        self.loader.failed.connect(self.load_failed)
        self.loader.finished.connect(self.replies.send_pending_prompt)
        self.racer = RaceController(self)
        self.baseline = BaselineController(self)  # which baseline a reply is shown against; measured after loads
        self.loader.loaded.connect(self.baseline.after_load)
        self.baseline.finished.connect(self.replies.send_pending_prompt)
        self.racer.finished.connect(self.race_finished)
        self.racer.finished.connect(lambda _text: self.baseline.start_if_due())  # a measurement that waited
        self.conversations = ConversationController(self)
        self.exporter = ExportController(self)
        self.settings_controller = SettingsController(self)  # the switches and the settings panel's changes

        self.setWindowTitle("specdec")
        self.resize(DEFAULT_SIZE)
        self.setStyleSheet(style_sheet())
        self._build()
        window_layout.build_menus(self)
        self.talk = install_talk_mode(self)  # presenter mode, replay, race, demos for talks
        self.adaptation = AdaptController(self)  # the draft head learns from the chats (app/adapt_controller.py)
        self.found_offers = FoundOffers(self)  # models found on this machine, in the settings' drop-downs

        self.clock = FlushClock([self.replies.run, self.racer.run], self.chat, self.graphs, self)

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
        window_layout.build_right_dock(self)
        window_layout.build_status_bar(self)

    def rank_drafts(self) -> None:
        """Which draft is fastest with the loaded verifier on this machine (app/rank_dialog.py)."""
        from app.rank_dialog import RankDialog

        if getattr(self, "rank_dialog", None) is None:
            self.rank_dialog = RankDialog(self)
        window_layout.raise_dialog(self.rank_dialog)

    def show_models(self) -> None:
        """Known models, installed or not, and their pairs (app/models_dialog.py)."""
        from app.models_dialog import ModelsDialog

        if getattr(self, "models_dialog", None) is None:
            self.models_dialog = ModelsDialog(self)
        self.models_dialog.refresh()
        window_layout.raise_dialog(self.models_dialog)

    def sizeHint(self) -> QSize:  # noqa: N802
        return QSize(DEFAULT_SIZE)

    # ------------------------------------------------------------------------------------- state --
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
        """The chat messages a run sends (Conversation.prompt_messages): with `prompt`, else the composer's text."""
        return self.conv.prompt_messages(prompt if prompt is not None else self.composer.toPlainText())

    def fit_to(self, area: QRect | None = None) -> None:
        """Fit the window to the screen's available area (at most its default size) and share the width
        out: on a narrow screen the sidebar narrows and the graphs go to one scrolling column."""
        window_layout.fit_window(self, DEFAULT_SIZE, area)

    # ------------------------------------------------------------------------------------ status --
    def update_controls(self) -> None:
        """Buttons and the model label from `busy` and the session."""
        baseline = self.baselines.pick(self.replies.last_prompt_tokens, self.baseline.graphs_live()) \
            if self.session else None
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
        self.progress.set_fraction(fraction)

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
        self.composer.fill(text)

    def clear_composer(self) -> None:
        self.composer.clear()

    def focus_composer(self) -> None:
        self.composer.setFocus()

    def start_flushing(self) -> None:
        """Start the flush timer (a run has started: its events are delivered and drawn on each tick)."""
        self.clock.start()

    def stop_flushing(self) -> None:
        """Stop the flush timer (the run it repainted for has ended)."""
        self.clock.stop()

    def graphs_shown(self) -> bool:
        """The live graphs are shown, not behind the Race tab (what a reply decoded in this process competes with)."""
        return self.right_dock.isVisible() and self.graphs.tabs.currentIndex() == 0

    # ------------------------------------------------------------------------------------- runs --
    def send_from_composer(self) -> None:
        self.replies.send_from_composer()

    def send(self, text: str) -> None:
        """Add a user message and start the reply (queued until the models are loaded)."""
        self.replies.send(text)

    def regenerate(self, bubble: MessageBubble | None) -> None:
        """A new version of `bubble`'s reply (None: the last one)."""
        self.replies.regenerate(bubble)

    def job_runner(self) -> Runner:
        """Where a run on the session's models decodes now: the host's process where one can (forked here on the
        first run after a load), else this one (app/host.py). Call on the GUI thread."""
        adapting = self.adaptation.enabled and self.adaptation.drafter is not None  # a head learning between replies
        return self.hosts.runner(self.session, head_version=self.adaptation.head_tokens, adapting=adapting)

    def flush(self, final: bool = True) -> None:
        """The runs' new events, tokens into the chat and rounds into the graphs (final: every panel)."""
        self.clock.flush(final)

    def stop(self) -> None:
        """Stop the reply or the race that is running (or the baseline's measurement)."""
        self.baseline.cancel()
        for run in (self.replies.run, self.racer.run):
            if run.stop():
                self.say("Stopping…")

    def new_chat(self) -> None:
        """Stop a running reply or race and start an empty conversation."""
        if self.busy in (Busy.REPLY, Busy.RACE):
            self.stop()
        self.replies.forget()  # the stopping reply's last events no longer reach the view
        self.conversations.new()

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
        self.clock.stop()
        self.replies.keep_at_close()
        # Keep what was generated so far, and whatever a failed background save left unwritten; what the
        # database refuses goes to a recovery file. If even that fails, the window stays open (once).
        if self.conversations.save_at_close() is not None and not self._close_refused:
            self._closing = False
            self._close_refused = True
            if self.busy in (Busy.REPLY, Busy.RACE):
                self.clock.start()
            self.show_error(self.conversations.lost.get(self.conv.id, ""))  # (nothing is shown while closing)
            event.ignore()
            return
        self.save_settings()
        wait_all(CLOSE_WAIT_S)
        self.hosts.close()
        if first_close:
            gc_pin.collector().release()
        event.accept()

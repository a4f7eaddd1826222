"""The open conversation's life outside a reply: new, open, delete (the sidebar), saving, drawing it in
the chat view, editing a turn (with undo), and which of its replies the graphs show.

The window holds the open `Conversation` (`window.conv`); this controller replaces and stores it.
Saving runs on the store's writer thread while the app is open and waits for the write while it closes.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject, Signal

from app import branches, gc_pin
from app.bubbles import MessageBubble, Notice
from app.conversation import Conversation, Message
from app.ports import WindowPort
from app.session import Busy
from app.store import SaveConflict
from app.trace import ReplyTrace, TokenRecord

if TYPE_CHECKING:
    from PySide6.QtCore import SignalInstance

    from app.chat_view import ChatView
    from app.graphs.graphs_panel import GraphsPanel
    from app.settings_panel import SettingsPanel
    from app.sidebar import ConversationSidebar
    from app.store import ConversationStore

GENERATING = (Busy.REPLY, Busy.RACE)


class ConversationWindow(WindowPort, Protocol):
    """What the conversation controller uses of the window besides the shared port."""

    store: ConversationStore
    chat: ChatView
    graphs: GraphsPanel
    settings_panel: SettingsPanel  # shows the open chat's system prompt
    sidebar: ConversationSidebar
    save_failed: SignalInstance  # a background save's error, emitted from the store's writer thread
    reply_finished: SignalInstance  # a reply ended (its ReplyTrace)

    def new_chat(self) -> None: ...
    def setWindowTitle(self, title: str) -> None: ...  # noqa: N802 - Qt's name
    def show_graphs(self, tab: int) -> None: ...
    def fill_composer(self, text: str) -> None: ...
    def clear_composer(self) -> None: ...
    def focus_composer(self) -> None: ...


# Opening a conversation draws this many of its last messages at once; the earlier ones follow on the event
# loop (ChatView.draw_earlier). A bubble costs 10-25 ms to build and lay out on a 2-core CPU.
FIRST_DRAWN = 4


class _Relay(QObject):
    """Carries what the store's writer thread reports to the GUI thread (queued signals)."""

    conflict = Signal(object, object)  # the Conversation saved, SaveConflict
    loaded = Signal(str, object)  # conversation id, the Future of its load


class ConversationController:
    def __init__(self, window: ConversationWindow) -> None:
        self.window = window
        self._relay = _Relay()
        self._relay.conflict.connect(self._keep_both)
        self._relay.loaded.connect(self._loaded)
        self.opening: tuple[str, Conversation, int] | None = None  # (id, open chat, its length) while loading
        self.undo: list[Message] | None = None  # the conversation before the last edit removed turns
        self.undo_notice: Notice | None = None  # the chat's notice with the Undo button
        # Conversations that at close could be neither saved nor kept in a recovery file: id -> what was said.
        self.lost: dict[str, str] = {}
        window.reply_finished.connect(lambda _trace: self.show_history())

    # -- switching ----------------------------------------------------------------------------------------
    def new(self) -> None:
        """An empty conversation in place of the open one (called by `MainWindow.new_chat`)."""
        w = self.window
        w.conv = Conversation(system=w.settings.system_prompt)
        self.undo = None
        self.opening = None  # a conversation still loading is not shown over the new one
        w.settings_panel.show_system(w.conv.system)
        w.chat.clear()
        w.graphs.live.set_trace(None, w.session.baseline_tps if w.session else None)
        self.show_history()
        w.setWindowTitle("specdec")
        if w.busy != Busy.LOAD:  # a load's progress stays on the status line
            w.say("New chat")
        self.refresh_sidebar()
        w.focus_composer()

    def open(self, conv_id: str) -> None:
        """Show a saved conversation. It is read on the store's thread (a long one takes about a second), and
        shown when it arrives unless the user moved on meanwhile (another chat, a new one, a message sent)."""
        w = self.window
        if w.busy in GENERATING:
            w.say("Stop the reply before switching conversations")
            return
        self.opening = (conv_id, w.conv, len(w.conv.messages))
        gc_pin.collector().pause()  # until it has arrived (app/gc_pin.py: its records are not walked)
        w.say("Opening…")
        future = w.store.load_in_background(conv_id)
        future.add_done_callback(lambda f: self._load_done(conv_id, f))

    def _load_done(self, conv_id: str, future) -> None:
        """Called on the store's thread: only emit (Qt queues the signal to the GUI thread)."""
        try:
            self._relay.loaded.emit(conv_id, future)
        except RuntimeError:  # the window is already deleted
            pass

    def _loaded(self, conv_id: str, future) -> None:
        w = self.window
        gc_pin.collector().freeze()
        if self.opening != (conv_id, w.conv, len(w.conv.messages)) or w.busy in GENERATING or w.closing:
            return  # the user moved on while it loaded
        self.opening = None
        try:
            conv = future.result()
        except (OSError, ValueError, KeyError) as exc:
            w.show_error(f"Could not open that conversation: {exc}")
            return
        w.conv = conv
        self.undo = None
        w.settings_panel.show_system(conv.system)  # each chat keeps its own system prompt
        self.render()
        for notice in conv.notices:  # read-only (a newer format), or what was dropped as damaged
            w.show_info(notice)
        last = _last_trace(conv)
        w.graphs.live.set_trace(last, last.baseline_tps if last else None)
        if last is not None:
            w.graphs.live.flush()
        w.setWindowTitle(f"specdec — {conv.title}")
        # The status bar describes this conversation, not the one shown before.
        w.say(f"Opened “{conv.title}”" + (f" · last reply: {last.summary()}" if last else ""))
        self.refresh_sidebar()

    def deleted(self, conv_id: str) -> None:
        if conv_id == self.window.conv.id:
            self.window.new_chat()
        self.refresh_sidebar()

    def refresh_sidebar(self) -> None:
        self.window.sidebar.refresh(self.window.conv)

    # -- showing --------------------------------------------------------------------------------------------
    def render(self) -> None:
        """Draw the whole conversation in the chat view again: its last FIRST_DRAWN messages now, the
        earlier ones above them on the event loop."""
        chat = self.window.chat
        chat.clear()
        messages = self.window.conv.messages
        first = max(len(messages) - FIRST_DRAWN, 0)
        for i in range(first, len(messages)):
            self._draw(i, messages[i])
        chat.draw_earlier([lambda i=i, m=messages[i]: self._draw(i, m, above=True) for i in range(first)])
        chat.scroll_to_end()
        self.show_history()

    def show_history(self) -> None:
        """The graphs' acceptance over the open chat: one point per finished reply (graphs.ChatAcceptance)."""
        w = self.window
        w.graphs.live.history.show([m.trace for m in w.conv.messages if m.role == "assistant"])

    def _draw(self, i: int, m: Message, above: bool = False) -> None:
        chat = self.window.chat
        if m.role == "user":
            chat.add_user(m.content, i, above=above)
            return
        trace = m.trace or ReplyTrace(stop_reason="eos")
        if m.trace is None:  # a reply saved without a trace: show its text plainly
            trace.tokens = [TokenRecord(0, m.content, "plain", 0, 0, None, None, None)]
        chat.add_assistant(trace, i, above=above).set_branch(*branches.position(m))

    def flip_branch(self, bubble: MessageBubble, step: int) -> None:
        """Show the previous or next version of a regenerated reply (and what followed it), and save."""
        w = self.window
        if w.busy in GENERATING:
            return
        if branches.flip(w.conv.messages, bubble.index, step):
            self.render()
            self.show_graphs_of_last_reply()
            shown = w.conv.messages[bubble.index].trace  # the status line's figures are this version's now
            w.say(shown.summary() if shown is not None and shown.rounds else "Ready")
            self.save()

    def show_graphs_for(self, bubble: MessageBubble) -> None:
        w = self.window
        if bubble.trace is None or w.busy in GENERATING:
            return
        w.graphs.live.set_trace(bubble.trace, bubble.trace.baseline_tps)
        w.graphs.live.flush()
        w.show_graphs(0)

    def show_graphs_of_last_reply(self) -> None:
        """Point the graphs at the conversation's last reply (none: empty graphs)."""
        last = _last_trace(self.window.conv)
        if self.window.graphs.live.trace is not last:
            self.window.graphs.live.set_trace(last, last.baseline_tps if last else None)

    # -- editing --------------------------------------------------------------------------------------------
    def edit(self, bubble: MessageBubble) -> None:
        """Take a user turn (and everything after it) out of the conversation into the composer."""
        w = self.window
        if w.busy in GENERATING:
            return
        messages = w.conv.messages
        idx = bubble.index
        if idx >= len(messages) or messages[idx].role != "user":
            return
        text = messages[idx].content
        removed = len(messages) - idx
        self.undo = list(messages)
        del messages[idx:]
        self.render()
        self.show_graphs_of_last_reply()  # the graphs must not keep showing a removed reply
        w.fill_composer(text)
        later = removed - 1
        what = f"this message and the {later} after it" if later else "this message"
        notice = w.chat.add_notice(f"Editing: {what} left the conversation (nothing is saved until you "
                                   "send). Undo puts them back.", "info")
        notice.add_button("Undo", self.undo_edit)
        self.undo_notice = notice
        w.say("Edit the message and press Enter to send it again (Undo puts the turns back)")

    def undo_edit(self) -> None:
        """Put back the turns the last edit removed (until the edited message is sent)."""
        w = self.window
        if self.undo is None or w.busy in GENERATING:
            return
        w.conv.messages[:] = self.undo
        self.undo = None
        w.clear_composer()
        self.render()
        self.show_graphs_of_last_reply()
        w.say("Edit undone")

    # -- saving ---------------------------------------------------------------------------------------------
    def save(self) -> None:
        """Store the conversation (a failure is shown; earlier saves stay intact) and list it in the sidebar."""
        w = self.window
        if not w.conv.messages:
            return
        error = self.store_quietly()
        if error is not None:
            w.show_error(f"Could not save the conversation: {error}. It stays open here; earlier saves are "
                         "intact.")
        w.setWindowTitle(f"specdec — {w.conv.title}")
        self.refresh_sidebar()

    def store_quietly(self) -> OSError | None:
        """Save the conversation atomically; the error if that failed (earlier saves stay intact).
        While the window closes, the write is waited for, and what the database refuses goes to a
        recovery file (see `save_at_close`)."""
        w = self.window
        if not w.conv.messages:
            return None
        if w.closing:
            return self.save_at_close()
        conv = w.conv
        try:  # written on the store's thread; a failure comes back through save_failed (a conflict, _keep_both)
            w.store.save_in_background(conv).add_done_callback(lambda f: self._background_save_done(f, conv))
        except OSError as exc:
            return exc
        return None

    def save_at_close(self) -> OSError | None:
        """Make sure the open conversation is stored before the app exits: a reply still running is saved
        as it stands, one whose last write failed is written again (after the queued writes land), and if
        the database still refuses it (another process holding the lock past every retry, a damaged file),
        it is kept in a recovery file that the next start imports, and the user is told. (An edit that
        took turns out is not a reason to save: nothing is saved until the edited message is sent.)"""
        w = self.window
        conv = w.conv
        if not conv.messages:
            return None
        if w.busy not in GENERATING and not w.store.save_failed(conv.id):
            return None
        conv_id = conv.id
        try:
            recovered = w.store.save_or_recover(conv)
        except OSError as exc:
            message = f"“{conv.title}” could not be saved ({w.store.recovery_reason or exc}) nor kept in a " \
                      f"recovery file ({exc})"
            print(f"specdec-chat: {message}", file=sys.stderr, flush=True)
            self.lost[conv.id] = message  # the window stays open once and shows it; main() exits 1 if it closes
            return exc
        self.lost.pop(conv_id, None)
        self.lost.pop(conv.id, None)
        if recovered is not None:
            message = (f"“{conv.title}” could not be saved ({w.store.recovery_reason}); it was kept in "
                       f"{recovered} and the next start adds it back")
            print(f"specdec-chat: {message}", file=sys.stderr, flush=True)
        elif conv.id != conv_id:  # another instance changed or deleted it: kept as a copy (the store's notice)
            print(f"specdec-chat: {w.store.notices[-1]}", file=sys.stderr, flush=True)
        return None

    def _background_save_done(self, future, conv: Conversation) -> None:
        """Called on the store's writer thread: only emit (Qt queues the signal to the GUI thread)."""
        error = future.exception()
        if error is not None:
            try:
                if isinstance(error, SaveConflict):
                    self._relay.conflict.emit(conv, error)
                else:
                    self.window.save_failed.emit(str(error))
            except RuntimeError:  # the window is already deleted
                pass

    def _keep_both(self, conv: Conversation, conflict: SaveConflict) -> None:
        """Another app instance changed or deleted this conversation since this window read it: this window's
        version becomes a conversation of its own (the other's stays as it is), and the user is told."""
        w = self.window
        if conv.id != conflict.conv_id:  # already kept (two queued saves of it both conflicted)
            return
        w.show_info(w.store.keep_both(conv, conflict))
        if conv is w.conv:
            self.save()
            return
        try:  # the user opened another one meanwhile: the copy is saved all the same
            w.store.save_in_background(conv).add_done_callback(lambda f: self._background_save_done(f, conv))
        except OSError as exc:
            w.show_error(f"Could not save “{conv.title}”: {exc}")
        self.refresh_sidebar()


def _last_trace(conv: Conversation) -> ReplyTrace | None:
    return next((m.trace for m in reversed(conv.messages) if m.trace is not None), None)

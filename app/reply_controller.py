"""The chat's reply, from Send to the saved message: the user's turn added, the reply run where the replies decode
(a run, app/run_controller.py, of app.session.reply_events), its events shown as they arrive, and its end saved.

A message sent before the models are loaded (or while the model settings are changed and not loaded yet) waits
for the load and goes as soon as it has landed; sent from the composer it stays there, locked, meanwhile. A
regenerated reply sets the one it replaces aside (app/branches.py): ‹ › on the new one flips back to it, and a
regenerate that cannot start shows it again.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject, QTimer

from app import branches
from app import session as session_mod
from app.conversation import Message
from app.run_controller import SOLE, RunController, RunWindow
from app.session import Busy, PromptInfo, reply_events
from app.trace import ReplyTrace
from app.worker import error_text
from specdec_core.errors import SpecdecError
from specdec_core.events import Finished, StopReason

if TYPE_CHECKING:
    from PySide6.QtCore import SignalInstance
    from PySide6.QtWidgets import QPushButton

    from app.adapt_controller import AdaptController
    from app.baseline_controller import BaselineController
    from app.bubbles import MessageBubble
    from app.chat_view import ChatView, Composer
    from app.conversations import ConversationController
    from app.graphs.graphs_panel import GraphsPanel
    from app.loading import LoadController
    from app.settings_panel import SettingsPanel

PREPARE_AFTER_MS = 300  # a reply ended: the next message's bubbles are built this much later (ChatView.prepare)
ENDED = ("eos", "max_tokens", "stop_string")  # a reply that ran its course (a baseline can be taken from it)


class ReplyWindow(RunWindow, Protocol):
    """What the reply uses of the window besides a run's port."""

    composer: Composer  # the message being written (locked while it waits for a load)
    spec_button: QPushButton  # speculation on or off for the next reply
    settings_panel: SettingsPanel  # `dirty`: model settings changed since the load
    chat: ChatView
    graphs: GraphsPanel
    loader: LoadController
    baseline: BaselineController  # which baseline the reply is shown against; a plain reply joins them
    conversations: ConversationController
    adaptation: AdaptController  # which draft head drafts the reply
    generation_event: SignalInstance  # every event of the streaming reply, after it is folded in
    reply_finished: SignalInstance  # the reply's ReplyTrace, flushed into the view and graphs

    def flush(self, final: bool = True) -> None: ...
    def stop_flushing(self) -> None: ...


class ReplyController(QObject):
    """The chat's replies, one at a time, and the message that waits for a load."""

    def __init__(self, window: ReplyWindow) -> None:
        super().__init__()
        self.window = window
        self.run = RunController(window, self, "reply", Busy.REPLY)
        self.message: Message | None = None  # the streaming (or last) reply's message
        self.last_prompt_tokens = 0  # the last reply's prompt length: which baseline fits the next one
        self._pending_prompt: str | None = None  # sent once the models are loaded
        self._queued_in_composer = False
        self._regens = 0
        self._earlier_versions: list = []  # a regenerated reply's earlier versions, until the new one starts

    @property
    def trace(self) -> ReplyTrace | None:
        """The streaming (or last) reply's trace; None after `forget`."""
        return self.run.traces.get(SOLE)

    # -- sending ---------------------------------------------------------------------------------------
    def send_from_composer(self) -> None:
        w = self.window
        text = w.composer.toPlainText().strip()
        if not text or w.busy in (Busy.REPLY, Busy.RACE):
            return
        if w.busy == Busy.RANK:
            w.say("A draft ranking is running (Generation ▸ Rank drafts): send when it ends.")
            return
        if w.busy == Busy.LOAD or w.session is None or w.settings_panel.dirty:
            # Queued until the models are loaded: the text stays in the composer (locked) meanwhile, so it
            # is visibly waiting, and is still there to edit if loading fails or is cancelled.
            w.composer.setReadOnly(True)
            self._queued_in_composer = True
            self.send(text)
            w.say("Queued: your message is sent as soon as the models are loaded…")
            return
        w.composer.clear()
        self.send(text)

    def send(self, text: str) -> None:
        """Add a user message and start the reply (queued until the models are loaded)."""
        w = self.window
        if w.busy in (Busy.LOAD, Busy.MEASURE) or (w.session is None and w.loader.worker is not None):
            self._pending_prompt = text
            w.baseline.cancel()  # a measurement after the load gives way, and runs after the reply
            w.say("The message will be sent once the models are loaded…" if w.busy == Busy.LOAD else "Sending…")
            return
        if w.session is None or w.settings_panel.dirty:
            # Model settings changed since the load: the reply uses the pair they name, loaded first.
            self._pending_prompt = text
            w.loader.load()
            return
        w.conversations.undo = None  # the edited message is sent: the removed turns are gone for good
        w.conv.messages.append(Message("user", text))
        w.conv.auto_title()
        w.conversations.save()  # the chat shows in the sidebar from its first message, not its first reply
        w.chat.add_user(text, len(w.conv.messages) - 1)
        w.chat.scroll_to_end()
        self.start()

    def drop_pending_prompt(self) -> None:
        self._pending_prompt = None  # loading failed: a message waiting for it is not sent

    def send_pending_prompt(self) -> None:
        """Loading ended: send the message that waited for it, if the models are there."""
        w = self.window
        queued, self._queued_in_composer = self._queued_in_composer, False
        w.composer.setReadOnly(False)
        if self._pending_prompt is not None and w.session is not None:
            text, self._pending_prompt = self._pending_prompt, None
            if queued:
                w.composer.clear()
            self.send(text)
        else:
            self._pending_prompt = None  # loading failed or was cancelled: the text is still in the composer
        w.baseline.start_if_due()

    def regenerate(self, bubble: MessageBubble | None) -> None:
        """A new version of `bubble`'s reply (None: the last one); the one it replaces is set aside."""
        w = self.window
        if w.busy or w.session is None:
            return
        msgs = w.conv.messages
        if bubble is None:
            idx = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].role == "assistant"), None)
        else:
            idx = bubble.index
        if idx is None or idx >= len(msgs) or msgs[idx].role != "assistant":
            return
        self._earlier_versions = branches.set_aside(msgs, idx)  # flip back to them with ‹ › on the new reply
        self._regens += 1
        w.conversations.render()
        w.conversations.show_graphs_of_last_reply()
        if float(w.settings.temperature) == 0:
            w.show_info("Temperature is 0 (greedy): the verifier always picks its most likely token, so "
                        "regenerating writes the same reply. Raise the temperature (Settings) for a "
                        "different one.")
        self.start()

    # -- the run -------------------------------------------------------------------------------------------
    def start(self) -> None:
        """The reply to the conversation as it stands, as a run: a streaming bubble, the live graphs on it."""
        w = self.window
        assert w.session is not None
        try:
            config = session_mod.config_from_settings(w.settings)
        except SpecdecError as exc:
            w.show_error(f"Check the generation settings: {exc}")
            self._restore_earlier_versions()
            return
        if self._regens and config.temperature > 0:
            config = config.with_(seed=config.seed + self._regens)  # a regenerated sample differs
        from specdec_core.engine import Controls

        s = w.session
        # Where it decodes (forking the host on the first reply of a session) before the baseline is picked: a
        # reply decoded apart from the window compares with runs the window did not slow either.
        runner = w.job_runner()
        messages = w.conv.chat_messages()
        trace = ReplyTrace(verifier=s.verifier_name, drafter=s.drafter_name, config=asdict(config),
                           baseline_tps=s.baseline_tps, baseline_source=s.baseline_source, seed=config.seed,
                           adapted_tokens=w.adaptation.head_tokens)  # which head drafts it (the chat's plot)
        w.baseline.pick_for(trace, self.last_prompt_tokens)  # refined when the prompt is built
        message = Message("assistant", "", trace)
        branches.attach(message, self._earlier_versions)
        self._earlier_versions = []
        w.conv.messages.append(message)
        self.message = message
        bubble = w.chat.add_assistant(trace, len(w.conv.messages) - 1, streaming=True)
        bubble.set_branch(*branches.position(message))
        w.graphs.live.set_trace(trace)
        w.graphs.tabs.setCurrentIndex(0)
        controls = Controls(speculate=w.spec_button.isChecked())
        system = w.conv.system  # the chat's own (Settings ▸ System shows the open chat's)
        self.run.start(reply_events, (messages, system, config), {SOLE: trace}, "Generating…", runner=runner,
                       controls=controls)

    def _restore_earlier_versions(self) -> None:
        """A regenerate that could not start: the reply it set aside is shown again."""
        versions, self._earlier_versions = self._earlier_versions, []
        if branches.restore(self.window.conv.messages, versions):
            self.window.conversations.render()

    def speculate(self, on: bool) -> None:
        """Speculation on or off for the streaming reply from its next round (a race's lanes keep their own)."""
        if self.run.controls is not None and self.window.busy == Busy.REPLY:
            self.run.controls.speculate = on  # the engine reads it at the start of the next round

    def forget(self) -> None:
        """A new chat: the stopping reply's last events no longer reach the view."""
        self.run.detach()

    def keep_at_close(self) -> None:
        """The window closes mid-reply: the reply so far is its message's text, saved as stopped."""
        trace, message = self.trace, self.message
        if self.window.busy == Busy.REPLY and trace is not None and message is not None:
            if trace.stop_reason is None:
                trace.stop_reason = StopReason.CANCELLED.value
            message.content = message.content or trace.text

    # -- the run's report (ports.RunReport) ------------------------------------------------------------
    def run_prompt(self, info: PromptInfo) -> None:
        w, trace = self.window, self.trace
        assert trace is not None  # a detached run reports no events
        trace.dropped_turns = info.dropped_turns
        self.last_prompt_tokens = info.prompt_tokens
        w.baseline.pick_for(trace, info.prompt_tokens)
        if info.dropped_turns:
            w.show_info(f"This conversation is longer than the verifier's context: the {info.dropped_turns} oldest "
                        f"message{'s are' if info.dropped_turns > 1 else ' is'} left out of what the models see (the "
                        "system prompt is kept). The saved history keeps everything.")

    def run_event(self, lane: str, event: object) -> None:
        w = self.window
        if isinstance(event, Finished) and self.message is not None:
            self.message.content = event.text
        if w.closing:
            return  # the window is closed (its widgets may be deleted): keep the data, touch no widget
        w.generation_event.emit(event)
        if isinstance(event, Finished) and (event.stop_reason is StopReason.ERROR or event.error):
            w.show_error(f"Generation failed: {event.error or 'unknown error'}")

    def run_failed(self, error: BaseException) -> None:
        """The engine refused the input (prompt too long, bad settings, incompatible pair) or crashed."""
        trace = self.trace
        if trace is not None:
            trace.error = error_text(error)
            trace.stop_reason = StopReason.ERROR.value
        self.window.show_error(error_text(error))

    def run_ended(self) -> None:
        w, trace, message = self.window, self.trace, self.message
        if trace is not None and trace.stop_reason is None:
            trace.stop_reason = StopReason.CANCELLED.value  # the worker stopped before Finished arrived
        if message is not None and trace is not None and not message.content:
            message.content = trace.text
        if w.closing:
            # The reply ended after the window closed (closeEvent waits only 1 s): save what it
            # wrote, and touch no widget, since they may be deleted by now.
            w.conversations.store_quietly()
            return
        # A reply that produced nothing (error before the first token) leaves no empty bubble behind.
        if message is not None and trace is not None and not trace.tokens and trace.error:
            if w.conv.messages and w.conv.messages[-1] is message:
                branches.drop_failed(w.conv.messages, message)  # a regenerated one: the earlier version again
                w.conversations.render()
        w.flush()  # final flush of text and graphs
        w.busy = Busy.IDLE
        self._regens = 0
        if trace is not None:
            w.baseline.to_reply_pace(trace)
        self._keep_as_baseline(trace)
        w.conversations.save()
        w.update_controls()
        w.say(trace.summary() if trace is not None and trace.rounds else "Ready")
        w.stop_flushing()
        if trace is not None and not w.closing:
            w.reply_finished.emit(trace)
            # The next message's bubbles, built once the window has settled (not in this turn, which redraws
            # the reply).
            QTimer.singleShot(PREPARE_AFTER_MS, w.chat, w.chat.prepare)
        w.baseline.after_reply(trace)

    def _keep_as_baseline(self, trace: ReplyTrace | None) -> None:
        # A reply with speculation off is one more verifier-alone measurement: it joins the others
        # (a median of comparable runs is the baseline) instead of replacing them.
        if trace is not None and trace.all_plain and trace.stop_reason in ENDED and (trace.get_stats() or None) \
                and trace.get_stats().new_tokens >= 8 and self.window.session:
            self.window.baseline.add(trace, "speculation-off reply")

"""The draft head learns from the user's chats (specdec_core/drafting/adapt.py) while the app is idle.

After each finished reply, a worker thread teaches a copy of the draft head the verifier's reply (a few
seconds at most), and the adapted weights are swapped into the live head once no reply or race is
running, so the next reply drafts with them. The verifier's output never changes; only how much of
the draft it accepts. Only a draft head adapts: for a draft model or prompt lookup the switch says so.

The adapted head persists in the user data folder (`adapted-draft/<head>/`, a head folder that also
loads as a draft spec), and so does the switch (`adapted-draft/settings.json`). It hooks into the
window through public names only: the `models_loaded`, `reply_finished` and `busy_changed` signals,
the Generation menu and the status bar.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QFileDialog, QLabel, QMenu

from app.session import Busy
from app.worker import FunctionWorker, error_text
from specdec_core.loading.kept_files import kept_json, set_aside

FOLDER = "adapted-draft"
DEFAULT_ON = False  # see `_read_switch`


class AdaptController(QObject):
    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window
        self.root = Path(window.store.root) / FOLDER
        # The HeadDrafter whose head can adapt (None: the drafter cannot), and its HeadAdapter, made only once
        # adaptation is on or asked for (it copies the head and the verifier's output rows in float32).
        self.drafter = None
        self.adapter = None
        self._verifier = None
        self.worker: FunctionWorker | None = None
        self.swap_due = False  # adapted weights wait for the window to be idle
        # Reply tokens the live head's weights learnt from (0: as loaded): what the next reply drafts with. The
        # window records it with each reply (ReplyTrace.adapted_tokens) for the chat's acceptance plot.
        self.head_tokens = 0
        self.enabled = self._read_switch()
        self.label = QLabel("")
        self.label.setToolTip("Whether the draft got better over this chat: the graphs' last plot, Acceptance "
                              "over this chat (a diamond: a reply drafted by the adapted draft)")
        window.statusBar().addPermanentWidget(self.label)
        self._add_menu_actions()
        window.models_loaded.connect(self.attach)
        window.reply_finished.connect(self.learn)
        window.busy_changed.connect(lambda busy: self._swap_when_idle())
        self.show_state()

    # ------------------------------------------------------------------------------------ setup --
    def _read_switch(self) -> bool:
        # Off by default: it never changes a reply, but on the embedded pair it has not yet been measured to
        # raise acceptance (docs/performance.md, online adaptation: 0.95x-1.00x over a 20-turn conversation),
        # and on a 2-core CPU its seconds of training after each reply compete with everything else. On is
        # one click in the Generation menu and is remembered.
        enabled = kept_json(self.root / "settings.json", _switch_in, "the switch is back to its default")
        return DEFAULT_ON if enabled is None else enabled

    def _add_menu_actions(self) -> None:
        menu = next(a.menu() for a in self.window.menuBar().actions() if a.text() == "&Generation")
        assert isinstance(menu, QMenu)
        menu.addSeparator()
        self.switch = menu.addAction("Adapt the draft to my chats")
        self.switch.setCheckable(True)
        self.switch.setChecked(self.enabled)
        self.switch.toggled.connect(self.set_enabled)
        self.reset_action = menu.addAction("Reset the adapted draft", self.reset)
        self.export_action = menu.addAction("Export the adapted draft…", self.export)

    def attach(self, session) -> None:
        """A new session: adapt its head (restoring what it learnt before), or say the drafter cannot."""
        from specdec_core.drafting.adapt import is_adaptable
        from specdec_core.drafting.drafters import model_drafter_of

        drafter = model_drafter_of(session.engine.drafter)
        head = getattr(drafter, "model", None)
        if self.drafter is not None and self.drafter is drafter:
            return  # the same head (a reload that kept it): what it learnt stays
        self.adapter = self.drafter = None
        self.head_tokens = 0
        if is_adaptable(head):
            self.drafter, self._verifier = drafter, session.verifier.model
            if self.enabled:
                self._ensure_adapter()
        self.show_state()

    def _ensure_adapter(self):
        """The loaded head's adapter, made on first need; with adaptation on it resumes what was saved."""
        from specdec_core.drafting.adapt import HeadAdapter

        if self.adapter is None and self.drafter is not None:
            self.adapter = HeadAdapter(self.drafter.model, self._verifier)
            if self.enabled and self._folder().exists():
                try:
                    self.adapter.load(self._folder())
                    self.adapter.swap_into(self.drafter)
                    self.head_tokens = self.adapter.tokens
                except (OSError, ValueError) as error:  # kept_files.DamagedFile among them
                    self.window.show_info(set_aside(self._folder(), str(error), "the draft adapts afresh from the "
                                                    "shipped one").removeprefix("specdec: "))
        return self.adapter

    def _folder(self) -> Path:
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", self.drafter.name if self.drafter else "head")
        return self.root / name

    # ------------------------------------------------------------------------------- learning --
    def learn(self, trace) -> None:
        """After a finished reply: adapt on it in the background."""
        session = self.window.session
        reply = [t.token_id for t in trace.tokens if t.in_reply]
        if not (self.enabled and self.drafter is not None and session is not None and len(reply) >= 2
                and trace.stop_reason in ("eos", "max_tokens", "stop_string")) or self.worker is not None:
            return
        self._ensure_adapter()
        messages = self.window.conv.chat_messages()[:-1]  # the conversation the reply answered
        system, max_new = self.window.conv.system or None, int(trace.config.get("max_new_tokens", 256))
        adapter, verifier = self.adapter, session.verifier

        def work(progress, cancelled):
            from specdec_core.text.chat import build_prompt

            ids = build_prompt(verifier.tokenizer, messages, system=system, context_length=verifier.context_length,
                               reserve_new_tokens=max_new).ids
            adapter.observe(ids, reply)
            return adapter.adapt(stop=cancelled)

        self.worker = FunctionWorker(work, name="adapt")
        self.worker.returned.connect(self._adapted)
        self.worker.errored.connect(lambda error: self.window.show_info(
            f"The draft could not adapt to this reply: {error_text(error)}"))
        self.worker.finished.connect(self._worker_done)
        self.show_state()
        self.worker.start()

    def _adapted(self, report) -> None:
        self.swap_due = report.steps > 0
        self._swap_when_idle()

    def _worker_done(self) -> None:
        self.worker = None
        self.show_state()

    def _swap_when_idle(self) -> None:
        """Swap the adapted weights in (and save them) only while no reply or race runs."""
        if self.window.busy is not Busy.IDLE:
            if self.worker is not None:
                self.worker.abort()  # a reply or race started: training stops at its next step
            return
        if self.swap_due and self.adapter is not None:
            self.swap_due = False
            if not self.enabled:  # switched off: the head as loaded drafts; what was learnt waits on disk
                self.adapter.swap_original_into(self.drafter)
                self.head_tokens = 0
                self.show_state()
                return
            self.adapter.swap_into(self.drafter)
            self.head_tokens = self.adapter.tokens
            if self.adapter.tokens:
                try:
                    self.adapter.save(self._folder(), tokenizer=self.drafter.draft.tokenizer)
                except OSError as error:
                    self.window.show_info(f"The adapted draft could not be saved in {self._folder()}: {error}")
            self.show_state()

    # ------------------------------------------------------------------------------- controls --
    def set_enabled(self, on: bool) -> None:
        self.enabled = bool(on)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / "settings.json").write_text(json.dumps({"enabled": self.enabled}) + "\n")
        except OSError as error:
            self.window.show_info(f"The adaptation switch could not be saved in {self.root}: {error}")
        if self.adapter is not None:  # the other weights draft from the next reply on (see _swap_when_idle)
            self.swap_due = True
        if self.enabled:
            self._ensure_adapter()
        self._swap_when_idle()
        self.show_state()

    def reset(self) -> None:
        """Back to the shipped head, here and on disk."""
        if self.worker is not None:
            self.worker.abort()
            QTimer.singleShot(100, self.reset)
            return
        shutil.rmtree(self._folder(), ignore_errors=True)
        if self.adapter is not None:
            self.adapter.reset()
            self.swap_due = True
            self._swap_when_idle()
        self.show_state()

    def export(self) -> None:
        if self._ensure_adapter() is None:
            return
        folder = QFileDialog.getExistingDirectory(self.window, "Export the adapted draft into a folder")
        if folder:
            try:
                self.adapter.save(Path(folder), tokenizer=self.drafter.draft.tokenizer)
                self.window.show_info(f"Saved the adapted draft in {folder}: load it as a draft spec")
            except OSError as error:
                self.window.show_info(f"The adapted draft could not be exported to {folder}: {error}")

    def show_state(self) -> None:
        """The status bar's words (a few, beside the window's messages; the sentence is their tooltip) and
        which actions apply."""
        available = self.drafter is not None
        for action in (self.reset_action, self.export_action):
            action.setEnabled(available)
        menu = "Generation ▸ Adapt the draft to my chats"
        tokens = self.adapter.tokens if self.adapter is not None else 0
        if self.window.session is not None and not available:
            text, tip = "draft does not adapt", ("Draft adaptation: only a draft head adapts to your chats, and "
                                                 "this drafter has none.")
        elif not available:
            text, tip = "", ""
        elif self.worker is not None:
            text, tip = "adapting the draft…", ("The draft head is learning the last reply; the verifier's text "
                                                "never changes.")
        elif not self.enabled:  # the head as loaded drafts; what was learnt is kept for when it is on again
            text, tip = "adaptation off", (f"Adaptation is off: the draft as loaded drafts; what it learnt from "
                                            f"{tokens:,} tokens is kept and drafts again when {menu} is on." if tokens
                                            else f"The draft is not adapted to your chats: {menu} turns it on.")
        else:
            text = f"draft adapted on {tokens:,} tokens" if tokens else "draft not adapted yet"
            tip = (f"{text[0].upper()}{text[1:]}: after each reply the draft head learns it while the app is idle; "
                   f"the verifier's text never changes ({menu}).")
        self.label.setText(text)
        self.label.setToolTip(tip)


def _switch_in(content: object) -> bool:
    """The adaptation switch in adapted-draft/settings.json's content (kept_files: anything else is damage)."""
    enabled = content["enabled"]  # type: ignore[index]
    if not isinstance(enabled, bool):
        raise TypeError(f"its switch is {str(enabled)[:40]}, not true or false")
    return enabled

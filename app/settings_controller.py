"""What the window's switches and its settings panel change: speculation (Ctrl+D, from the streaming reply's next
round), the token colours, the reading view and code colours of the chat, the open chat's system prompt, and the
model settings (loaded with the next message, or at Load models). Each change is saved at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QObject

from app.ports import WindowPort

if TYPE_CHECKING:
    from app.chat_view import ChatView
    from app.conversations import ConversationController
    from app.reply_controller import ReplyController
    from app.settings_panel import SettingsPanel


class SettingsWindow(WindowPort, Protocol):
    """What the settings' changes use of the window besides the shared port."""

    chat: ChatView
    settings_panel: SettingsPanel
    replies: ReplyController  # the streaming reply takes a speculation switch from its next round
    conversations: ConversationController  # saves the chat whose system prompt changed

    def update_controls(self) -> None: ...
    def save_settings(self) -> None: ...


class SettingsController(QObject):
    def __init__(self, window: SettingsWindow) -> None:
        super().__init__()
        self.window = window

    def set_speculation(self, on: bool) -> None:
        w = self.window
        w.settings.speculate = on
        w.replies.speculate(on)  # from the streaming reply's next round (a race's lanes keep their own)
        w.update_controls()
        w.save_settings()

    def set_colored(self, on: bool) -> None:
        self.window.settings.colored = on
        self.window.chat.set_colored(on)
        self.window.save_settings()

    def set_code_colored(self, on: bool) -> None:
        self.window.settings.code_colored = on
        self.window.chat.set_code_colored(on)
        self.window.save_settings()

    def set_reading(self, on: bool) -> None:
        self.window.settings.reading = on
        self.window.chat.set_reading(on)
        self.window.save_settings()

    def system_edited(self) -> None:
        """The settings' System box edits the open chat's system prompt, saved with the chat."""
        w = self.window
        w.conv.system = w.settings_panel.system.toPlainText()
        if w.conv.messages and not w.conv.read_only:
            w.conversations.store_quietly()

    def models_changed(self) -> None:
        w = self.window
        w.settings_panel.set_dirty(True)
        if not w.busy:
            w.say("Model settings changed: they are loaded when you send your next message (or now: Load models)")
        w.save_settings()

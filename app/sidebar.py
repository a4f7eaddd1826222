"""The conversations sidebar: the saved chats, newest first, and the open one even before it is saved.

It reads the store's public API (`list`, `load`, `save`, `delete`) and tells the window what the user
asked for through signals; the window decides (it may be busy replying).
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QInputDialog,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.conversation import Conversation
from app.store import ConversationStore, SaveConflict


class ConversationSidebar(QWidget):
    new_requested = Signal()
    open_requested = Signal(str)  # conversation id
    deleted = Signal(str)  # conversation id, already removed from the store
    renamed = Signal(str)
    failed = Signal(str)  # a sentence for the user

    def __init__(self, store: ConversationStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self.current: Conversation | None = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        new = QPushButton("New chat")
        new.setToolTip("Start a new conversation (Ctrl+N)")
        new.clicked.connect(self.new_requested)
        lay.addWidget(new)
        self.list = QListWidget()
        self.list.setObjectName("conversations")
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.itemClicked.connect(self.open_item)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        lay.addWidget(self.list, 1)

    def refresh(self, current: Conversation) -> None:
        """List the saved chats; `current` is selected, and listed on top while it is not saved yet."""
        self.current = current
        self.list.blockSignals(True)
        self.list.clear()
        infos = self.store.list()
        if not any(info.id == current.id for info in infos):
            item = self._add(current.title if current.messages else "New chat", current.id,
                             "Not saved yet: it is saved with its first message")
            font = item.font()
            font.setItalic(True)
            item.setFont(font)
            item.setSelected(True)
        for info in infos:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.updated))
            item = self._add(info.title, info.id, f"{info.messages} messages · {when}")
            if info.id == current.id:
                item.setSelected(True)
        self.list.blockSignals(False)

    def _add(self, title: str, conv_id: str, tip: str) -> QListWidgetItem:
        # The list creates the item itself (the text overload of addItem), so the list alone owns it.
        self.list.addItem(title)
        item = self.list.item(self.list.count() - 1)
        item.setData(Qt.ItemDataRole.UserRole, conv_id)
        item.setToolTip(tip)
        return item

    def open_item(self, item: QListWidgetItem) -> None:
        conv_id = item.data(Qt.ItemDataRole.UserRole)
        if self.current is None or conv_id != self.current.id:
            self.open_requested.emit(conv_id)

    def _menu(self, pos) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        conv_id = item.data(Qt.ItemDataRole.UserRole)
        menu = QMenu(self)
        rename = menu.addAction("Rename…")
        delete = menu.addAction("Delete")
        chosen = menu.exec(self.list.mapToGlobal(pos))
        current = self.current
        if chosen is rename:
            title, ok = QInputDialog.getText(self, "Rename", "Title", text=item.text())
            if ok and title.strip():
                try:
                    conv = current if current is not None and conv_id == current.id else self.store.load(conv_id)
                    conv.title = title.strip()
                    if conv.messages:
                        self.store.save(conv)
                except (OSError, ValueError, KeyError, SaveConflict) as exc:  # a conflict: another instance wrote it
                    self.failed.emit(f"Could not rename that conversation: {exc}")
                self.renamed.emit(conv_id)
        elif chosen is delete:
            if QMessageBox.question(self, "Delete", f"Delete “{item.text()}”?") == QMessageBox.StandardButton.Yes:
                self.store.delete(conv_id)
                self.deleted.emit(conv_id)

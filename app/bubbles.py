"""One message of the chat (`MessageBubble`: header, actions, the token view, the footer's figures) and the
notices the chat shows between messages (`Notice`)."""
from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.fit import ElidedLabel
from app.token_view import TokenTextView
from app.trace import ReplyTrace


class MessageBubble(QFrame):
    copy_requested = Signal(object)  # self
    edit_requested = Signal(object)
    regenerate_requested = Signal(object)
    graphs_requested = Signal(object)
    branch_requested = Signal(object, int)  # self, -1 (the previous version) or +1 (the next)

    def __init__(self, role: str, index: int, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.role = role
        self.index = index  # the message's index in the conversation
        self.setObjectName(f"bubble_{role}")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 8, 12, 6)
        lay.setSpacing(2)
        lay.addLayout(self._build_head(role))
        self.body = TokenTextView(self)
        lay.addWidget(self.body)
        lay.addLayout(self._build_foot())
        self.set_branch(1, 1)

    def _build_head(self, role: str) -> QHBoxLayout:
        """Who wrote it, the models that did, and the actions (the ‹ › of a regenerated reply go in the foot)."""
        head = QHBoxLayout()
        head.setSpacing(6)
        self.header = QLabel("You" if role == "user" else "Assistant")
        self.header.setObjectName("bubble_header")
        head.addWidget(self.header)
        # One line: a long pair name ends in "…" (the whole name is its tooltip) and never widens the bubble; wrapped,
        # it stood four lines tall beside the buttons in a 1024-px window.
        self.meta = ElidedLabel("")
        self.meta.setObjectName("muted")
        head.addWidget(self.meta, 1)
        self.actions: dict[str, QToolButton] = {}
        self.branch_label = QLabel("")
        self.branch_label.setObjectName("muted")
        self.branch_label.setToolTip("Regenerated: every version of this reply is kept")
        self.branch_buttons: list[QToolButton] = []
        for text, step, tip in (("‹", -1, "Show the earlier version of this reply"),
                                ("›", 1, "Show the later version of this reply")):
            b = QToolButton()
            b.setText(text)
            b.setObjectName("bubble_action")
            b.setToolTip(tip)
            b.clicked.connect(lambda _checked=False, step=step: self.branch_requested.emit(self, step))
            self.branch_buttons.append(b)
        names = ("Copy", "Edit") if role == "user" else ("Graphs", "Copy", "Regenerate")
        for name in names:
            b = QToolButton()
            b.setText(name)
            b.setObjectName("bubble_action")
            b.setCursor(Qt.CursorShape.PointingHandCursor)
            head.addWidget(b)
            self.actions[name] = b
        self.actions["Copy"].clicked.connect(lambda: self.copy_requested.emit(self))
        if "Edit" in self.actions:
            self.actions["Edit"].setToolTip("Edit this message and send it again (later messages are removed)")
            self.actions["Edit"].clicked.connect(lambda: self.edit_requested.emit(self))
        if "Regenerate" in self.actions:
            self.actions["Regenerate"].setToolTip("Generate this reply again")
            self.actions["Regenerate"].clicked.connect(lambda: self.regenerate_requested.emit(self))
        if "Graphs" in self.actions:
            self.actions["Graphs"].setToolTip("Show this reply's speculation graphs")
            self.actions["Graphs"].clicked.connect(lambda: self.graphs_requested.emit(self))
        return head

    def _build_foot(self) -> QHBoxLayout:
        self.footer = QLabel("")
        self.footer.setObjectName("bubble_footer")
        self.footer.setWordWrap(True)
        self.footer.setVisible(False)
        # Under the reply, not in the header: the header's buttons already set the bubble's narrowest width.
        foot = QHBoxLayout()
        foot.setSpacing(4)
        for widget in (self.branch_buttons[0], self.branch_label, self.branch_buttons[1]):
            foot.addWidget(widget, 0, Qt.AlignmentFlag.AlignTop)
        foot.addWidget(self.footer, 1)
        return foot

    @property
    def trace(self) -> ReplyTrace | None:
        return self.body.trace

    def text(self) -> str:
        return self.trace.text if self.trace is not None else self.body.toPlainText()

    def set_streaming(self, streaming: bool) -> None:
        for name in ("Regenerate", "Edit"):
            if name in self.actions:
                self.actions[name].setEnabled(not streaming)
        self._streaming = streaming
        self.set_branch(*self.branch)

    def set_branch(self, which: int, count: int) -> None:
        """Which version of a regenerated reply this is (from 1) of how many; ‹ › flip between them."""
        self.branch = (which, count)
        streaming = getattr(self, "_streaming", False)
        for b in (*self.branch_buttons, self.branch_label):
            b.setVisible(count > 1)
        self.branch_label.setText(f"{which}/{count}")
        self.branch_buttons[0].setEnabled(which > 1 and not streaming)
        self.branch_buttons[1].setEnabled(which < count and not streaming)

    def update_footer(self) -> None:
        trace = self.trace
        if trace is None:
            return
        parts = []
        if trace.tokens or trace.finished:
            parts.append(trace.summary())
        if trace.dropped_turns:
            parts.append(f"{trace.dropped_turns} oldest turn{'s' if trace.dropped_turns > 1 else ''} "
                         "left out to fit the context")
        if trace.error:
            parts.append(f"error: {trace.error}")
        self.footer.setText(" · ".join(parts))
        self.footer.setVisible(bool(parts))
        if trace.baseline_tps and trace.baseline_source:
            self.footer.setToolTip(f"Speedup against the verifier alone on this machine "
                                   f"({trace.baseline_tps:.1f} tok/s): {trace.baseline_source}")
        if trace.finished:
            self.meta.setText(_models_line(trace))
        else:
            self.meta.setText("generating…" if not trace.tokens else f"generating… {_models_line(trace)}")


def _models_line(trace: ReplyTrace) -> str:
    if not trace.verifier:
        return ""
    if trace.drafter and trace.speculative:
        return f"{trace.verifier} ← {trace.drafter}"
    return trace.verifier


class Notice(QFrame):
    def __init__(self, text: str, kind: str = "info", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.kind = kind
        self.setObjectName(f"notice_{kind}")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 6, 10, 6)
        self._lay = lay
        self.label = QLabel(text)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.label, 1)
        self.buttons: dict[str, QToolButton] = {}
        close = QToolButton()
        close.setText("✕")
        close.setObjectName("bubble_action")
        close.setToolTip("Dismiss")
        close.clicked.connect(self.deleteLater)
        lay.addWidget(close, 0, Qt.AlignmentFlag.AlignTop)

    def add_button(self, text: str, slot) -> QToolButton:
        """An action next to the text (e.g. Undo); using it dismisses the notice."""
        b = QToolButton()
        b.setText(text)
        b.setObjectName("bubble_action")
        b.clicked.connect(slot)
        b.clicked.connect(self.deleteLater)
        self._lay.insertWidget(1, b, 0, Qt.AlignmentFlag.AlignTop)
        self.buttons[text] = b
        return b

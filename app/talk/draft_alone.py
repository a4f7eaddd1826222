"""What the draft would have written by itself, next to the verified reply: why verification is needed.

The draft model alone is `Engine(draft)` with speculation off: exactly its own greedy (or sampled)
reply under the same settings. Prompt lookup alone copies earlier text while it finds a match, then
stops: it has nothing to say of its own.
"""

from __future__ import annotations

import html
import os

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSplitter, QVBoxLayout, QWidget

from app.runs import Lane, RunContext, engine_lane
from app.talk import style as ts
from app.talk.context import head_alone, prompt_lookup_alone
from app.talk.lanes_ui import FLUSH_MS, LanePane, LaneRun
from app.theme import ACCENT
from app.token_view import TokenTextView

DRAFT_COLOR = ts.DRAFT


def draft_lane(ctx: RunContext) -> Lane:
    from specdec_core.drafting.drafters import is_draft_head

    s = ctx.session
    if s.draft is not None and is_draft_head(s.draft):
        name = getattr(s.draft, "name", "") or "draft head"
        return Lane("draft", f"the draft head alone ({name}, after the verifier read the prompt)",
                    lambda ids, config, controls: head_alone(s.verifier, s.draft, ids, config, controls))
    if s.draft is not None:
        return engine_lane("draft", f"the draft model alone ({s.drafter_name})", s.draft, None, False)
    tok, eos = s.verifier.tokenizer, s.verifier.eos_token_ids
    return Lane("draft", "prompt lookup alone",
                lambda ids, config, controls: prompt_lookup_alone(tok, ids, config, controls, eos))


def agreeing_prefix(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def mark_parting(view: TokenTextView, agreeing: int) -> None:
    """Tint the draft's tokens inside the first `agreeing` characters of its text green and the rest red, over the
    view's own rendering: its code keeps its monospace font and indentation (a rich-text copy of the text lost
    both)."""
    trace = view.trace
    if trace is None:
        return
    ends, at = {}, 0
    for i, tok in enumerate(trace.tokens):
        if tok.in_reply:
            at += len(tok.text)
            ends[i] = at
    agree, part = QTextCharFormat(), QTextCharFormat()
    agree.setBackground(QColor(ts.ACCEPTED.red(), ts.ACCEPTED.green(), ts.ACCEPTED.blue(), 90))
    part.setForeground(ts.REJECTED)
    cursor = QTextCursor(view.document())
    cursor.beginEditBlock()
    for index, start, end in view.token_spans():
        if end <= start or index not in ends:
            continue
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        cursor.mergeCharFormat(agree if ends[index] <= agreeing else part)
    cursor.endEditBlock()


class DraftAloneView(QWidget):
    finished = Signal(object)  # (draft text, verified text)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx: RunContext | None = None
        self.run: LaneRun | None = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 10, 12, 10)
        self.prompt = QLabel("")
        self.prompt.setWordWrap(True)
        ts.set_big(self.prompt, 1.0)
        lay.addWidget(self.prompt)
        self.summary = QLabel("")
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        ts.set_big(self.summary, 1.15)
        lay.addWidget(self.summary)
        split = QSplitter(Qt.Orientation.Horizontal)
        self.panes = {"draft": LanePane("The draft alone", DRAFT_COLOR),
                      "verified": LanePane("Verified reply (speculative decoding)", ACCENT)}
        for p in self.panes.values():
            split.addWidget(p)
        lay.addWidget(split, 1)
        row = QHBoxLayout()
        self.status = QLabel("")
        ts.set_big(self.status, 0.9)
        row.addWidget(self.status, 1)
        self.run_button = QPushButton("Run")
        self.run_button.clicked.connect(lambda: self.start(self.ctx) if self.ctx else None)
        ts.set_big(self.run_button, 0.95)
        row.addWidget(self.run_button)
        lay.addLayout(row)
        self.timer = QTimer(self)
        self.timer.setInterval(FLUSH_MS)
        self.timer.timeout.connect(self._tick)

    def start(self, ctx: RunContext) -> None:
        if self.run is not None and self.run.running:
            return
        self.ctx = ctx
        s = ctx.session
        self.prompt.setText(f"<b>Prompt:</b> {html.escape(ctx.prompt_text[:200])}")
        lanes = [draft_lane(ctx), engine_lane("verified", "verified", s.verifier, s.drafter, True)]
        self.panes["draft"].title.setText(
            f"<span style='color:{DRAFT_COLOR.name()}'>■</span> What {html.escape(lanes[0].title)} writes")
        self.panes["verified"].title.setText(
            f"<span style='color:{ACCENT.name()}'>■</span> What {html.escape(s.verifier_name)} outputs "
            "(verified)")
        self.run = LaneRun(lanes, self)
        for key, pane in self.panes.items():
            pane.bind(self.run.traces[key])
        self.summary.setText("")
        self.status.setText("The draft writes alone first, then the verified reply…")
        self.run.finished.connect(self._on_finished)
        self.run.errored.connect(lambda m: self.status.setText(f"Error: {m}"))
        self.run.start(ctx)
        self.run_button.setEnabled(False)
        self.timer.start()

    def _tick(self) -> None:
        for pane in self.panes.values():
            pane.flush()

    def _on_finished(self) -> None:
        self._tick()
        self.timer.stop()
        self.run_button.setEnabled(True)
        assert self.run is not None
        draft, verified = self.run.traces["draft"].text, self.run.traces["verified"].text
        n = agreeing_prefix(draft, verified)
        if draft == verified:
            words = ("The draft alone wrote <b>the same text</b> as the verified reply: a perfectly aligned "
                     "draft (acceptance near 100%).")
        else:
            words = (f"They agree for the first <b>{n}</b> characters, then the draft goes its own way. "
                     "Verification keeps every token the verifier would have chosen; the draft only saves time "
                     "where it guessed right.")
        self.summary.setText(words)
        mark_parting(self.panes["draft"].text, n)
        self.status.setText("Green: where the draft agrees with the verified reply; red: where it parts.")
        self.finished.emit((draft, verified))

"""Talk ▸ Run the demo: a scripted talk in eight steps (demo_script.STEPS), advanced with → or Space (← goes back).

Each step runs on its own fresh preset prompt, in a single-turn context, when first reached; going back shows it as
it ended. Its headline figure (tokens/s, speedup) is set at 54 pt, and one line of speaker notes sits below, or in a
second window (NotesWindow) on the speaker's screen. Every finished step is handed to `recorded` as a scene of the web
page (Talk ▸ Export as web page).
"""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QSizePolicy, QStackedWidget, QVBoxLayout, QWidget

from app.fit import wrap_labels
from app.runs import RunContext
from app.talk import style as ts
from app.talk.demo_script import STEPS, TALK_MAX_NEW_TOKENS, DemoStep
from app.talk.demo_steps import PAGES, DemoResults, StepPage

HEADLINE_POINTS = 54  # the headline tok/s and speedup: legible from the back of a room at 1280×800
NEXT_KEYS = ("Right", "Space", "PgDown")  # presentation clickers send Page Down / Page Up
BACK_KEYS = ("Left", "PgUp")


class NotesWindow(QWidget):
    """The speaker's notes in a window of their own: this step, its line of notes, and what comes next."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setWindowTitle("Speaker notes")
        lay = QVBoxLayout(self)
        self.step = QLabel("")
        ts.set_big(self.step, 1.3, bold=True)
        self.note = QLabel("")
        self.note.setWordWrap(True)
        ts.set_big(self.note, 1.2)
        self.next = QLabel("")
        ts.set_big(self.next, 0.95)
        for label in (self.step, self.note, self.next):
            lay.addWidget(label)
        lay.addStretch(1)
        self.resize(640, 260)

    def show_step(self, index: int) -> None:
        step = STEPS[index]
        self.step.setText(f"Step {index + 1} of {len(STEPS)}: {step.title}")
        self.note.setText(step.note)
        self.next.setText(f"Next: {STEPS[index + 1].title}" if index + 1 < len(STEPS) else "Last step.")


class DemoView(QWidget):
    step_changed = Signal(int)
    step_done = Signal(int)  # a step reached its result (its page's `error` says whether it failed)
    recorded = Signal(dict)  # a finished step's scene of the web page

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx: RunContext | None = None
        self.max_new_tokens = TALK_MAX_NEW_TOKENS
        self.results = DemoResults()
        self.pages: dict[int, StepPage] = {}
        self.index = -1
        self.notes_window: NotesWindow | None = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 8, 12, 8)
        self.title = QLabel("")
        self.title.setWordWrap(True)
        ts.set_big(self.title, 1.5, bold=True)
        lay.addWidget(self.title)
        top = QHBoxLayout()
        self.headline = QLabel("")  # its own row: at 54 pt a figure takes most of a 1024 px screen
        font = self.headline.font()
        font.setPointSizeF(HEADLINE_POINTS)
        font.setBold(True)
        self.headline.setFont(font)
        top.addWidget(self.headline)
        self.detail = QLabel("")  # what the figure is, beside it
        self.detail.setWordWrap(True)
        ts.set_big(self.detail, 0.95)
        top.addWidget(self.detail, 1)
        lay.addLayout(top)
        self.stack = QStackedWidget()
        lay.addWidget(self.stack, 1)
        self.controls = self._controls()  # TalkDialog keeps them in view below what scrolls
        for keys, slot in ((NEXT_KEYS, self.next), (BACK_KEYS, self.back)):
            for key in keys:
                shortcut = QShortcut(QKeySequence(key), self)
                shortcut.setContext(Qt.ShortcutContext.WindowShortcut)
                shortcut.activated.connect(slot)

    def heightForWidth(self, width: int) -> int:  # noqa: N802 - Qt override
        """The height TalkDialog's scroll area gives the demo at `width`: the layout's, with the page on screen in
        place of the stack's tallest page, and that page no taller than the area leaves it unless the least it
        needs at that width is more (its plots shrink first). A QStackedWidget is as tall at a width as the
        tallest page it holds (QStackedLayout.heightForWidth ignores size policies), so once the replay or the
        theory step had been shown every later step scrolled, even the few lines of step 8; and a page at its
        preferred height put its plots' lower half under the fold at 1280×800 where they could have shrunk."""
        full = super().heightForWidth(width)
        page = self.pages.get(self.index)
        if page is None or full < 0:
            return full
        margins = self.layout().contentsMargins()
        inner = width - margins.left() - margins.right()
        rest = full - self.stack.heightForWidth(inner)  # the title, the headline row, the margins
        page_height = page.height_for(inner)
        area = self.parentWidget()  # the scroll area's viewport, in TalkDialog
        if area is not None:
            page_height = max(page.least_height(inner), min(page_height, area.height() - rest))
        return rest + page_height

    def _controls(self) -> QWidget:
        box = QWidget()
        lay = QVBoxLayout(box)
        lay.setContentsMargins(0, 0, 0, 0)
        self.note = QLabel("")  # the step's one line of speaker notes
        self.note.setWordWrap(True)
        ts.set_big(self.note, 0.95)
        lay.addWidget(self.note)
        row = QHBoxLayout()
        self.status = QLabel("")
        ts.set_big(self.status, 0.85)
        row.addWidget(self.status, 1)
        self.notes_button = QPushButton("Notes window")
        self.notes_button.setToolTip("The speaker's notes in a second window, for the speaker's own screen")
        self.notes_button.clicked.connect(self.show_notes_window)
        self.back_button = QPushButton("← Back")
        self.back_button.clicked.connect(self.back)
        self.next_button = QPushButton("Next →")
        self.next_button.clicked.connect(self.next)
        for b in (self.notes_button, self.back_button, self.next_button):
            b.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # Space is the demo's key, never a focused button's
            ts.set_big(b, 0.85)
            row.addWidget(b)
        lay.addLayout(row)
        return box

    # -- moving through the steps ----------------------------------------------------------------------
    def start(self, ctx: RunContext) -> None:
        self.ctx = ctx
        self.go(0)

    def next(self) -> None:
        if self.index + 1 < len(STEPS):
            self.go(self.index + 1)

    def back(self) -> None:
        if self.index > 0:
            self.go(self.index - 1)

    def go(self, index: int) -> None:
        current = self.pages.get(self.index)
        if current is not None and current.running:
            current.stop()  # leaving a step early ends its run: two runs at once would slow both
        self.index = index
        step = STEPS[index]
        page = self.pages.get(index)
        fresh = page is None
        if page is None:
            page = self.pages[index] = PAGES[step.key](step)
            page.headline.connect(lambda text, i=index: self._headline(i, text))
            page.detail.connect(lambda text, i=index: self.detail.setText(text) if i == self.index else None)
            page.done.connect(lambda i=index: self._done(i))
            self.stack.addWidget(page)
        self.stack.setCurrentWidget(page)
        for other in self.pages.values():  # the stack as tall as this page needs, not as its tallest page
            policy = QSizePolicy.Policy.Preferred if other is page else QSizePolicy.Policy.Ignored
            other.setSizePolicy(policy, policy)
        self.stack.updateGeometry()
        self.title.setText(f"{index + 1}/{len(STEPS)} · {step.title}")
        self.note.setText(step.note)
        self.headline.setText(page.last_headline)
        self.detail.setText(page.last_detail)
        self.back_button.setEnabled(index > 0)
        self.next_button.setEnabled(index + 1 < len(STEPS))
        if self.notes_window is not None:
            self.notes_window.show_step(index)
        self.step_changed.emit(index)
        if fresh and self.ctx is not None:
            self.status.setText("Running…" if step.prompt else "")
            page.begin(self.context_for(step), self.results)
            wrap_labels(page)  # as TalkDialog does for its view: no label's one long line widens the demo

    def context_for(self, step: DemoStep) -> RunContext:
        """The step's fresh single-turn prompt (or the window's, for the steps that run none) at talk length."""
        assert self.ctx is not None
        ctx = self.ctx.with_prompt(step.prompt) if step.prompt else self.ctx
        return replace(ctx, config=ctx.config.with_(max_new_tokens=self.max_new_tokens))

    def _headline(self, index: int, text: str) -> None:
        if index == self.index:
            self.headline.setText(text)

    def _done(self, index: int) -> None:
        page = self.pages[index]
        if index == self.index:
            self.status.setText(f"Error: {page.error}" if page.error else "Done. → or Space: the next step.")
        scene = page.scene()
        if scene is not None:
            self.recorded.emit(scene)
        self.step_done.emit(index)

    def show_notes_window(self) -> NotesWindow:
        if self.notes_window is None:
            self.notes_window = NotesWindow(self)
        self.notes_window.show_step(max(self.index, 0))
        self.notes_window.show()
        self.notes_window.raise_()
        return self.notes_window

    def stop(self) -> None:
        page = self.pages.get(self.index)
        if page is not None and page.running:
            page.stop()

    def pause(self) -> None:
        """What TalkDialog calls as it closes: the step's run ends with it."""
        self.stop()

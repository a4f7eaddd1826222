"""Talk mode: explain speculative decoding to a room, with the real models, live.

- presenter.py   full screen, large type, projector theme, legend and enlarged graphs (F5)
- replay.py      any reply, live or saved, round by round in three beats (rounds.py is its model)
- race.py        speculation off vs on, one after the other on a shared clock, with the speedup
- draft_alone.py what the draft writes by itself, next to the verified reply
- explainer.py   the formulas with live α, γ, c and a γ slider on the predicted curve
- slow_demo.py   good vs poorly aligned drafters against the verifier alone
- export.py      replay as GIF (or MP4 with ffmpeg), widgets as PNG
- recorder.py    what the demos ran, for *Export as web page* (one HTML file that replays it: app/web)
- demo.py        Run the demo: eight scripted steps (demo_script.py) on pages of demo_steps.py, → / Space
- demo_shots.py  screenshots of every step of the demo, made by the app on a real screen

`install_talk_mode(window)` adds a "Talk" menu to the main window using only its public attributes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from PySide6.QtCore import QObject, QSize, Qt
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import QDialog, QFileDialog, QMenuBar, QVBoxLayout, QWidget

from app.fit import available, fit_to_screen, scrolling, wrap_labels
from app.ports import RunPort, WindowPort
from app.talk.presenter import PresentedWindow, PresenterMode
from app.talk.recorder import Recorder, prompt_before, race_view_scene, slow_view_scene
from app.trace import ReplyTrace

if TYPE_CHECKING:
    from app.graphs.graphs_panel import GraphsPanel

PRESENTER_KEYS = ("F5", "Ctrl+Shift+F5")  # the first one free in the window is used
REPLAY_KEYS = ("F6", "Ctrl+Shift+F6")
DEMO_KEYS = ("F7", "Ctrl+Shift+F7")


class TalkWindow(WindowPort, RunPort, PresentedWindow, Protocol):
    """What talk mode uses of the main window: the shared port (the session, settings and prompt its demos run),
    what presenter mode changes, the graphs' reply, and the menu bar its Talk menu joins."""

    graphs: GraphsPanel

    def menuBar(self) -> QMenuBar: ...  # noqa: N802 - Qt's name


def current_trace(window: TalkWindow) -> ReplyTrace | None:
    """The reply the window's graphs show (the streaming one, or the one whose Graphs button was pressed),
    else the conversation's last reply with tokens."""
    trace = window.graphs.live.trace
    if trace is not None and trace.tokens:
        return trace
    for m in reversed(window.conv.messages):
        if m.trace is not None and m.trace.tokens:
            return m.trace
    return None


def trace_from_json(data: dict) -> ReplyTrace:
    """A trace from a saved file: a ReplyTrace dict, or a conversation (its last reply with a trace)."""
    if "tokens" in data:
        return ReplyTrace.from_dict(data)
    for m in reversed(data.get("messages", [])):
        if m.get("trace"):
            return ReplyTrace.from_dict(m["trace"])
    raise ValueError("no reply trace in this file (expected a conversation JSON or a trace)")


def used_shortcuts(widget: QWidget) -> set[str]:
    keys = set()
    for a in widget.findChildren(QAction):
        keys.update(s.toString() for s in a.shortcuts())
    for s in widget.findChildren(QShortcut):
        keys.add(s.key().toString())
    return {k for k in keys if k}


class TalkDialog(QDialog):
    """A top-level window around one talk view; maximised when presenter mode is on."""

    def __init__(self, view: QWidget, title: str, parent: QWidget | None, modal: bool) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.view = view
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        # In a scroll area: the dialog fits a 1024×700 (or scale-2) screen even where the view's content
        # cannot shrink that far; the view scrolls instead of the dialog running off the screen.
        wrap_labels(view)
        lay.addWidget(scrolling(view), 1)
        controls = getattr(view, "controls", None)  # a view's buttons stay in view, below what scrolls
        if isinstance(controls, QWidget):
            holder = QVBoxLayout()
            holder.setContentsMargins(12, 4, 12, 10)
            holder.addWidget(controls)
            lay.addLayout(holder)
        fit_to_screen(self, QSize(1280, 800), available(parent) if parent is not None else None)
        if modal:  # the views that run the models: the window must not start a reply meanwhile
            self.setWindowModality(Qt.WindowModality.WindowModal)

    def closeEvent(self, event) -> None:  # noqa: N802 - Qt override
        run = getattr(self.view, "run", None)
        if run is not None and getattr(run, "running", False):
            run.stop()
        pause = getattr(self.view, "pause", None)
        if pause is not None:
            pause()
        super().closeEvent(event)


class TalkMode(QObject):
    """The Talk menu's controller for one main window."""

    def __init__(self, window: TalkWindow,
                 get_current_trace: Callable[[], ReplyTrace | None] | None = None) -> None:
        super().__init__(window.window())
        self.window = window
        self.top = window.window()  # the window as a widget: the parent of the menu's actions and the dialogs
        self.get_current_trace = get_current_trace or (lambda: current_trace(window))
        self.presenter = PresenterMode(window)
        self.recorder = Recorder()
        self.dialogs: list[TalkDialog] = []
        self.menu = window.menuBar().addMenu("&Talk")
        taken = used_shortcuts(self.top)
        self.presenter_action = self._action("Presenter mode", self.presenter.toggle,
                                             next((k for k in PRESENTER_KEYS if k not in taken), None))
        self.presenter_action.setCheckable(True)
        self.presenter.toggled.connect(self.presenter_action.setChecked)
        self.menu.addSeparator()
        self._action("Run the demo (8 steps, → or Space)…", self.open_demo,
                     next((k for k in DEMO_KEYS if k not in taken), None))
        self._action("Replay this reply round by round…", self.open_replay,
                     next((k for k in REPLAY_KEYS if k not in taken), None))
        self._action("Replay a saved trace (JSON)…", self.open_saved_replay)
        self._action("Draft tree of each round…", self.open_tree)
        self.menu.addSeparator()
        self._action("Race: off vs on, side by side…", self.open_race)
        self._action("What the draft writes alone…", self.open_draft_alone)
        self._action("What makes it slow…", self.open_slow_demo)
        self._action("Explain the speedup (formulas)…", self.open_explainer)
        self.menu.addSeparator()
        self._action("Export as web page (replays in any browser)…", self.export_web_page)

    def _action(self, text: str, slot: Callable[[], Any], shortcut: str | None = None) -> QAction:
        a = QAction(text, self.top)
        if shortcut:
            a.setShortcut(QKeySequence(shortcut))
            a.setShortcutContext(Qt.ShortcutContext.ApplicationShortcut)  # also from talk dialogs
        a.triggered.connect(lambda _checked=False: slot())
        self.menu.addAction(a)
        return a

    # -- opening views ---------------------------------------------------------------------------------
    def _show(self, view: QWidget, title: str, modal: bool = False) -> TalkDialog:
        dlg = TalkDialog(view, title, self.top, modal)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.destroyed.connect(lambda _=None, d=dlg: self.dialogs.remove(d) if d in self.dialogs else None)
        self.dialogs.append(dlg)
        if self.presenter.active:
            dlg.showMaximized()
        else:
            dlg.show()
        return dlg

    def _say(self, text: str) -> None:
        self.window.show_error(text)

    def open_replay(self, trace: ReplyTrace | None = None) -> TalkDialog | None:
        from app.talk.replay import ReplayDialog

        trace = trace or self.get_current_trace()
        if trace is None or not trace.tokens:
            self._say("No reply to replay yet: send a message first (or open a saved conversation).")
            return None
        dlg = ReplayDialog(trace, self.top)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        if self.presenter.active:
            dlg.showMaximized()
        else:
            dlg.show()
        return dlg  # type: ignore[return-value]

    def open_tree(self, trace: ReplyTrace | None = None):
        from app.tree_view import TreeDialog, tree_rounds

        trace = trace or self.get_current_trace()
        if trace is None or not tree_rounds(trace):
            self._say("This reply has no draft trees: auto grows them only when greedy (temperature 0), and "
                      "checks none where no draft pays. Set Draft tree to a number of nodes (Generation "
                      "settings) and send a message.")
            return None
        dlg = TreeDialog(trace, self.top, scale=1.6 if self.presenter.active else 1.0)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        if self.presenter.active:
            dlg.showMaximized()
        else:
            dlg.show()
        return dlg

    def open_saved_replay(self, path: str | None = None) -> None:
        if path is None:
            path, _ = QFileDialog.getOpenFileName(self.top, "Replay a saved trace", str(Path.home()),
                                                  "JSON (*.json)")
            if not path:
                return
        try:
            trace = trace_from_json(json.loads(Path(path).read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._say(f"Could not read a trace from {path}: {exc}")
            return
        self.open_replay(trace)

    def _context(self, prompt: str | None = None):
        from app.talk.context import context_from_window

        ctx = context_from_window(self.window, prompt)
        if isinstance(ctx, str):
            self._say(ctx)
            return None
        return ctx

    def open_demo(self, max_new_tokens: int | None = None):
        """The scripted talk (demo.py); it records each step for Export as web page, in place of what was.
        `max_new_tokens`: each step's reply length, where not the talk's (a busy machine's screenshots)."""
        from app.talk.demo import DemoView
        from app.talk.demo_script import STEPS

        ctx = self._context(STEPS[0].prompt)
        if ctx is None:
            return None
        if ctx.session.drafter is None:
            self._say("There is no usable drafter, so there is nothing to demonstrate. " + ctx.session.verdict)
            return None
        view = DemoView()
        if max_new_tokens:
            view.max_new_tokens = max_new_tokens
        self.recorder.clear()
        view.recorded.connect(self.recorder.add)
        dlg = self._show(view, "Speculative decoding, the demo", modal=True)
        view.start(ctx)
        return dlg

    def open_race(self):
        from app.talk.race import RaceView

        ctx = self._context()
        if ctx is None:
            return None
        if ctx.session.drafter is None:
            self._say("There is no usable drafter, so there is nothing to race. " + ctx.session.verdict)
            return None
        view = RaceView()
        view.finished.connect(lambda _result, v=view: self.recorder.add(race_view_scene(v)))
        dlg = self._show(view, "Race: speculation off vs on", modal=True)
        view.start(ctx)
        return dlg

    def open_draft_alone(self):
        from app.talk.draft_alone import DraftAloneView

        ctx = self._context()
        if ctx is None:
            return None
        view = DraftAloneView()
        dlg = self._show(view, "What the draft writes alone", modal=True)
        view.start(ctx)
        return dlg

    def open_slow_demo(self):
        from app.talk.slow_demo import SlowDemoView

        ctx = self._context()
        if ctx is None:
            return None
        view = SlowDemoView()
        view.ctx = ctx
        view.finished.connect(lambda _results, v=view: self.recorder.add(slow_view_scene(v)))
        dlg = self._show(view, "What makes speculation slow", modal=True)
        view.start(ctx)
        return dlg

    def open_explainer(self):
        from app.talk.explainer import Explainer

        view = Explainer()
        trace = self.get_current_trace()
        if trace is not None:
            view.set_from_trace(trace)
        view.live_button.setEnabled(True)
        view.live_button.clicked.connect(lambda: view.set_from_trace(self.get_current_trace()))
        return self._show(view, "The speedup, explained: predicted and measured")

    def export_web_page(self, path: str | None = None):
        """Write what the demos recorded (else the reply on screen) as one HTML page that replays it anywhere."""
        trace = self.get_current_trace()
        prompt = prompt_before(self.window.conv.messages, trace) if trace is not None else ""
        return self.recorder.export(self.top, trace, prompt, self._say, path)


def install_talk_mode(window: TalkWindow,
                      get_current_trace: Callable[[], ReplyTrace | None] | None = None) -> TalkMode:
    """Add the Talk menu, the presenter shortcut (F5) and the replay shortcut (F6) to `window`."""
    return TalkMode(window, get_current_trace)


__all__ = ["install_talk_mode", "TalkMode", "current_trace", "trace_from_json"]

"""What the first reply after a load would otherwise do for the first time while the user watches it, done
beforehand: on the GUI thread, one step per event-loop turn, right after the load.

The first reply's window froze for 0.43-0.77 s on a 2-core CPU (issue 55), against 12-120 ms for the later
ones. What only the first reply paid for, on the GUI thread: forking the decoding process (app/host.py: now
forked for the after-load measurement, app/baseline_controller.py), modules imported on first use (numpy's
masked arrays, on the graphs' first median; the UTF-16 codec, on the token view's first position), and the
first layout and paint of a streaming bubble and of the live graphs with data (style sheets, fonts, glyphs,
pyqtgraph's first curves and axis labels). This module rehearses those on a scripted reply that is never
shown: a bubble made hidden and painted into a pixmap, and the live graphs painted with it into a pixmap and
handed back their own reply before the event loop could show them anything else. Last, the chat builds the
bubbles of the first message and its reply ahead (ChatView.prepare), as it does again after each reply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from PySide6.QtCore import QTimer

from app.trace import ReplyTrace, RoundRecord, TokenRecord
from specdec_core.events import TokenState

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from app.chat_view import ChatView
    from app.graphs.graphs_panel import GraphsPanel

# A reply with every token state, prose, digits and a fenced code block: the paths a real one takes.
_PIECES = ["Here", " is", " a", " function", ":\n\n", "```", "python", "\n", "def", " reverse", "(s", "):\n",
           "    return", " s", "[::-1]", "\n", "```", "\n\n", "It", " runs", " in", " O", "(n", ")", " time", ".",
           " 42", " tokens", "."]


class WarmWindow(Protocol):
    graphs: GraphsPanel
    chat: ChatView  # builds the first message's bubbles ahead (ChatView.prepare)

    def window(self) -> QWidget: ...  # the top-level widget: the rehearsed bubble's parent (its style sheet)


def rehearsal_trace() -> ReplyTrace:
    """A finished, scripted reply: rounds of three drafts with every token state, and its stats."""
    states = [TokenState.ACCEPTED, TokenState.ACCEPTED, TokenState.REJECTED, TokenState.CORRECTED]
    trace = ReplyTrace(verifier="rehearsal", drafter="rehearsal", prompt_tokens=30, baseline_tps=10.0)
    emitted = 0
    for i, text in enumerate(_PIECES):
        r, state = i // 4, states[i % 4]
        emitted += state != TokenState.REJECTED
        trace.tokens.append(TokenRecord(1000 + i, text, state.value, r, i % 4, 0.6, 0.5, 0.8,
                                        [(text, 0.5), (" the", 0.2)], t=0.06 * (r + 1)))
        if i % 4 == 3 or i == len(_PIECES) - 1:
            trace.rounds.append(RoundRecord(r, 3, 2, TokenState.CORRECTED.value, "gamma", 3, 0.01, 0.04 + 0.002 * r,
                                            0.005, 0.055 * (r + 1), emitted, rows=4))
    n = len(trace.rounds)
    trace.stats = {"new_tokens": emitted, "rounds": n, "drafted": 3 * n, "accepted": 2 * n, "tokens_per_s": 12.0,
                   "acceptance_rate": 2 / 3, "mean_accepted_length": emitted / n, "verify_s": 0.05 * n,
                   "draft_s": 0.01 * n, "prompt_tokens": 30}
    trace.stop_reason = "eos"
    return trace


def _imports() -> None:
    import numpy.ma  # noqa: F401 - numpy imports it on a first median or unique (the graphs' first figures)

    "warm".encode("utf-16-le")  # the token view counts positions in UTF-16 (its codec is looked up once)


def _bubble(window: WarmWindow) -> None:
    from app.bubbles import MessageBubble

    bubble = MessageBubble("assistant", 0, window.window())
    bubble.hide()
    bubble.resize(560, 320)
    bubble.body.set_trace(rehearsal_trace(), True)
    bubble.update_footer()
    bubble.grab()
    bubble.deleteLater()


def _graphs(window: WarmWindow) -> None:
    live = window.graphs.live
    trace, how, like = live.trace, live.baseline_how, live.baseline_like
    if trace is not None and not trace.finished:
        return  # a reply streams already (sent during the load): it is drawing them for real
    live.set_trace(rehearsal_trace())
    live.set_baseline(10.0, "rehearsal", like_for_like=True)
    live.flush(panels=True, figures=True)
    live.grab()
    live.set_trace(trace)  # its own reply again, before the event loop paints anything
    live.set_baseline(trace.baseline_tps if trace is not None else None, how, like_for_like=like)


def steps(window: WarmWindow) -> list[Callable[[], None]]:
    return [_imports, lambda: _bubble(window), lambda: _graphs(window), window.chat.prepare]


def warm_up(window: WarmWindow, then: Callable[[], None] = lambda: None) -> None:
    """Run the steps, one per event-loop turn (the window answers between them), then `then`. The window is a
    QObject (MainWindow): the turns' timers are its."""
    todo = steps(window)

    def next_step() -> None:
        if not todo:
            then()
            return
        todo.pop(0)()
        QTimer.singleShot(0, window, next_step)

    # The window is the timers' context: one closed meanwhile drops the steps left instead of running them on
    # widgets that are gone.
    QTimer.singleShot(0, window, next_step)

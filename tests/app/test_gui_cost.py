"""What the window costs the decoding thread per token: the event worker wakes the GUI thread per batch of
events, not per token, and the live graphs' header, rewritten every tick, does not re-lay out the plots."""

from __future__ import annotations

import time

from PySide6.QtCore import QCoreApplication, QEvent, QObject

from app.worker import EventWorker


class _EventCounter(QObject):
    """Counts the events of one type the GUI thread receives (MetaCall: queued cross-thread signal deliveries;
    LayoutRequest: layouts asked for)."""

    def __init__(self, kind: QEvent.Type) -> None:
        super().__init__()
        self.kind, self.count = kind, 0

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt override
        if event.type() == self.kind:
            self.count += 1
        return False


def _slow_events(n: int):
    for i in range(n):
        time.sleep(0.0005)  # a tiny model's token: well under a millisecond of work each
        yield i


def test_events_arrive_in_order_and_in_batches_with_the_end_after_the_last(qtbot):
    counter = _EventCounter(QEvent.Type.MetaCall)
    app = QCoreApplication.instance()
    app.installEventFilter(counter)
    seen, ends = [], []
    worker = EventWorker(lambda: _slow_events(300))
    worker.event.connect(seen.append)
    worker.finished.connect(lambda: ends.append(len(seen)))
    try:
        with qtbot.waitSignal(worker.finished, timeout=10_000):
            worker.start()
    finally:
        app.removeEventFilter(counter)
    assert seen == list(range(300)) and ends == [300]
    # One wake-up per batch of events, not one per event (300 events over about 0.2 s or more: a handful)
    assert counter.count < 300 / 5, counter.count



def _shown_graphs(qtbot, size=None, baseline_tps=None):
    """Live graphs shown (at `size`), following an empty reply's trace."""
    from app.graphs.live import LiveGraphs
    from app.trace import ReplyTrace

    graphs = LiveGraphs()
    qtbot.addWidget(graphs)
    if size is not None:
        graphs.resize(*size)
    graphs.show()
    trace = ReplyTrace()
    graphs.set_trace(trace, baseline_tps)
    graphs.flush(panels=True)  # the reply's start, drawn at the first tick that draws panels
    return graphs, trace


class _LayoutRequests(QObject):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def eventFilter(self, obj, event) -> bool:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.LayoutRequest:
            self.count += 1
        return False


def test_the_graph_header_changing_every_tick_does_not_re_lay_out_the_plots(qtbot):
    from app.trace import RoundRecord

    graphs, trace = _shown_graphs(qtbot, size=(700, 900))
    requests = _LayoutRequests()
    graphs.installEventFilter(requests)
    for i in range(20):  # a streaming reply: the header's tok/s changes on every flush
        trace.rounds.append(RoundRecord(i, 2, 1, "corrected", "gamma", 2, 0.01, 0.03 + 0.001 * i, 0.0,
                                        0.05 * (i + 1) + 0.001 * i * i, 2 * (i + 1)))
        graphs.flush(panels=False)
        qtbot.wait(1)
    assert "tok/s" in graphs.header.text() and graphs.header.isVisible()
    assert graphs.header.height() >= graphs.header.heightForWidth(graphs.header.width())  # never cut off
    assert requests.count <= 2, requests.count  # the box grew once for its first line, not per tick


def test_while_a_reply_streams_the_panels_are_redrawn_at_most_twice_a_second(qtbot):
    from app.graphs.plots import PANEL_EVERY_S
    from app.trace import RoundRecord

    graphs, trace = _shown_graphs(qtbot)
    before = graphs.updates
    for i in range(10):  # ten window ticks within a few milliseconds, each with a new round
        trace.rounds.append(RoundRecord(i, 2, 1, "corrected", "gamma", 2, 0.01, 0.03, 0.0, 0.05 * (i + 1), 2 * (i + 1)))
        graphs.flush(panels=True)
    assert PANEL_EVERY_S >= 0.5 and graphs.updates - before <= 1
    trace.stop_reason = "eos"
    graphs.flush()
    assert graphs.updates - before >= len(graphs.PANELS)  # the finished reply: every panel drawn at once


def test_the_theory_words_and_the_header_growing_and_shrinking_do_not_re_lay_out_the_plots(qtbot):
    from app.trace import RoundRecord

    graphs, trace = _shown_graphs(qtbot, size=(700, 900), baseline_tps=40.0)
    requests = _LayoutRequests()
    for i in range(12):  # the theory panel's sentence carries the running figures: it changes every redraw
        trace.rounds.append(RoundRecord(i, 3, i % 3, "corrected", "gamma", 3, 0.01, 0.03 + 0.002 * i, 0.001,
                                        0.05 * (i + 1), 2 * (i + 1)))
        graphs.flush(panels=False)
        graphs._draw_panel("theory")
        if i == 1:
            graphs.installEventFilter(requests)  # from here on the texts keep their line counts, or shrink
        qtbot.wait(1)
    assert "Theory vs practice" in graphs.words.text()
    assert requests.count <= 1, requests.count


def test_a_flush_of_many_differently_coloured_tokens_changes_the_document_once(qtbot):
    from app.token_view import TokenTextView
    from app.trace import ReplyTrace, TokenRecord

    view = TokenTextView()
    qtbot.addWidget(view)
    view.show()
    trace = ReplyTrace()
    view.set_trace(trace, colored=True)
    changes = []
    view.document().contentsChange.connect(lambda *args: changes.append(args))
    states = ("accepted", "rejected", "corrected", "bonus", "accepted", "rejected", "corrected", "plain")
    # A speculative round's tokens, one run of one state each, and a line that ends (drawn with its Markdown)
    trace.tokens = [TokenRecord(i, f" w{i}" + ("\n" if i == 5 else ""), state, i, 0, 0.5, 0.5, 0.5)
                    for i, state in enumerate(states)]
    assert view.render_pending() == len(states)
    assert "w0" in view.toPlainText() and "w7" in view.toPlainText()
    assert len(changes) == 1, changes  # one layout of what changed, not one per run of a state


def test_the_footer_and_the_graph_header_are_rewritten_only_on_figure_ticks_and_only_after_new_tokens(qtbot):
    from app.chat_view import ChatView
    from app.graphs.live import LiveGraphs
    from app.trace import ReplyTrace, RoundRecord, TokenRecord

    chat, graphs = ChatView(), LiveGraphs()
    qtbot.addWidget(chat)
    qtbot.addWidget(graphs)
    chat.show()
    graphs.show()
    trace = ReplyTrace()
    bubble = chat.add_assistant(trace, 0, streaming=True)
    graphs.set_trace(trace, 20.0)
    footers, headers = [], []
    bubble.update_footer = lambda real=bubble.update_footer: (footers.append(1), real())
    graphs._draw_header = lambda real=graphs._draw_header: (headers.append(1), real())

    def tick(i: int, figures: bool) -> None:
        trace.tokens.append(TokenRecord(i, f" w{i}", "plain", i, 0, None, 0.5, None))
        trace.rounds.append(RoundRecord(i, 0, 0, "plain", "off", 0, 0.0, 0.03, 0.0, 0.03 * (i + 1), i + 1))
        chat.flush(figures=figures)
        graphs.flush(panels=False, figures=figures)

    for i in range(5):  # text-only ticks: the tokens stream, the figures wait
        tick(i, figures=False)
    assert "w4" in bubble.body.toPlainText() and not footers and not headers
    tick(5, figures=True)
    assert len(footers) == 1 and len(headers) == 1 and "6 tokens" in bubble.footer.text()
    chat.flush(figures=True)  # a figure tick with nothing new rewrites nothing
    graphs.flush(panels=False, figures=True)
    assert len(footers) == 1 and len(headers) == 1
    trace.stop_reason = "eos"  # the end: the final figures at once, whatever the tick
    chat.flush(figures=False)
    graphs.flush(panels=False, figures=False)
    assert len(footers) == 2 and chat.streaming_bubble is None


def test_while_rounds_keep_arriving_every_panel_is_redrawn_in_turn(qtbot, monkeypatch):
    import app.graphs.plots as graphs_mod
    from app.trace import RoundRecord

    monkeypatch.setattr(graphs_mod, "PANEL_EVERY_S", 0.0)  # a panel on every tick, to see which ones
    graphs, trace = _shown_graphs(qtbot)
    drawn = []
    graphs._draw_panel = lambda name, real=graphs._draw_panel: (drawn.append(name), real(name))
    for i in range(len(graphs.PANELS)):  # a new round before every tick, as a streaming reply sends them
        trace.rounds.append(RoundRecord(i, 2, 1, "corrected", "gamma", 2, 0.01, 0.03, 0.0, 0.05 * (i + 1), 2 * (i + 1)))
        graphs.flush(panels=True)
    assert sorted(drawn) == sorted(graphs.PANELS), drawn  # not the first panel over and over


def test_a_streaming_reply_s_header_gaining_lines_keeps_its_height_so_the_plots_are_not_re_laid_out(qtbot):
    from app.trace import RoundRecord

    # no baseline yet: the window picks one when the prompt is built
    graphs, trace = _shown_graphs(qtbot, size=(520, 900))
    needed, boxes = [], []
    for i in range(12):  # one line of figures, then the speedup with its ± and the baseline's line below
        trace.rounds.append(RoundRecord(i, 3, i % 3, "corrected", "gamma", 3, 0.01, 0.03 + 0.002 * i, 0.001,
                                        0.05 * (i + 1), 3 * (i + 1)))
        if i == 3:
            graphs.set_baseline(40.0, "median of 3 speculation-off replies at a similar prompt length")
        graphs.flush(panels=False)
        needed.append(graphs.header.heightForWidth(graphs.header_box.width()))
        boxes.append(graphs.header_box.height())
        qtbot.wait(1)
    assert needed[-1] > needed[0], needed  # the header did gain lines
    assert boxes[-1] >= needed[-1]  # never cut off
    # The box (in the layout above the plots) kept the height it took for the first line: a change of it
    # re-lays out and repaints all seven plots
    assert len(set(boxes)) == 1, boxes


def test_a_token_view_paints_its_text_without_a_python_override_in_the_way_and_still_shows_token_tips(qtbot):
    from PySide6.QtCore import QPoint
    from PySide6.QtGui import QHelpEvent
    from PySide6.QtWidgets import QApplication, QTextBrowser, QToolTip

    from app.token_view import TokenTextView
    from app.trace import ReplyTrace, TokenRecord

    # PySide holds the GIL across a C++ call made from Python: an override of viewportEvent (or paintEvent)
    # would paint every frame of a streaming reply inside one, and the decoding thread would wait for it.
    for name in ("viewportEvent", "paintEvent", "event"):
        assert getattr(TokenTextView, name) is getattr(QTextBrowser, name), name
    view = TokenTextView()
    qtbot.addWidget(view)
    view.resize(400, 100)
    view.show()
    trace = ReplyTrace(stop_reason="eos")
    trace.tokens = [TokenRecord(0, "Paris", "accepted", 0, 0, 0.4, 0.9, 1.0)]
    view.set_trace(trace, colored=True)
    pos = view.cursorRect(view.textCursor()).center() + QPoint(4, 0)
    pos.setX(5)
    assert view.token_at(pos.toPointF()) is trace.tokens[0]
    QApplication.sendEvent(view.viewport(), QHelpEvent(QEvent.Type.ToolTip, pos, view.viewport().mapToGlobal(pos)))
    qtbot.waitUntil(QToolTip.isVisible, timeout=2000)
    assert "Paris" in QToolTip.text()
    QToolTip.hideText()


def test_a_polled_worker_wakes_the_gui_thread_only_to_start_and_to_end_and_its_owner_gets_every_event(qtbot):
    from PySide6.QtCore import QTimer

    counter = _EventCounter(QEvent.Type.MetaCall)
    app = QCoreApplication.instance()
    seen, ends = [], []
    worker = EventWorker(lambda: _slow_events(300), polled=True)
    worker.event.connect(seen.append)
    worker.finished.connect(lambda: ends.append(len(seen)))
    tick = QTimer()  # the owner's own timer (the window's flush) takes the events
    tick.timeout.connect(worker.deliver)
    tick.start(40)
    app.installEventFilter(counter)
    try:
        with qtbot.waitSignal(worker.finished, timeout=10_000):
            worker.start()
    finally:
        app.removeEventFilter(counter)
        tick.stop()
    assert seen == list(range(300)) and ends == [300]  # in order, and the end after the last event
    assert counter.count <= 3, counter.count  # started, the end, finished: no wake-up for events


def test_an_idle_window_at_1024_px_lays_nothing_out_again(qtbot, make_window):
    from PySide6.QtCore import QRect

    w = make_window(load=False)
    w.fit_to(QRect(0, 0, 1024, 700))  # narrow: the colour legend may take its short texts
    # The layouts that fitting started settle (sooner or later, with the machine's speed); then half a second
    # goes by with none. A layout that asks for itself again never gives such a half second.
    counter = _EventCounter(QEvent.Type.LayoutRequest)
    QCoreApplication.instance().installEventFilter(counter)
    try:
        for _ in range(20):
            counter.count = 0
            qtbot.wait(500)
            if counter.count == 0:
                break
    finally:
        QCoreApplication.instance().removeEventFilter(counter)
    assert counter.count == 0  # a layout that asks for itself again keeps the GUI thread (and the GIL) busy

"""Starting a reply does little in the event-loop turn of its Send, where the window can neither repaint nor answer:
the live graphs redraw at the next tick that draws panels, once for the reply and its baseline together, and the
bubbles of the message and its reply were built ahead, while the window idled (issue 55, "no stall on the first
reply after a load"). Checked by what runs where, not by time."""

from __future__ import annotations

from app.trace import ReplyTrace, RoundRecord


def _counted_panels(qtbot):
    from app.graphs.live import LiveGraphs

    graphs = LiveGraphs()
    qtbot.addWidget(graphs)
    graphs.show()
    drawn: list[str] = []
    graphs._draw_panel = lambda name, real=graphs._draw_panel: (drawn.append(name), real(name))
    return graphs, drawn


def test_a_streaming_reply_and_its_baseline_are_drawn_once_at_the_next_panel_tick_not_at_once(qtbot):
    graphs, drawn = _counted_panels(qtbot)
    streaming = ReplyTrace()
    graphs.set_trace(streaming)
    graphs.set_baseline(20.0, "verifier alone", like_for_like=True)  # as the prompt is built
    assert drawn == []
    streaming.rounds.append(RoundRecord(0, 2, 1, "corrected", "gamma", 2, 0.01, 0.03, 0.0, 0.05, 2))
    graphs.flush(panels=False)  # a text-only tick
    assert drawn == []
    graphs.flush(panels=True)
    assert sorted(drawn) == sorted(graphs.PANELS)  # every panel, each once
    assert graphs.panels["tps"].baseline_line.value() == 20.0


def test_a_finished_reply_or_hidden_graphs_are_drawn_at_once_as_before(qtbot):
    graphs, drawn = _counted_panels(qtbot)
    finished = ReplyTrace(stats={"tokens_per_s": 12.0, "new_tokens": 2}, stop_reason="eos")
    graphs.set_trace(finished)
    assert sorted(drawn) == sorted(graphs.PANELS)
    drawn.clear()
    graphs.hide()
    graphs.set_trace(ReplyTrace())
    graphs.flush(panels=True)
    assert drawn == []  # hidden: nothing drawn until shown
    graphs.show()
    assert sorted(drawn) == sorted(graphs.PANELS)


def test_a_message_sent_fills_in_bubbles_built_ahead_while_the_window_idled(make_window, qtbot, send_and_wait):
    w = make_window()
    send_and_wait(w, "Hello")
    qtbot.waitUntil(lambda: set(w.chat._spare) == {"user", "assistant"}, timeout=10_000)  # built after the reply
    ahead = dict(w.chat._spare)
    trace = send_and_wait(w, "Hello again")
    user, reply = w.chat.bubbles[-2:]
    assert user is ahead["user"] and reply is ahead["assistant"]
    assert reply.trace is trace and (user.index, reply.index) == (2, 3)
    assert "Hello again" in user.body.toPlainText() and user.isVisible() and reply.isVisible()

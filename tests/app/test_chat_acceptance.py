"""Acceptance over the conversation (graphs.ChatAcceptance): one point per finished reply of the open chat, with
the figures its bubble's footer shows, gaps where nothing was drafted, the replies an adapted draft head drafted
marked, the chat's own history when another is opened or the app reopened, and no redraw while a reply streams."""

from __future__ import annotations

import math

import numpy as np
import tiny

from app.conversation import trace_from_dict
from app.graphs.chat_acceptance import ADAPTED_SYMBOL, LOADED_SYMBOL
from app.store import ConversationStore

head_folder = tiny.save_head_folder


def drawn(w):
    """What the plot draws: (acceptance rate, tokens per call) per reply, NaN where the line has a gap."""
    h = w.graphs.live.history
    rate, calls = h.rate_line.yData, h.calls_line.yData  # None: nothing drawn
    return [] if rate is None else list(zip(rate.tolist(), calls.tolist()))


def symbols(w):
    """Reply number -> the symbol its acceptance point is drawn with."""
    return {int(round(s.pos().x())): s.symbol() for s in w.graphs.live.history.rate_dots.points()}


def test_two_replies_give_two_points_with_the_figures_of_their_footers(make_window, send_and_wait):
    w = make_window(max_new_tokens=16)
    traces = [send_and_wait(w, "Once upon a time"), send_and_wait(w, "And then what?")]
    points = drawn(w)
    assert len(points) == 2
    tips = [s.data() for s in w.graphs.live.history.rate_dots.points()]  # what hovering a point says
    for i, ((rate, calls), trace, bubble) in enumerate(zip(points, traces,
                                                           [b for b in w.chat.bubbles if b.trace is not None])):
        stats = trace.get_stats()
        assert stats.drafted and (rate, calls) == (stats.acceptance_rate, stats.mean_accepted_length)
        figures = f"acceptance {rate:.0%} · {calls:.2f} tokens/call"
        assert figures in bubble.footer.text() and figures in tips[i]
    assert symbols(w) == {1: LOADED_SYMBOL, 2: LOADED_SYMBOL}  # a draft model does not adapt


def test_a_reply_with_speculation_off_is_a_gap_not_a_zero(make_window, send_and_wait):
    w = make_window(max_new_tokens=12)
    send_and_wait(w, "Once upon a time")
    w.spec_button.setChecked(False)
    off = send_and_wait(w, "And then what?")
    w.spec_button.setChecked(True)
    send_and_wait(w, "Tell me more")
    assert off.all_plain
    (r1, c1), (r2, c2), (r3, c3) = drawn(w)
    assert math.isnan(r2) and math.isnan(c2) and not any(math.isnan(v) for v in (r1, c1, r3, c3))
    assert sorted(symbols(w)) == [1, 3]  # no point at reply 2, not even at 0


def test_opening_another_chat_or_reopening_the_app_shows_that_chats_history(make_window, send_and_wait, qtbot,
                                                                             data_dir):
    w = make_window(max_new_tokens=12)
    first = [send_and_wait(w, "Once upon a time"), send_and_wait(w, "And then what?")]
    first_id = w.conv.id
    w.new_chat()
    assert drawn(w) == []
    send_and_wait(w, "A second chat")
    assert len(drawn(w)) == 1
    w.conversations.open(first_id)
    qtbot.waitUntil(lambda: w.conv.id == first_id, timeout=10_000)
    expected = [(t.get_stats().acceptance_rate, t.get_stats().mean_accepted_length) for t in first]
    assert drawn(w) == expected
    w.close()
    qtbot.waitUntil(lambda: not ConversationStore(data_dir).save_failed(first_id), timeout=5000)
    again = make_window(load=False)  # the app reopened on the same data folder
    again.conversations.open(first_id)
    qtbot.waitUntil(lambda: again.conv.id == first_id, timeout=10_000)
    assert drawn(again) == expected


def test_replies_drafted_by_the_adapted_head_are_marked_and_a_reset_is_shown(
        make_window, send_and_wait, qtbot, tmp_path, tiny_models_dir, tiny_tokenizer):
    w = make_window(draft=str(head_folder(tmp_path, tiny_models_dir["llama-verifier"], tiny_tokenizer)),
                    max_new_tokens=16)
    w.adaptation.switch.setChecked(True)
    shipped = send_and_wait(w, "Once upon a time")
    qtbot.waitUntil(lambda: "draft adapted on" in w.adaptation.label.text(), timeout=30_000)
    learnt = sum(t.in_reply for t in shipped.tokens)
    adapted = send_and_wait(w, "And then what?")
    assert (shipped.adapted_tokens, adapted.adapted_tokens) == (0, learnt)
    history = w.graphs.live.history
    assert symbols(w) == {1: LOADED_SYMBOL, 2: ADAPTED_SYMBOL}
    assert f"draft adapted on {learnt:,} tokens" in history.title
    qtbot.waitUntil(lambda: w.adaptation.worker is None, timeout=30_000)
    w.adaptation.reset()
    send_and_wait(w, "Tell me more")
    assert [line.value() for line in history.reset_lines] == [2.5]  # between the adapted reply and the next
    assert symbols(w)[3] == LOADED_SYMBOL
    saved = trace_from_dict(adapted.to_dict())  # stored with the reply, so a reopened chat marks it too
    assert saved.adapted_tokens == learnt


def test_a_trace_saved_before_the_head_was_recorded_reads_as_drafted_by_the_loaded_head():
    assert trace_from_dict({"stop_reason": "eos", "drafter": "d"}).adapted_tokens == 0


def test_the_chat_plot_is_not_redrawn_while_a_reply_streams(make_window, send_and_wait, qtbot):
    w = make_window(max_new_tokens=24)
    history = w.graphs.live.history
    seen = []
    w.generation_event.connect(lambda ev: seen.append(history.updates))
    before = history.updates
    send_and_wait(w, "Once upon a time")
    assert len(seen) > 10 and set(seen) == {before}  # not once while its tokens arrived
    assert history.updates == before + 1  # once, when it finished
    assert np.isfinite(drawn(w)[0]).all()


def test_the_chat_plot_keeps_both_axes_inside_it_at_the_narrowest_panel_width(qtbot):
    from app.graphs.live import LiveGraphs
    from app.graphs.plots import PLOT_MIN_WIDTH
    from app.trace import ReplyTrace

    graphs = LiveGraphs()
    qtbot.addWidget(graphs)
    stats = {"drafted": 10, "accepted": 6, "acceptance_rate": 0.6, "mean_accepted_length": 2.4}
    graphs.history.show([ReplyTrace(stats=stats, stop_reason="eos", drafter="d", adapted_tokens=123_456)])
    plot = graphs.history.plot
    plot.setParent(None)  # alone, at the width of the panel's narrowest column
    qtbot.addWidget(plot)
    plot.resize(PLOT_MIN_WIDTH, 150)
    plot.show()
    qtbot.waitExposed(plot)
    item = plot.getPlotItem()
    assert "draft adapted on 123,456 tokens" in graphs.history.title
    # A two-line title over the plot's middle column alone made the plot wider than the widget: the right
    # axis (tokens per call) was drawn past its edge, out of sight.
    assert item.getAxis("right").geometry().right() <= PLOT_MIN_WIDTH + 0.5

"""Presenter mode (F5) sets the shown reply's tokens/s and speedup large over the chat, from the graphs' own figures;
a speedup gets a big figure only against a like-for-like baseline."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication

from app.graphs.figures import ReplyFigures
from app.graphs.headline import FASTER, SLOWER, headline_of
from app.talk.presenter_headline import HEADLINE_POINTS, HeadlineBar
from app.trace import ReplyTrace, RoundRecord, TokenRecord


def reply(kinds: str = "s" * 14, tokens_per_s: float = 40.0, finished: bool = True) -> ReplyTrace:
    """'s' a round that drafted 2 and kept 1 (2 tokens), 'o' one with speculation off (1 token)."""
    rounds, after = [], 0
    for i, kind in enumerate(kinds):
        on = kind == "s"
        after += 2 if on else 1
        rounds.append(RoundRecord(i, 2 if on else 0, 1 if on else 0, "corrected" if on else "plain",
                                  "gamma" if on else "off", 2 if on else 0, 0.01, 0.03 + 0.01 * (i % 3), 0.01,
                                  0.05 * (i + 1), after))
    trace = ReplyTrace(stop_reason="eos" if finished else None, baseline_tps=10.0)
    trace.rounds = rounds
    trace.tokens = [TokenRecord(i, "x", "plain", 0, 0, None, 0.5, None) for i in range(after)]
    drafted = sum(r.drafted for r in rounds)
    trace.stats = {"new_tokens": after, "rounds": len(rounds), "drafted": drafted, "accepted": drafted // 2,
                   "tokens_per_s": tokens_per_s}
    return trace


def figures(trace: ReplyTrace, baseline: float = 10.0) -> ReplyFigures:
    f = ReplyFigures(trace, baseline)
    f.copy_rounds()
    return f


def test_a_like_for_like_speedup_is_a_headline_figure_in_its_colour():
    h = headline_of(figures(reply(tokens_per_s=40.0)), switched=False, like_for_like=True)
    assert (h.tps, h.speedup, h.color) == ("40.0 tok/s", "4.00×", FASTER)
    assert "against the verifier alone at 10.0 tok/s" in h.note and h.note.startswith("±")
    assert headline_of(figures(reply(tokens_per_s=8.0)), False, True).color == SLOWER


def test_a_ratio_to_the_calibration_a_mixed_or_a_short_reply_gets_no_big_speedup_and_says_why():
    calibration = headline_of(figures(reply()), switched=False, like_for_like=False)
    assert calibration.tps == "40.0 tok/s" and calibration.speedup == ""
    assert "4.00× against the load's calibration, not like for like" in calibration.note
    mixed = headline_of(figures(reply("sssooss")), switched=True, like_for_like=True)
    assert mixed.speedup == "" and mixed.note.startswith("mixed reply")
    short = headline_of(figures(reply("ss")), switched=False, like_for_like=True)
    assert short.speedup == "" and short.note.startswith("too short for a speedup")
    off = headline_of(figures(reply("oooo")), switched=False, like_for_like=True)
    assert off.speedup == "" and off.note == "speculation off"
    streaming = headline_of(figures(reply(finished=False)), switched=False, like_for_like=True)
    assert streaming.note.endswith("so far")


def test_presenter_mode_sets_the_replys_tokens_per_second_and_speedup_large_over_the_chat(qtbot, make_window):
    window = make_window(load=False)
    presenter = window.talk.presenter
    presenter.full_screen = False
    window.resize(1280, 800)
    live = window.graphs.live
    live.set_trace(reply(tokens_per_s=40.0), 10.0)
    live.set_baseline(10.0, "a race's off lane", like_for_like=True)
    assert presenter.headline is None  # outside presenter mode the header's figures are enough

    window.talk.presenter_action.trigger()  # F5
    QApplication.processEvents()
    bar = presenter.headline
    assert isinstance(bar, HeadlineBar) and bar.isVisible()
    assert bar.tps.font().pointSizeF() >= 48 and bar.speedup.font().pointSizeF() >= 48 and HEADLINE_POINTS >= 48
    assert bar.tps.text() == "40.0 tok/s" and "4.00×" in bar.speedup.text() and FASTER in bar.speedup.text()
    column = window.legend.parentWidget().layout()
    assert column.indexOf(bar) == column.indexOf(window.legend) + 1  # in the chat column, over the chat

    live.set_trace(reply(tokens_per_s=25.0), 10.0)  # another reply shown: the headline follows the graphs
    assert bar.tps.text() == "25.0 tok/s" and bar.speedup.text() == ""  # its baseline is the calibration again
    assert "not like for like" in bar.note.text()

    window.talk.presenter_action.trigger()
    QApplication.processEvents()
    assert presenter.headline is None and column.indexOf(bar) == -1 and not bar.isVisible()


def test_the_headline_follows_a_streaming_reply_while_the_graphs_show_the_race_tab(qtbot, make_window):
    window = make_window(load=False)
    presenter = window.talk.presenter
    presenter.full_screen = False
    window.talk.presenter_action.trigger()
    window.graphs.tabs.setCurrentIndex(1)  # the Race tab: the live graphs are hidden
    QApplication.processEvents()
    live = window.graphs.live
    assert not live.isVisible()
    whole = reply(tokens_per_s=40.0)
    streaming = reply(finished=False)
    streaming.rounds = []
    live.set_trace(streaming, 10.0)
    for r in whole.rounds:
        streaming.rounds.append(r)
        live.flush()
    assert presenter.headline.tps.text() == f"{streaming.running_tps():.1f} tok/s"
    assert presenter.headline.note.text().endswith("so far")
    window.talk.presenter_action.trigger()

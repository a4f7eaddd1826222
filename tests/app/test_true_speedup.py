"""The speedup the chat shows compares like with like, and "theory vs practice" uses measured costs."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from app.speedup import (
    BaselineBook,
    BaselineSample,
    measured_costs,
    nice_ceiling,
    practical_speedup,
    why_they_differ,
)
from specdec_core.stats import predicted_speedup


def test_the_baseline_is_a_median_of_comparable_runs_and_does_not_drift_with_the_last_one():
    book = BaselineBook()
    book.add(BaselineSample(13.7, 30, "calibration", graphs_live=False))
    for tps in (10.0, 8.8, 6.7):  # speculation-off replies, each slower (the machine got busier)
        book.add(BaselineSample(tps, 40, "speculation-off reply", graphs_live=True))
    b = book.pick(35, graphs_live=True)
    assert b.tokens_per_s == 8.8  # the median of the runs under the same UI load, not the last one
    assert b.samples == 3 and "median of 3 runs" in b.how and "graphs repainting" in b.how
    # Replies with the graphs hidden compare with the calibration (run with them hidden), and say so.
    idle = book.pick(35, graphs_live=False)
    assert idle.tokens_per_s == 13.7 and "live graphs hidden" in idle.how and "30-token prompt" in idle.how


def test_the_baseline_prefers_a_similar_prompt_length():
    book = BaselineBook()
    book.add(BaselineSample(20.0, 30, "calibration", graphs_live=True))
    book.add(BaselineSample(12.0, 900, "speculation-off reply", graphs_live=True))
    assert book.pick(40, True).tokens_per_s == 20.0
    assert book.pick(1000, True).tokens_per_s == 12.0
    assert book.pick(40, True).how.startswith("verifier alone: 1 run (calibration) at 30-token prompt")
    # Without a run under the same UI load it uses the others, and says so.
    assert "no run yet with the graphs hidden" in book.pick(40, False).how


def _round(drafted, verify_s, draft_s=0.0, overhead_s=0.0):
    return SimpleNamespace(drafted=drafted, verify_s=verify_s, draft_s=draft_s, overhead_s=overhead_s,
                           hidden_draft_s=0.0)


def test_the_measured_curve_uses_the_measured_cost_of_checking_k_tokens():
    # One plain verifier step costs 10 ms; each drafted token checked adds 5 ms (checking 2 tokens: 1.5x).
    rounds = [_round(0, 0.010)] * 3 + [_round(1, 0.015, draft_s=0.001)] * 5 + [_round(3, 0.025, draft_s=0.003)] * 5
    costs = measured_costs(rounds, baseline_tps=100.0)
    assert costs.verify1_s == pytest.approx(0.010)
    assert costs.verify_slope_s == pytest.approx(0.005)
    assert costs.verify_ratio(1) == pytest.approx(1.5)
    alpha, gamma = 0.6, 3
    practical = practical_speedup(alpha, gamma, costs)
    textbook = predicted_speedup(alpha, gamma, 0.1)
    assert practical < textbook  # checking costs more than one step here, so the curve sits lower
    words = why_they_differ(alpha, gamma, 0.1, costs, textbook, practical)
    assert "costs one decode step; here it costs 2.50" in words


def test_nice_ceilings_grow_in_steps():
    assert [nice_ceiling(x) for x in (0, 0.3, 1, 1.2, 3, 7, 11, 240)] == pytest.approx([1, 0.3, 1, 1.5, 3, 8, 15, 300])


def _numbers(text: str) -> list[str]:
    return re.findall(r"(\d+\.\d) tok/s", text)


def test_mid_reply_the_graph_header_and_the_bubble_footer_show_the_same_speed(make_window, qtbot):
    w = make_window(max_new_tokens=60)
    seen = []

    def check(_ev) -> None:
        trace, bubble = w.graphs.live.trace, w.chat.streaming_bubble
        # events arrive in batches on the window's tick: the last ones may come after the reply's bubble closed
        if trace is None or trace.finished or len(trace.rounds) < 3 or bubble is None:
            return
        w.flush(final=False)  # the timer's tick: text and graphs together
        footer, header = bubble.footer.text(), w.graphs.live.header.text()
        seen.append((_numbers(header)[:1], _numbers(footer)[:1]))

    w.generation_event.connect(check)
    with qtbot.waitSignal(w.reply_finished, timeout=60_000):
        w.send("Tell me a long story")
    # The figures are rewritten every FIGURES_EVERY-th tick (app/flush_clock.py), header and footer on the same one.
    shown = [(h, f) for h, f in seen if h or f]
    assert shown and all(h == f for h, f in shown), shown[:5]


def test_a_reply_says_how_its_baseline_was_measured(make_window, send_and_wait, monkeypatch):
    monkeypatch.setenv("SPECDEC_HOST", "0")  # replies in this process, beside the repainting graphs
    w = make_window(max_new_tokens=32)  # long enough for a speedup with its spread (app/trace.py)
    w.spec_button.setChecked(False)
    send_and_wait(w, "Hello")
    w.spec_button.setChecked(True)
    w.new_chat()  # a prompt of the same length: a baseline at another length is never like for like
    trace = send_and_wait(w, "Hello again")
    assert trace.baseline_tps == w.baselines.samples[0].tokens_per_s
    assert trace.baseline_source.startswith("verifier alone: 1 run (speculation-off reply)")
    assert "graphs repainting" in trace.baseline_source
    assert "baseline: verifier alone" in w.graphs.live.header.text()
    assert trace.baseline_source in w.chat.bubbles[-1].footer.toolTip()
    assert re.search(r"\d\.\d\d× ±\d\.\d\d vs verifier alone \(like for like: 1 run\)",
                     w.chat.bubbles[-1].footer.text()), w.chat.bubbles[-1].footer.text()


def test_theory_vs_practice_draws_both_curves_and_never_says_faster_below_one(make_window, send_and_wait):
    w = make_window(max_new_tokens=24)
    w.spec_button.setChecked(False)
    send_and_wait(w, "Hello")
    w.spec_button.setChecked(True)
    send_and_wait(w, "Hello")
    live = w.graphs.live
    assert len(live.theory.theory_curve.getData()[0]) == 16 and len(live.theory.practical_curve.getData()[0]) == 16
    assert "textbook curve assumes checking" in live.words.text()
    sp = live.figures.measured_speedup
    if sp is not None and sp < 1:
        assert "faster" not in live.words.text()


def test_until_a_like_for_like_run_the_baseline_says_it_is_only_the_load_time_calibration():
    book = BaselineBook()
    book.add(BaselineSample(13.7, 30, "calibration", graphs_live=False))
    first = book.pick(30, graphs_live=False)
    assert not first.like_for_like and first.short.startswith("only the calibration at load")
    book.add(BaselineSample(11.0, 30, "race", graphs_live=False))
    assert book.pick(30, graphs_live=False).like_for_like
    # a reply with the graphs repainting has only runs with them hidden to compare with: said, not like for like
    repainting = book.pick(30, graphs_live=True)
    assert not repainting.like_for_like and repainting.short == "vs runs with the live graphs hidden"


def test_once_the_user_has_run_the_verifier_alone_the_load_time_calibration_no_longer_counts():
    book = BaselineBook()
    book.add(BaselineSample(6.8, 36, "calibration", graphs_live=False))  # read low, as the models were first used
    book.add(BaselineSample(8.4, 40, "speculation-off reply", graphs_live=False))
    b = book.pick(40, graphs_live=False)
    assert b.tokens_per_s == 8.4 and b.samples == 1 and "(speculation-off reply)" in b.how and b.like_for_like
    book.add(BaselineSample(8.0, 38, "race", graphs_live=False))
    assert book.pick(40, graphs_live=False).tokens_per_s == 8.2  # the median of the two, without the 6.8


def test_the_graph_header_shows_no_verdict_colour_against_the_calibration_alone(qtbot):
    from app.graphs.live import LiveGraphs
    from app.trace import ReplyTrace, RoundRecord

    def trace(rounds: int) -> ReplyTrace:
        tr = ReplyTrace(stats={"tokens_per_s": 8.0}, stop_reason="eos")
        for i in range(rounds):
            tr.rounds.append(RoundRecord(i, 2, 1, "corrected", "gamma", 2, 0.01, 0.05, 0.0, 0.06 * (i + 1),
                                         2 * (i + 1)))
        return tr

    graphs = LiveGraphs()
    qtbot.addWidget(graphs)
    graphs.show()
    for like in (False, True):
        graphs.set_trace(trace(20))
        graphs.set_baseline(10.0, "verifier alone", like_for_like=like)
        header = graphs.header.text()
        assert ("<b style='color:rgb(215,58,73)'>0.80×</b>" in header) is like, header
        assert "0.80×" in header and ("not like for like" in header) is not like


def test_a_race_alternates_its_runs_and_reports_the_median_pair_with_its_spread():
    from app.speedup import race_order, race_spread

    assert race_order(3) == [("off", False), ("on", True), ("on 2", True), ("off 2", False), ("off 3", False),
                             ("on 3", True)]
    spread = race_spread([(10.0, 14.0, 64), (8.0, 16.0, 64), (10.0, 12.0, 60)])
    assert spread.speedup == pytest.approx(1.4) and (spread.low, spread.high) == pytest.approx((1.2, 2.0))
    assert spread.tokens == 60 and not spread.short_reply
    assert spread.spread_words() == "median of 3 alternating runs each, 1.20–2.00×"
    assert race_spread([(10.0, 12.0, 5)]).short_reply


def _tree_reply():
    """Two tree rounds and a plain step, with a verifier-alone baseline of 50 tok/s (20 ms a token)."""
    from app.trace import ReplyTrace, RoundRecord

    def node(parent, p, accepted=False):
        return {"token_id": 0, "text": "x", "parent": parent, "draft_prob": 0.5, "target_prob": p,
                "accept_prob": 1.0 if accepted else 0.0, "accepted": accepted}

    # mass: 0.8 + 0.8*0.5 + 0.1 = 1.3 accepted drafts expected in each tree round
    tree = [node(-1, 0.8, True), node(0, 0.5, True), node(-1, 0.1)]
    rounds = [RoundRecord(0, 0, 0, "plain", "probe", 0, 0.0, 0.020, 0.0, 0.02, 1, rows=1),
              RoundRecord(1, 2, 2, "bonus", "tree", 4, 0.004, 0.030, 0.001, 0.055, 4, tree=tree, rows=4),
              RoundRecord(2, 2, 2, "bonus", "tree", 4, 0.004, 0.030, 0.001, 0.09, 7, tree=tree, rows=4)]
    trace = ReplyTrace(rounds=rounds, stop_reason="eos", baseline_tps=50.0, verifier="v", drafter="d")
    trace.stats = trace.tally().snapshot().to_dict()
    return trace


def test_a_reply_with_trees_is_predicted_from_its_trees_not_the_chain_formula(qtbot):
    from app.graphs.live import LiveGraphs
    from app.speedup import tree_path_mass, tree_prediction
    from app.talk import style as ts
    from app.talk.explainer import Explainer

    trace = _tree_reply()
    assert tree_path_mass(trace.rounds[1].tree) == pytest.approx(1.3)
    costs = measured_costs(trace.rounds, 50.0)
    pred = tree_prediction(trace.rounds, costs)
    assert pred.tokens_per_call == pytest.approx((1 + 2.3 + 2.3) / 3) and pred.measured_tokens_per_call == 7 / 3
    assert pred.nodes == 3
    # expected tokens over the rounds' time with the measured cost of checking 3 candidates, against 20 ms a token
    seconds = sum(r.draft_s + costs.verify_s(r.checked) + costs.overhead_s_per_round for r in trace.rounds)
    assert pred.speedup == pytest.approx(5.6 * 0.02 / seconds)

    explainer = Explainer()
    qtbot.addWidget(explainer)
    assert explainer.set_from_trace(trace)
    assert explainer.gamma == 2  # the trees' main line, not their 3 candidates
    text = explainer.verdict.text()
    assert "drafted <b>trees</b>" in text and f"predicts {pred.speedup:.2f}×" in text and "Best γ" not in text
    formulas = explainer.formulas.text()  # the chain's figures: named so, and no green or red verdict
    assert "a chain's speedup" in formulas and ts.ACCEPTED.name() not in formulas and ts.REJECTED.name() not in formulas

    graphs = LiveGraphs()
    qtbot.addWidget(graphs)
    graphs.show()
    graphs.set_trace(trace, 50.0)
    assert graphs.words.text().count("From its trees (3.0 candidates a round)") == 1
    assert graphs.theory.predicted_point.getData()[1][0] == pytest.approx(pred.speedup)


def test_the_verifier_alone_line_labels_itself_on_the_side_away_from_the_running_mean(qtbot):
    from app.graphs.live import LiveGraphs
    from app.trace import ReplyTrace, RoundRecord

    graphs = LiveGraphs()
    qtbot.addWidget(graphs)
    graphs.show()
    for baseline, side in ((10.0, (1, 0)), (80.0, (1, 1))):  # mean about 33 tok/s: the label below, then above
        trace = ReplyTrace(stats={"tokens_per_s": 33.0}, stop_reason="eos")
        for i in range(20):
            trace.rounds.append(RoundRecord(i, 2, 1, "corrected", "gamma", 2, 0.01, 0.05, 0.0, 0.06 * (i + 1),
                                            2 * (i + 1)))
        graphs.set_trace(trace)
        graphs.set_baseline(baseline, "verifier alone", like_for_like=True)
        graphs._draw_panel("tps")
        label = graphs.panels["tps"].baseline_line.label
        assert label.anchors == [side, side] and "verifier alone" in label.toPlainText()


def test_a_round_that_lands_on_a_tick_without_new_text_still_refreshes_the_footer(qtbot):
    """The graphs' header redraws when rounds arrive; the footer must too, or the two show different tokens/s on
    the same tick (a round's verdict can land one tick after its tokens)."""
    from app.chat_view import ChatView
    from app.trace import ReplyTrace
    from specdec_core.events import DraftStop, Prefilled, RoundVerified, TokenCommitted, TokenState

    view = ChatView()
    qtbot.addWidget(view)
    trace = ReplyTrace()
    trace.apply(Prefilled(5, 0, 0.01))
    bubble = view.add_assistant(trace, 1, streaming=True)
    for index, token in enumerate((10, 11, 12)):
        trace.apply(TokenCommitted(token, f" w{token}", TokenState.PLAIN, index, 0, None, 0.9, None))
        view.flush(figures=True)  # the text and the footer, from what has arrived
        trace.apply(RoundVerified(index, (), 0, token, TokenState.PLAIN, DraftStop.PROBE, 0, 0.0, 0.01 * (index + 1),
                                  0.001, rows=1))
        view.flush(figures=True)  # no new text, a new round
        assert bubble.footer.text() == trace.summary()

"""The explainer's dot for a reply that drafted trees is what its trees predict, not the chain formula's."""

from __future__ import annotations

import pytest

from app.speedup import measured_costs, tree_prediction
from app.trace import ReplyTrace, RoundRecord
from specdec_core.stats import predicted_speedup


def tree_reply(baseline: float | None = 50.0) -> ReplyTrace:
    def node(parent, p, accepted=False):
        return {"token_id": 0, "text": "x", "parent": parent, "draft_prob": 0.5, "target_prob": p,
                "accept_prob": 1.0 if accepted else 0.0, "accepted": accepted}

    tree = [node(-1, 0.8, True), node(0, 0.5, True), node(-1, 0.1)]
    rounds = [RoundRecord(0, 0, 0, "plain", "probe", 0, 0.0, 0.020, 0.0, 0.02, 1, rows=1),
              RoundRecord(1, 2, 2, "bonus", "tree", 4, 0.004, 0.030, 0.001, 0.055, 4, tree=tree, rows=4),
              RoundRecord(2, 2, 2, "bonus", "tree", 4, 0.004, 0.030, 0.001, 0.09, 7, tree=tree, rows=4)]
    trace = ReplyTrace(rounds=rounds, stop_reason="eos", baseline_tps=baseline, verifier="v", drafter="d")
    trace.stats = trace.tally().snapshot().to_dict()
    return trace


def test_the_explainers_dot_is_the_trees_prediction_when_the_reply_drafted_trees(qtbot):
    from app.talk.explainer import Explainer

    trace = tree_reply()
    pred = tree_prediction(trace.rounds, measured_costs(trace.rounds, 50.0))
    explainer = Explainer()
    qtbot.addWidget(explainer)
    assert explainer.set_from_trace(trace)
    x, y = explainer.point.getData()
    assert x[0] == pytest.approx(2.0) and y[0] == pytest.approx(pred.speedup)  # at the trees' main line
    chain = predicted_speedup(explainer.alpha, explainer.gamma, explainer.c)
    assert y[0] != pytest.approx(chain)
    legend = explainer.plot.getPlotItem().legend
    assert legend.getLabel(explainer.point).text == "predicted from its trees"

    explainer.set_from_trace(tree_reply(baseline=None))  # no baseline: no cost for a tree's prediction, no dot
    assert len(explainer.point.getData()[0] if explainer.point.getData()[0] is not None else []) == 0


def test_a_chain_replys_dot_stays_the_formulas_at_the_sliders_gamma(qtbot):
    from app.talk.explainer import Explainer

    explainer = Explainer()
    qtbot.addWidget(explainer)
    explainer.set_values(0.8, 5, 0.1)
    x, y = explainer.point.getData()
    assert x[0] == 5 and y[0] == pytest.approx(predicted_speedup(0.8, 5, 0.1))
    assert explainer.plot.getPlotItem().legend.getLabel(explainer.point).text == "at this γ"

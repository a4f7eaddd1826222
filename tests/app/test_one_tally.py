"""One definition of acceptance and tokens per call: the bubble's footer, the graphs' header, a reopened
trace and the CLI's JSON all fold a reply's rounds by the engine's rule (stats.StatsAccumulator)."""

from __future__ import annotations

import json
import re

from app.graphs.live import LiveGraphs
from app.trace import ReplyTrace
from specdec_core.commands.cli import reply_json, stats_line
from specdec_core.events import (
    DraftStop,
    Finished,
    Prefilled,
    RoundVerified,
    StopReason,
    TokenState,
    Verdict,
)
from specdec_core.stats import StatsAccumulator

EOS = 2


def _verdict(token_id: int, accepted: bool, parent: int = -1) -> Verdict:
    return Verdict(token_id, f"t{token_id}", parent, 0.5, 0.6 if accepted else 0.1, 1.0 if accepted else 0.0, accepted)


def _node(token_id: int, parent: int, accepted: bool, checked: bool = True) -> Verdict:
    return Verdict(token_id, f"t{token_id}", parent, 0.5, 0.6 if accepted else 0.1,
                   (1.0 if accepted else 0.0) if checked else None, accepted)


def _reply_events() -> list[object]:
    """A plain first step, a tree round of 3 nodes that accepts its main line of 2 and adds a bonus, and a tree
    round whose accepted end-of-sequence draft ends the reply (no correction or bonus after it):
    5 tokens in 3 verifier calls, 3 of 5 checked nodes accepted."""
    rounds = [
        RoundVerified(0, (), 0, 10, TokenState.PLAIN, DraftStop.PROBE, 0, 0.0, 0.01, 0.001, rows=1),
        RoundVerified(1, (_verdict(11, True), _verdict(12, True, parent=0)), 2, 13, TokenState.BONUS, DraftStop.TREE, 4,
                      0.002, 0.012, 0.001, tree=(_node(11, -1, True), _node(14, -1, False), _node(12, 0, True)),
                      rows=4),
        RoundVerified(2, (_verdict(EOS, True),), 1, EOS, TokenState.ACCEPTED, DraftStop.TREE, 4, 0.001, 0.011,
                      0.001, tree=(_node(EOS, -1, True), _node(15, -1, False, checked=False)), rows=3),
    ]
    tally = StatsAccumulator(prompt_tokens=7)
    for r in rounds:
        r.add_to(tally)
    return [Prefilled(7, 0, 0.01), *rounds,
            Finished(StopReason.EOS, "t10t11t12t13", (10, 11, 12, 13, EOS), tally.snapshot())]


def _tokens_per_call(text: str, unit: str) -> float:
    match = re.search(rf"(\d+\.\d+) {unit}", text)
    assert match, text
    return float(match.group(1))


def test_footer_header_reopened_trace_and_cli_json_report_the_same_figures_for_one_reply(qtbot):
    events = _reply_events()
    trace = ReplyTrace()
    for ev in events:
        trace.apply(ev)
    cli = reply_json(events)["stats"]
    assert (cli["new_tokens"], cli["rounds"], cli["drafted"], cli["accepted"]) == (5, 3, 5, 3)
    assert trace.rounds[-1].tokens_after == 5  # the accepted end-of-sequence draft was the reply's last token

    footer = trace.summary()
    assert "acceptance 60%" in footer
    assert _tokens_per_call(footer, "tokens/call") == round(cli["mean_accepted_length"], 2)
    assert "acceptance 60% (3/5)" in stats_line(events[-1]) and "1.67 tokens/call" in stats_line(events[-1])

    reopened = ReplyTrace.from_dict(json.loads(json.dumps(trace.to_dict())))
    for shown in (trace, reopened):
        graphs = LiveGraphs()
        qtbot.addWidget(graphs)
        graphs.show()
        graphs.set_trace(shown)
        graphs.flush()
        assert _tokens_per_call(graphs.header.text(), "tokens per verifier call") == 1.67
        assert graphs.figures.alpha == cli["acceptance_rate"]
        # Rounds by accepted length: the tally's histogram (2 and 1 accepted), on an axis up to γ 4.
        assert tuple(graphs.panels["hist"].bars.opts["height"]) == (0, 1, 1, 0, 0)
        assert tuple(cli["accepted_length_histogram"]) == (0, 1, 1)
        figures = shown.tally().snapshot()
        assert (figures.new_tokens, figures.rounds, figures.drafted, figures.accepted) == (5, 3, 5, 3)
        assert figures.per_position_acceptance == tuple(cli["per_position_acceptance"])

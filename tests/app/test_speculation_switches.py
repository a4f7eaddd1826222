"""Ctrl+D in the middle of a reply: the graphs mark where speculation was switched, and the footer says the reply
was mixed instead of giving it one speedup. The footer also counts accepted and drafted tokens."""

from __future__ import annotations

from app.graphs.live import LiveGraphs
from app.toggles import mixed, switches
from app.trace import ReplyTrace, RoundRecord, TokenRecord
from specdec_core.events import RoundVerified


def rounds_of(kinds: str) -> list[RoundRecord]:
    """'s' a speculating round (2 drafted, 1 accepted: 2 tokens), 'o' a round with speculation off (1 token)."""
    out, t, after = [], 0.0, 0
    for i, kind in enumerate(kinds):
        t += 0.05
        on = kind == "s"
        after += 2 if on else 1
        out.append(RoundRecord(index=i, drafted=2 if on else 0, accepted=1 if on else 0,
                               emitted_state="corrected" if on else "plain", stop="gamma" if on else "off",
                               gamma=2 if on else 0, draft_s=0.01, verify_s=0.03, overhead_s=0.01, t_end=t,
                               tokens_after=after))
    return out


def mixed_trace(kinds: str = "ssoos") -> ReplyTrace:
    trace = ReplyTrace(stop_reason="eos", baseline_tps=10.0, baseline_source="a race's off lane")
    trace.rounds = rounds_of(kinds)
    trace.tokens = [TokenRecord(i, "x", "plain", 0, 0, None, 0.5, None) for i in range(trace.rounds[-1].tokens_after)]
    drafted = sum(r.drafted for r in trace.rounds)
    accepted = sum(r.accepted for r in trace.rounds)
    trace.stats = {"new_tokens": len(trace.tokens), "rounds": len(trace.rounds), "drafted": drafted,
                   "accepted": accepted, "acceptance_rate": accepted / drafted if drafted else 0.0,
                   "mean_accepted_length": len(trace.tokens) / len(trace.rounds), "tokens_per_s": 40.0}
    return trace


def test_each_switch_is_found_between_the_rounds_decoded_each_way():
    trace = mixed_trace("ssoos")
    found = switches(trace.rounds)
    assert [(s.position, s.on) for s in found] == [(2, False), (4, True)]
    assert [s.t for s in found] == [trace.rounds[1].t_end, trace.rounds[3].t_end]
    assert not mixed(mixed_trace("sss")) and not mixed(mixed_trace("ooo"))


def test_a_mixed_reply_gets_no_single_speedup_and_says_it_was_mixed():
    trace = mixed_trace("s" * 10 + "o" * 4 + "s" * 4)  # long enough for a speedup, were it one way
    summary = trace.summary()
    assert "×" not in summary
    assert "mixed: speculation switched 2 times mid-reply, on for 28 of 32 tokens" in summary
    whole = mixed_trace("s" * 14)
    assert "×" in whole.summary() and "mixed" not in whole.summary()


def test_the_footer_counts_accepted_and_drafted_tokens_beside_tokens_per_call():
    summary = mixed_trace("sssss").summary()
    assert "acceptance 50% · 2.00 tokens/call · 5/10 drafted tokens accepted" in summary


def test_the_graphs_mark_each_switch_on_the_time_and_round_axes_and_forget_them_for_another_reply(qtbot):
    graphs = LiveGraphs()
    qtbot.addWidget(graphs)
    graphs.show()
    trace = mixed_trace("ssoos")
    graphs.set_trace(trace, trace.baseline_tps)
    marks = graphs.switch_marks.lines
    assert [line.value() for line in marks["tps"]] == [trace.rounds[1].t_end, trace.rounds[3].t_end]
    assert [line.value() for line in marks["acc"]] == [2.5, 4.5] == [line.value() for line in marks["time"]]
    assert [line.label.format for line in marks["tps"]] == ["speculation off", "speculation on"]
    assert "mixed reply" in graphs.header.text() and "×" not in graphs.header.text()
    graphs.set_trace(mixed_trace("sssss"), 10.0)
    assert not any(marks.values()) and "mixed" not in graphs.header.text()


def test_ctrl_d_mid_reply_is_marked_on_the_plots_and_in_the_footer(make_window, send_and_wait):
    # Long enough that the switch, asked from the GUI thread when round 2's event arrives there (a repaint tick
    # later), lands while the reply still runs on any machine: at 60 tokens a fast one had finished (1 run in 5).
    w = make_window(max_new_tokens=400)
    switched = []

    def on_event(ev):
        if isinstance(ev, RoundVerified) and ev.round_index == 2 and not switched:
            switched.append(True)
            w.toggle_action.trigger()  # Ctrl+D

    w.generation_event.connect(on_event)
    trace = send_and_wait(w, "Count with me")
    assert switched and w.graphs.live.switch_marks.switches[0].on is False
    assert len(w.graphs.live.switch_marks.lines["tps"]) == len(switches(trace.rounds)) >= 1
    footer = w.chat.bubbles[-1].footer.text()
    assert "mixed: speculation switched" in footer and "×" not in footer

"""The window says what happened: a load that stopped a reply, model settings not loaded yet, speculation
the cost model paused, and no speedup figure on replies too short to measure one."""

from __future__ import annotations

import dataclasses

import pytest

from app.bubbles import Notice
from app.graphs.header import PAUSED_ROUNDS
from app.graphs.live import LiveGraphs
from app.trace import MIN_SPEEDUP_TOKENS, ReplyTrace, RoundRecord
from specdec_core.events import TokenCommitted


def notices(w) -> list[str]:
    return [n.label.text() for n in w.chat.widget().findChildren(Notice)]


def test_loading_mid_reply_says_it_stopped_the_reply(make_window, qtbot):
    w = make_window(max_new_tokens=2000)
    asked = []

    def on_event(ev):
        if isinstance(ev, TokenCommitted) and not asked:
            asked.append(True)
            w.loader.load()

    w.generation_event.connect(on_event)
    with qtbot.waitSignal(w.models_loaded, timeout=60_000):
        w.send("Go on for a long time")
    qtbot.waitUntil(lambda: w.busy == "", timeout=10_000)
    assert w.conv.messages[-1].trace.stop_reason == "cancelled"
    said = [t for t in notices(w) if "stopped the reply" in t]
    assert len(said) == 1, notices(w)


def test_a_changed_drafter_is_loaded_for_the_next_message_and_the_panel_says_so(make_window, qtbot, send_and_wait):
    w = make_window()
    assert w.session.request.drafter == "model"
    w.settings_panel.use_lookup.setChecked(True)
    assert w.settings_panel.pending.isVisibleTo(w.settings_panel) and "next message" in w.status_label.text()
    trace = send_and_wait(w, "Hello hello hello")
    assert w.session.request.drafter == "prompt-lookup" and trace.drafter == "prompt lookup"
    assert not w.settings_panel.pending.isVisibleTo(w.settings_panel)


def rounds(spec: list[tuple[int, str]], seconds=(0.05, 0.07, 0.06, 0.09)) -> list[RoundRecord]:
    """Rounds from (drafted, stop) pairs, each emitting its accepted drafts + 1."""
    out, t, after = [], 0.0, 0
    for i, (drafted, stop) in enumerate(spec):
        accepted = drafted // 2
        dt = seconds[i % len(seconds)]
        t += dt
        after += accepted + 1
        out.append(RoundRecord(i, drafted, accepted, "corrected" if drafted else "plain", stop, 4, dt / 4, dt / 2,
                               dt / 4, t, after))
    return out


def test_the_header_says_when_the_cost_model_paused_speculation(qtbot):
    graphs = LiveGraphs()
    qtbot.addWidget(graphs)
    graphs.show()
    for paused, said in ((PAUSED_ROUNDS - 1, False), (PAUSED_ROUNDS, True)):
        trace = ReplyTrace(baseline_tps=20.0)
        trace.rounds = rounds([(4, "tree")] * 5 + [(0, "cost"), (0, "probe")] * (paused // 2) + [(0, "cost")] *
                              (paused % 2))
        graphs.set_trace(trace, 20.0)
        assert ("speculation paused: not paying here" in graphs.header.text()) is said
        assert "speculation off" not in graphs.header.text()
    trace.rounds += rounds([(1, "tree")] * 2 + [(0, "cost")])  # the engine's two tries: still paused
    graphs.set_trace(trace, 20.0)
    assert "speculation paused: not paying here" in graphs.header.text()
    trace.rounds += rounds([(4, "tree")] * 3)  # drafting again for longer than a try: no longer paused
    graphs.set_trace(trace, 20.0)
    assert "paused" not in graphs.header.text()
    # Drafting two rounds in three is not a pause, however long it goes on.
    mixed = ReplyTrace(baseline_tps=20.0)
    mixed.rounds = rounds([(0, "cost"), (2, "tree"), (2, "tree")] * 10)
    graphs.set_trace(mixed, 20.0)
    assert "paused" not in graphs.header.text()
    # Speculation switched off is not a pause.
    off = ReplyTrace(baseline_tps=20.0)
    off.rounds = rounds([(0, "off")] * 20)
    graphs.set_trace(off, 20.0)
    assert "paused" not in graphs.header.text()


@pytest.mark.parametrize("shape", ["tree", "chain"])
def test_a_reply_whose_draft_never_pays_ends_with_the_header_saying_speculation_paused(
        shape, make_window, send_and_wait, monkeypatch):
    w = make_window(max_new_tokens=60, tree_nodes=-1)  # auto: the cost model sizes (and may skip) every draft
    drafter = w.session.engine.drafter
    grow, propose = drafter.propose_tree, drafter.propose
    # Each draft takes a second, as the engine measures it: against a plain step of a millisecond none pays.
    monkeypatch.setattr(drafter, "propose_tree", lambda *a, **k: dataclasses.replace(grow(*a, **k), draft_s=1.0))
    monkeypatch.setattr(drafter, "propose", lambda *a, **k: dataclasses.replace(propose(*a, **k), draft_s=1.0))
    if shape == "chain":
        monkeypatch.setattr(drafter, "grows_trees", False)  # as prompt lookup: the cost model sizes chains
    w.session.engine.set_drafter(drafter)
    assert w.spec_button.text() == "Speculation ON"
    trace = send_and_wait(w, "Once upon a time")
    assert {"tree" if shape == "tree" else "gamma"} <= {r.stop for r in trace.rounds if r.drafted}
    # A draft this dear is tried again only rarely (DraftPlanner.HOPELESS_PROBE_FACTOR), and the reply's last
    # round has no room for one: the pause goes on through it.
    assert any(not r.drafted for r in trace.rounds)
    assert trace.rounds[-1].stop == "max_tokens"
    assert "speculation paused: not paying here" in w.graphs.live.header.text()


def test_a_short_reply_gets_no_speedup_and_a_long_one_gets_its_spread(qtbot):
    short = ReplyTrace(baseline_tps=20.0, stop_reason="eos", stats={"new_tokens": 6, "tokens_per_s": 30.0})
    short.rounds = rounds([(4, "gamma")] * 2)
    assert "×" not in short.summary() and "too short for a speedup" in short.summary()
    long = ReplyTrace(baseline_tps=20.0, stop_reason="eos", stats={"new_tokens": 60, "tokens_per_s": 30.0})
    long.rounds = rounds([(4, "gamma")] * 20)
    assert sum(r.accepted + 1 for r in long.rounds) >= MIN_SPEEDUP_TOKENS
    # The ratio estimator's standard error, computed directly.
    e = [r.accepted + 1 for r in long.rounds]
    t = [r.total_s for r in long.rounds]
    rate = sum(e) / sum(t)
    n = len(e)
    want = (n / (n - 1) * sum((ei - rate * ti) ** 2 for ei, ti in zip(e, t))) ** 0.5 / sum(t) / rate
    assert abs(long.rate_spread() - want) < 1e-9 and want > 0
    assert f"1.50× ±{1.5 * want:.2f} vs verifier alone" in long.summary()
    graphs = LiveGraphs()
    qtbot.addWidget(graphs)
    graphs.show()
    graphs.set_trace(short, 20.0)
    assert "too short for a speedup" in graphs.header.text() and "×" not in graphs.header.text()
    graphs.set_trace(long, 20.0)
    assert "±" in graphs.header.text()


def test_the_header_names_the_drafts_dtype_where_it_differs_from_the_verifiers(make_window):
    import torch

    w = make_window()
    assert "float32" in w.model_label.text() and "(draft" not in w.model_label.text()
    # as a CPU with native bfloat16 loads it
    w.session.draft = dataclasses.replace(w.session.draft, dtype=torch.bfloat16)
    w.update_controls()
    assert "cpu float32 (draft bfloat16)" in w.model_label.text()


def test_a_footer_says_speculation_paused_not_off_when_the_cost_model_drafted_nothing():
    paused = ReplyTrace(baseline_tps=20.0, stop_reason="max_tokens")
    paused.rounds = rounds([(0, "cost"), (0, "probe")] * 8)
    off = ReplyTrace(baseline_tps=20.0, stop_reason="max_tokens")
    off.rounds = rounds([(0, "off")] * 16)
    assert "speculation paused: drafts do not pay here" in paused.summary() and "off" not in paused.summary()
    assert "speculation off" in off.summary() and "paused" not in off.summary()
    # It still ran with speculation on: its speed against the verifier alone is its figure, as a race shows it.
    assert paused.speedup_words() and paused.speedup_words() in paused.summary()

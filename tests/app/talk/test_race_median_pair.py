"""A race's drawn lanes are its median pair: the pair whose speedup is the headline, with every other run faint.

The race's events are recorded once from the tiny engine, then replayed by a scripted runner that sets each
lane's tokens/s, so which pair is the median does not depend on this machine's speed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from specdec_core.config import GenerationConfig

PROMPT = [{"role": "user", "content": "The capital of France"}]
# Pair 1 is the fastest (its off run is the cold first one), pair 2 the median, pair 3 the slowest.
SCRIPTED_TPS = {"off": 10.0, "on": 30.0, "off 2": 10.0, "on 2": 15.0, "off 3": 10.0, "on 3": 12.0}


@pytest.fixture(scope="module")
def recorded(tiny_session):
    from app.runs import race_events
    from specdec_core.engine import Controls

    config = GenerationConfig(max_new_tokens=12, gamma=3)
    return config, list(race_events(tiny_session, PROMPT, None, config, 3, Controls()))


def scripted_runner(events: list, tps: dict[str, float]):
    """A RunContext runner that replays `events` with each lane's Finished tokens/s set to tps[lane]."""
    from app.runs import LaneEvent
    from specdec_core.events import Finished

    def run(job, args, controls):
        for ev in events:
            if isinstance(ev, LaneEvent) and isinstance(ev.event, Finished):
                stats = replace(ev.event.stats, tokens_per_s=tps[ev.lane])
                ev = LaneEvent(ev.lane, replace(ev.event, stats=stats))
            yield ev

    return lambda: run


def finished_race(qtbot, tiny_session, recorded):
    """A Talk race of 3 pairs over the recorded events at the scripted speeds, run to its end: (view, result)."""
    from app.runs import RunContext
    from app.talk.race import RaceView

    config, events = recorded
    view = RaceView()
    qtbot.addWidget(view)
    view.pairs = 3
    ctx = RunContext(tiny_session, PROMPT, None, config, scripted_runner(events, SCRIPTED_TPS))
    with qtbot.waitSignal(view.finished, timeout=60_000) as blocker:
        view.start(ctx)
    return view, blocker.args[0]


def test_the_talk_race_draws_and_shows_the_median_pair_not_the_first(qtbot, tiny_session, recorded):
    from app.graphs.race_curves import curve_data

    view, result = finished_race(qtbot, tiny_session, recorded)
    traces = view.run.traces
    assert result.speedup == pytest.approx(1.5) and result.pair == 2
    # the bold curves, the panes' texts and their figures are pair 2's: 10 → 15 tok/s, the headline's 1.50×
    for side in ("off", "on"):
        x, y = view.curves[side].getData()
        want_x, want_y = curve_data(traces[f"{side} 2"])
        assert np.array_equal(x, want_x) and np.array_equal(y, want_y)
        assert view.panes[side].text.trace is traces[f"{side} 2"]
    assert "10.0 tok/s" in view.panes["off"].figures.text() and "15.0 tok/s" in view.panes["on"].figures.text()
    assert result.pair_tps[1] / result.pair_tps[0] == pytest.approx(result.speedup)
    assert "pair 2 of 3, the median" in view.identity.text() and "(1.50×)" in view.identity.text()
    # the spread: every run drawn faint, and the headline's range
    assert sorted(view.race_curves.faint) == sorted(SCRIPTED_TPS)
    assert all(len(c.getData()[0]) > 1 for c in view.race_curves.faint.values())
    assert view.spread.text().startswith("median of 3 alternating runs each, 1.20–3.00×")


def test_replay_together_replays_the_median_pair(qtbot, tiny_session, recorded):
    view, _ = finished_race(qtbot, tiny_session, recorded)
    view.replay_together()
    assert sorted(view._shown) == ["off 2", "on 2"]
    qtbot.waitUntil(lambda: not view.timer.isActive(), timeout=10_000)
    assert view.panes["on"].text.trace.rounds == view.run.traces["on 2"].rounds


def test_the_chats_race_tab_draws_the_median_pair_bold_and_says_so(qtbot, tiny_session, recorded):
    from app.graphs.race_curves import curve_data
    from app.graphs.race_plot import RacePlot
    from app.runs import LaneEvent
    from app.speedup import race_order

    _config, events = recorded
    plot = RacePlot()
    qtbot.addWidget(plot)
    plot.start([key for key, _ in race_order(3)])
    for ev in scripted_runner(events, SCRIPTED_TPS)()(None, (), None):
        if isinstance(ev, LaneEvent):
            plot.traces[ev.lane].apply(ev.event)
            plot.flush()
    words = plot.finish(greedy=True)
    assert plot.curves.run == 2 and "pair 2 of 3, the median: 10.0 → 15.0 tok/s (1.50×)" in words
    assert words.startswith("1.50× (faster), median of 3 alternating runs each, 1.20–3.00×")
    x, _ = plot.curves.bold["on"].getData()
    assert np.array_equal(x, curve_data(plot.traces["on 2"])[0])
    assert all(len(c.getData()[0]) > 1 for c in plot.curves.faint.values())

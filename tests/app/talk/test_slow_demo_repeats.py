""""What makes it slow" runs every lane several times, alternating, after a warm-up, where the window decodes, and
shows the median run with the spread.

The lanes' events are recorded once from the tiny engine; a scripted runner replays them with chosen tokens/s, so
which run is the median and whether the poor draft lost do not depend on this machine's speed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from specdec_core.config import GenerationConfig

PROMPT = [{"role": "user", "content": "Once upon a time"}]
# The verifier alone's first run is the cold one (slow); the poor draft loses in every run, by 0.5×, 0.8×, 0.6×.
SCRIPTED_TPS = {"off": 10.0, "good": 15.0, "lookup": 9.0, "weak": 5.0,
                "off 2": 20.0, "good 2": 30.0, "lookup 2": 18.0, "weak 2": 16.0,
                "off 3": 20.0, "good 3": 28.0, "lookup 3": 19.0, "weak 3": 12.0}


@pytest.fixture(scope="module")
def recorded(tiny_session):
    from app.talk.slow_lanes import slow_events
    from specdec_core.engine import Controls

    config = GenerationConfig(max_new_tokens=12, gamma=3)
    return config, list(slow_events(tiny_session, PROMPT, None, config, 0.8, 3, Controls()))


def scripted_runner(events: list, tps: dict[str, float], jobs: list):
    """A RunContext runner (where the window decodes) that notes each job and replays `events`, each lane's
    Finished tokens/s set to tps[lane]."""
    from app.runs import LaneEvent
    from specdec_core.events import Finished

    def run(job, args, controls):
        jobs.append((job, args[3:]))
        for ev in events:
            if isinstance(ev, LaneEvent) and isinstance(ev.event, Finished):
                ev = LaneEvent(ev.lane, replace(ev.event, stats=replace(ev.event.stats, tokens_per_s=tps[ev.lane])))
            yield ev

    return lambda: run


def test_the_slow_demos_lanes_alternate_after_a_warm_up_that_is_not_counted(tiny_session, recorded):
    from app.runs import LaneEvent

    config, events = recorded
    lanes = [ev.lane for ev in events if isinstance(ev, LaneEvent)]
    order = list(dict.fromkeys(lanes))
    assert order == ["off", "good", "lookup", "weak", "weak 2", "lookup 2", "good 2", "off 2",
                     "off 3", "good 3", "lookup 3", "weak 3"]  # the verifier alone is not always first and cold
    assert all(ev.event.stats.new_tokens == config.max_new_tokens for ev in events
               if isinstance(ev, LaneEvent) and hasattr(ev.event, "stats"))  # no 8-token warm-up run among them


def test_a_warm_up_runs_each_distinct_lane_once_with_few_tokens_and_yields_nothing(tiny_session):
    from app.runs import Lane, LaneEvent, RunContext, lane_events
    from specdec_core.engine import Controls

    calls = []

    def run(ids, config, controls):
        calls.append(config.max_new_tokens)
        yield "event"

    lanes = [Lane("a", "", run), Lane("a 2", "", run)]
    ctx = RunContext(tiny_session, PROMPT, None, GenerationConfig(max_new_tokens=32))
    out = [ev for ev in lane_events(ctx, lanes, Controls(), warm_up_tokens=8) if isinstance(ev, LaneEvent)]
    assert calls == [8, 32, 32] and [ev.lane for ev in out] == ["a", "a 2"]


def test_the_slow_demo_runs_where_the_window_decodes_and_draws_the_median_run_with_its_spread(
        qtbot, tiny_session, recorded):
    from app.graphs.race_curves import curve_data
    from app.runs import RunContext
    from app.talk.slow_demo import SlowDemoView
    from app.talk.slow_lanes import slow_events

    config, events = recorded
    jobs: list = []
    view = SlowDemoView()
    qtbot.addWidget(view)
    ctx = RunContext(tiny_session, PROMPT, None, config, scripted_runner(events, SCRIPTED_TPS, jobs))
    with qtbot.waitSignal(view.finished, timeout=60_000) as blocker:
        view.start(ctx)
    results = blocker.args[0]
    assert jobs == [(slow_events, (0.8, 3))]  # the job went to the runner: the decoding process where there is one
    # the poor draft's runs against the verifier alone of the same repeat: 0.5, 0.8, 0.6 -> median 0.6 (run 3)
    assert results["weak"][2] == pytest.approx(0.6) and results["weak"][0] == pytest.approx(12.0)
    assert results["off"] == (pytest.approx(20.0), 0.0, pytest.approx(1.0))
    assert view.curves.run == 3
    for kind in ("off", "weak"):
        x, _ = view.curves.bold[kind].getData()
        assert np.array_equal(x, curve_data(view.run.traces[f"{kind} 3"])[0])
    assert all(len(c.getData()[0]) > 1 for c in view.curves.faint.values())  # every run drawn: the spread
    rows = view.rows.text()
    assert "0.60×</b> (median of 3, 0.50–0.80×), slower than the verifier alone in 3 of 3 runs" in rows
    assert "20.0 tok/s" in rows and "12.0 tok/s" in rows  # the drawn run's own figures
    # the bars: medians, with the range of each kind's runs
    assert list(view.bars.opts["height"]) == [20.0, 28.0, 18.0, 12.0]
    assert list(view.ranges.opts["bottom"]) == [10.0, 13.0, 9.0, 7.0]
    assert list(view.ranges.opts["top"]) == [0.0, 2.0, 1.0, 4.0]


def test_the_demos_slow_step_gives_the_median_with_its_spread_and_how_often_the_poor_draft_lost(
        qtbot, tiny_session, recorded):
    from app.runs import RunContext
    from app.talk.demo_script import STEPS
    from app.talk.demo_steps import DemoResults, ViewPage

    config, events = recorded
    page = ViewPage(next(step for step in STEPS if step.key == "slow"))
    qtbot.addWidget(page)
    ctx = RunContext(tiny_session, PROMPT, None, config, scripted_runner(events, SCRIPTED_TPS, []))
    with qtbot.waitSignal(page.done, timeout=60_000):
        page.begin(ctx, DemoResults())
    assert page.last_headline == "0.60×" and not page.error
    assert page.last_detail.endswith("; median of 3 alternating runs each, 0.50–0.80×; slower in 3 of 3")

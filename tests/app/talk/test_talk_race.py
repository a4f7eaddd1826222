"""The race: two replies of the same prompt, a speedup figure, and the greedy identity check."""

from __future__ import annotations

from specdec_core.config import GenerationConfig


def test_race_produces_two_replies_and_a_speedup(qtbot, tiny_session):
    from app.runs import RunContext
    from app.talk.race import RaceView

    view = RaceView()
    qtbot.addWidget(view)
    view.show()
    view.pairs = 2
    ctx = RunContext(tiny_session, [{"role": "user", "content": "The capital of France"}], None,
                      GenerationConfig(max_new_tokens=16, gamma=3))
    started = []
    with qtbot.waitSignal(view.finished, timeout=60_000) as blocker:
        view.start(ctx)
        view.run.lane_started.connect(started.append)
    result = blocker.args[0]
    assert result is not None and result is view.result
    # the headline is the median of alternating runs (the second pair runs on first), with its spread shown
    assert started == ["on", "off 2", "on 2"] or started == ["off", "on", "on 2", "off 2"]
    assert result.spread.pairs == 2 and result.spread.low <= result.speedup <= result.spread.high
    assert view.spread.text().startswith("median of 2 alternating runs each")
    assert result.text_off and result.text_on
    assert result.speedup > 0 and result.tps_off > 0 and result.tps_on > 0
    assert result.identical is True  # greedy, float32: speculation must not change a token
    assert view.headline.text().endswith("×</span>")
    assert view.panes["off"].text.toPlainText() and view.panes["on"].text.toPlainText()
    # the curves share one clock: both start at (0, 0) and end at each reply's length
    x, y = view.curves["on"].getData()
    assert x[0] == 0 and y[-1] == view.run.traces["on"].rounds[-1].tokens_after


def finished_race(qtbot, tiny_session):
    """A RaceView that has run a short race on the tiny session."""
    from app.runs import RunContext
    from app.talk.race import RaceView

    view = RaceView()
    qtbot.addWidget(view)
    ctx = RunContext(tiny_session, [{"role": "user", "content": "Hello"}], None,
                      GenerationConfig(max_new_tokens=8, gamma=3))
    with qtbot.waitSignal(view.finished, timeout=60_000):
        view.start(ctx)
    return view


def test_replay_together_shows_both_replies_again(qtbot, tiny_session):
    view = finished_race(qtbot, tiny_session)
    view.replay_together()
    assert view.panes["on"].text.toPlainText() == ""
    qtbot.waitUntil(lambda: not view.timer.isActive(), timeout=10_000)
    assert view.panes["on"].text.trace.text == view.result.text_on


def test_the_race_redraws_a_curve_only_when_its_lane_has_new_rounds(qtbot, tiny_session):
    """Setting unchanged curves on every tick repainted the plot all race long, slowing the lanes it timed."""
    view = finished_race(qtbot, tiny_session)
    drawn = []
    curves = view.race_curves
    for name, curve in [*curves.faint.items(), *((f"bold {k}", c) for k, c in curves.bold.items())]:
        curve.setData = lambda *args, name=name: drawn.append(name)
    for _ in range(3):
        view._tick()  # the timer's tick, lanes unchanged
    assert drawn == []
    off = view.run.traces["off"]
    off.rounds.append(off.rounds[-1])
    view._tick()
    assert drawn == ["off"] + (["bold off"] if curves.run == 1 else [])


def test_the_race_buttons_stay_in_view_without_scrolling_and_fit_scale_2(qtbot):
    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QScrollArea

    from app.talk import TalkDialog
    from app.talk.race import RaceView

    view = RaceView()
    dialog = TalkDialog(view, "Race", None, False)
    qtbot.addWidget(dialog)
    dialog.resize(1024, 700)
    dialog.show()
    qtbot.wait(20)
    assert not dialog.findChild(QScrollArea).isAncestorOf(view.controls)
    for button in (view.run_button, view.stop_button, view.replay_button, view.png_button):
        assert button.isVisible() and button.mapTo(dialog, QPoint(0, button.height())).y() <= dialog.height()
    # QT_SCALE_FACTOR=2 on a 1024-pixel screen leaves 512 logical pixels
    assert view.controls.minimumSizeHint().width() <= 500

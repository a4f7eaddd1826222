"""Talk ▸ Export as web page from the app: the reply on screen when nothing was recorded, what a race and the slow
demo recorded, and a plain sentence when there is nothing to export."""

from __future__ import annotations

import json
import re

from specdec_core.config import GenerationConfig


def page_data(path) -> dict:
    text = path.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="recording">(.*?)</script>', text, re.S)
    assert found
    return json.loads(found.group(1))


def test_with_nothing_recorded_the_page_replays_the_reply_on_screen(make_window, send_and_wait, tmp_path):
    window = make_window()
    trace = send_and_wait(window, "Hello there")
    path = window.talk.export_web_page(str(tmp_path / "talk.html"))
    assert path is not None
    (scene,) = page_data(path)["scenes"]
    assert scene["kind"] == "reply" and scene["prompt"] == "Hello there"
    assert "".join(text for text, state, _, _ in scene["tokens"] if state != "rejected") == trace.text


def test_with_nothing_to_export_the_window_says_so(make_window, tmp_path):
    window = make_window(load=False)
    said = []
    window.error_shown.connect(said.append)
    assert window.talk.export_web_page(str(tmp_path / "talk.html")) is None
    assert said and said[0].startswith("Nothing to export yet")
    assert not (tmp_path / "talk.html").exists()


def test_a_finished_race_and_slow_demo_become_scenes_of_the_page(qtbot, tiny_session, tmp_path):
    from app.runs import RunContext
    from app.talk.race import RaceView
    from app.talk.recorder import Recorder, race_view_scene, slow_view_scene
    from app.talk.slow_demo import SlowDemoView

    ctx = RunContext(tiny_session, [{"role": "user", "content": "Hello"}], None,
                      GenerationConfig(max_new_tokens=8, gamma=3))
    race, slow = RaceView(), SlowDemoView()
    qtbot.addWidget(race)
    qtbot.addWidget(slow)
    race.pairs = 3
    with qtbot.waitSignal(race.finished, timeout=60_000):
        race.start(ctx)
    slow.ctx = ctx
    with qtbot.waitSignal(slow.finished, timeout=60_000):
        slow.start(ctx)
    recorder = Recorder()
    recorder.add(race_view_scene(race))
    recorder.add(slow_view_scene(slow))
    path = recorder.export(race, None, "", lambda _text: None, str(tmp_path / "talk.html"))
    race_scene, slow_scene = page_data(path)["scenes"]
    assert race_scene["headline"] == f"{race.result.speedup:.2f}×"
    assert len(race_scene["lanes"]) == 6 and sum(not lane["faint"] for lane in race_scene["lanes"]) == 2
    assert [lane["key"] for lane in slow_scene["lanes"]] == [lane.key for lane in slow.lanes]

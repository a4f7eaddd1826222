"""Talk ▸ Run the demo: the eight scripted steps driven end to end on tiny models, the keys that move through them,
the speaker's notes, and step 8's llama.cpp figure from a bench result (or the plain sentence when none exists)."""

from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt

from specdec_core.config import GenerationConfig

STEP_TIMEOUT_MS = 120_000


def bench_result(verifier: str, llama_alone: float | None, date: str = "2026-12-06T00:00:00+00:00") -> dict:
    lanes = [{"lane": "llama.cpp alone", "tokens_per_s": llama_alone} if llama_alone is not None else
             {"lane": "llama.cpp alone", "skipped": "no GGUF file"},
             {"lane": "llama.cpp + draft", "skipped": "the draft is not a GGUF file"}]
    return {"setup": {"verifier": verifier, "date": date}, "baseline": {"tokens_per_s": 7.5},
            "speculative": {"tokens_per_s": 11.25}, "speedup": 1.5, "llama_cpp": {"lanes": lanes}}


def write_bench(folder, name: str, result: dict):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(result), encoding="utf-8")
    return path


@pytest.fixture
def demo(qtbot, tiny_session):
    from app.runs import RunContext
    from app.talk import TalkDialog
    from app.talk.demo import DemoView
    from app.talk.demo_script import STEPS

    view = DemoView()
    dialog = TalkDialog(view, "The demo", None, False)
    qtbot.addWidget(dialog)
    dialog.resize(1280, 800)
    dialog.show()
    qtbot.waitExposed(dialog)
    ctx = RunContext(tiny_session, [{"role": "user", "content": STEPS[0].prompt}], None,
                      GenerationConfig(max_new_tokens=16, gamma=3))
    yield view, ctx
    view.stop()
    dialog.close()  # the dialog lives as long as the test: the view is its child


def wait_done(qtbot, view, index: int) -> None:
    qtbot.waitUntil(lambda: index in view.pages and view.pages[index].finished, timeout=STEP_TIMEOUT_MS)


def assert_in_view_where_it_fits(view) -> None:
    """A step that can shrink to the dialog (the least its page needs at its width, with the demo's title and
    headline) does not scroll: its plots shrink, and a taller step shown before it does not leave it that step's
    height (a QStackedWidget's height for a width is its tallest page's)."""
    from PySide6.QtWidgets import QApplication, QScrollArea

    QApplication.processEvents()
    area = view.window().findChild(QScrollArea)
    page = view.pages[view.index]
    needs = view.height() - page.height() + page.least_height(page.width())
    if needs <= area.viewport().height():
        assert area.verticalScrollBar().maximum() == 0, (view.index, needs, area.viewport().size())


def test_the_demo_reaches_every_step_with_its_figure_and_records_it(qtbot, demo, data_dir):
    from PySide6.QtTest import QTest

    from app.talk.demo import HEADLINE_POINTS
    from app.talk.demo_script import STEPS

    view, ctx = demo
    reached, scenes = [], []
    view.step_changed.connect(reached.append)
    view.recorded.connect(scenes.append)
    view.start(ctx)
    for index in range(len(STEPS)):
        wait_done(qtbot, view, index)
        page = view.pages[index]
        assert page.error == "", (STEPS[index].key, page.error)
        assert view.headline.text() and view.detail.text(), STEPS[index].key
        assert view.note.text() == STEPS[index].note
        assert_in_view_where_it_fits(view)
        QTest.keyClick(view.window(), Qt.Key.Key_Space if index % 2 else Qt.Key.Key_Right)
    assert reached == list(range(len(STEPS)))
    # On the last step (a few lines of text) the demo is as tall as that step needs, not as the race's page.
    race_height = view.pages[4].minimumSizeHint().height()
    assert view.stack.minimumSizeHint().height() < race_height
    assert view.headline.font().pointSizeF() >= 48
    assert HEADLINE_POINTS >= 48
    # Steps 1 and 3 ran the same fresh prompt, in single-turn contexts; speculation kept the verifier's text.
    assert view.results.traces["spec"].text == view.results.traces["alone"].text
    assert view.results.traces["spec"].baseline_tps == view.results.alone_tps
    assert [s["kind"] for s in scenes] == ["reply", "reply", "reply", "lanes", "lanes", "note", "note"]
    assert "No llama.cpp figure" in scenes[-1]["lines"][0]  # no bench result in this data folder


def test_back_shows_a_step_as_it_ended_without_running_it_again(qtbot, demo):
    view, ctx = demo
    view.start(ctx)
    wait_done(qtbot, view, 0)
    first = view.pages[0]
    text = first.pane.text.toPlainText()
    view.next()
    wait_done(qtbot, view, 1)
    view.back()
    assert view.index == 0 and view.pages[0] is first and not first.running
    assert first.pane.text.toPlainText() == text and view.headline.text() == first.last_headline


def test_the_replay_step_plays_its_best_round_and_holds_at_its_end(qtbot, saved_trace):
    from app.talk.demo_script import STEPS
    from app.talk.demo_steps import DemoResults, ReplayPage
    from app.web.recording import best_round

    page = ReplayPage(STEPS[3])
    qtbot.addWidget(page)
    page.replay.set_speed(8.0)
    page.begin(None, DemoResults(traces={"spec": saved_trace}))
    assert page.finished and page.error == "" and page.playing
    qtbot.waitUntil(lambda: not page.playing, timeout=30_000)
    state = page.replay.state
    assert state.index == page.last_beat
    assert state.rounds[state.step.round].index == best_round(saved_trace).index


def test_the_theory_step_shrunk_to_the_least_it_needs_keeps_its_rows_apart_and_its_plot_at_its_minimum(qtbot,
                                                                                                         saved_trace):
    from PySide6.QtWidgets import QApplication

    from app.talk.demo_script import STEPS
    from app.talk.demo_steps import DemoResults, TheoryPage

    page = TheoryPage(next(s for s in STEPS if s.key == "theory"))
    qtbot.addWidget(page)
    page.begin(None, DemoResults(traces={"spec": saved_trace}))
    assert page.finished and page.give > 0  # its plot can give up height before the demo scrolls
    page.show()
    page.resize(600, page.least_height(600))
    QApplication.processEvents()
    e = page.explainer
    plot, slider = e.plot, e.sliders["γ"]
    assert e.source.isHidden()  # the headline's words say where the figures come from
    assert plot.height() >= plot.minimumHeight()
    assert slider.mapTo(page, slider.rect().bottomLeft()).y() < plot.mapTo(page, plot.rect().topLeft()).y()
    assert plot.mapTo(page, plot.rect().bottomLeft()).y() <= page.height()  # the last row on the page
    assert page.least_height(600) < page.height_for(600)


def test_the_notes_window_follows_the_steps(qtbot, demo):
    from app.talk.demo_script import STEPS

    view, ctx = demo
    view.start(ctx)
    notes = view.show_notes_window()
    assert notes.note.text() == STEPS[0].note and STEPS[1].title in notes.next.text()
    wait_done(qtbot, view, 0)
    view.next()
    assert notes.step.text().startswith("Step 2 of 8") and notes.note.text() == STEPS[1].note
    view.stop()


def test_step_8_shows_the_newest_bench_result_for_this_verifier(tmp_path, monkeypatch):
    from app.talk.demo_script import BENCH_ENV, LlamaFigure, llama_figure

    monkeypatch.delenv(BENCH_ENV, raising=False)
    folder = tmp_path / "bench"
    write_bench(folder, "old.json", bench_result("SmolLM2-135M-Instruct", 30.0, "2026-11-01T00:00:00+00:00"))
    write_bench(folder, "new.json", bench_result("SmolLM2-135M-Instruct", 33.4))
    write_bench(folder, "other.json", bench_result("Qwen2.5-Coder-1.5B", 9.0, "2026-12-07T00:00:00+00:00"))
    write_bench(folder, "plain.json", {"setup": {"verifier": "SmolLM2-135M-Instruct"}})  # no llama.cpp lanes
    figure = llama_figure("SmolLM2-135M-Instruct", tmp_path)
    assert isinstance(figure, LlamaFigure) and figure.path.name == "new.json"
    assert "llama.cpp alone: 33.4 tok/s" in figure.lines()
    assert any("no figure (the draft is not a GGUF file)" in line for line in figure.lines())


def test_step_8_says_plainly_when_there_is_no_llama_cpp_figure(tmp_path, monkeypatch):
    from app.talk.demo_script import BENCH_ENV, llama_figure

    monkeypatch.delenv(BENCH_ENV, raising=False)
    assert llama_figure("SmolLM2-135M-Instruct", tmp_path).startswith("No llama.cpp figure: no bench result")
    write_bench(tmp_path / "bench", "other.json", bench_result("Qwen2.5-Coder-1.5B", 9.0))
    words = llama_figure("SmolLM2-135M-Instruct", tmp_path)
    assert isinstance(words, str) and "are for Qwen2.5-Coder-1.5B" in words
    monkeypatch.setenv(BENCH_ENV, str(write_bench(tmp_path / "elsewhere", "x.json", bench_result("tiny", None))))
    assert llama_figure("tiny", tmp_path).startswith("No llama.cpp figure")  # llama.cpp alone never ran


def test_the_llama_page_shows_a_bench_result_from_the_data_folder(qtbot, demo, data_dir, monkeypatch):
    from app.talk.demo_script import BENCH_ENV, STEPS
    from app.talk.demo_steps import DemoResults, LlamaPage

    monkeypatch.delenv(BENCH_ENV, raising=False)
    view, ctx = demo
    write_bench(data_dir / "bench", "llama.json", bench_result(ctx.session.verifier_name, 33.4))
    page = LlamaPage(STEPS[7])
    qtbot.addWidget(page)
    page.begin(ctx, DemoResults())
    assert page.finished and "llama.cpp alone: 33.4 tok/s" in page.text.text()
    assert page.last_headline == "11.2 vs 33.4" and "specdec speculative vs llama.cpp alone" in page.last_detail


def test_the_talk_menu_runs_the_demo_on_the_windows_models_and_records_it(make_window, qtbot):
    from app.talk.demo_script import STEPS

    window = make_window()
    action = next(a for a in window.talk.menu.actions() if a.text().startswith("Run the demo"))
    assert action.shortcut().toString() == "F7"
    dialog = window.talk.open_demo()
    view = dialog.view
    wait_done(qtbot, view, 0)
    assert view.pages[0].error == "" and view.pages[0].prompt == STEPS[0].prompt
    qtbot.waitUntil(lambda: bool(window.talk.recorder.recording), timeout=5000)
    assert window.talk.recorder.recording.scenes[0]["title"] == STEPS[0].title
    dialog.close()


def test_the_poor_drafter_of_what_makes_it_slow_drafts_every_round_whatever_the_cost_model_says(tiny_session):
    from app.runs import RunContext
    from app.talk.slow_lanes import slow_lanes
    from specdec_core.engine import Controls
    from specdec_core.events import DraftStop, RoundVerified

    ctx = RunContext(tiny_session, [{"role": "user", "content": "Hello"}], None,
                      GenerationConfig(max_new_tokens=24, gamma=3, cost_aware=True, adaptive=True, tree_nodes=-1))
    weak = next(lane for lane in slow_lanes(ctx.session, ctx.config) if lane.key == "weak")
    assert "drafting forced" in weak.title
    rounds = [ev for ev in weak.run(ctx.prompt_ids(), ctx.config, Controls()) if isinstance(ev, RoundVerified)]
    full = [r for r in rounds if r.stop != DraftStop.MAX_TOKENS]  # the last few are cut by the reply's length
    assert len(full) > 2 and all(len(r.drafted) == 3 and not r.tree for r in full)

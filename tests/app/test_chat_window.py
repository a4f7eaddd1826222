"""The window on tiny random models: what a user sees matches what the engine did."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextCursor

from app.theme import STATE_STYLE
from specdec_core.events import Finished, RoundVerified, TokenCommitted, TokenRejected, TokenState


def rendered_states(view) -> list[tuple[str, str, bool]]:
    """(text, background rgba, struck out) of each rendered token, read back from the QTextDocument."""
    out = []
    doc = view.document()
    ends = view._starts[1:] + [doc.characterCount() - 1]
    for start, end in zip(view._starts, ends):
        cursor = QTextCursor(doc)
        cursor.setPosition(start)
        cursor.setPosition(end, QTextCursor.MoveMode.KeepAnchor)
        fmt = QTextCursor(doc)
        fmt.setPosition(start + 1)
        cf = fmt.charFormat()
        bg = cf.background().color().rgba() if cf.background().style() != Qt.BrushStyle.NoBrush else None
        out.append((cursor.selectedText().replace("\u2029", "\n"), bg, cf.fontStrikeOut()))
    return out


def expected_background(state: str):
    bg, _ = STATE_STYLE[state]
    return bg.rgba() if bg is not None else None


def test_reply_tokens_carry_the_engines_states(make_window, qtbot, send_and_wait):
    w = make_window(max_new_tokens=40)
    events = []
    w.generation_event.connect(events.append)
    trace = send_and_wait(w, "Tell me about Paris")

    token_events = [e for e in events if isinstance(e, (TokenCommitted, TokenRejected))]
    assert token_events, "the reply streamed no tokens"
    assert [t.state for t in trace.tokens] == [TokenState(e.state).value for e in token_events]
    assert [t.token_id for t in trace.tokens] == [e.token_id for e in token_events]
    finished = [e for e in events if isinstance(e, Finished)][-1]
    assert w.conv.messages[-1].content == finished.text

    # A random draft disagrees with a random verifier: the reply shows draft and verifier tokens.
    states = {t.state for t in trace.tokens}
    assert TokenState.REJECTED.value in states and TokenState.CORRECTED.value in states

    # What the document shows: every non-empty token, in arrival order, with its state's format.
    bubble = w.chat.bubbles[-1]
    view = bubble.body
    shown = [trace.tokens[i] for i in view._token_index]
    assert shown == [t for t in trace.tokens if t.text]
    fenced = "`" in trace.text  # a code fence hides whole lines (app/markdown.py): text is compared elsewhere
    for tok, (text, bg, struck) in zip(shown, rendered_states(view)):
        want = tok.text.replace("\n", "↵") if tok.state == "rejected" else tok.text
        if not fenced and not any(c in tok.text for c in "*#-+`"):  # Markdown markers are hidden or replaced
            assert text == want
        assert bg == expected_background(tok.state), tok
        assert struck == (tok.state == TokenState.REJECTED.value)

    # Rounds reach the graphs, and the tooltip names the token's round and probabilities.
    assert w.graphs.live.figures.t.n == len(trace.rounds) == len([e for e in events if isinstance(e, RoundVerified)])
    from app.token_view import token_tooltip

    tip = token_tooltip(shown[0], trace)
    assert "round" in tip and "verifier probability" in tip and "drafting stopped" in tip
    # hovering the middle of a token finds that token
    k = len(shown) // 2
    cursor = QTextCursor(view.document())
    cursor.setPosition(view._starts[k])
    rect = view.cursorRect(cursor)
    from PySide6.QtCore import QPointF

    assert view.token_at(QPointF(rect.center().x() + 2, rect.center().y())) is shown[k]


def test_colour_switch_hides_rejected_and_keeps_the_reply(make_window, send_and_wait):
    w = make_window()
    trace = send_and_wait(w, "Hello")
    view = w.chat.bubbles[-1].body
    w.legend.check.setChecked(False)
    assert view.toPlainText() == trace.text
    assert all(bg is None and not struck for _t, bg, struck in rendered_states(view))
    w.legend.check.setChecked(True)
    assert any(struck for _t, _bg, struck in rendered_states(view))


def test_speculation_toggle_gives_plain_tokens(make_window, send_and_wait):
    w = make_window()
    w.spec_button.setChecked(False)
    assert w.spec_button.text() == "Speculation OFF"
    trace = send_and_wait(w, "Hello")
    assert trace.tokens and {t.state for t in trace.tokens} == {TokenState.PLAIN.value}
    assert all(r.drafted == 0 for r in trace.rounds)
    # A reply with speculation off is one more verifier-alone measurement (app/speedup.py).
    sample = w.baselines.samples[-1]
    assert sample.tokens_per_s == trace.get_stats().tokens_per_s and sample.source == "speculation-off reply"
    assert sample.prompt_tokens == trace.prompt_tokens > 0


def test_speculation_toggle_applies_mid_reply(make_window, qtbot, send_and_wait):
    w = make_window(max_new_tokens=120)
    switched = []

    def on_event(ev):
        if isinstance(ev, RoundVerified) and ev.round_index == 2 and not switched:
            switched.append(True)
            w.spec_button.setChecked(False)  # the shortcut's action does the same (Ctrl+D)

    w.generation_event.connect(on_event)
    trace = send_and_wait(w, "Count with me")
    drafted = [r.drafted for r in trace.rounds]
    assert drafted[0] > 0, "speculation was on at the start"
    assert drafted[-1] == 0 and trace.tokens[-1].state == TokenState.PLAIN.value


def test_stop_ends_the_reply(make_window, qtbot):
    w = make_window(max_new_tokens=2000)
    stopped = []

    def on_event(ev):
        if isinstance(ev, TokenCommitted) and not stopped:
            stopped.append(time.perf_counter())
            qtbot.keyClick(w, Qt.Key.Key_Escape)

    w.generation_event.connect(on_event)
    with qtbot.waitSignal(w.reply_finished, timeout=60_000) as blocker:
        w.send("Go on for a long time")
    trace = blocker.args[0]
    assert trace.stop_reason == "cancelled"
    assert len([t for t in trace.tokens if t.in_reply]) < 2000
    assert w.busy == "" and w.send_button.isVisible()
    assert "stopped" in w.chat.bubbles[-1].footer.text()


def test_conversation_survives_save_and_reopen(make_window, data_dir, send_and_wait, qtbot):
    w = make_window()
    trace = send_and_wait(w, "First question")
    trace2 = send_and_wait(w, "Second question")
    conv_id = w.conv.id
    assert w.conv_list.count() == 1 and w.conv_list.item(0).text() == "First question"

    w2 = make_window(load=False)
    # the new window's own (unsaved) chat on top, then the saved one
    assert w2.conv_list.count() == 2 and w2.conv_list.item(0).text() == "New chat"
    w2.sidebar.open_item(w2.conv_list.item(1))
    qtbot.waitUntil(lambda: w2.conv.id == conv_id, timeout=10_000)  # read on the store's thread
    assert w2.conv_list.count() == 1  # the empty new chat was never saved: opening another drops its row
    assert w2.conv.id == conv_id
    assert [m.role for m in w2.conv.messages] == ["user", "assistant", "user", "assistant"]
    reopened = w2.conv.messages[3].trace
    assert [(t.text, t.state, t.round, t.position) for t in reopened.tokens] == \
        [(t.text, t.state, t.round, t.position) for t in trace2.tokens]
    assert reopened.stats == trace2.stats and len(reopened.rounds) == len(trace2.rounds)
    # reopened with its colours and its graphs
    view = w2.chat.bubbles[1].body
    assert [(t, s) for t, _b, s in rendered_states(view)] == \
        [(t.text.replace("\n", "↵") if t.state == "rejected" else t.text, t.state == "rejected")
         for t in trace.tokens if t.text]
    assert w2.graphs.live.figures.t.n == len(trace2.rounds)
    assert "tokens" in w2.chat.bubbles[3].footer.text()


def other_tokenizer():
    """A BPE tokenizer trained on other text: the same ids mean different strings."""
    import tiny
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=list(reversed(tiny.SPECIALS)),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()[::-1])
    tok.train_from_iterator([line.upper()[::-1] for line in tiny.CORPUS], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = tiny.CHATML
    return fast


def test_a_draft_with_another_tokenizer_is_paired_through_the_text(make_window, qtbot, tmp_path):
    import tiny

    draft = tiny.save_model(tmp_path / "other-draft", "llama", other_tokenizer(), seed=3, layers=1, hidden=16)
    w = make_window(load=False, draft=str(draft))
    with qtbot.waitSignal(w.models_loaded, timeout=60_000) as blocker:
        w.loader.load()
    session = blocker.args[0]
    assert session.verdict_ok and session.drafter is not None
    assert "token-level intersection" in session.drafter.name
    assert w.settings_panel.verdict.text().startswith("compatible: different vocabularies")


def test_incompatible_pair_shows_the_doctors_reason(make_window, qtbot, tmp_path):
    import tiny

    draft = tiny.save_wide_head(tmp_path / "wide-head", tiny.make_tokenizer())  # made for a verifier 48 wide
    w = make_window(load=False, draft=str(draft))
    errors = []
    w.error_shown.connect(errors.append)
    with qtbot.waitSignal(w.models_loaded, timeout=60_000) as blocker:
        w.loader.load()
    session = blocker.args[0]
    assert not session.verdict_ok and session.drafter is None
    verdict = w.settings_panel.verdict.text()
    assert verdict.startswith("incompatible:") and len(verdict) > len("incompatible: ")
    assert errors and verdict in errors[0]
    # the app keeps working with the verifier alone
    qtbot.waitUntil(lambda: w.busy == "", timeout=5000)
    with qtbot.waitSignal(w.reply_finished, timeout=60_000) as b:
        w.send("Still there?")
    assert {t.state for t in b.args[0].tokens} == {"plain"}


def test_prompt_too_long_is_a_message_and_the_conversation_is_kept(make_window, qtbot):
    w = make_window()
    errors = []
    w.error_shown.connect(errors.append)
    with qtbot.waitSignal(w.reply_finished, timeout=60_000):
        w.send("Paris " * 2000)
    assert errors and "context" in errors[-1]
    assert [m.role for m in w.conv.messages] == ["user"]  # no empty reply left behind
    assert w.busy == ""


def test_graphs_receive_the_rounds(make_window, send_and_wait):
    w = make_window(max_new_tokens=40, gamma=3)
    trace = send_and_wait(w, "Graphs please")
    g = w.graphs.live
    n = len(trace.rounds)
    assert g.figures.t.n == n
    x, y = g.panels["tps"].curve.getData()
    assert len(x) == n and y[-1] > 0
    x, y = g.panels["acc"].accepted_curve.getData()
    assert list(y) == [r.accepted for r in trace.rounds]
    assert sum(g.figures.hist) == sum(1 for r in trace.rounds if r.drafted)
    assert g.figures.alpha == trace.get_stats().acceptance_rate
    x, y = g.theory.theory_curve.getData()
    assert len(x) == 16  # predicted speedup for γ = 1..16 with the measured α and c
    assert g.theory.break_even.value() == 1.0


def test_close_while_generating_cancels_the_reply_at_its_next_step(make_window, qtbot):
    w = make_window(max_new_tokens=5000)
    with qtbot.waitSignal(w.generation_event, timeout=60_000):
        w.send("A long one")
    conv_id, store = w.conv.id, w.store
    w.close()
    from app.worker import live_workers

    # The worker stops at its next step (well under a second alone on 2 cores); the wait only bounds a hang.
    qtbot.waitUntil(lambda: not live_workers(), timeout=30_000)
    reply = store.load(conv_id).messages[-1]
    assert reply.role == "assistant" and reply.trace.stop_reason == "cancelled"  # not run to its end


def test_a_reply_ending_after_the_window_is_gone_is_saved_without_touching_widgets(make_window, qtbot):
    import shiboken6

    from app.worker import live_workers

    w = make_window(max_new_tokens=5000)
    w.send("A long one")
    qtbot.waitUntil(lambda: w.replies.trace is not None and len(w.replies.trace.tokens) >= 3, timeout=60_000)
    conv_id, store = w.conv.id, w.store
    w.close()  # aborts the reply; its last events and `finished` are still queued for the GUI thread
    shiboken6.delete(w.chat)  # its widgets are gone (as after qtbot's teardown) before those signals arrive
    qtbot.waitUntil(lambda: not live_workers(), timeout=5000)
    qtbot.wait(100)  # deliver them: pytest-qt fails the test on any exception raised in a slot
    saved = store.load(conv_id)
    assert [m.role for m in saved.messages] == ["user", "assistant"]
    assert saved.messages[1].content and saved.messages[1].trace.stop_reason == "cancelled"


def test_regenerate_and_edit_and_resend(make_window, qtbot, send_and_wait):
    w = make_window()
    send_and_wait(w, "First")
    send_and_wait(w, "Second")
    assert len(w.conv.messages) == 4
    with qtbot.waitSignal(w.reply_finished, timeout=60_000):
        w.regenerate(w.chat.bubbles[3])
    assert [m.role for m in w.conv.messages] == ["user", "assistant", "user", "assistant"]
    assert len(w.chat.bubbles) == 4
    # edit the second question: it and everything after leave the chat; its text is back in the composer
    w.conversations.edit(w.chat.bubbles[2])
    assert w.composer.toPlainText() == "Second" and len(w.conv.messages) == 2
    w.composer.setPlainText("Second, edited")
    with qtbot.waitSignal(w.reply_finished, timeout=60_000):
        qtbot.keyClick(w.composer, Qt.Key.Key_Return)
    assert w.conv.messages[2].content == "Second, edited" and len(w.conv.messages) == 4


def test_shift_enter_is_a_new_line(make_window, qtbot):
    w = make_window(load=False)
    qtbot.keyClicks(w.composer, "line one")
    qtbot.keyClick(w.composer, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(w.composer, "line two")
    assert w.composer.toPlainText() == "line one\nline two" and not w.conv.messages


def test_race_runs_off_then_on_and_compares_greedy_texts(make_window, qtbot):
    w = make_window(max_new_tokens=24)
    w.composer.setPlainText("Race me")
    with qtbot.waitSignal(w.race_finished, timeout=120_000) as done:
        w.racer.race()
    off, on = w.graphs.race.traces["off"], w.graphs.race.traces["on"]
    assert {t.state for t in off.tokens} == {"plain"} and on.speculative
    assert off.text == on.text and "identical" in done.args[0]
    assert len(w.graphs.race.curves.faint["on"].getData()[0]) == len(on.rounds) + 1
    assert not w.conv.messages  # a race is a measurement, not a chat turn
    # every pair's off run joins the baselines, marked as run with the live graphs hidden behind the Race tab
    assert len(w.graphs.race.traces) == 2 * w.racer.pairs and f"median of {w.racer.pairs} alternating" in done.args[0]
    assert [s.source for s in w.baselines.samples] == ["race"] * w.racer.pairs
    assert not any(s.graphs_live for s in w.baselines.samples)
    assert "live graphs hidden" in w.baselines.pick(on.prompt_tokens, graphs_live=False).how


def test_a_race_of_the_last_replys_prompt_starts_from_the_cost_model_that_reply_started_from(make_window):
    from app.runs import chat_planner
    from app.session import config_from_settings, reply_events
    from specdec_core.engine import Controls

    w = make_window(max_new_tokens=16)
    session, messages = w.session, [{"role": "user", "content": "Race me"}]
    engine = session.engine
    engine.planner.priced_out = 7  # a pause under way as the reply begins
    list(reply_events(session, messages, None, config_from_settings(w.settings), Controls()))
    raced = chat_planner(session, messages, None)
    assert raced is not engine.planner and raced.priced_out == 7  # what the reply began with, not what it learnt
    assert chat_planner(session, [{"role": "user", "content": "Another prompt"}], None) is engine.planner
    assert chat_planner(session, messages, "a system prompt") is engine.planner

def slow_load(request, progress, cancelled, previous=None, steps: list[int] | None = None):
    """Stands in for a long model load: reports progress (which raises once cancelled), each step noted in `steps`."""
    from app.session import LoadStep

    for i in range(600):
        if steps is not None:
            steps.append(i)
        progress(LoadStep("verifier", "downloading", i / 600))
        time.sleep(0.05)
    raise AssertionError("the load was not cancelled")


def test_cancel_load_keeps_the_app_usable(make_window, qtbot, monkeypatch):
    import app.session

    w = make_window()
    loaded = w.session
    monkeypatch.setattr(app.session, "load_session", slow_load)
    w.loader.load()
    qtbot.waitUntil(lambda: w.progress.isVisible() and w.progress.maximum() == 1000, timeout=5000)
    assert w.cancel_load_button.isVisible()
    w.cancel_load_button.click()
    qtbot.waitUntil(lambda: w.busy == "", timeout=2000)
    assert w.session is loaded and not w.progress.isVisible()


def test_close_while_loading_cancels_the_load_at_its_next_step(make_window, qtbot, monkeypatch):
    import functools

    import app.session

    w = make_window(load=False)
    steps: list[int] = []
    monkeypatch.setattr(app.session, "load_session", functools.partial(slow_load, steps=steps))
    w.loader.load()
    qtbot.waitUntil(lambda: w.busy == "load", timeout=2000)
    w.close()
    from app.worker import live_workers

    qtbot.waitUntil(lambda: not live_workers(), timeout=30_000)  # bounds a hang; the load runs 30 s uncancelled
    assert steps and len(steps) < 600  # the load stopped at a progress report, not at its end


def test_settings_panel_changes_persist(make_window, data_dir):
    from app.settings import Settings

    w = make_window(load=False)
    w.settings_panel.gamma.setValue(6)
    w.settings_panel.temperature.setValue(0.7)
    w.settings_panel.use_lookup.setChecked(True)
    w.spec_button.setChecked(False)
    saved = Settings.load(data_dir)
    assert (saved.gamma, saved.temperature, saved.drafter, saved.speculate) == (6, 0.7, "prompt-lookup", False)
    assert w.settings_panel.load_button.text().endswith("●")  # a model change asks for a reload


def test_choosing_both_drafters_loads_a_hybrid_with_its_draft_token_cap(make_window, qtbot, send_and_wait,
                                                                        data_dir):
    from app.settings import Settings
    from specdec_core.drafting.drafters import HybridDrafter, ModelDrafter

    w = make_window()
    assert not w.settings_panel.draft_tokens.isEnabled()  # "Draft model" is chosen
    w.settings_panel.use_hybrid.setChecked(True)
    w.settings_panel.draft_tokens.setValue(2)
    assert w.settings_panel.draft_tokens.isEnabled() and w.settings_panel.draft_row.isEnabled()
    saved = Settings.load(data_dir)
    assert (saved.drafter, saved.draft_tokens) == ("hybrid", 2)
    with qtbot.waitSignal(w.models_loaded, timeout=60_000):
        w.loader.load()
    qtbot.waitUntil(lambda: w.busy == "", timeout=5000)
    drafter = w.session.drafter
    assert isinstance(drafter, HybridDrafter) and isinstance(drafter.model_drafter, ModelDrafter)
    assert drafter.model_tokens == 2
    assert "+ prompt lookup" in w.model_label.text()
    trace = send_and_wait(w, "the robot said the robot said the robot")
    assert trace.stats["drafted"] > 0


def test_garbage_is_collected_on_the_gui_thread_only_while_a_window_is_open(make_window, qtbot):
    import gc
    import threading

    from app import gc_pin

    gc.enable()  # as in the app before its window opens (the tests' own fixture keeps it off otherwise)
    w = make_window(load=False)
    assert not gc.isenabled() and gc_pin.collector().active
    finalised_on: list[str] = []

    class Cyclic:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            finalised_on.append(threading.current_thread().name)

    def allocate_like_a_worker() -> None:  # far past the young generation's threshold
        Cyclic()
        junk = [[i] for i in range(20 * gc.get_threshold()[0])]
        del junk

    worker = threading.Thread(target=allocate_like_a_worker, name="worker")
    worker.start()
    worker.join()
    assert finalised_on == []  # the worker's allocations did not start a collection there
    qtbot.waitUntil(lambda: bool(finalised_on), timeout=3000)  # the GUI thread's timer collected it
    assert finalised_on == [threading.main_thread().name]
    w.close()
    assert gc.isenabled() and not gc_pin.collector().active


def test_the_gui_thread_collector_makes_a_full_collection_only_when_the_old_generation_grew():
    import gc

    from app.gc_pin import GuiThreadCollector

    gc.enable()  # as in the app before its window opens (the tests' own fixture keeps it off otherwise)
    c = GuiThreadCollector()
    c.acquire()
    try:
        gen0, _, _ = gc.get_threshold()
        keep = [[i] for i in range(2 * gen0)]
        assert c.collect() == 0  # only the young generation is past its threshold
        assert c.collect() is None  # nothing allocated since
        c._long_lived = 10**9  # as if the last full collection had left a huge old generation
        while gc.get_count()[2] <= gc.get_threshold()[2]:  # young collections until both older ones pass
            keep.append([[i] for i in range(2 * gen0)])  # well past the threshold (frees may lower the count)
            assert c.collect() in (0, 1)
        c._long_lived = 0  # now it has grown by more than a quarter
        keep.append([[i] for i in range(2 * gen0)])
        assert c.collect() == 2
    finally:
        c.release()
    assert gc.isenabled()


def test_the_gui_thread_collector_collects_nothing_while_paused_and_thaws_at_the_next_pause():
    import gc

    from app.gc_pin import GuiThreadCollector

    class Cyclic:
        def __init__(self) -> None:
            self.me = self

    gc.enable()  # as in the app before its window opens (the tests' own fixture keeps it off otherwise)
    c = GuiThreadCollector()
    c.acquire()
    try:
        c.pause()
        ghost = Cyclic()
        keep = [[i] for i in range(2 * gc.get_threshold()[0])]
        assert c.collect() is None
        c.freeze()  # a conversation arrived: everything alive now is out of the collector's sight
        alive = {id(o) for generation in range(3) for o in gc.get_objects(generation)}
        assert id(ghost) not in alive and id(keep) not in alive and gc.get_freeze_count() > 0
        c.pause()  # the next one is opened: the last one's objects are the collector's again
        alive = {id(o) for generation in range(3) for o in gc.get_objects(generation)}
        assert id(ghost) in alive and gc.get_freeze_count() == 0
        c.freeze()
    finally:
        c.release()
    assert gc.get_freeze_count() == 0 and not c.paused and gc.isenabled()


def test_closing_a_window_keeps_the_modules_frozen_and_still_collects_its_own_garbage():
    import gc

    from app.gc_pin import GuiThreadCollector

    finalised: list[str] = []

    class Cyclic:
        def __init__(self, name: str) -> None:
            self.me, self.name = self, name

        def __del__(self) -> None:
            finalised.append(self.name)

    gc.collect()
    gc.freeze()  # what the app freezes before its window opens (gc_pin.freeze_what_is_loaded)
    loaded = gc.get_freeze_count()
    try:
        c = GuiThreadCollector()
        c.acquire()
        Cyclic("window's")
        c.release()  # no conversation was opened: nothing of the window's was frozen
        assert finalised == ["window's"] and gc.get_freeze_count() == loaded

        c.acquire()
        c.pause()
        Cyclic("chat's")
        c.freeze()  # a conversation arrived: its garbage is frozen with everything else
        c.release()  # so closing thaws all, and collects it on this thread
        assert finalised == ["window's", "chat's"] and gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()  # the suite freezes its modules again after each test (conftest.py)


def test_graphs_and_bubbles_fit_the_default_window_after_a_reply(make_window, qtbot, send_and_wait):
    w = make_window(max_new_tokens=24)  # the tiny models' names are long temp-folder paths
    send_and_wait(w, "Tell me about Paris")
    w.graphs.live.flush()
    qtbot.wait(50)  # let the layout settle
    live = w.graphs.live
    for plot in (live.plots[name] for name in ("tps", "acc", "hist", "pos", "time", "theory")):
        title = plot.getPlotItem().titleLabel.text
        assert plot.getPlotItem().minimumWidth() <= plot.viewport().width(), f"clipped plot: {title}"
    assert w.graphs.width() <= w.right_dock.width()
    viewport = w.chat.viewport().width()
    for bubble in w.chat.bubbles:
        right = bubble.mapTo(w.chat.viewport(), bubble.rect().topRight()).x()
        assert right <= viewport, f"a {bubble.role} bubble runs past the chat's right edge"
        body = bubble.body
        assert body.height() >= body.document().size().height(), "the reply's last lines are cut off"
        if bubble.footer.isVisible():
            assert bubble.footer.y() >= body.geometry().bottom(), "the footer covers the reply's text"


def test_a_narrow_bubble_keeps_its_header_on_one_line_and_grows_to_hold_its_footer(qtbot):
    from app.chat_view import ChatView
    from app.trace import ReplyTrace, TokenRecord

    chat = ChatView()
    qtbot.addWidget(chat)
    chat.resize(520, 700)
    chat.show()
    trace = ReplyTrace(verifier="A-verifier-with-a-rather-long-name-Instruct",
                       drafter="a-draft-with-a-long-name + prompt lookup", stop_reason="max_tokens",
                       error="the footer wraps too: " + "a long message " * 12)
    words = "Honey bees live in colonies of up to sixty thousand workers and a single queen. " * 4
    trace.tokens = [TokenRecord(0, word + " ", "plain", 0, 0, None, None, None) for word in words.split()]
    bubble = chat.add_assistant(trace, 1)
    body, footer = bubble.body, bubble.footer
    # the layout settles over a few event-loop turns (slower beside another test process)
    line = bubble.meta.fontMetrics().height()

    def settled() -> bool:
        return bubble.meta.height() < line * 1.5 and body.height() >= body.document().size().height() and (
            not footer.isVisible() or footer.y() >= body.geometry().bottom())

    qtbot.waitUntil(settled, timeout=5000)
    assert bubble.meta.height() < line * 1.5  # the header is one line ...
    # ... and the whole of it is in its tooltip
    assert bubble.meta.is_elided() and "A-verifier-with-a-rather-long-name" in bubble.meta.toolTip()
    assert body.height() >= body.document().size().height()
    if footer.isVisible():
        assert footer.y() >= body.geometry().bottom(), "the footer covers the reply's text"
        assert footer.geometry().bottom() <= bubble.height()

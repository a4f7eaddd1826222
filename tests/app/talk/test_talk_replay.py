"""Replay: a saved trace played beat by beat, in order, ends in the reply's own text; GIF export."""

from __future__ import annotations

from app.talk.rounds import Beat, ReplayState, rounds_of


def test_rounds_regroup_every_token_in_order(saved_trace):
    stories = rounds_of(saved_trace)
    assert [s.index for s in stories] == sorted({t.round for t in saved_trace.tokens})
    regrouped = [t for s in stories for t in (*s.drafted, *([s.emitted] if s.emitted else []))]
    assert sorted(map(id, regrouped)) == sorted(map(id, saved_trace.tokens))
    assert stories[-1].text_after == saved_trace.text
    # the trace has both outcomes, so the replay shows rejections and corrections
    assert any(s.first_rejected is not None for s in stories)


def test_state_steps_forward_through_every_beat_and_back(saved_trace):
    state = ReplayState(saved_trace)
    seen = []
    texts = [state.committed_text()]
    while state.step_forward():
        seen.append(state.step)
        texts.append(state.committed_text())
    assert seen == state.steps and state.at_end
    assert state.committed_text() == saved_trace.text
    # the committed text only ever grows, and each round starts with its draft beats
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))
    for story_index, story in enumerate(state.rounds):
        beats = [s.beat for s in state.steps if s.round == story_index]
        assert beats[-1] is Beat.RESOLVE
        assert beats.count(Beat.DRAFT) == len(story.drafted)
    while state.step_back():
        pass
    assert state.at_start and state.committed_text() == ""


def test_round_jumps_land_on_resolved_rounds(saved_trace):
    state = ReplayState(saved_trace)
    for k in range(len(state.rounds)):
        assert state.next_round()
        assert state.step.beat is Beat.RESOLVE and state.step.round == k
    assert not state.next_round()
    assert state.prev_round() and state.step.round == len(state.rounds) - 2


def test_replay_widget_plays_a_saved_trace_to_its_final_text(qtbot, saved_trace):
    from app.talk.replay import ReplayWidget

    w = ReplayWidget(saved_trace)
    qtbot.addWidget(w)
    w.resize(1200, 760)
    w.show()
    indices = []
    w.beat_changed.connect(indices.append)
    while w.step_forward():
        pass
    assert indices[:-1] == list(range(len(w.state)))  # one beat at a time, in order
    assert len(w.state.committed_tokens()) == len(saved_trace.tokens)  # rejected drafts shown too
    assert w.reply.toPlainText()
    assert w.state.committed_text() == saved_trace.text
    # the numbers panel shows the last round's drafted tokens plus the verifier's own token
    story = w.state.story
    assert w.numbers.rowCount() == len(story.drafted) + (story.emitted is not None)


def test_replay_plays_on_its_timer_and_pauses_at_the_end(qtbot, saved_trace):
    from app.talk.replay import ReplayWidget

    w = ReplayWidget(saved_trace)
    qtbot.addWidget(w)
    w.show()
    w.set_speed(1000.0)  # 20 ms beats
    w.next_round()
    w.next_round()
    w.state.seek(len(w.state) - 4)
    w.play()
    assert w.playing
    qtbot.waitUntil(lambda: w.state.at_end and not w.playing, timeout=5000)
    assert w.state.committed_text() == saved_trace.text


def test_gif_export_writes_one_frame_per_beat(qtbot, saved_trace, tmp_path):
    from PIL import Image

    from app.talk.export import export_gif
    from app.talk.replay import ReplayWidget
    from app.trace import ReplyTrace

    short = ReplyTrace.from_dict(saved_trace.to_dict())
    first_rounds = {t.round for t in short.tokens}
    keep = sorted(first_rounds)[:3]
    short.tokens = [t for t in short.tokens if t.round in keep]
    short.rounds = [r for r in short.rounds if r.index in keep]
    w = ReplayWidget(short)
    qtbot.addWidget(w)
    w.resize(900, 600)
    w.show()
    path = tmp_path / "replay.gif"
    n = export_gif(w, path, max_width=600)
    assert n == len(w.state) > 3
    with Image.open(path) as im:
        assert im.n_frames == n
    assert w.state.index == -1  # left where it was


def _tree_trace():
    """A probe step, a round whose one draft is accepted (plus a bonus), and a tree round of 3 candidates whose
    main line of 2 keeps 1 (then the verifier's correction)."""
    from app.trace import ReplyTrace, RoundRecord, TokenRecord

    def tok(text, state, rnd, pos):
        return TokenRecord(0, text, state, rnd, pos, 0.5, 0.6, 1.0)

    node = {"token_id": 0, "text": "x", "parent": -1, "draft_prob": 0.5, "target_prob": 0.6, "accept_prob": 1.0,
            "accepted": True}
    rounds = [RoundRecord(0, 0, 0, "plain", "probe", 0, 0.0, 0.01, 0.0, 0.01, 1),
              RoundRecord(1, 1, 1, "bonus", "gamma", 1, 0.001, 0.01, 0.0, 0.02, 3),
              RoundRecord(2, 2, 1, "corrected", "tree", 4, 0.002, 0.01, 0.0, 0.03, 5,
                          tree=[node, {**node, "parent": 0, "accepted": False}, {**node, "accepted": False}],
                          emitted_token_id=7)]
    tokens = [tok("A", "plain", 0, 0), tok(" b", "accepted", 1, 0), tok(" c", "bonus", 1, 1),
              tok(" d", "accepted", 2, 0), tok(" e", "rejected", 2, 1), tok(" f", "corrected", 2, 1)]
    return ReplyTrace(tokens=tokens, rounds=rounds, stats={}, stop_reason="eos")


def test_replay_words_name_no_identifiers_and_count_one_draft_and_trees_in_words():
    from app.talk.rounds import round_info

    state = ReplayState(_tree_trace())
    captions = [state.caption()]
    while state.step_forward():
        captions.append(state.caption())
    words = " ".join(captions + [round_info(r) for r in state.trace.rounds])
    for identifier in ("probe)", "draft_cap", "stop:", "all 1 ", "All 1 ", "1 drafts"):
        assert identifier not in words, identifier
    assert "a plain step, timed again" in words  # the probe, in words
    assert "The drafted token was accepted, and the verifier adds a bonus token" in words
    assert "checks all 3 candidates of the tree in one forward pass" in words
    assert "a tree of 3 candidates, main line of 2" in words


def test_the_numbers_show_no_verifier_figures_for_drafts_after_the_first_rejection(qtbot, saved_trace):
    from app.talk.replay import NumbersTable

    state = ReplayState(saved_trace)
    k, story = next((k, s) for k, s in enumerate(state.rounds)
                    if s.first_rejected is not None and len(s.drafted) > s.first_rejected + 1)
    table = NumbersTable()
    qtbot.addWidget(table)
    for beat in (Beat.VERIFY, Beat.RESOLVE):
        table.show_beat(story, next(s for s in state.steps if s.round == k and s.beat is beat), greedy=True)
        rejected = story.first_rejected
        rows = [[table.item(r, c).text() for c in range(table.columnCount())] for r in range(len(story.drafted))]
        assert rows[rejected][3] == f"{story.drafted[rejected].target_prob:.3f}"  # checked, and refused
        for row in rows[rejected + 1:]:  # never reached by the acceptance rule
            assert row[3:5] == ["not checked", "–"] and row[5] == ("discarded" if beat is Beat.RESOLVE else "")


def test_the_replay_controls_stay_in_view_at_1024x700_and_fit_half_that_width(qtbot, saved_trace):
    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QScrollArea

    from app.talk.replay import ReplayDialog

    dialog = ReplayDialog(saved_trace)
    qtbot.addWidget(dialog)
    dialog.resize(1024, 700)
    dialog.show()
    qtbot.wait(20)
    controls = dialog.replay.controls
    scroll = dialog.findChild(QScrollArea)
    assert not scroll.isAncestorOf(controls)  # never scrolled out of sight with the replay
    bottom = controls.mapTo(dialog, QPoint(0, controls.height())).y()
    assert controls.isVisible() and bottom <= dialog.height()
    # QT_SCALE_FACTOR=2 on a 1024-pixel screen leaves 512 logical pixels: the controls' narrowest layout fits
    assert controls.minimumSizeHint().width() <= 500


def test_a_tree_round_replays_as_its_tree_grows_then_one_pass_then_the_accepted_path(qtbot):
    from app.talk.replay import ReplayWidget

    trace = _tree_trace()
    w = ReplayWidget(trace)
    qtbot.addWidget(w)
    w.resize(1000, 700)
    w.show()
    tree_round = next(i for i, s in enumerate(w.state.rounds) if s.tree_nodes)
    steps = [s for s in w.state.steps if s.round == tree_round]
    assert [s.beat for s in steps] == [Beat.DRAFT] * 3 + [Beat.VERIFY, Beat.RESOLVE]  # one beat per candidate
    story = w.state.rounds[tree_round]
    shown = []
    for step in steps:
        nodes = w.stage.tree_beat(story, step)
        shown.append(len(nodes) - 1)  # without the root
        w.stage.show_beat(story, step, len(w.state.rounds), True)
        assert not w.stage.grab().isNull()  # painting the beat raises nothing
        if step.beat is not Beat.RESOLVE:
            assert {n.state for n in nodes[1:]} == {"drafted"}  # no verdict before it is given
    assert shown == [1, 2, 3, 3, 4]  # growing, all three in the pass, then the verifier's own token too
    final = w.stage.tree_beat(story, steps[-1])
    states = [n.state for n in sorted(final, key=lambda n: n.index)][1:]
    assert states == ["accepted", "rejected", "rejected", "corrected"]

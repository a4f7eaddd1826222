"""The replay reads well on a large screen: every row of the round's numbers in view where there is room, and a
caption that quotes a token never breaks inside its quotes."""

from __future__ import annotations

from app.fit import rows_height
from app.talk.rounds import Beat, ReplayState, quoted
from app.trace import ReplyTrace, RoundRecord, TokenRecord


def tree_trace() -> ReplyTrace:
    """Round 0 the prefill's token; round 1 a tree whose candidates are a newline, then an indented line."""
    trace = ReplyTrace(stop_reason="eos")
    nodes = [("\n", -1), ("    return x", 0), (" y", 1), ("z", -1), ("w", 3), ("v", 4)]
    trace.rounds = [RoundRecord(0, 0, 0, "plain", "off", 0, 0.0, 0.1, 0.0, 0.1, 1),
                    RoundRecord(1, 3, 3, "bonus", "tree", 4, 0.01, 0.1, 0.0, 0.21, 5,
                                tree=[{"token_id": i, "text": text, "parent": parent, "draft_prob": 0.5,
                                       "target_prob": 0.5, "accept_prob": 0.5, "accepted": i < 3}
                                      for i, (text, parent) in enumerate(nodes)])]
    trace.tokens = [TokenRecord(99, "def f():", "plain", 0, 0, None, 0.5, None)]
    trace.tokens += [TokenRecord(i, text, "accepted", 1, i, 0.5, 0.5, 0.5) for i, (text, _) in enumerate(nodes[:3])]
    trace.tokens.append(TokenRecord(100, "!", "bonus", 1, 3, None, 0.5, None))
    return trace


def seven_drafts_trace() -> ReplyTrace:
    """Round 1 drafts seven tokens: five accepted, two rejected, and a correction (eight rows of numbers)."""
    trace = ReplyTrace(stop_reason="eos")
    trace.tokens = [TokenRecord(99, "A", "plain", 0, 0, None, 0.5, None)]
    trace.tokens += [TokenRecord(i, f"w{i}", "accepted" if i < 5 else "rejected", 1, i, 0.5, 0.5, 0.5)
                     for i in range(7)]
    trace.tokens.append(TokenRecord(100, "Z", "corrected", 1, 5, None, 0.5, None))
    trace.rounds = [RoundRecord(0, 0, 0, "plain", "off", 0, 0.0, 0.1, 0.0, 0.1, 1),
                    RoundRecord(1, 7, 5, "corrected", "gamma", 7, 0.01, 0.1, 0.0, 0.21, 7)]
    return trace


def test_a_caption_quotes_a_newline_token_without_breaking_inside_its_quotes():
    assert quoted("\n") == "“↵”" and quoted("") == "“∅”" and quoted("  ") == "“␣␣”"
    assert quoted("    return x") == "“\u00a0\u00a0\u00a0\u00a0return\u00a0x”"
    state = ReplayState(tree_trace())
    captions = []
    while state.step_forward():
        if state.step.beat is Beat.DRAFT:
            captions.append(state.caption())
    assert any("“↵”" in c for c in captions)
    for caption in captions:
        for quote in caption.split("“")[1:]:
            inside = quote.split("”")[0]
            assert "\n" not in inside and " " not in inside  # no line break can fall inside the quotes


def test_the_numbers_table_shows_every_row_of_the_round_when_the_window_has_room(qtbot):
    from app.talk.replay import ReplayWidget

    w = ReplayWidget(seven_drafts_trace())
    qtbot.addWidget(w)
    w.show()
    w.to_end()
    table = w.numbers
    assert table.rowCount() == 8  # seven drafts and the correction
    # As tall as the stage's minimum, the caption, the controls and every row need, and some more: room enough.
    room = w.minimumSizeHint().height() + rows_height(table) + 200
    w.resize(1000, room)
    qtbot.waitUntil(lambda: w.split.sizes()[1] >= rows_height(table))
    last = table.rowCount() - 1
    assert table.rowViewportPosition(last) + table.rowHeight(last) <= table.viewport().height()
    top = w.split.widget(0)
    assert w.split.sizes()[0] >= top.minimumSizeHint().height()  # the stage keeps its own minimum


def test_in_its_dialog_the_replay_fits_the_window_so_the_rows_given_to_the_numbers_are_in_view(qtbot):
    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QApplication

    from app.talk.replay import ReplayDialog

    dlg = ReplayDialog(seven_drafts_trace())
    qtbot.addWidget(dlg)
    dlg.resize(1280, 800)
    dlg.show()
    replay = dlg.replay
    replay.to_end()
    area = replay.parentWidget().parentWidget()  # the scroll area the dialog keeps the replay in
    qtbot.waitUntil(lambda: area.viewport().width() >= 1280 - area.verticalScrollBar().sizeHint().width())
    around = dlg.height() - area.viewport().height()  # the controls and the info row below it
    # Taller than the replay's minimum by some rows: the replay fills the window, and nothing scrolls.
    height = around + replay.minimumSizeHint().height() + 3 * replay.numbers.rowHeight(0)
    dlg.resize(1280, height)
    qtbot.waitUntil(lambda: dlg.height() == height and replay.split.sizes()[1] > 0)
    QApplication.processEvents()
    assert area.verticalScrollBar().maximum() == 0
    table = replay.numbers
    bottom = table.mapTo(area.viewport(), QPoint(0, table.height())).y()
    assert bottom <= area.viewport().height()  # the table's last rows are not under the controls
    assert replay.split.sizes()[1] > table.minimumSizeHint().height()  # the room went to the numbers


def test_a_tree_round_asks_the_stage_for_its_tree_alone_and_the_numbers_get_the_rest(qtbot):
    from PySide6.QtWidgets import QApplication

    from app.talk.replay import ReplayWidget
    from app.talk.round_stage import CHAIN_HEIGHT

    w = ReplayWidget(tree_trace())
    qtbot.addWidget(w)
    w.show()
    assert w.stage.minimumSizeHint().height() == CHAIN_HEIGHT  # before the first round
    chain_minimum = w.minimumSizeHint().height()
    w.to_end()  # the tree round's verdict: two rows of candidates
    QApplication.processEvents()
    story = w.state.story
    assert story.tree_nodes
    needed = w.stage.height_needed(story)
    assert w.stage.minimumSizeHint().height() == needed < CHAIN_HEIGHT
    assert w.minimumSizeHint().height() == chain_minimum - (CHAIN_HEIGHT - needed)
    # At what was the replay's minimum, the height the stage no longer asks goes to the numbers.
    bottom_minimum = w.split.widget(1).minimumSizeHint().height()
    w.resize(1000, chain_minimum)
    QApplication.processEvents()
    assert w.split.sizes()[1] >= min(rows_height(w.numbers), bottom_minimum + CHAIN_HEIGHT - needed)


def test_at_its_height_for_a_narrow_width_the_replay_wraps_its_caption_without_squeezing_the_stage(qtbot):
    from PySide6.QtWidgets import QApplication

    from app.talk.replay import ReplayWidget

    w = ReplayWidget(seven_drafts_trace())
    qtbot.addWidget(w)
    w.show()
    w.to_end()
    narrow = w.minimumSizeHint().width()  # where the caption wraps to more lines than its minimum holds
    margins = w.layout().contentsMargins()
    caption = w.caption.heightForWidth(narrow - margins.left() - margins.right())
    assert caption > w.caption.minimumSizeHint().expandedTo(w.caption.minimumSize()).height()  # more than two lines
    w.resize(narrow, w.heightForWidth(narrow))
    QApplication.processEvents()
    assert w.caption.height() >= caption
    assert w.stage.height() >= w.stage.minimumSizeHint().height()

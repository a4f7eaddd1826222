"""The replay on a 1024×700 screen (a 1000-pixel-wide replay at the least height it asks): the tree of a tree round
drawn across the stage, not in half of it; the stage never squeezed under its minimum by a caption that grew a line
at a beat; and every header of the round's numbers in full. Checked against the widgets' own size hints and
geometry, not the pixels of any font."""

from __future__ import annotations

from PySide6.QtWidgets import QApplication

from tests.app.talk.test_replay_reading import seven_drafts_trace, tree_trace

WIDTH = 1000  # the replay's width in the demo on a 1024-pixel screen, within its margins


def replay_at_its_least_height(qtbot, trace):
    from app.talk.replay import ReplayWidget

    w = ReplayWidget(trace)
    qtbot.addWidget(w)
    w.show()
    w.to_end()
    w.resize(WIDTH, w.heightForWidth(WIDTH))
    QApplication.processEvents()
    return w


def test_a_tree_round_is_drawn_at_its_own_size_or_across_the_stage(qtbot):
    from app.tree_view import TreeView, layout_tree

    w = replay_at_its_least_height(qtbot, tree_trace())
    stage, story = w.stage, w.state.story
    assert story.tree_nodes
    drawn, area = stage.tree_drawn(), stage.tree_area()
    assert area.contains(drawn.adjusted(1, 1, -1, -1))
    alone = TreeView(legend=False)
    alone.set_placed(layout_tree(story.record, story.emitted.text, story.text_before))
    # Its caption band (empty in the stage) counted in, the tree was fitted into a height it did not use.
    assert drawn.width() >= min(area.width(), alone.sizeHint().width()) - 1


def test_a_caption_that_grows_a_line_at_a_beat_leaves_the_stage_its_minimum(qtbot):
    w = replay_at_its_least_height(qtbot, seven_drafts_trace())
    final = w.caption.height()
    w.step_back()  # the verifier's pass: a shorter caption
    QApplication.processEvents()
    assert w.caption.heightForWidth(w.caption.width()) < final  # the verdict's caption is a line longer
    w.step_forward()
    QApplication.processEvents()
    assert w.caption.height() >= final
    assert w.stage.height() >= w.stage.minimumSizeHint().height()


def test_every_header_of_the_rounds_numbers_fits_its_column_at_1024_px(qtbot):
    w = replay_at_its_least_height(qtbot, seven_drafts_trace())
    header = w.numbers.horizontalHeader()
    for c in range(header.count()):
        assert header.sectionSize(c) >= header.sectionSizeHint(c), w.numbers.COLUMNS[c]
        assert w.numbers.horizontalHeaderItem(c).toolTip()  # what a header cut on a narrower screen says
    assert w.bottom.sizes()[1] >= 0.3 * sum(w.bottom.sizes()) - 1  # the reply beside them keeps its share


def test_the_numbers_keep_their_width_when_the_replay_is_laid_out_after_its_resize(qtbot):
    """As in the demo at scale 2: the replay resized while hidden, its splitters laid out wider once shown."""
    from app.talk.replay import ReplayWidget

    w = ReplayWidget(seven_drafts_trace())
    qtbot.addWidget(w)
    w.resize(1256, 569)
    w.to_end()
    w.show()
    qtbot.waitExposed(w)
    QApplication.processEvents()
    header = w.numbers.horizontalHeader()
    assert all(header.sectionSize(c) >= header.sectionSizeHint(c) for c in range(header.count()))
    assert w.bottom.sizes()[0] >= w.numbers.least_width()

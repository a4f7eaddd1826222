"""The draft tree view: one round's candidates laid out by draft position, coloured by the verifier's verdict."""

from __future__ import annotations

import pytest
import tiny

from app.trace import ReplyTrace
from app.tree_view import TreeDialog, layout_tree, tree_html, tree_rounds
from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import ModelDrafter
from specdec_core.engine import Engine


@pytest.fixture(scope="module")
def tree_trace(tiny_tokenizer):
    verifier, draft = tiny.make_pair("llama", tiny_tokenizer)
    trace = ReplyTrace()
    prompt = tiny_tokenizer("Once upon a time there was").input_ids
    for event in Engine(verifier, ModelDrafter(draft)).generate(
            prompt, GenerationConfig(max_new_tokens=24, tree_nodes=6, cost_aware=False)):
        trace.apply(event)
    return trace


def test_a_tree_round_is_laid_out_with_the_drafts_best_line_on_the_first_row(tree_trace):
    rounds = tree_rounds(tree_trace)
    assert rounds
    for index in rounds:
        rnd = tree_trace.rounds[index]
        placed = layout_tree(rnd, "x")
        assert len(placed) == len(rnd.tree) + 2  # the root, every node, the verifier's own token
        rows = [(n.row, n.column) for n in placed]
        assert len(set(rows)) == len(rows)  # no two boxes on one cell
        by_index = {n.index: n for n in placed}
        for node in placed[1:]:
            assert node.column == by_index[node.parent].column + 1  # a child sits one position right
        accepted = [n for n in placed if n.state == "accepted"]
        assert len(accepted) == rnd.accepted
        emitted = next(n for n in placed if n.index == len(rnd.tree))
        assert emitted.state in ("corrected", "bonus")
        assert emitted.column == rnd.accepted + 1  # right after the accepted path


def test_the_tree_survives_a_save_and_reopen(tree_trace):
    again = ReplyTrace.from_dict(tree_trace.to_dict())
    assert [r.tree for r in again.rounds] == [r.tree for r in tree_trace.rounds]


def test_the_tooltip_lists_the_tree_and_the_dialog_exports_a_png(qtbot, tree_trace, tmp_path):
    rnd = tree_trace.rounds[tree_rounds(tree_trace)[0]]
    html = tree_html(rnd, "x")
    assert html.count("■") == len(rnd.tree) + 1
    dialog = TreeDialog(tree_trace)
    qtbot.addWidget(dialog)
    assert "candidates in one verifier pass" in dialog.view.caption
    out = tmp_path / "tree.png"
    assert dialog.save_png(str(out)) and out.stat().st_size > 1000
    size = dialog.view.sizeHint()
    columns = max(n.column for n in dialog.view.placed) + 1
    assert size.width() >= columns * 100


def test_a_tokens_tooltip_in_a_tree_round_shows_the_round_s_tree(tree_trace):
    from app.token_view import token_tooltip

    index = tree_rounds(tree_trace)[0]
    token = next(t for t in tree_trace.tokens if t.round == index)
    tip = token_tooltip(token, tree_trace)
    assert "candidates in one verifier pass" in tip
    assert tip.count("■") >= len(tree_trace.rounds[index].tree) + 1


def test_the_replay_and_the_talk_menu_open_the_tree_and_it_fits_a_small_screen(qtbot, tree_trace):
    from PySide6.QtCore import QSize

    from app.fit import fits
    from app.talk.replay import ReplayDialog

    replay = ReplayDialog(tree_trace)
    qtbot.addWidget(replay)
    assert replay.tree_button.isEnabled()
    tree = replay.open_tree()
    qtbot.addWidget(tree)
    assert tree.view.placed and fits(tree, QSize(1024, 700))
    chain = ReplyTrace()  # a reply without trees: the button is off
    assert not ReplayDialog(chain).tree_button.isEnabled()


def test_the_draft_tree_setting_reaches_the_engine_and_a_bad_value_falls_back(tmp_path):
    import json

    from app.session import config_from_settings
    from app.settings import Settings

    settings = Settings()
    assert config_from_settings(settings).tree_nodes == -1  # auto
    settings.tree_nodes = 8
    settings.save(tmp_path)
    assert config_from_settings(Settings.load(tmp_path)).tree_nodes == 8
    (tmp_path / "settings.json").write_text(json.dumps({"tree_nodes": -5}))
    loaded = Settings.load(tmp_path)
    assert loaded.tree_nodes == -1 and loaded.notices


def test_the_graphs_count_every_candidate_a_tree_round_checked(qtbot, tree_trace):
    from app.graphs.live import LiveGraphs
    from app.speedup import measured_costs

    graphs = LiveGraphs()
    qtbot.addWidget(graphs)
    graphs.set_trace(tree_trace)
    checked = [len(r.tree) if r.tree else r.drafted for r in tree_trace.rounds]
    assert list(graphs.figures.drafted.data[:len(checked)]) == checked
    assert any(len(r.tree) > r.drafted for r in tree_trace.rounds)  # more than the main line
    costs = measured_costs(tree_trace.rounds, baseline_tps=100.0)
    assert costs is not None and max(costs.measured_verify) == max(checked)  # verify cost by nodes checked


@pytest.mark.parametrize("tree_nodes", [0, 6])
def test_the_graphs_figures_are_the_engines_own_tally(qtbot, tiny_tokenizer, tree_nodes):
    from app.graphs.live import LiveGraphs

    verifier, draft = tiny.make_pair("llama", tiny_tokenizer)
    trace = ReplyTrace()
    prompt = tiny_tokenizer("Once upon a time there was").input_ids
    for event in Engine(verifier, ModelDrafter(draft)).generate(
            prompt, GenerationConfig(max_new_tokens=24, tree_nodes=tree_nodes, cost_aware=False)):
        trace.apply(event)
    graphs = LiveGraphs()
    qtbot.addWidget(graphs)
    graphs.set_trace(trace)
    stats = trace.stats
    assert graphs.figures.alpha == pytest.approx(stats["acceptance_rate"])
    assert graphs.figures.c == pytest.approx(stats["c"])
    assert graphs.figures.mean_gamma == pytest.approx(stats["mean_gamma"])
    tally = graphs.figures.tally
    assert tally.drafted_at and [a / d for a, d in zip(tally.accepted_at, tally.drafted_at)] \
        == pytest.approx(list(stats["per_position_acceptance"]))


def test_a_reply_with_draft_trees_survives_the_conversation_store(tmp_path, tree_trace):
    from app.conversation import Conversation, Message
    from app.store import ConversationStore

    store = ConversationStore(tmp_path)
    conv = Conversation(messages=[Message("user", "Once upon a time"), Message("assistant", tree_trace.text,
                                                                                 tree_trace)])
    store.save(conv)
    again = ConversationStore(tmp_path).load(conv.id).messages[1].trace
    assert again is not None
    assert [r.tree for r in again.rounds] == [r.tree for r in tree_trace.rounds]
    assert tree_rounds(again) == tree_rounds(tree_trace)


def test_the_cost_panel_plots_every_pass_and_the_engines_own_cost_curve(qtbot, tiny_tokenizer):
    import numpy as np

    from app.graphs.live import LiveGraphs

    verifier, draft = tiny.make_pair("llama", tiny_tokenizer)
    engine = Engine(verifier, ModelDrafter(draft))
    trace = ReplyTrace()
    prompt = tiny_tokenizer("Once upon a time there was").input_ids
    for event in engine.generate(prompt, GenerationConfig(max_new_tokens=24, tree_nodes=6, cost_aware=False)):
        trace.apply(event)
    rounds = trace.rounds
    assert rounds[0].rows == len(rounds[0].tree)  # the prefill gave the last prompt token's distribution
    assert all(r.rows == len(r.tree) + 1 for r in rounds[1:] if r.tree)  # the last token and every node
    graphs = LiveGraphs()
    qtbot.addWidget(graphs)
    graphs.set_trace(trace)
    graphs.set_baseline(100.0, verify_s_per_token=0.004)
    fed, ms = graphs.panels["cost"].passes.getData()
    assert sorted(fed[np.isfinite(fed)]) == sorted(r.rows for r in rounds if r.rows)
    # what the sizer read, pass for pass
    assert graphs.figures.cost.seconds == pytest.approx(engine.planner.sizer.cost.seconds)
    x, y = graphs.panels["cost"].curve.getData()
    assert list(x) == sorted(engine.planner.sizer.cost.seconds) and list(y) == sorted(y)  # never falling as k grows
    assert graphs.panels["cost"].step_line.isVisible() and graphs.panels["cost"].step_line.value() == pytest.approx(4.0)
    assert f"{trace.stats['mean_accepted_length']:.2f} tokens per verifier call" in graphs.header.text()
    saved = ReplyTrace.from_dict(trace.to_dict())
    assert [r.rows for r in saved.rounds] == [r.rows for r in rounds]


def _hand_round():
    from app.trace import RoundRecord

    node = {"token_id": 0, "draft_prob": 0.6, "target_prob": 0.7, "accept_prob": 1.0, "accepted": True}
    tree = [{**node, "text": " sat", "parent": -1},
            {**node, "text": " ran", "parent": -1, "accepted": False, "accept_prob": 0.0, "target_prob": 0.05},
            {**node, "text": " fast", "parent": 1, "accepted": False, "accept_prob": None, "target_prob": 0.9}]
    return RoundRecord(3, 1, 1, "bonus", "tree", 4, 0.001, 0.01, 0.0, 0.05, 8, tree=tree, emitted_token_id=5)


def test_the_root_shows_the_text_before_the_round_and_unchecked_nodes_show_no_verifier_figure(qtbot, tmp_path):
    from PySide6.QtGui import QFontMetricsF

    from app.tree_view import TreeView

    rnd = _hand_round()
    placed = {n.index: n for n in layout_tree(rnd, " on", before="Once upon a time, long ago, the cat")}
    assert placed[-1].text == "…␣time,␣long␣ago,␣the␣cat"  # the end of the text before the round
    assert placed[2].state == "unchecked" and placed[2].target_prob is None  # its parent was refused first
    html = tree_html(rnd, " on")
    assert "d 0.60 · not checked" in html and "v 0.90" not in html and "v 0.05" in html
    for scale in (1.0, 1.6):  # the dialog, and presenter mode
        view = TreeView(scale=scale)
        qtbot.addWidget(view)
        view.set_round(rnd, " on", before="Once upon a time the cat")
        assert view._font(0.85).pointSizeF() >= 8.5 * scale - 1e-6  # the smallest type in the picture
        view.resize(view.sizeHint())
        image = view.grab().toImage()
        # the legend is painted under the boxes, inside the picture a PNG export saves
        boxes_bottom = max(view._rect(n).bottom() for n in view.placed)
        assert image.height() >= boxes_bottom + view._legend_height() - 1
        legend_row = int(boxes_bottom + 18 * scale + QFontMetricsF(view._font(0.85)).height() / 2)
        assert len({image.pixel(x, legend_row) for x in range(image.width())}) > 2  # something is drawn


def test_a_verifier_token_that_decodes_to_nothing_reads_as_empty_not_as_a_question_mark():
    rnd = _hand_round()
    placed = {n.index: n for n in layout_tree(rnd, "")}  # e.g. the end of sequence, decoded without specials
    assert placed[len(rnd.tree)].text == "∅"
    assert {n.index: n for n in layout_tree(rnd, None)}[len(rnd.tree)].text == "?"  # the text is not known

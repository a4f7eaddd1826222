"""A draft with another tokenizer (issue 24): a drafted token's tooltip shows the draft's own token and the
verifier token it became, and the saved trace keeps them; the tree, replay and round views mark a mapped token,
and a string-match proposal shows no draft probability it never had."""

from __future__ import annotations

import pytest
import tiny

from app.conversation import trace_from_dict
from app.token_view import token_tooltip
from app.trace import ReplyTrace
from specdec_core.config import GenerationConfig
from specdec_core.drafting.cross_vocab import StringMatchDrafter, TokenIntersectionDrafter
from specdec_core.engine import Engine


@pytest.fixture(scope="module")
def pair(tiny_tokenizer):
    verifier = tiny.as_loaded(tiny.make_model("llama", tiny_tokenizer, seed=1, logit_scale=8.0), tiny_tokenizer)
    other = tiny.renumbered_tokenizer(tiny_tokenizer, drop_merges=20)
    draft = tiny.as_loaded(tiny.renumbered_model(verifier.model, tiny_tokenizer, other, noise=0.2, noise_seed=3),
                           other, "other")
    return verifier, draft


def traced(pair, kind, **config) -> ReplyTrace:
    verifier, draft = pair
    trace = ReplyTrace()
    prompt = verifier.tokenizer("The capital of France is").input_ids
    for event in Engine(verifier, kind(draft, verifier)).generate(
            prompt, GenerationConfig(max_new_tokens=12, gamma=4, **config)):
        trace.apply(event)
    return trace


def test_a_drafted_tokens_tooltip_shows_the_draft_token_it_came_from_and_survives_saving(pair):
    trace = traced(pair, TokenIntersectionDrafter, tree_nodes=0)
    drafted = [t for t in trace.tokens if t.draft_prob is not None]
    assert drafted and all(t.draft_source for t in drafted)
    tip = token_tooltip(drafted[0], trace)
    assert "draft's own token(s)" in tip and "became verifier token" in tip and f"(id {drafted[0].token_id})" in tip
    again = trace_from_dict(trace.to_dict())
    assert [t.draft_source for t in again.tokens] == [t.draft_source for t in trace.tokens]


def test_the_html_export_marks_each_mapped_token_with_the_draft_token_it_came_from_and_a_legend_line(pair):
    import html

    from app.conversation import Conversation, Message
    from app.export_formats import to_html
    from app.trace import MAPPED_MARK, MAPPED_NOTE, STRING_MATCH

    def page(kind):
        trace = traced(pair, kind, tree_nodes=0)
        return trace, to_html(Conversation(messages=[Message("user", "Hi"), Message("assistant", trace.text, trace)]))

    trace, tli = page(TokenIntersectionDrafter)
    drafted = [t for t in trace.tokens if t.draft_source]
    assert drafted and html.escape(MAPPED_NOTE) in tli
    for tok in drafted:  # the tooltip's figures: the draft's own token(s), and the verifier token they became
        title = (f"{MAPPED_MARK} draft's own token(s): {tok.draft_source} → verifier token {tok.text!r} "
                 f"(id {tok.token_id})")
        assert html.escape(title, quote=True) in tli
    assert tli.count("dotted") == len(drafted) + 1  # each mapped token underlined, and the legend's sample
    _, slem = page(StringMatchDrafter)
    assert f"draft p {STRING_MATCH} ·" in slem and "draft p 1.000" not in slem
    plain = traced(pair, TokenIntersectionDrafter, tree_nodes=0, speculate=False)
    assert MAPPED_NOTE not in to_html(Conversation(messages=[Message("assistant", plain.text, plain)]))


def test_a_tree_rounds_mapped_nodes_are_marked_with_the_draft_token_in_the_tree_its_tooltip_and_legend(pair):
    from app.trace import MAPPED_MARK, MAPPED_NOTE
    from app.tree_view import layout_tree, legend_notes, node_tooltip, tree_html

    trace = traced(pair, TokenIntersectionDrafter, tree_nodes=8, cost_aware=False)
    rnd = next(r for r in trace.rounds if r.tree)
    nodes = [n for n in layout_tree(rnd, "x") if n.drafted]
    assert nodes and all(n.source and "(id" in n.source for n in nodes)
    assert all(n.source is None for n in layout_tree(rnd, "x") if not n.drafted)  # root, verifier's token
    assert f"{MAPPED_MARK} the draft's own token(s): {nodes[0].source}" in node_tooltip(nodes[0])
    assert tree_html(rnd, "x").count(f"{MAPPED_MARK} draft's own:") == len(nodes)
    assert MAPPED_NOTE in legend_notes(layout_tree(rnd, "x"))
    again = trace_from_dict(trace.to_dict())  # a reopened conversation's tree keeps the marks
    assert [n.source for n in layout_tree(again.rounds[rnd.index], "x")] == [n.source for n in layout_tree(rnd, "x")]


def test_the_replay_marks_a_mapped_token_and_names_the_draft_token_in_its_numbers(pair, qtbot):
    from app.talk.replay import NumbersTable
    from app.talk.round_stage import chip_label
    from app.talk.rounds import Beat, Step, rounds_of
    from app.trace import MAPPED_MARK

    trace = traced(pair, TokenIntersectionDrafter, tree_nodes=0)
    story = next(s for s in rounds_of(trace) if s.drafted)
    assert chip_label(story.drafted[0]).startswith(MAPPED_MARK)
    table = NumbersTable()
    qtbot.addWidget(table)
    table.show_beat(story, Step(0, Beat.RESOLVE), greedy=True)
    token = table.item(0, 1)
    assert token.text().startswith(MAPPED_MARK) and story.drafted[0].draft_source in token.toolTip()


def test_a_string_match_proposal_shows_string_match_not_a_draft_probability_of_one(pair, qtbot):
    from app.talk.replay import NumbersTable
    from app.talk.rounds import Beat, Step, rounds_of
    from app.trace import STRING_MATCH

    trace = traced(pair, StringMatchDrafter, tree_nodes=0)
    drafted = [t for t in trace.tokens if t.state in ("accepted", "rejected")]
    assert drafted and all(t.draft_prob is None and t.draft_source for t in drafted)
    tip = token_tooltip(drafted[0], trace)
    assert f"draft probability</td><td>&nbsp;{STRING_MATCH}" in tip and "1.000" not in tip.split("verifier")[0]
    story = next(s for s in rounds_of(trace) if s.drafted)
    table = NumbersTable()
    qtbot.addWidget(table)
    table.show_beat(story, Step(0, Beat.RESOLVE), greedy=True)
    assert table.item(0, 2).text() == STRING_MATCH


def test_the_settings_offer_installed_drafts_with_their_overlap(qtbot):
    from app.settings import Settings
    from app.settings_panel import SettingsPanel
    from specdec_core.pairs.draft_candidates import DraftCandidate

    panel = SettingsPanel(Settings())
    qtbot.addWidget(panel)
    panel.offer_drafts([DraftCandidate("org/other-draft", "other tokenizer, 87% overlap", 0.87)])
    combo = panel.draft
    texts = [combo.itemText(i) for i in range(combo.count())]
    assert "org/other-draft  ·  other tokenizer, 87% overlap" in texts
    combo.setCurrentIndex(texts.index("org/other-draft  ·  other tokenizer, 87% overlap"))
    assert combo.spec() == "org/other-draft"  # the note is not part of the spec


def test_after_loading_the_window_offers_the_recent_models_as_drafts_with_their_overlap(make_window, qtbot,
                                                                                        tmp_path):
    other = tmp_path / "other-draft"
    tiny.make_tokenizer(vocab_size=300, corpus=[line.upper() for line in tiny.CORPUS]).save_pretrained(other)
    w = make_window(load=False, recent_specs=[str(other)])
    with qtbot.waitSignal(w.models_loaded, timeout=60_000):
        w.loader.load()
    combo = w.settings_panel.draft
    qtbot.waitUntil(lambda: any(combo.itemText(i).startswith(f"{other}  ·  other tokenizer, ")
                                for i in range(combo.count())), timeout=30_000)  # computed in the background

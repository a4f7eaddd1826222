"""A draft with another tokenizer (issue 24): a drafted token's tooltip shows the draft's own token and the
verifier token it became, and the saved trace keeps them."""

from __future__ import annotations

import tiny

from app.chat_view import token_tooltip
from app.store import trace_from_dict
from app.trace import ReplyTrace
from specdec_core.config import GenerationConfig
from specdec_core.drafting.cross_vocab import TokenIntersectionDrafter
from specdec_core.engine import Engine


def test_a_drafted_tokens_tooltip_shows_the_draft_token_it_came_from_and_survives_saving(tiny_tokenizer):
    verifier = tiny.as_loaded(tiny.make_model("llama", tiny_tokenizer, seed=1, logit_scale=8.0), tiny_tokenizer)
    other = tiny.renumbered_tokenizer(tiny_tokenizer, drop_merges=20)
    draft = tiny.as_loaded(tiny.renumbered_model(verifier.model, tiny_tokenizer, other, noise=0.2, noise_seed=3),
                           other, "other")
    trace = ReplyTrace()
    prompt = tiny_tokenizer("The capital of France is").input_ids
    for event in Engine(verifier, TokenIntersectionDrafter(draft, verifier)).generate(
            prompt, GenerationConfig(max_new_tokens=12, gamma=4, tree_nodes=0)):
        trace.apply(event)
    drafted = [t for t in trace.tokens if t.draft_prob is not None]
    assert drafted and all(t.draft_source for t in drafted)
    tip = token_tooltip(drafted[0], trace)
    assert "draft's own token(s)" in tip and "became verifier token" in tip and f"(id {drafted[0].token_id})" in tip
    again = trace_from_dict(trace.to_dict())
    assert [t.draft_source for t in again.tokens] == [t.draft_source for t in trace.tokens]


def test_the_settings_offer_installed_drafts_with_their_overlap(qtbot):
    from app.settings_panel import SettingsPanel
    from app.store import Settings
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
                                for i in range(combo.count())), timeout=10_000)

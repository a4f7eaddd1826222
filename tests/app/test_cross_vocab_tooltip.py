"""A draft with another tokenizer (issue 24): a drafted token's tooltip shows the draft's own token and the
verifier token it became, and the saved trace keeps them."""

from __future__ import annotations

import tiny

from app.chat_view import token_tooltip
from app.store import trace_from_dict
from app.trace import ReplyTrace
from specdec_core.config import GenerationConfig
from specdec_core.cross_vocab import TokenIntersectionDrafter
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

"""The footer says what share of a reply prompt lookup copied from earlier text (a repeated prompt's reply copies
the earlier reply, and its speed then says little about drafting), beside the accepted and drafted counts."""

import re

import tiny

from app.trace import ReplyTrace
from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import ModelDrafter, PromptLookupDrafter
from specdec_core.engine import Engine


def _trace(engine, prompt) -> ReplyTrace:
    trace = ReplyTrace()
    for ev in engine.generate(prompt, GenerationConfig(max_new_tokens=40, gamma=4, tree_nodes=0)):
        trace.apply(ev)
    return trace


def test_a_reply_that_copies_earlier_text_says_what_share_was_copied_and_a_drafted_one_says_nothing(tiny_tokenizer):
    verifier, draft = tiny.make_pair("gpt2", tiny_tokenizer)
    prompt = tiny_tokenizer("one two three four one two three four one two").input_ids
    copied = _trace(Engine(verifier, PromptLookupDrafter()), prompt)
    stats = copied.get_stats()
    n = sum(r.copied for r in copied.rounds)
    assert 0 < n == stats.accepted  # every accepted draft of prompt lookup is a copy
    summary = copied.summary()
    assert f"{n / stats.new_tokens:.0%} of it copied from earlier text ({n}/{stats.new_tokens} tokens" in summary
    assert re.search(rf"{stats.accepted}/{stats.drafted} drafted tokens accepted", summary)  # the counts, beside it
    assert "copied" not in _trace(Engine(verifier, ModelDrafter(draft)), prompt).summary()


def test_a_saved_reply_keeps_its_copied_share():
    trace = ReplyTrace.from_dict({"rounds": [{"index": 0, "drafted": 3, "accepted": 3, "emitted_state": "bonus",
                                              "stop": "gamma", "gamma": 3, "draft_s": 0.0, "verify_s": 0.01,
                                              "overhead_s": 0.0, "t_end": 0.01, "tokens_after": 4, "copied": 3}],
                                  "stats": {"new_tokens": 4, "rounds": 1, "drafted": 3, "accepted": 3,
                                            "tokens_per_s": 10.0},
                                  "stop_reason": "eos"})
    assert "75% of it copied from earlier text (3/4 tokens" in trace.summary()

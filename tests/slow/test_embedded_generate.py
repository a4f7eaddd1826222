"""The real embedded verifier (SmolLM2-135M-Instruct from its GGUF), offline."""

import pytest

from specdec_core.config import GenerationConfig
from specdec_core.events import TokenCommitted, TokenState
from specdec_core.text.chat import build_prompt

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pair(embedded_pair):
    return embedded_pair  # the embedded default pair, loaded once per session (conftest.py)


def test_the_embedded_default_pair_is_the_shipped_head_with_prompt_lookup(pair):
    from specdec_core.drafting.drafters import HeadDrafter, HybridDrafter

    assert isinstance(pair.drafter, HybridDrafter) and isinstance(pair.drafter.model_drafter, HeadDrafter)
    assert pair.drafter.model_tokens == 1
    assert pair.verdict is not None and pair.verdict.compatible


def test_capital_of_france_is_paris_with_speculation_on_and_off_and_identical(pair):
    ids = build_prompt(pair.verifier.tokenizer, [{"role": "user", "content": "What is the capital of France?"}],
                       context_length=pair.verifier.context_length).ids
    config = GenerationConfig(max_new_tokens=40)
    *_, on = pair.engine.generate(ids, config)
    *_, off = pair.engine.generate(ids, config.with_(speculate=False))
    assert "Paris" in on.text and "Paris" in off.text
    assert on.token_ids == off.token_ids
    assert on.stats.drafted > 0 and off.stats.drafted == 0


def test_prompt_lookup_accepts_copied_text_when_rewriting(pair):
    text = "The quick brown fox jumps over the lazy dog near the quiet river bank."
    ids = build_prompt(pair.verifier.tokenizer,
                       [{"role": "user", "content": f"Repeat this sentence exactly: {text}"}],
                       context_length=pair.verifier.context_length).ids
    events = list(pair.engine.generate(ids, GenerationConfig(max_new_tokens=30, gamma=6)))
    accepted = [e for e in events if isinstance(e, TokenCommitted) and e.state is TokenState.ACCEPTED]
    assert len(accepted) >= 5 and events[-1].stats.acceptance_rate > 0.2

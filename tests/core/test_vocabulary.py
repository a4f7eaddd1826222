"""A draft that knows fewer token ids than its verifier never narrows the verifier's distribution.

The draft's tokenizer is the same BPE trained with fewer merges (290 against 320 tokens), so ids 0-289
mean the same text in both and the doctor accepts the pair. The verifier must still produce ids 290-319,
at the rate it produces them alone, greedy or sampled, speculating or not (issue 17).
"""

import math

import pytest
import tiny
import torch

from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import ModelDrafter
from specdec_core.engine import Engine
from specdec_core.pairs.doctor import check_models

DRAFT_VOCAB = 290


@pytest.fixture(scope="module")
def pair(tiny_tokenizer):
    """A verifier whose output rows past the draft's vocabulary are boosted (so its argmax and a good
    part of its mass often lie there), and a draft over the 290-token tokenizer."""
    model = tiny.make_model("llama", tiny_tokenizer, seed=1, logit_scale=8.0)
    with torch.no_grad():
        model.get_output_embeddings().weight[DRAFT_VOCAB:] *= 1.6
    verifier = tiny.as_loaded(model, tiny_tokenizer, "verifier-320")
    small = tiny.make_tokenizer(vocab_size=DRAFT_VOCAB)
    draft = tiny.as_loaded(tiny.make_model("llama", small, seed=2, logit_scale=8.0), small, "draft-290")
    return verifier, draft


def prompt_ids(tokenizer):
    return tokenizer("the cat").input_ids


def reply(engine, prompt, **config):
    *_, finished = engine.generate(prompt, GenerationConfig(**config))
    assert finished.error is None
    return list(finished.token_ids)


def test_the_doctor_accepts_the_pair_and_says_the_verifier_keeps_its_other_tokens(pair):
    verifier, draft = pair
    verdict = check_models(verifier, draft)
    assert verdict.compatible
    assert verdict.summary().startswith(
        "compatible: the draft knows 290 of the verifier's 320 tokens; the others can still be produced, "
        "never drafted")


def test_greedy_speculation_equals_the_verifiers_generate_where_its_argmax_lies_past_the_drafts_vocabulary(
        pair, tiny_tokenizer):
    verifier, draft = pair
    prompt = prompt_ids(tiny_tokenizer)
    expected = verifier.model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=40,
                                       eos_token_id=tiny_tokenizer.eos_token_id, pad_token_id=0)[0, len(prompt):]
    expected = expected.tolist()
    assert any(t >= DRAFT_VOCAB for t in expected), "the test needs a greedy reply with such tokens"
    engine = Engine(verifier, ModelDrafter(draft))
    for gamma in (1, 4):
        assert reply(engine, prompt, max_new_tokens=40, gamma=gamma) == expected
    assert reply(engine, prompt, max_new_tokens=40, speculate=False) == expected


def test_sampled_tokens_past_the_drafts_vocabulary_keep_the_verifiers_frequency(pair, tiny_tokenizer):
    verifier, draft = pair
    prompt = prompt_ids(tiny_tokenizer)
    alone, with_draft = Engine(verifier, None), Engine(verifier, ModelDrafter(draft))
    counts = {}
    for name, engine, speculate in (("alone", alone, False), ("off", with_draft, False),
                                    ("speculating", with_draft, True)):
        tokens = [t for seed in range(12)
                  for t in reply(engine, prompt, temperature=1.5, seed=seed, max_new_tokens=40, gamma=3,
                                 speculate=speculate)]
        counts[name] = (sum(t >= DRAFT_VOCAB for t in tokens), len(tokens))
    beyond, total = counts["alone"]
    rate = beyond / total
    assert 0.05 < rate < 0.95, counts  # the verifier alone produces them often
    for name in ("off", "speculating"):
        k, n = counts[name]
        # Within 4.5 standard errors of the difference of two binomial proportions.
        bound = 4.5 * math.sqrt(rate * (1 - rate) * (1 / n + 1 / total))
        assert abs(k / n - rate) < bound, (name, counts)

"""The hybrid drafter: prompt lookup where the conversation repeats itself, the draft model elsewhere."""

import pytest
import tiny

from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import DraftTarget, HeadDrafter, HybridDrafter, ModelDrafter
from specdec_core.engine import Engine
from specdec_core.errors import ConfigError
from specdec_core.events import DraftStop, Finished, RoundVerified


class Counting:
    """Wraps a drafter and records the budget of each proposal it is asked for."""

    def __init__(self, inner):
        self.inner, self.asked = inner, []
        self.name = inner.name

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def propose(self, ids, max_tokens):
        self.asked.append(max_tokens)
        return self.inner.propose(ids, max_tokens)


@pytest.fixture(scope="module")
def pair(tiny_tokenizer):
    return tiny.make_pair("llama", tiny_tokenizer)


def generate(engine, prompt, **config):
    events = list(engine.generate(prompt, GenerationConfig(**config)))
    assert isinstance(events[-1], Finished)
    return events


@pytest.mark.parametrize("model_tokens", [None, 1, 3])
@pytest.mark.parametrize("gamma", [1, 4])
def test_greedy_output_with_a_hybrid_is_the_verifiers_own(pair, tiny_tokenizer, model_tokens, gamma):
    verifier, draft = pair
    prompt = tiny_tokenizer("the robot said the robot said the robot").input_ids
    expected = generate(Engine(verifier, None), prompt, max_new_tokens=48)[-1].token_ids
    events = generate(Engine(verifier, HybridDrafter(ModelDrafter(draft), model_tokens)), prompt,
                      max_new_tokens=48, gamma=gamma)
    assert events[-1].token_ids == expected


def test_greedy_output_with_a_hybrid_around_a_draft_head_is_the_verifiers_own(pair, tiny_tokenizer):
    verifier, _ = pair
    prompt = tiny_tokenizer("the robot said the robot said the robot").input_ids
    expected = generate(Engine(verifier, None), prompt, max_new_tokens=48)[-1].token_ids
    hybrid = HybridDrafter(HeadDrafter(tiny.make_head(verifier)), model_tokens=2)
    engine = Engine(verifier, hybrid)  # attaches the head inside the hybrid to the verifier
    assert generate(engine, prompt, max_new_tokens=48, gamma=4)[-1].token_ids == expected
    engine.reset_caches()
    assert generate(engine, prompt, max_new_tokens=48, gamma=4)[-1].token_ids == expected


def test_the_hybrid_copies_on_a_match_and_asks_the_model_for_at_most_its_tokens_otherwise(pair, tiny_tokenizer):
    verifier, draft = pair
    model = Counting(ModelDrafter(draft))
    hybrid = HybridDrafter(model, model_tokens=2)
    hybrid.attach(DraftTarget(None, len(tiny_tokenizer), frozenset()))
    repeated = tiny_tokenizer("one two three four one two three four one two").input_ids
    copied = hybrid.propose(repeated, 4)
    start = repeated.index(repeated[-2])
    assert list(copied.token_ids) == repeated[start + 2:start + 6] and model.asked == []

    fresh = tiny_tokenizer("a quiet lake").input_ids
    drafted = hybrid.propose(fresh, 4)
    assert model.asked == [2] and 1 <= len(drafted.token_ids) <= 2
    if len(drafted.token_ids) == 2:  # stopped by the model's cap, not by the round's γ of 4
        assert drafted.stop is DraftStop.DRAFT_CAP


def test_a_model_round_below_gamma_names_the_draft_token_cap_as_its_stop(pair, tiny_tokenizer):
    verifier, draft = pair
    prompt = tiny_tokenizer("a quiet lake").input_ids
    events = generate(Engine(verifier, HybridDrafter(ModelDrafter(draft), model_tokens=1)), prompt,
                      max_new_tokens=12, gamma=4)
    model_rounds = [e for e in events if isinstance(e, RoundVerified) and len(e.drafted) == 1]
    assert model_rounds
    assert all(r.stop is not DraftStop.GAMMA for r in model_rounds)  # "reached γ" would be wrong at γ = 4
    assert any(r.stop is DraftStop.DRAFT_CAP for r in model_rounds)


def test_a_reply_mixes_copied_and_drafted_rounds(pair, tiny_tokenizer):
    verifier, draft = pair
    model = Counting(ModelDrafter(draft))
    prompt = tiny_tokenizer("the robot said the robot said the robot").input_ids
    events = generate(Engine(verifier, HybridDrafter(model, model_tokens=1)), prompt, max_new_tokens=40, gamma=4)
    rounds = [e for e in events if isinstance(e, RoundVerified)]
    assert model.asked and set(model.asked) == {1}
    assert len(model.asked) < len(rounds)  # other rounds were copies
    assert any(len(r.drafted) > 1 for r in rounds)  # only the lookup proposes more than one token here


def test_a_hybrid_needs_at_least_one_model_token(pair):
    with pytest.raises(ConfigError):
        HybridDrafter(ModelDrafter(pair[1]), model_tokens=0)

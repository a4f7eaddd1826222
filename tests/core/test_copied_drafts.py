"""Each drafted token says whether it was copied from earlier text (prompt lookup) or drafted by a model, so that
a reply that copies an earlier reply can say how much of it was copied (issue 55, "Say what the figure is made
of")."""

import pytest
import tiny

from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import HybridDrafter, ModelDrafter, PromptLookupDrafter
from specdec_core.engine import Engine
from specdec_core.events import RoundVerified


@pytest.fixture(scope="module")
def gpt2_pair(tiny_tokenizer):
    return tiny.make_pair("gpt2", tiny_tokenizer)  # a repetitive tiny model: prompt lookup finds runs to copy


def _drafted(engine, prompt, tree_nodes=0):
    config = GenerationConfig(max_new_tokens=40, gamma=4, tree_nodes=tree_nodes)
    return [v for ev in engine.generate(prompt, config) if isinstance(ev, RoundVerified) for v in ev.drafted]


def test_prompt_lookup_marks_its_drafts_copied_and_a_draft_model_does_not(gpt2_pair, tiny_tokenizer):
    verifier, draft = gpt2_pair
    prompt = tiny_tokenizer("one two three four one two three four one two").input_ids
    copied = _drafted(Engine(verifier, PromptLookupDrafter()), prompt)
    modelled = _drafted(Engine(verifier, ModelDrafter(draft)), prompt)
    assert copied and all(v.copied for v in copied)
    assert modelled and not any(v.copied for v in modelled)


@pytest.mark.parametrize("tree_nodes", [0, 8])
def test_a_hybrid_marks_only_the_copies_as_copied(gpt2_pair, tiny_tokenizer, tree_nodes):
    verifier, draft = gpt2_pair
    prompt = tiny_tokenizer("one two three four one two three four one two").input_ids
    drafted = _drafted(Engine(verifier, HybridDrafter(ModelDrafter(draft))), prompt, tree_nodes)
    assert any(v.copied for v in drafted)  # the repeated words are copied ...
    if tree_nodes == 0:
        assert any(not v.copied for v in drafted)  # ... and the model drafts where there is nothing to copy

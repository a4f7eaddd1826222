"""Online adaptation of a draft head (adapt.py): it learns the verifier's replies between replies, within
its budgets, without ever changing the verifier's output."""

import pytest
import tiny
import torch

from specdec_core.config import GenerationConfig
from specdec_core.drafting.adapt import AdaptSettings, HeadAdapter, is_adaptable, verifier_states
from specdec_core.drafting.drafters import HeadDrafter, HybridDrafter
from specdec_core.engine import Engine
from specdec_core.events import Finished, RoundVerified
from specdec_core.loading import cpu_speed
from specdec_core.loading.models import load_model

FAST = AdaptSettings(steps=30, max_seconds=60.0, lr=2e-2)


@pytest.fixture(scope="module")
def verifier(tiny_tokenizer):
    return tiny.make_pair("llama", tiny_tokenizer)[0]


def reply(engine, ids, **config):
    """(token ids, accepted drafts / drafted) of one greedy reply."""
    events = list(engine.generate(ids, GenerationConfig(**{"max_new_tokens": 40, "gamma": 3, "top_alternatives": 0,
                                                            "tree_nodes": 0, **config})))
    assert isinstance(events[-1], Finished) and events[-1].error is None
    drafted = [d for e in events if isinstance(e, RoundVerified) for d in e.drafted]
    return list(events[-1].token_ids), sum(d.accepted for d in drafted) / max(1, len(drafted))


def test_after_adapting_on_a_reply_the_head_drafts_more_of_it_and_the_output_stays_the_verifiers(
        verifier, tiny_tokenizer):
    drafter = HeadDrafter(tiny.make_head(verifier, scale=0.5))
    engine = Engine(verifier, drafter)
    prompt = tiny_tokenizer("Once upon a time there was a little robot").input_ids
    plain, _ = reply(Engine(verifier), prompt, speculate=False)
    before_ids, before = reply(engine, prompt)
    adapter = HeadAdapter(drafter.model, verifier.model, FAST)
    adapter.observe(prompt, before_ids)
    report = adapter.adapt()
    adapter.swap_into(drafter)
    after_ids, after = reply(engine, prompt)
    assert before_ids == after_ids == plain
    assert report.steps == FAST.steps and report.tokens == len(before_ids)
    assert after > before + 0.2


@pytest.mark.parametrize("layers", [(), (0,)], ids=["final state", "with an inner layer"])
def test_sampled_output_still_follows_the_verifier_with_an_adapted_head(verifier, tiny_tokenizer, layers):
    # The lossless check of test_lossless.py, on a head adapted to one of the verifier's replies (also a head
    # that reads an inner layer beside the final state, draft_head.with_layers: its fusion adapts too).
    from test_lossless import CONFIGS, VOCAB, chi_square_p_value, exact_joint, sampled_joint

    small = tiny.as_loaded(tiny.make_model("llama", tiny_tokenizer, seed=3, vocab_size=VOCAB, logit_scale=20.0,
                                           layers=1 + len(layers), hidden=16), tiny_tokenizer,
                           eos_token_ids=frozenset())
    head = tiny.make_head(small, scale=0.5, feature_layers=layers)
    drafter = HeadDrafter(head)
    adapter = HeadAdapter(head.model, small.model, FAST)
    before = {name: weight.clone() for name, weight in head.model.state_dict().items()}
    adapter.observe([1, 3, 5], [2, 7, 1, 3, 5, 2, 7])
    adapter.adapt()
    adapter.swap_into(drafter)
    changed = {name for name, weight in head.model.state_dict().items() if not torch.equal(weight, before[name])}
    assert "fc.weight" in changed and ("fuse.weight" in changed or not layers)
    config = CONFIGS[1]
    counts = sampled_joint(small, head, config, runs=600, drafter=drafter)
    assert chi_square_p_value(counts, exact_joint(small, config)) > 1e-3


def test_adaptation_stops_at_its_step_and_time_budgets_and_the_buffer_at_its_size(verifier):
    head = tiny.make_head(verifier).model
    adapter = HeadAdapter(head, verifier.model, AdaptSettings(steps=3, buffer_tokens=100, max_length=40))
    for start in range(6):
        adapter.observe(list(range(10 + start, 30 + start)), list(range(50, 70)))
    assert adapter.adapt().steps == 3
    assert sum(len(lesson.ids) for lesson in adapter.buffer) <= 100 and len(adapter.buffer) == 2
    assert all(len(lesson.ids) == 40 for lesson in adapter.buffer)  # each cut to its last max_length positions
    timed = HeadAdapter(head, verifier.model, AdaptSettings(steps=1000, max_seconds=0.0))
    timed.observe(list(range(10, 30)), list(range(50, 70)))
    assert timed.adapt().steps == 0
    calls = []
    stopped = HeadAdapter(head, verifier.model, AdaptSettings(steps=1000, max_seconds=60.0))
    stopped.observe(list(range(10, 30)), list(range(50, 70)))
    assert stopped.adapt(stop=lambda: calls.append(1) or len(calls) > 2).steps == 2  # a reply is about to start


def test_the_swap_reaches_a_cpu_tuned_head_whose_weights_are_packed(verifier, tiny_tokenizer):
    if not cpu_speed.packing_available():
        pytest.skip("this torch build has no oneDNN inner product")
    head = tiny.make_head(verifier, scale=0.5)
    shapes = {tuple(m.weight.shape) for m in head.model.modules() if type(m) is torch.nn.Linear}
    cpu_speed.apply_plans(head.model, [cpu_speed.RowPlan(s, dict.fromkeys(cpu_speed.ROW_COUNTS, "packed"), {})
                                       for s in shapes])
    drafter = HeadDrafter(head)
    engine = Engine(verifier, drafter)
    prompt = tiny_tokenizer("Hello! How can I help you today?").input_ids
    ids, _ = reply(engine, prompt)  # drafting packs the weights
    adapter = HeadAdapter(head.model, verifier.model, FAST)
    adapter.observe(prompt, ids)
    adapter.adapt()
    adapter.swap_into(drafter)
    x, embeds = torch.randn(1, 1, 32), torch.randn(1, 1, 32)
    adapter.head.eval()
    with torch.no_grad():
        expected = adapter.head(x, embeds, torch.tensor([0]))
        torch.testing.assert_close(head.model(x, embeds, torch.tensor([0])), expected)


def test_reset_brings_back_the_original_head_and_forgets_what_it_learnt(verifier):
    loaded = tiny.make_head(verifier)
    head = loaded.model
    original = {k: v.clone() for k, v in head.state_dict().items()}
    adapter = HeadAdapter(head, verifier.model, AdaptSettings(steps=2))
    adapter.observe(list(range(10, 30)), list(range(50, 70)))
    adapter.adapt()
    drafter = HeadDrafter(loaded)
    adapter.swap_into(drafter)
    assert not torch.equal(head.fc.weight, original["fc.weight"])
    adapter.reset()
    adapter.swap_into(drafter)
    assert all(torch.equal(head.state_dict()[k], v) for k, v in original.items())
    assert adapter.tokens == 0 and not adapter.buffer


def test_an_exported_adapted_head_loads_as_a_draft_spec_and_resumes_with_its_count(verifier, tiny_tokenizer,
                                                                                   tmp_path):
    head = tiny.make_head(verifier).model
    adapter = HeadAdapter(head, verifier.model, AdaptSettings(steps=2))
    adapter.observe(list(range(10, 30)), list(range(50, 70)))
    adapter.adapt()
    adapter.save(tmp_path / "adapted", tokenizer=tiny_tokenizer)
    loaded = load_model(str(tmp_path / "adapted"))
    assert loaded.model.config.model_type == "specdec_head"
    torch.testing.assert_close(loaded.model.fc.weight, adapter.head.fc.weight)
    again = HeadAdapter(head, verifier.model)
    again.load(tmp_path / "adapted")
    assert again.tokens == 20
    torch.testing.assert_close(again.head.fc.weight, adapter.head.fc.weight)


def test_only_a_draft_head_adapts(verifier, tiny_tokenizer):
    draft = tiny.make_pair("llama", tiny_tokenizer)[1]
    assert is_adaptable(tiny.make_head(verifier).model) and not is_adaptable(draft.model)
    with pytest.raises(TypeError):
        HeadAdapter(draft.model, verifier.model)
    assert isinstance(HybridDrafter(HeadDrafter(tiny.make_head(verifier))).model_drafter, HeadDrafter)


def test_recomputing_states_leaves_the_engines_recorded_hidden_states_alone(verifier, tiny_tokenizer):
    drafter = HeadDrafter(tiny.make_head(verifier))
    engine = Engine(verifier, drafter)
    prompt = tiny_tokenizer("The capital of France is Paris.").input_ids
    reply(engine, prompt, max_new_tokens=4)
    recorded = engine.verifier_forward._last_hidden
    (states,) = verifier_states(verifier.model, [prompt])
    assert engine.verifier_forward._last_hidden is recorded
    with torch.no_grad():
        fresh = verifier.model.base_model(input_ids=torch.tensor([prompt])).last_hidden_state[0]
    torch.testing.assert_close(states.float(), fresh, atol=2e-3, rtol=1e-2)


def test_only_the_chosen_parameters_adapt_and_the_anchor_keeps_them_nearer_the_original(verifier):
    head = tiny.make_head(verifier).model
    original = {k: v.clone() for k, v in head.state_dict().items()}

    def adapted(**settings):
        adapter = HeadAdapter(head, verifier.model, AdaptSettings(steps=5, lr=1e-2, **settings))
        adapter.observe(list(range(10, 30)), list(range(50, 70)))
        adapter.adapt()
        return adapter.head.state_dict()

    only_fc = adapted(trained=("fc.",))
    assert not torch.equal(only_fc["fc.weight"], original["fc.weight"])
    assert all(torch.equal(only_fc[k], v) for k, v in original.items() if not k.startswith("fc."))

    def distance(weights):
        return sum(float(((weights[k] - v) ** 2).sum()) for k, v in original.items() if k != "head_ids")

    assert distance(adapted(anchor=100.0)) < 0.5 * distance(adapted())


def test_with_prompt_positions_the_head_also_learns_the_conversation_before_the_reply(verifier):
    head = tiny.make_head(verifier).model
    prompt, reply_ids = list(range(10, 30)), list(range(50, 70))
    firsts = {}
    for prompt_positions in (False, True):
        adapter = HeadAdapter(head, verifier.model, AdaptSettings(steps=1, prompt_positions=prompt_positions))
        adapter.observe(prompt, reply_ids)
        adapter.adapt()
        firsts[prompt_positions] = adapter.buffer[0].first
    assert firsts == {False: len(prompt) - 2, True: 0}

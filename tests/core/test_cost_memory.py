"""The cost model remembers this machine: a new engine starts from the verify costs the last engine over the same
verifier measured here (specdec_core/loading/cost_memory.py), not from three plain steps that time them again."""

import dataclasses

import pytest
import tiny
import torch

from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import ModelDrafter
from specdec_core.drafting.planner import DraftPlanner, DraftPolicy
from specdec_core.engine import Engine
from specdec_core.events import DraftStop, Finished, RoundVerified
from specdec_core.loading import cost_memory
from specdec_core.verification.cost import VerifyCost


@pytest.fixture
def remembering(monkeypatch):
    monkeypatch.setenv(cost_memory.OFF_ENV, "on")  # the suite turns it off (conftest.py)


@pytest.fixture(scope="module")
def pair(tiny_tokenizer):
    return tiny.make_pair("llama", tiny_tokenizer)


def rounds_of(engine, prompt, n=24):
    events = list(engine.generate(prompt, GenerationConfig(max_new_tokens=n, tree_nodes=6)))
    assert isinstance(events[-1], Finished) and events[-1].error is None
    return [e for e in events if isinstance(e, RoundVerified)], events[-1].token_ids


def test_a_new_engine_starts_from_the_costs_the_last_one_measured_here_and_times_no_plain_step(
        pair, tiny_tokenizer, tmp_path, remembering):
    verifier, draft = (dataclasses.replace(model, cache_dir=tmp_path) for model in pair)
    prompt = tiny_tokenizer("Once upon a time there was").input_ids
    first, text = rounds_of(Engine(verifier, ModelDrafter(draft)), prompt)
    assert [r.stop for r in first[1:1 + VerifyCost.SETTLED]] == [DraftStop.PROBE] * VerifyCost.SETTLED
    assert cost_memory.memory_file(verifier).exists()

    again = Engine(verifier, ModelDrafter(draft))  # as the next `specdec generate` process builds one
    second, same_text = rounds_of(again, prompt)
    assert not [r for r in second if r.stop is DraftStop.PROBE]
    assert same_text == text  # only the draft sizes may differ, never the reply
    assert not again.planner.sizer.cost.stale(1)


def test_recalled_costs_count_as_settled_timings_and_give_way_to_fresh_ones():
    cost = VerifyCost()
    cost.recall({1: 0.050, 5: 0.060})
    assert not cost.stale(1) and cost.estimate(5) == pytest.approx(0.060)
    cost.observe(1, 0.300)  # one slow pass does not replace a recalled figure
    assert cost.estimate(1) == pytest.approx(0.050)
    for _ in range(VerifyCost.SETTLED + 2):  # the machine is busier today: fresh timings decide
        cost.observe(1, 0.058)
    assert cost.estimate(1) == pytest.approx(0.058)
    for _ in range(VerifyCost.MAX_AGE):
        cost.observe(9, 0.090)
    assert cost.stale(5) and cost.stale(1)  # recalled figures age like any others
    assert cost.settled() == {9: pytest.approx(0.090)}


def test_costs_are_kept_per_verifier_and_precision_and_a_damaged_or_unwritable_memory_only_means_measuring(
        pair, tmp_path, remembering, monkeypatch):
    verifier = dataclasses.replace(pair[0], cache_dir=tmp_path)
    cost_memory.remember(verifier, {1: 0.05, 3: 0.06})
    assert cost_memory.recalled(verifier) == {1: 0.05, 3: 0.06}
    assert cost_memory.recalled(dataclasses.replace(verifier, dtype=torch.bfloat16)) == {}
    assert cost_memory.recalled(dataclasses.replace(verifier, name="another")) == {}

    cost_memory.memory_file(verifier).write_text('{"seconds": {"1": -5}}')
    assert cost_memory.recalled(verifier) == {}
    cost_memory.memory_file(verifier).write_text("{not json")
    assert cost_memory.recalled(verifier) == {}

    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    cost_memory.remember(dataclasses.replace(verifier, cache_dir=blocked), {1: 0.05})  # no error
    monkeypatch.setenv(cost_memory.OFF_ENV, "off")
    assert cost_memory.memory_file(verifier) is None and cost_memory.recalled(verifier) == {}


def test_an_engine_told_not_to_remember_leaves_the_memory_as_it_was(pair, tiny_tokenizer, tmp_path, remembering):
    verifier, draft = (dataclasses.replace(model, cache_dir=tmp_path) for model in pair)
    cost_memory.remember(verifier, {1: 0.5, 4: 0.6})
    calibrating = Engine(verifier, None, DraftPlanner(DraftPolicy(remember_costs=False)))  # as the app's calibration
    rounds_of(calibrating, tiny_tokenizer("Once upon a time").input_ids, n=8)
    assert calibrating.planner.sizer.cost.passes and cost_memory.recalled(verifier) == {1: 0.5, 4: 0.6}


def test_a_model_in_another_weight_format_keeps_costs_of_its_own(pair, tmp_path, remembering):
    verifier = dataclasses.replace(pair[0], cache_dir=tmp_path)
    quantised = dataclasses.replace(verifier, weights="Q4_K 72 %, Q6_K 28 %")
    eight_bit = dataclasses.replace(verifier, weights="Q4_K 72 %, Q6_K 28 %, 8-bit activations")
    files = {cost_memory.memory_file(m) for m in (verifier, quantised, eight_bit)}
    assert len(files) == 3 and None not in files  # a float model's cost curve says nothing of its quantised forms


def test_a_quantised_models_costs_are_kept_per_build_of_the_kernel(pair, tmp_path, remembering, monkeypatch):
    """A new kernel (its source changed, or SPECDEC_QUANT_KERNEL=avx2) multiplies at another speed: the costs
    measured with the old one would price its drafts wrongly."""
    from specdec_core.loading import qkernel

    quantised = dataclasses.replace(pair[0], cache_dir=tmp_path, weights="Q4_1 79 %, Q8_0 21 %")
    floats = dataclasses.replace(pair[0], cache_dir=tmp_path)
    before = [cost_memory.memory_file(model) for model in (quantised, floats)]
    monkeypatch.setattr(qkernel, "build_id", lambda: "0123456789abcdef")
    after = [cost_memory.memory_file(model) for model in (quantised, floats)]
    assert after[0] != before[0] and after[1] == before[1]  # float weights run no kernel: their costs stay


def test_a_damaged_draft_cost_file_is_set_aside_and_the_draft_measured_afresh(pair, tmp_path, remembering):
    verifier = dataclasses.replace(pair[0], cache_dir=tmp_path)
    cost_memory.remember_draft(verifier, "ModelDrafter:draft:Q4_0", 0.125)
    assert cost_memory.recalled_draft(verifier, "ModelDrafter:draft:Q4_0") == pytest.approx(0.125)
    assert cost_memory.recalled_draft(verifier, "ModelDrafter:another:Q4_0") is None
    path = cost_memory.draft_file(verifier, "ModelDrafter:draft:Q4_0")
    path.write_text('{"seconds_per_step": -1}')
    assert cost_memory.recalled_draft(verifier, "ModelDrafter:draft:Q4_0") is None and not path.exists()


def test_a_new_engine_starts_from_how_often_this_pair_usually_had_its_drafts_accepted_here(
        pair, tiny_tokenizer, tmp_path, remembering):
    verifier, draft = (dataclasses.replace(model, cache_dir=tmp_path) for model in pair)
    prompt = tiny_tokenizer("Once upon a time there was").input_ids
    first = Engine(verifier, ModelDrafter(draft))
    rounds_of(first, prompt)
    usual = first.planner.usual.rates()
    assert first.planner.usual.observed and usual != first.planner.usual.prior

    again = Engine(verifier, ModelDrafter(draft))  # as the next `specdec generate` process builds one
    again.planner.start_reply(verifier)
    assert again.planner.usual.prior == pytest.approx(usual, abs=1e-4) and not again.planner.usual.observed
    assert again.planner.chain_record.rates() == pytest.approx(usual, abs=1e-4)  # its first rounds read them too


def test_a_draft_cost_file_without_rates_or_with_rates_out_of_range_means_learning_them_afresh(
        pair, tmp_path, remembering):
    verifier = dataclasses.replace(pair[0], cache_dir=tmp_path)
    cost_memory.remember_draft(verifier, "ModelDrafter:draft:Q4_0", 0.125)  # as an earlier version wrote it
    assert cost_memory.recalled_rates(verifier, "ModelDrafter:draft:Q4_0") is None
    assert cost_memory.recalled_draft(verifier, "ModelDrafter:draft:Q4_0") == pytest.approx(0.125)
    cost_memory.remember_draft(verifier, "ModelDrafter:draft:Q4_0", 0.125, (0.85, 0.9, 0.8, 0.8))
    assert cost_memory.recalled_rates(verifier, "ModelDrafter:draft:Q4_0") == pytest.approx((0.85, 0.9, 0.8, 0.8))
    path = cost_memory.draft_file(verifier, "ModelDrafter:draft:Q4_0")
    path.write_text('{"seconds_per_step": 0.125, "accepted_by_position": [1.5]}')
    assert cost_memory.recalled_rates(verifier, "ModelDrafter:draft:Q4_0") is None and not path.exists()

"""The acceptance rule and the processed distributions, on hand-built tensors."""

import math

import pytest
import torch

from specdec_core.config import GenerationConfig
from specdec_core.errors import NonFiniteError
from specdec_core.verification.sampling import accept_drafts, accept_tree, processed_probs, sample, shown_probs


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def one_hot(i, v=4):
    return torch.nn.functional.one_hot(torch.tensor(i), v).float()


def test_greedy_processing_is_the_one_hot_of_the_argmax():
    probs = processed_probs(torch.tensor([[0.1, 2.0, -1.0, 0.5]]), GenerationConfig(temperature=0))
    assert probs.tolist() == [[0.0, 1.0, 0.0, 0.0]]


def test_temperature_then_top_k_then_top_p():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert torch.allclose(processed_probs(logits, GenerationConfig(temperature=1.0)),
                          torch.tensor([0.5, 0.3, 0.15, 0.05]), atol=1e-6)
    top_k = processed_probs(logits, GenerationConfig(temperature=1.0, top_k=2))
    assert torch.allclose(top_k, torch.tensor([0.625, 0.375, 0, 0]), atol=1e-6)
    # top-p 0.8 keeps 0.5 and 0.3 (their mass reaches 0.8), drops the rest
    top_p = processed_probs(logits, GenerationConfig(temperature=1.0, top_p=0.8))
    assert torch.allclose(top_p, torch.tensor([0.625, 0.375, 0, 0]), atol=1e-6)
    # top-p always keeps the most likely token
    assert processed_probs(logits, GenerationConfig(temperature=1.0, top_p=0.01)).tolist() == [1, 0, 0, 0]
    hot = processed_probs(logits, GenerationConfig(temperature=2.0))
    assert hot[0] < 0.5 and hot[3] > 0.05  # higher temperature flattens


def test_people_read_the_softmax_when_greedy_and_the_sampled_distribution_otherwise():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    assert torch.allclose(shown_probs(logits, GenerationConfig()), torch.softmax(logits, -1))  # not the one-hot
    sampled = GenerationConfig(temperature=0.5, top_k=2)
    assert torch.equal(shown_probs(logits, sampled), processed_probs(logits, sampled))
    given = torch.full((1, 4), 0.25)
    assert shown_probs(logits, sampled, given) is given  # the processed distribution already computed


def test_greedy_acceptance_accepts_the_matching_prefix_then_corrects():
    target = torch.stack([one_hot(1), one_hot(2), one_hot(3), one_hot(0)])
    draft = torch.stack([one_hot(1), one_hot(2), one_hot(0)])
    result = accept_drafts(torch.tensor([1, 2, 0]), draft, target, gen())
    assert result.n_accepted == 2
    assert result.next_token == 3  # the verifier's own choice at the first mismatch
    assert result.accept_probs == (1.0, 1.0, 0.0)


def test_all_accepted_gives_a_bonus_token_from_the_last_target_row():
    target = torch.stack([one_hot(1), one_hot(2), one_hot(3)])
    result = accept_drafts(torch.tensor([1, 2]), target[:2].clone(), target, gen())
    assert (result.n_accepted, result.next_token) == (2, 3)


def test_no_drafts_samples_from_the_verifier_alone():
    target = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    result = accept_drafts(torch.tensor([], dtype=torch.long), torch.empty(0, 4), target, gen())
    assert (result.n_accepted, result.next_token) == (0, 2)


def test_token_the_verifier_rules_out_is_always_rejected_and_never_resampled():
    target = torch.tensor([[0.0, 0.5, 0.5, 0.0], [0.25, 0.25, 0.25, 0.25]])
    draft = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    for seed in range(50):
        result = accept_drafts(torch.tensor([3]), draft, target, gen(seed))
        assert result.n_accepted == 0 and result.next_token in (1, 2)


def test_acceptance_probability_is_min_one_target_over_draft():
    target = torch.tensor([[0.2, 0.8], [0.5, 0.5]])
    draft = torch.tensor([[0.6, 0.4]])
    assert abs(accept_drafts(torch.tensor([0]), draft, target, gen()).accept_probs[0] - 1 / 3) < 1e-6
    assert accept_drafts(torch.tensor([1]), draft, target, gen()).accept_probs[0] == 1.0


def test_rule_output_is_distributed_as_the_target():
    """Vectorised over many draws: draft x ~ draft_probs, emitted token ~ target_probs exactly."""
    target = torch.tensor([0.5, 0.3, 0.15, 0.05])
    draft = torch.tensor([0.1, 0.2, 0.3, 0.4])
    generator = gen(123)
    counts = torch.zeros(4)
    n = 6000
    for _ in range(n):
        x = torch.multinomial(draft, 1, generator=generator)
        result = accept_drafts(x, draft[None], torch.stack([target, target]), generator)
        counts[x.item() if result.n_accepted else result.next_token] += 1
    assert torch.allclose(counts / n, target, atol=0.025)


# --------------------------------------------------------------------------- extreme finite temperatures (issue 25)

LOGITS = torch.tensor([[0.5, 3.0, float("-inf"), -60.0, 2.9], [-80.0, -90.0, -85.0, float("-inf"), -81.0]])


@pytest.mark.parametrize("temperature", [1e-300, 1e-45, 1e-38, 1e-30])
def test_a_temperature_too_small_for_float32_samples_as_greedy(temperature):
    probs = processed_probs(LOGITS, GenerationConfig(temperature=temperature))
    assert probs.tolist() == processed_probs(LOGITS, GenerationConfig(temperature=0)).tolist()


@pytest.mark.parametrize("temperature", [1e39, 1e300, 1.7e308])
def test_a_huge_temperature_is_uniform_over_the_tokens_not_ruled_out(temperature):
    probs = processed_probs(LOGITS, GenerationConfig(temperature=temperature))
    assert probs.tolist() == [[0.25, 0.25, 0.0, 0.25, 0.25], [0.25, 0.25, 0.25, 0.0, 0.25]]
    top_2 = processed_probs(LOGITS, GenerationConfig(temperature=temperature, top_k=2))
    assert top_2.tolist() == [[0.0, 0.5, 0.0, 0.0, 0.5], [0.5, 0.0, 0.0, 0.0, 0.5]]


def test_moderate_temperatures_are_untouched_by_the_limits():
    logits = torch.tensor([[1.0, 2.0, float("-inf")]])
    for temperature in (1e-3, 0.7, 1e6):
        expected = torch.softmax(logits / temperature, -1)
        assert torch.equal(processed_probs(logits, GenerationConfig(temperature=temperature)), expected)


@pytest.mark.parametrize("temperature", [1e-300, 1e-38, 1e39])
def test_extreme_temperatures_never_give_nan_to_the_acceptance_rule(temperature):
    config = GenerationConfig(temperature=temperature)
    torch.manual_seed(0)
    target = processed_probs(torch.randn(4, 50) * 20, config)
    draft = processed_probs(torch.randn(3, 50) * 20, config)
    result = accept_drafts(draft.argmax(-1), draft, target, gen())
    assert all(math.isfinite(p) for p in result.accept_probs)
    assert 0 <= result.next_token < 50


def test_sampling_from_a_nan_distribution_is_an_error_not_the_last_id():
    with pytest.raises(NonFiniteError):
        sample(torch.tensor([0.2, float("nan"), 0.3]), gen())
    with pytest.raises(NonFiniteError):
        sample(torch.zeros(3), gen())


def test_a_nan_acceptance_ratio_is_an_error_not_an_acceptance():
    target = torch.tensor([[float("nan"), 0.5, 0.5], [0.2, 0.3, 0.5]])
    draft = torch.tensor([[1.0, 0.0, 0.0]])
    with pytest.raises(NonFiniteError):
        accept_drafts(torch.tensor([0]), draft, target, gen())
    with pytest.raises(NonFiniteError):
        accept_tree([0], [-1], target, gen())


def test_nan_logits_are_an_error_when_sampling():
    with pytest.raises(NonFiniteError):
        processed_probs(torch.tensor([[0.1, float("nan")]]), GenerationConfig(temperature=0.7))

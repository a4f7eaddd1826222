"""The repetition penalty: transformers' definition, applied by both models to the same history, so greedy
speculation still equals the verifier's own greedy generate and sampling still follows its distribution."""

import pytest
import tiny
import torch
from test_engine import hf_greedy, prompt_ids
from test_lossless import PROMPT, VOCAB, chi_square_p_value, sampled_joint
from transformers import RepetitionPenaltyLogitsProcessor

from specdec_core.commands.cli import main
from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import HeadDrafter, HybridDrafter, ModelDrafter, PromptLookupDrafter
from specdec_core.engine import Engine
from specdec_core.errors import ConfigError
from specdec_core.verification.sampling import processed_probs, seen_tokens

PENALTY = 1.8


def test_the_penalty_is_transformers_own_and_costs_nothing_when_off():
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0, -0.2]])
    history = [1, 3, 1]
    config = GenerationConfig(temperature=1.0, repetition_penalty=PENALTY)
    seen = seen_tokens(config, history, [[]], 5)
    want = torch.softmax(RepetitionPenaltyLogitsProcessor(PENALTY)(torch.tensor([history]), logits.clone()), -1)
    assert torch.allclose(processed_probs(logits, config, seen), want, atol=1e-6)
    # Greedy: the argmax after the penalty (token 3 loses to token 0 here).
    assert processed_probs(logits, config.with_(temperature=0.0), seen).argmax().item() == 0
    # Each row has its own history: row 1 has also seen the draft token 0.
    rows = seen_tokens(config, history, [[], [0]], 5)
    assert rows.tolist() == [[False, True, False, True, False], [True, True, False, True, False]]
    assert seen_tokens(GenerationConfig(), history, [[]], 5) is None
    with pytest.raises(ConfigError, match="repetition penalty"):
        GenerationConfig(repetition_penalty=0.0).validate()


def hf_greedy_penalized(loaded, prompt, n):
    out = loaded.model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n, repetition_penalty=PENALTY,
                                eos_token_id=loaded.tokenizer.eos_token_id, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("kind", ["model", "prompt-lookup", "hybrid", "head", "tree", "off"])
def test_greedy_speculation_with_the_penalty_equals_the_verifiers_own_greedy_generate(tiny_tokenizer, kind):
    verifier, draft = tiny.make_pair("llama", tiny_tokenizer)
    text = "Once upon a time there was a little robot"
    # Prompt lookup copies only what repeats: give it a prompt that does (the penalty makes replies repeat less).
    prompt = prompt_ids(tiny_tokenizer, f"{text}. {text}. {text}" if kind in ("prompt-lookup", "hybrid") else text)
    want = hf_greedy_penalized(verifier, prompt, 40)
    assert want != hf_greedy(verifier, prompt, 40)  # the penalty changes this reply: the test can tell
    drafter = {"model": ModelDrafter(draft), "prompt-lookup": PromptLookupDrafter(),
               "hybrid": HybridDrafter(ModelDrafter(draft)), "head": HeadDrafter(tiny.make_head(verifier, scale=0.5)),
               "tree": ModelDrafter(draft), "off": None}[kind]
    config = GenerationConfig(max_new_tokens=40, gamma=4, repetition_penalty=PENALTY,
                              tree_nodes=6 if kind == "tree" else 0, cost_aware=False)
    *_, fin = Engine(verifier, drafter).generate(prompt, config)
    assert list(fin.token_ids) == want
    if kind != "off":
        assert fin.stats.drafted > 0


def exact_joint_penalized(verifier, config, prompt=PROMPT):
    """P(first = a, second = b) under the verifier's processed distribution with the penalty's histories."""
    with torch.no_grad():
        first_logits = verifier.model(torch.tensor([prompt])).logits[0, -1]
        first = processed_probs(first_logits[None], config, seen_tokens(config, prompt, [[]], VOCAB))[0]
        nexts_logits = verifier.model(torch.tensor([prompt + [a] for a in range(VOCAB)])).logits[:, -1]
        nexts = processed_probs(nexts_logits, config, seen_tokens(config, prompt, [[a] for a in range(VOCAB)], VOCAB))
    return first[:, None] * nexts


@pytest.fixture(scope="module")
def lossless_pair(tiny_tokenizer):
    def model(seed):
        m = tiny.make_model("llama", tiny_tokenizer, seed=seed, vocab_size=VOCAB, logit_scale=20.0, layers=1,
                            hidden=16)
        return tiny.as_loaded(m, tiny_tokenizer, eos_token_ids=frozenset())
    return model(3), model(4)


def test_sampling_with_the_penalty_follows_the_verifiers_processed_distribution(lossless_pair):
    verifier, draft = lossless_pair
    config = GenerationConfig(temperature=1.0, max_new_tokens=3, gamma=3, top_alternatives=0,
                              repetition_penalty=PENALTY)
    exact = exact_joint_penalized(verifier, config)
    plain = exact_joint_penalized(verifier, config.with_(repetition_penalty=1.0))
    assert float((exact - plain).abs().sum()) / 2 > 0.05  # the penalty moves the distribution this much
    counts = sampled_joint(verifier, draft, config)
    assert chi_square_p_value(counts, exact) > 1e-3
    assert chi_square_p_value(counts, plain) < 1e-6  # and the test tells the two apart


def test_the_cli_takes_a_repetition_penalty_and_refuses_a_bad_one(capsys, tmp_path, tiny_tokenizer):
    verifier = tiny.save_model(tmp_path / "verifier", "llama", tiny_tokenizer, seed=1, logit_scale=8.0)
    assert main(["generate", "Once upon a time", "--verifier", str(verifier), "--no-speculation", "--json",
                 "--max-new-tokens", "12", "--device", "cpu", "--repetition-penalty", "1.8"]) == 0
    capsys.readouterr()
    assert main(["generate", "hi", "--verifier", str(verifier), "--repetition-penalty", "0", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        "error: repetition penalty must be from 0.01 to 100 (got 0)"]


def test_a_draft_identical_to_the_verifier_is_always_accepted_with_the_penalty(lossless_pair):
    """The draft samples from the same penalised distribution as the verifier checks (both with the history
    up to each drafted position): with the verifier as its own draft, every drafted token is accepted. On a
    vocabulary of 8 every reply repeats tokens, so a draft without the penalty would be rejected often."""
    verifier, _ = lossless_pair
    config = GenerationConfig(temperature=1.0, max_new_tokens=60, gamma=4, repetition_penalty=PENALTY, seed=3)
    *_, fin = Engine(verifier, ModelDrafter(verifier)).generate(PROMPT, config)
    assert fin.stats.drafted >= 40 and fin.stats.accepted == fin.stats.drafted

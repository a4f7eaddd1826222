"""`specdec bench --adapt --proxy` (adapt_proxy.py): online adaptation measured on a recorded conversation
without drafting, turn by turn in the order the app adapts."""

import json
import random

import pytest
import tiny
import torch

from specdec_core.commands.cli import main
from specdec_core.config import GenerationConfig
from specdec_core.drafting.adapt import AdaptSettings, verifier_states
from specdec_core.drafting.drafters import HeadDrafter, HybridDrafter
from specdec_core.drafting.phrases import PhraseStore
from specdec_core.engine import Engine
from specdec_core.measuring.adapt_proxy import ChainRounds, Turn, chain_rounds, head_predictions, run_proxy
from specdec_core.measuring.bench import time_reply

FAST = AdaptSettings(steps=30, max_seconds=60.0, lr=2e-2)


@pytest.fixture(scope="module")
def verifier(tiny_tokenizer):
    return tiny.make_pair("llama", tiny_tokenizer)[0]


def recorded_turn(verifier, seed: int) -> Turn:
    """A random prompt and the verifier's greedy reply to it."""
    draw = random.Random(seed)
    prompt = [draw.randrange(4, 300) for _ in range(12)]
    config = GenerationConfig(max_new_tokens=24, speculate=False, top_alternatives=0)
    return Turn(prompt, list(time_reply(Engine(verifier), prompt, config).token_ids))


def test_each_turn_is_measured_before_the_head_learns_it_and_after_it_learnt_the_earlier_ones(verifier):
    head = tiny.make_head(verifier, scale=0.5).model
    original = {k: v.clone() for k, v in head.state_dict().items()}
    first, second, third = (recorded_turn(verifier, seed) for seed in (1, 2, 3))
    seen = []
    result = run_proxy(head, verifier.model, [first, second, first, third], FAST, steps=2, on_turn=seen.append)
    rows = result["per_turn"]
    assert "chain_ceiling" not in rows[0]  # no chain to replay without its rounds' settings
    assert seen == rows and [row["turn"] for row in rows] == [1, 2, 3, 4]
    assert all(row["positions"] == 24 and len(row["before"]) == len(row["after"]) == 2 for row in rows)
    assert rows[0]["after"] == rows[0]["before"]  # nothing learnt before the first turn
    assert rows[2]["after"][0] > rows[2]["before"][0] + 0.5  # the third turn repeats the first, learnt by then
    # The fourth turn is new: had the copy learnt it before it was measured, it would know it as well.
    assert rows[3]["after"][0] < rows[2]["after"][0] - 0.5
    assert all(row["adapt_steps"] == FAST.steps for row in rows)
    assert all(torch.equal(head.state_dict()[k], v) for k, v in original.items())  # a copy adapted


@pytest.mark.parametrize("with_store", [False, True])
def test_the_chains_rounds_replayed_from_the_heads_first_step_match_the_engines(verifier, tiny_tokenizer,
                                                                              with_store):
    head = tiny.make_head(verifier, scale=0.5)
    phrases = None
    if with_store:  # a store of the verifier's own reply: where lookup finds nothing, the hybrid copies it
        plain = GenerationConfig(max_new_tokens=40, speculate=False, top_alternatives=0)
        said = time_reply(Engine(verifier), tiny_tokenizer("A robot").input_ids, plain).token_ids
        phrases = PhraseStore([said] * 3)
    engine = Engine(verifier, HybridDrafter(HeadDrafter(head), model_tokens=1, phrases=phrases))
    config = GenerationConfig(max_new_tokens=40, gamma=3, tree_nodes=0, top_alternatives=0)
    prompt = tiny_tokenizer("Once upon a time there was a little robot. Once upon a time").input_ids
    reply = time_reply(engine, prompt, config)
    turn = Turn(list(prompt), list(reply.token_ids))
    (states,) = verifier_states(verifier.model, [turn.prompt_ids + turn.reply_ids])
    rows = verifier.model.get_output_embeddings().weight.detach()[head.model.head_ids]
    predicted = head_predictions(head.model, verifier.model.get_input_embeddings(), rows, turn, states, 1)
    replayed = chain_rounds(turn, predicted[0], ChainRounds(config.gamma, config.max_new_tokens,
                                                            verifier.eos_token_ids, engine.vocab_size, phrases))
    if with_store:  # the store drafted some rounds the head would have drafted without it
        alone = chain_rounds(turn, predicted[0], ChainRounds(config.gamma, config.max_new_tokens,
                                                             verifier.eos_token_ids, engine.vocab_size))
        assert alone["head_drafted"] > replayed["head_drafted"]
    tally = reply.tally
    assert tally.accepted > 0 and tally.drafted > tally.accepted  # a mix of acceptances and rejections
    assert (replayed["drafted"], replayed["accepted"], replayed["rounds"]) == \
           (tally.drafted, tally.accepted, tally.rounds)
    # Rounds without a lookup match draft one head token each; the first round's copy (the prompt repeats
    # itself) was the lookup's.
    assert 0 < replayed["head_drafted"] < replayed["rounds"] and replayed["head_accepted"] <= replayed["head_drafted"]
    # The ceiling: the same rounds with a head right at every position.
    result = run_proxy(head.model, verifier.model, [turn, turn], AdaptSettings(steps=1), ChainRounds(
        config.gamma, config.max_new_tokens, verifier.eos_token_ids, engine.vocab_size, phrases))
    ceiling, before = result["chain_ceiling"], result["chain_before"]
    assert ceiling["head_acceptance"] == 1.0 and ceiling["acceptance_rate"] > before["acceptance_rate"]
    assert before["acceptance_rate"] == replayed["accepted"] / replayed["drafted"]


def test_bench_adapt_proxy_prints_each_turn_and_reuses_the_recorded_replies(capsys, tiny_tokenizer, tmp_path,
                                                                             monkeypatch):
    verifier_folder, head_folder, prompts = tiny.save_conversation_bench(tmp_path, tiny_tokenizer)
    replies, out = tmp_path / "replies.json", tmp_path / "proxy.json"
    command = ["bench", "--adapt", "--proxy", "--prompts", str(prompts), "--verifier", str(verifier_folder),
               "--draft", str(head_folder), "--device", "cpu", "--max-new-tokens", "8", "--adapt-steps", "2",
               "--replies", str(replies), "--json", str(out), "--adapt-option", "lr=0.001",
               "--adapt-option", "trained=fc.,norm."]
    assert main(command) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())
    assert [row["turn"] for row in result["per_turn"]] == [1, 2, 3] and result["settings"]["steps"] == 2
    assert result["settings"]["lr"] == 0.001 and result["settings"]["trained"] == ["fc.", "norm."]
    assert "teacher-forced agreement" in printed and len(json.loads(replies.read_text())["turns"]) == 3

    import specdec_core.measuring.adapt_bench as adapt_bench

    monkeypatch.setattr(adapt_bench, "time_reply", lambda *args: pytest.fail("the replies were generated again"))
    assert main(command) == 0

    def figures(rows):
        return [{key: value for key, value in row.items() if key != "adapt_s"} for row in rows]

    assert figures(json.loads(out.read_text())["per_turn"]) == figures(result["per_turn"])
    assert main(["bench", "--proxy", "--prompts", str(prompts), "--verifier", str(verifier_folder)]) == 2
    assert "add --adapt" in capsys.readouterr().err
    assert main([*command, "--adapt-option", "lr=fast"]) == 2
    assert "lr: 'fast' is not a float" in capsys.readouterr().err

"""`specdec bench --adapt` (adapt_bench.py): a conversation replayed before and during online adaptation."""

import json

import pytest
import tiny
import torch

from specdec_core.commands.cli import main
from specdec_core.config import GenerationConfig
from specdec_core.drafting.adapt import AdaptSettings
from specdec_core.drafting.drafters import HeadDrafter, HybridDrafter
from specdec_core.engine import Engine
from specdec_core.measuring.adapt_bench import run_adapt_bench
from specdec_core.measuring.bench import BenchError
from specdec_core.measuring.prompt_sets import PromptCase, load_prompts


def turns(*texts):
    return [PromptCase(f"conversation-{i}", ({"role": "user", "content": text},)) for i, text in enumerate(texts)]


@pytest.fixture(scope="module")
def verifier(tiny_tokenizer):
    return tiny.make_pair("llama", tiny_tokenizer)[0]


def test_later_turns_are_drafted_by_a_head_adapted_on_earlier_ones_with_identical_output(verifier):
    head = tiny.make_head(verifier, scale=0.5)
    original = {k: v.clone() for k, v in head.model.state_dict().items()}
    engine = Engine(verifier, HybridDrafter(HeadDrafter(head), model_tokens=3))
    config = GenerationConfig(max_new_tokens=24, gamma=3, tree_nodes=0, top_alternatives=0)
    cases = turns(*["Once upon a time there was a little robot"] * 4)
    result = run_adapt_bench(engine, verifier, cases, config, AdaptSettings(steps=30, max_seconds=60.0, lr=2e-2),
                             history=0)
    assert result["identical"] and [row["identical"] for row in result["per_turn"]] == [True] * 4
    assert result["after"]["acceptance_rate"] > result["before"]["acceptance_rate"] + 0.2
    assert result["adapted_tokens"] == 4 * 24 and result["setup"]["turns"] == 4
    # The bench leaves the head as it found it.
    assert all(torch.equal(head.model.state_dict()[k], v) for k, v in original.items())


def test_each_turn_sees_the_earlier_exchanges_up_to_the_history(verifier, monkeypatch):
    import specdec_core.measuring.adapt_bench as adapt_bench

    seen = []
    real = adapt_bench.time_reply
    monkeypatch.setattr(adapt_bench, "time_reply", lambda engine, ids, config: seen.append(len(ids)) or
                        real(engine, ids, config))
    engine = Engine(verifier, HeadDrafter(tiny.make_head(verifier)))
    config = GenerationConfig(max_new_tokens=6, gamma=2, tree_nodes=0, top_alternatives=0)
    lengths = {}
    for history in (1, 2):
        seen.clear()
        adapt_bench.replay(engine, verifier.tokenizer, 512, turns("1 2 3", "4 5 6", "7 8 9"), config, history)
        lengths[history] = list(seen)
    assert lengths[1][0] < lengths[1][1]  # the second turn sees the first exchange
    assert lengths[1][:2] == lengths[2][:2] and lengths[2][2] > lengths[1][2]  # the third sees one or two


def test_only_a_draft_head_and_greedy_replies_can_be_measured(verifier, tiny_tokenizer):
    draft = tiny.make_pair("llama", tiny_tokenizer)[1]
    from specdec_core.drafting.drafters import ModelDrafter

    config = GenerationConfig(max_new_tokens=4)
    with pytest.raises(BenchError, match="draft head"):
        run_adapt_bench(Engine(verifier, ModelDrafter(draft)), verifier, turns("a", "b"), config, AdaptSettings())
    with pytest.raises(BenchError, match="greedy"):
        run_adapt_bench(Engine(verifier, HeadDrafter(tiny.make_head(verifier))), verifier, turns("a", "b"),
                        config.with_(temperature=0.7), AdaptSettings())


def test_bench_adapt_prints_before_and_after_and_writes_json(capsys, tiny_tokenizer, tmp_path):
    verifier_folder, head_folder, prompts = tiny.save_conversation_bench(tmp_path, tiny_tokenizer)
    out = tmp_path / "adapt.json"
    code = main(["bench", "--adapt", "--prompts", str(prompts), "--verifier", str(verifier_folder), "--draft",
                 str(head_folder), "--device", "cpu", "--max-new-tokens", "8", "--adapt-steps", "2",
                 "--json", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(out.read_text())
    assert result["identical"] and result["setup"]["adapt"]["steps"] == 2 and len(result["per_turn"]) == 3
    assert all(0 < len(turn["token_ids"]) <= 8 for turn in result["per_turn"])  # the replies, for tuning later
    assert "acceptance after / before" in captured.out and "output identical: yes" in captured.out
    code = main(["bench", "--adapt", "--prompts", str(prompts), "--verifier", str(verifier_folder), "--drafter",
                 "prompt-lookup", "--device", "cpu", "--max-new-tokens", "4"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "draft head" in errors[0]


def test_the_bundled_conversations_have_twenty_turns():
    from pathlib import Path

    from specdec_core.measuring.prompt_sets import BUNDLED_SETS

    for name in ("conversation-20", "photo-script-20"):
        assert name in BUNDLED_SETS
        cases = load_prompts(str(Path(__file__).parents[2] / "assets" / "prompts" / f"{name}.jsonl"))
        assert len(cases) == 20 and all(len(case.messages) == 1 for case in cases)
        assert len({case.messages[0]["content"] for case in cases}) == 20

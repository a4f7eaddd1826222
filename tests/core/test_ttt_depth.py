"""Training a draft head for deeper drafting positions (EAGLE-3's training-time test, distill/head.py) and
the per-depth acceptance the measure step reports."""

from __future__ import annotations

import pytest
import tiny
import torch

from distill.head import _subset, head_losses
from distill.measure import measure_pair


@pytest.fixture(scope="module")
def verifier(tiny_tokenizer):
    return tiny.make_pair("llama", tiny_tokenizer)[0]


def _batch(head, length: int, counted: int, seed: int = 0):
    """ids [1, length], random states [1, length, d], one counted head position, its top-4 labels."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 200, (1, length), generator=generator)
    states = torch.randn(1, length, head.config.hidden_size, generator=generator)
    mask = torch.zeros(1, length - 1, dtype=torch.bool)
    mask[0, counted] = True
    top_ids = head.head_ids[torch.randperm(len(head.head_ids), generator=generator)[:4]][None]
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    return ids, states, mask, top_ids, probs


def test_each_depths_loss_reads_the_heads_own_predictions_not_the_verifiers_later_states(verifier):
    """Depth d at position q stands for the d-th drafted token of a round whose verified prefix ends at
    q - d + 1: the verifier's true states after that are unknown when drafting, so changing them must not
    move depth d's losses, while the shallower depths that do see them move."""
    head = tiny.make_head(verifier, scale=0.5).model.eval()
    embed = verifier.model.get_input_embeddings()
    output_rows, subset_index = _subset(head, verifier.model.get_output_embeddings().weight.detach())
    q = 8
    ids, states, mask, top_ids, probs = _batch(head, 14, q)
    batch = (ids, states, mask, subset_index[top_ids], probs)
    changed = states.clone()
    changed[:, q - 1:q + 1] += torch.randn(1, 2, states.shape[-1])  # the true states at q - 1 and q
    with torch.no_grad():
        before = head_losses(head, embed, output_rows, batch, steps=4)
        after = head_losses(head, embed, output_rows, (ids, changed, mask, *batch[3:]), steps=4)
    for depth in (1, 2):  # they read the true state at q (depth 1) or q - 1 (depth 2)
        assert not torch.isclose(before[f"classification{depth}"], after[f"classification{depth}"])
    for depth in (3, 4):  # they read only the head's own predictions past q - 2
        assert before[f"classification{depth}"] == after[f"classification{depth}"]
        assert before[f"regression{depth}"] == after[f"regression{depth}"]
    assert len({float(before[f"classification{d}"]) for d in (1, 2, 3, 4)}) == 4


def test_the_depth_decay_weighs_each_depths_losses_into_the_training_loss(verifier):
    head = tiny.make_head(verifier, scale=0.5).model.eval()
    embed = verifier.model.get_input_embeddings()
    output_rows, subset_index = _subset(head, verifier.model.get_output_embeddings().weight.detach())
    ids, states, mask, top_ids, probs = _batch(head, 12, 6, seed=1)
    mask[0, 3:10] = True
    batch = (ids, states, mask, subset_index[top_ids.expand(7, 4)], probs.expand(7, 4))
    with torch.no_grad():
        alike = head_losses(head, embed, output_rows, batch, steps=3)
        decayed = head_losses(head, embed, output_rows, batch, steps=3, depth_decay=0.5)
    for name in ("classification", "regression"):
        per_depth = [alike[f"{name}{d}"] for d in (1, 2, 3)]
        torch.testing.assert_close(alike[name], sum(per_depth) / 3)
        torch.testing.assert_close(decayed[name], (per_depth[0] + 0.5 * per_depth[1] + 0.25 * per_depth[2]) / 1.75)


def test_measure_reports_acceptance_at_each_draft_depth(verifier, tiny_tokenizer):
    head = tiny.make_head(verifier, scale=0.5)
    prompts = [[{"role": "user", "content": "Once upon a time there was a little robot"}],
               [{"role": "user", "content": "The quick brown fox"}]]
    figures = measure_pair(verifier, head, prompts, gammas=(3,), max_new_tokens=16, sampled=False)
    per_depth = figures["speculative"]["3"]["per_position_acceptance"]
    assert len(per_depth) == 3 and all(0.0 <= a <= 1.0 for a in per_depth)
    # A chain drafts every depth each round, and depth i is accepted only if depth i - 1 was.
    assert per_depth == sorted(per_depth, reverse=True)
    assert figures["verifier_alone"]["per_position_acceptance"] == []


def test_a_heads_card_states_the_depth_and_the_decay_it_was_trained_with():
    from distill.card import _train_command

    command = _train_command("deep", {"chain_steps": 4, "depth_decay": 0.8, "steps": 10})
    assert command == "python -m distill train-head --run deep --chain-steps 4 --depth-decay 0.8 --steps 10"
    assert "--depth-decay" not in _train_command("plain", {"chain_steps": 2, "depth_decay": 1.0})


def test_the_measure_step_reads_a_held_out_set_with_comment_lines_and_reports_each_depth(tiny_models_dir, tmp_path):
    from distill.__main__ import main

    (tmp_path / "mine.jsonl").write_text('# Held out, never trained on\n'
                                         '{"name": "a", "messages": [{"role": "user", "content": "The quick"}]}\n'
                                         '{"name": "b", "messages": [{"role": "user", "content": "Hello!"}]}\n')
    out = tmp_path / "figures.json"
    main(["--verifier", str(tiny_models_dir["llama-verifier"]), "--device", "cpu", "--prompts", str(tmp_path),
          "measure", "--draft", str(tiny_models_dir["llama-draft"]), "--held-out", "mine.jsonl", "--n-prompts", "5",
          "--gammas", "2", "--sampled-gamma", "2", "--max-new-tokens", "6", "--out", str(out)])
    figures = __import__("json").loads(out.read_text())
    assert figures["prompts"] == 2 and len(figures["speculative"]["2"]["per_position_acceptance"]) == 2

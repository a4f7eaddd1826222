"""Training a draft head onward from an exported one (the shipped head) on new kinds of text: `--init-from`
takes a head's folder, `--head-ids merge` keeps its token ids but makes room for the new data's top-1
tokens (`--head-ids keep` keeps them all), and the export names every run behind the new head."""

from __future__ import annotations

import json

import pytest
import tiny
import torch

from distill.__main__ import _head_folder
from distill.head import merged_head_ids


@pytest.fixture(scope="module")
def verifier(tiny_tokenizer):
    return tiny.make_pair("llama", tiny_tokenizer)[0]


def test_merged_ids_keep_the_earlier_heads_in_order_and_put_the_new_top1_tokens_in_place_of_its_rarest():
    earlier = torch.tensor([2, 0, 7, 5, 9, 4, 8, 1])  # most probable first
    mass = torch.zeros(12)
    mass[[11, 3, 6, 7]] = torch.tensor([5.0, 4.0, 3.0, 9.0])  # 6 is in the top-k but never the top-1
    top1 = torch.zeros(12)
    top1[[11, 3, 7]] = 1
    merged = merged_head_ids(earlier, mass, top1)
    assert merged.tolist() == [2, 0, 7, 5, 9, 4, 11, 3]
    # At most a quarter of the earlier ids make room.
    top1[:] = 1
    mass[:] = torch.arange(12.0)
    assert merged_head_ids(earlier, mass, top1).tolist() == [2, 0, 7, 5, 9, 4, 11, 10]


def test_the_token_ids_are_chosen_without_the_validation_shards(tmp_path):
    from distill.head import label_mass, top1_counts

    (tmp_path / "labels").mkdir()
    for stem, token in (("train-00000", 3), ("val-00000", 5)):
        torch.save({"top_ids": [torch.tensor([[token, 1]], dtype=torch.int32)],
                    "top_logp": [torch.tensor([[-0.1, -2.4]], dtype=torch.float16)]},
                   tmp_path / "labels" / f"{stem}.pt")
    held = frozenset({"val-00000"})
    assert torch.nonzero(top1_counts(tmp_path, 8, held)).flatten().tolist() == [3]
    assert torch.nonzero(label_mass(tmp_path, 8, held)).flatten().tolist() == [1, 3]
    assert torch.nonzero(top1_counts(tmp_path, 8)).flatten().tolist() == [3, 5]


def test_init_from_names_a_run_or_a_heads_folder(tmp_path):
    work = tmp_path / "work"
    assert _head_folder(work, "head5") == str(work / "runs" / "head5" / "model")
    folder = tmp_path / "shipped"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert _head_folder(work, str(folder)) == str(folder)


def test_a_run_from_an_exported_head_proposes_the_new_datas_tokens_and_its_export_names_every_run_behind_it(
        tmp_path, verifier):
    from dataclasses import replace

    from distill.card import render_card
    from distill.data import generate_replies
    from distill.export import export_draft
    from distill.head import HeadSettings, top1_counts, train_head
    from distill.prompts import build_prompt_sets

    prompts = build_prompt_sets(seed=0)[0]
    special = sorted({verifier.tokenizer.eos_token_id, verifier.tokenizer.pad_token_id})
    settings = HeadSettings(head_size=40, intermediate=64, heads=4, kv_heads=2, steps=4, batch_tokens=256,
                            warmup=2, validate_every=2, validation_fraction=0.2)
    first, second = tmp_path / "first", tmp_path / "second"
    generate_replies(verifier, prompts[:8], first, modes=["greedy"], shard_size=8, batch_size=8, max_new_tokens=16)
    train_head(verifier, first, first / "runs" / "h", settings, special)
    shipped = export_draft(first / "runs" / "h", verifier.tokenizer, tmp_path / "shipped",
                           {"verifier": "tiny", "run": "h", "reply_modes": ["greedy"], "prompt_sets": ["train"]})

    generate_replies(verifier, prompts[8:16], second, modes=["t07"], shard_size=8, batch_size=8,
                     max_new_tokens=16, seed=3)
    more = replace(settings, init_from=_head_folder(second, str(shipped)), head_ids="merge", chain_steps=2,
                   bf16=False)
    train_head(verifier, second, second / "runs" / "h2", more, special)
    dest = export_draft(second / "runs" / "h2", verifier.tokenizer, tmp_path / "next",
                        {"verifier": "tiny", "run": "h2", "reply_modes": ["corpustf"], "prompt_sets": ["corpus"]},
                        average_with=(shipped, 0.25))

    from specdec_core.loading.draft_head import SpecdecHeadModel

    before = SpecdecHeadModel.from_pretrained(shipped).head_ids.tolist()
    after = SpecdecHeadModel.from_pretrained(dest).head_ids.tolist()
    top1 = top1_counts(second, verifier.model.get_output_embeddings().weight.shape[0])
    lacking = {i for i in torch.nonzero(top1).flatten().tolist() if i not in before}
    assert lacking, "the second data set should bring top-1 tokens the first head lacks"
    added = min(len(lacking), len(before) // 4)
    assert set(after) - set(before) <= lacking and len(set(after) - set(before)) == added
    assert after[:len(before) - added] == before[:len(before) - added]
    # --head-ids keep: the same ids as the head it starts from, none replaced.
    train_head(verifier, second, second / "runs" / "h3", replace(more, head_ids="keep", steps=1), special)
    assert SpecdecHeadModel.from_pretrained(second / "runs" / "h3" / "model").head_ids.tolist() == before

    # The exported weights are the average asked for: a quarter the run's, three quarters the start's.
    run = SpecdecHeadModel.from_pretrained(second / "runs" / "h2" / "model").state_dict()
    start = SpecdecHeadModel.from_pretrained(shipped).float().state_dict()
    exported = SpecdecHeadModel.from_pretrained(dest).float().state_dict()
    weight = "layer.down_proj.weight"
    assert not torch.equal(run[weight], start[weight])
    torch.testing.assert_close(exported[weight], 0.75 * start[weight] + 0.25 * run[weight], atol=2e-3, rtol=1e-2)

    distill = json.loads((dest / "distill.json").read_text())
    assert [r["run"] for r in distill["earlier_runs"]] == ["h"]
    assert distill["settings"]["head_ids"] == "merge"
    card = _card()
    text = render_card(card, distill)
    assert f"train-head --run h2 --init-from {shipped} --head-ids merge --chain-steps 2" in text
    assert "--fp32" in text and "fp32 on the CPU" in text
    assert f"export --run h2 --average-with {shipped} --share 0.25" in text and "(25%)" in text
    # Its data: the corpus with teacher-forced prompt text, and the commands that make it; the table as given.
    assert "corpus-replies --teacher-forced" in text and "teacher-forced positions too" in text
    assert "| independent-heldout | acceptance | 0.30 | 0.35 | `specdec bench --prompts independent-heldout` |" in text


def _card() -> dict:
    """card.json as `python -m distill card` writes it, figures made up, with a before/after table."""
    return {"greedy_acceptance_rate": 0.5, "sampled_acceptance_rate_t0.7": 0.4, "speedup": 1.2, "best_gamma": 1,
            "identical_greedy_output": True, "draft_ms_per_token": 1.0, "verifier_ms_per_token": 10.0, "c": 0.1,
            "folder_bytes": 1000,
            "measurement": {"speculative": {}, "verifier_alone": {"tokens_per_s": 10.0}, "prompts": 1,
                            "max_new_tokens": 8, "torch_threads": 1, "load_average": [0, 0, 0], "command": "x",
                            "sampled_t0.7": {"gamma": 1}},
            "comparison": {"title": "h against h2", "before": "h", "after": "h2", "note": "load 9",
                           "rows": [{"set": "independent-heldout", "figure": "acceptance", "before": "0.30",
                                     "after": "0.35", "command": "specdec bench --prompts independent-heldout"}]}}


def test_the_card_step_can_redraw_the_card_with_a_new_before_and_after_table_measuring_nothing(tmp_path):
    from distill.__main__ import main

    card = _card()
    del card["comparison"]
    (tmp_path / "card.json").write_text(json.dumps(card))
    (tmp_path / "distill.json").write_text(json.dumps({"kind": "head", "run": "h", "settings": {}}))
    (tmp_path / "compare.json").write_text(json.dumps(_card()["comparison"]))
    main(["card", "--draft", str(tmp_path), "--rerender", "--compare", str(tmp_path / "compare.json")])
    text = (tmp_path / "README.md").read_text()
    assert "## Before and after: h against h2" in text and "| independent-heldout | acceptance | 0.30 | 0.35 |" in text
    assert json.loads((tmp_path / "card.json").read_text())["comparison"]["after"] == "h2"

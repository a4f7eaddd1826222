"""The independent held-out prompt set (issue 27): written apart from distill's templates, never trained on."""

import json

import pytest
import torch

from distill.prompts import read_jsonl, read_training_jsonl
from specdec_core.measuring.bench import category_of
from specdec_core.measuring.prompt_sets import PROMPTS_DIR, load_prompts

SET = PROMPTS_DIR / "independent-heldout.jsonl"


def test_the_independent_set_loads_as_a_bundled_set_with_a_category_in_every_name():
    cases = load_prompts("independent-heldout")
    assert 40 <= len(cases) <= 60
    records = [json.loads(line) for line in SET.read_text(encoding="utf-8").splitlines()
               if line.strip() and not line.startswith("#")]
    assert [category_of(case) for case in cases] == [record["category"] for record in records]
    categories = {category_of(case) for case in cases}
    assert {"everyday", "multilingual", "translation", "summary", "rag", "math", "code", "rewrite"} <= categories
    # Other scripts than Latin, and long prompts (a passage to summarise or answer from) next to short ones.
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in case.messages[-1]["content"]) for case in cases)
    lengths = sorted(len(case.messages[-1]["content"]) for case in cases)
    assert lengths[0] < 80 and lengths[-1] > 500


def test_distill_refuses_to_train_on_a_held_out_set_by_name_or_by_mark(tmp_path):
    with pytest.raises(SystemExit, match="held-out"):
        read_training_jsonl(SET)
    with pytest.raises(SystemExit, match="held-out"):
        read_training_jsonl(PROMPTS_DIR / "distill-heldout.jsonl")
    renamed = tmp_path / "my-prompts.jsonl"
    renamed.write_text(SET.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(SystemExit, match="held-out"):
        read_training_jsonl(renamed)
    assert read_training_jsonl(PROMPTS_DIR / "distill-train.jsonl")  # the training sets still read


def test_the_distill_generate_step_reads_its_prompts_through_the_guard(monkeypatch, tmp_path):
    # Whatever --set names, `generate` goes through read_training_jsonl: point it at a folder where the
    # training file is a copy of the held-out set and it stops before loading any model.
    import distill.__main__ as steps

    (tmp_path / "distill-train.jsonl").write_text(SET.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(steps, "_load_verifier", lambda args: pytest.fail("loaded a model"))
    args = type("Args", (), {"set": "train", "prompts": tmp_path})()
    with pytest.raises(SystemExit, match="held-out"):
        steps.cmd_generate(args)


def test_no_independent_prompt_appears_in_the_training_sets():
    held = {case.messages[-1]["content"] for case in load_prompts("independent-heldout")}
    for name in ("distill-train.jsonl", "distill-train-extra.jsonl"):
        trained = {m["content"] for messages in read_jsonl(PROMPTS_DIR / name) for m in messages}
        assert not held & trained


def test_heldout_replies_give_agreement_its_examples_and_the_folder_is_never_trained_on(monkeypatch, tmp_path):
    # `heldout-replies` writes the verifier's greedy replies (with states and labels) under a set name that
    # marks them held out; the head's examples load from them, and train-head refuses that folder.
    from tiny import as_loaded, make_model, make_tokenizer

    import distill.__main__ as steps
    from distill.head import load_examples

    tokenizer = make_tokenizer()
    verifier = as_loaded(make_model("llama", tokenizer, seed=1, logit_scale=8.0), tokenizer, "tiny-verifier")
    monkeypatch.setattr(steps, "_load_verifier", lambda args: verifier)
    (tmp_path / "independent-heldout.jsonl").write_text(
        "# Held out\n" + "\n".join(json.dumps({"name": name, "messages": [{"role": "user", "content": text}]})
                                     for name, text in (("ocean-sea", "Tell me about the sea."), ("greet-hi", "Hello!"),
                                                        ("ask-why", "Why?"))),
        encoding="utf-8")
    work = tmp_path / "w"
    args = type("Args", (), {"prompts": tmp_path, "held_out": "independent-heldout.jsonl", "n_prompts": 2,
                             "max_new_tokens": 6, "batch_size": 2, "seed": 0, "work": work})()
    steps.cmd_heldout_replies(args)
    stem = "greedy-heldout_independent_heldout-00000"
    assert [p.name for p in (work / "replies").iterdir()] == [f"{stem}.pt"]
    assert (work / "features" / f"{stem}.pt").exists() and (work / "labels" / f"{stem}.pt").exists()
    examples = load_examples(work, 64, set(verifier.eos_token_ids))
    assert 1 <= len(examples) <= 2 and all(e.end > e.first for e in examples)
    # `agreement --by-category` reads each example's category back from the set's file, by its reply.
    categories = steps._categories(work, tmp_path, examples)
    firsts = {tuple(e.ids[:e.first + 2].tolist()): c for e, c in zip(examples, categories)}
    data = torch.load(work / "replies" / f"{stem}.pt")
    expected = dict(zip((tuple(p) for p in data["prompt_ids"]), ["ocean", "greet"]))
    assert firsts and all(expected[prompt] == category for prompt, category in firsts.items())
    with pytest.raises(SystemExit, match="held-out"):
        steps.cmd_train_head(type("Args", (), {"work": work})())

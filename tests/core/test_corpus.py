"""The lasting corpus (distill/corpus.py): varied prompts, shards that resume and grow, teacher-forced
positions, and the head trained from it to several drafting depths, on a tiny random verifier."""

from __future__ import annotations

import json
import random
from collections import Counter
from itertools import islice
from pathlib import Path

import pytest
import torch
from tiny import as_loaded, make_model, make_tokenizer

from distill import corpus as corpus_module
from distill.corpus import corpus_to_replies, grow_corpus, read_shard, shard_paths
from distill.corpus_prompts import KINDS, corpus_prompts
from distill.data import label_replies, load_sequences
from distill.prompts import build_prompt_sets

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "prompts"


@pytest.fixture(scope="module")
def verifier():
    tokenizer = make_tokenizer()
    return as_loaded(make_model("llama", tokenizer, seed=1, logit_scale=8.0), tokenizer, "tiny-verifier")


def test_the_first_few_hundred_prompts_are_distinct_cover_every_kind_and_are_not_the_template_prompts():
    prompts = list(islice(corpus_prompts(0), 400))
    kinds = Counter(p["kind"] for p in prompts)
    assert set(kinds) == set(KINDS) and min(kinds.values()) >= 20
    texts = [json.dumps(p["messages"]) for p in prompts]
    assert len(set(texts)) == len(texts)
    assert texts == [json.dumps(p["messages"]) for p in islice(corpus_prompts(0), 400)]  # seeded
    assert any(len(p["messages"]) > 1 for p in prompts)  # conversations
    assert max(len(p["messages"][-1]["content"]) for p in prompts) > 400  # long passages
    train, held_out = build_prompt_sets(seed=0)
    template_texts = {m["content"] for messages in train + held_out for m in messages}
    assert not template_texts & {m["content"] for p in prompts for m in p["messages"]}


def test_no_held_out_prompt_text_appears_in_the_corpus_prompts():
    corpus_text = "\n".join(m["content"] for p in islice(corpus_prompts(0), 3000) for m in p["messages"])
    held_out = [path for path in ASSETS.glob("*.jsonl") if "heldout" in path.name]
    assert held_out  # distill-heldout.jsonl at least
    for path in held_out:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                for message in json.loads(line)["messages"]:
                    # A held-out prompt's opening words (its own text, not a shared instruction) never occur.
                    assert message["content"][:60] not in corpus_text, (path.name, message["content"][:60])


def test_a_killed_job_resumes_without_redoing_or_duplicating_shards_and_a_later_run_appends(tmp_path, verifier,
                                                                                            monkeypatch):
    folder = tmp_path / "corpus"
    calls = []
    real = corpus_module.greedy_replies

    def dies_on_the_third_shard(verifier, encoded, **kwargs):
        calls.append(len(encoded))
        if len(calls) == 3:
            raise KeyboardInterrupt  # killed while generating the third shard
        return real(verifier, encoded, **kwargs)

    monkeypatch.setattr(corpus_module, "greedy_replies", dies_on_the_third_shard)
    with pytest.raises(KeyboardInterrupt):
        grow_corpus(verifier, folder, shards=5, shard_size=4, batch_size=4, max_new_tokens=8)
    first = shard_paths(folder)
    assert [p.name for p in first] == ["shard-00000.npz", "shard-00001.npz"]
    assert sorted(p.name for p in folder.iterdir()) == ["shard-00000.npz", "shard-00001.npz"]  # no partial file
    stamps = {p.name: p.stat().st_mtime_ns for p in first}

    monkeypatch.setattr(corpus_module, "greedy_replies", real)
    written = grow_corpus(verifier, folder, shards=3, shard_size=4, batch_size=4, max_new_tokens=8)
    assert [p.name for p in written] == ["shard-00002.npz", "shard-00003.npz", "shard-00004.npz"]
    assert {p.name: p.stat().st_mtime_ns for p in first} == stamps  # not rewritten
    prompts = [json.dumps(p["messages"]) for path in shard_paths(folder) for p in read_shard(path)[0]]
    assert len(prompts) == 20 and len(set(prompts)) == 20
    # The five shards hold exactly the first twenty prompts of the stream, in order: nothing skipped.
    assert prompts == [json.dumps(p["messages"]) for p in islice(corpus_prompts(0), 20)]


def test_a_shard_keeps_the_verifiers_greedy_replies_and_the_prompt_ids_compactly(tmp_path, verifier):
    [path] = grow_corpus(verifier, tmp_path, shards=1, shard_size=3, batch_size=2, max_new_tokens=10)
    prompts, prompt_ids, reply_ids, facts = read_shard(path)
    assert facts["verifier"] == "tiny-verifier" and facts["max_new_tokens"] == 10
    with torch.no_grad():
        for ids, reply in zip(prompt_ids, reply_ids):
            out = verifier.model.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=10,
                                          eos_token_id=sorted(verifier.eos_token_ids), pad_token_id=0)
            assert out[0, len(ids):len(ids) + len(reply)].tolist() == reply
    with __import__("numpy").load(path) as data:
        assert data["reply_ids"].dtype.name == "uint16" and data["prompt_ids"].dtype.name == "uint16"


def test_teacher_forced_replies_start_where_each_prompts_own_text_starts(tmp_path, verifier):
    grow_corpus(verifier, tmp_path / "c", shards=1, shard_size=6, batch_size=6, max_new_tokens=6)
    _, prompt_ids, reply_ids, _ = read_shard(shard_paths(tmp_path / "c")[0])
    [plain] = corpus_to_replies(tmp_path / "c", tmp_path / "w")
    [forced] = corpus_to_replies(tmp_path / "c", tmp_path / "w", teacher_forced=True)
    assert corpus_to_replies(tmp_path / "c", tmp_path / "w") == []  # already there
    assert (plain.stem, forced.stem) == ("corpus-00000", "corpustf-00000")
    for i, (sequence, ids, reply) in enumerate(zip(load_sequences(forced), prompt_ids, reply_ids)):
        assert sequence.prompt_ids + sequence.reply_ids == ids + reply
        assert len(sequence.reply_ids) > len(reply)  # some of the prompt's own text counts
        # What stays out is the opening it shares with another prompt (the template), no more, no less.
        kept = sequence.prompt_ids
        assert len(kept) > 1 and any(other[:len(kept)] == kept for j, other in enumerate(prompt_ids) if j != i)
        assert not any(other[:len(kept) + 1] == ids[:len(kept) + 1] for j, other in enumerate(prompt_ids) if j != i)
    assert [s.reply_ids for s in load_sequences(plain)] == reply_ids


def test_each_prompts_own_text_starts_past_its_longest_opening_shared_with_any_other_prompt():
    rng = random.Random(0)
    for _ in range(300):  # short ids from a small alphabet: duplicates, prefixes of one another, no sharing
        prompts = [[rng.randrange(3) for _ in range(rng.randrange(1, 7))] for _ in range(rng.randrange(1, 9))]
        expected = []
        for i, ids in enumerate(prompts):
            shared = max((next((n for n, (a, b) in enumerate(zip(ids, other)) if a != b), min(len(ids), len(other)))
                          for j, other in enumerate(prompts) if j != i), default=0)
            expected.append(min(max(1, shared), len(ids)))
        assert corpus_module._teacher_forced_starts(prompts) == expected, prompts


def test_a_head_trains_to_four_drafting_depths_on_the_teacher_forced_corpus(tmp_path, verifier):
    from distill.head import HeadSettings, compute_features, train_head

    grow_corpus(verifier, tmp_path / "c", shards=2, shard_size=8, batch_size=8, max_new_tokens=12)
    corpus_to_replies(tmp_path / "c", tmp_path / "w", teacher_forced=True)
    label_replies(verifier, tmp_path / "w", top_k=4)
    compute_features(verifier, tmp_path / "w")
    settings = HeadSettings(head_size=100, intermediate=32, heads=4, kv_heads=2, steps=4, batch_tokens=256,
                            warmup=1, validate_every=4, chain_steps=4, depth_decay=0.8)
    special = sorted({verifier.tokenizer.eos_token_id, verifier.tokenizer.pad_token_id})
    summary = train_head(verifier, tmp_path / "w", tmp_path / "w" / "runs" / "h", settings, special)
    last = summary["history"][-1]
    assert last["step"] == 4
    assert {f"val_agreement{d}" for d in (1, 2, 3, 4)} <= set(last)
    assert {f"classification{d}" for d in (1, 2, 3, 4)} <= set(last)
    assert summary["settings"]["chain_steps"] == 4 and summary["settings"]["depth_decay"] == 0.8


def test_the_corpus_steps_run_from_distills_command_line(tiny_models_dir, tmp_path, capsys):
    from distill.__main__ import main

    verifier = ["--verifier", str(tiny_models_dir["llama-verifier"]), "--device", "cpu", "--work", str(tmp_path / "w")]
    main([*verifier, "corpus", "--folder", str(tmp_path / "c"), "--shards", "2", "--shard-size", "2",
          "--max-new-tokens", "4"])
    main([*verifier, "corpus", "--folder", str(tmp_path / "c"), "--shards", "1", "--shard-size", "2",
          "--max-new-tokens", "4"])
    main([*verifier, "corpus-replies", "--folder", str(tmp_path / "c"), "--teacher-forced"])
    out = capsys.readouterr().out
    assert "2 new shards; 2 in" in out and "1 new shards; 3 in" in out and "3 replies files" in out
    assert sorted(p.name for p in (tmp_path / "w" / "replies").iterdir()) == [
        "corpustf-00000.pt", "corpustf-00001.pt", "corpustf-00002.pt"]


def test_a_corpus_grows_only_with_the_verifier_that_wrote_it(tmp_path, verifier):
    grow_corpus(verifier, tmp_path, shards=1, shard_size=2, max_new_tokens=4)
    tokenizer = make_tokenizer()
    other = as_loaded(make_model("llama", tokenizer, seed=3, logit_scale=8.0), tokenizer, "another-verifier")
    with pytest.raises(SystemExit, match="holds replies of tiny-verifier, not another-verifier"):
        grow_corpus(other, tmp_path, shards=1, shard_size=2, max_new_tokens=4)
    assert len(shard_paths(tmp_path)) == 1

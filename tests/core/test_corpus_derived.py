"""Prompts derived from the corpus's own replies (distill/corpus_derived.py): follow-ups to finished replies,
passages, snippets and sentences taken from them, and a corpus that grows from that material."""

from __future__ import annotations

import json
from collections import Counter
from itertools import islice

import pytest
from tiny import as_loaded, make_model, make_tokenizer

from distill.corpus import grow_corpus, read_shard, shard_paths, write_shard
from distill.corpus_derived import KINDS, derived_prompts, material_from_shards, material_from_texts

PROSE = ("Bees live in colonies. A colony has one queen and many workers. Workers collect nectar from flowers. "
         "The queen lays all the eggs.")
CODE = "Here is one way:\n\n```python\ndef double(x):\n    return 2 * x\n```\n\nIt returns twice its input."
CUT = "First, preheat the oven to 200 degrees. Then mix the flour and the butter until it looks like"


def _user(text):
    return [{"role": "user", "content": text}]


def test_finished_replies_are_continued_and_cut_ones_only_give_their_finished_sentences():
    material = material_from_texts([(_user("tell me about bees"), PROSE, True),
                                    (_user("a doubling function?"), CODE, True),
                                    (_user("how do I make scones"), CUT, False)])
    assert [m[-1]["content"] for m, _ in material.exchanges] == ["tell me about bees", "a doubling function?"]
    assert material.passages == [PROSE]  # the code reply is no passage, the cut one has too few sentences
    assert material.snippets == [("python", "def double(x):\n    return 2 * x")]
    assert "First, preheat the oven to 200 degrees." in material.sentences
    assert not any("looks like" in s for s in material.sentences)  # the unfinished sentence is dropped


def test_the_derived_stream_is_seeded_distinct_and_puts_every_kind_of_task_to_the_corpus_text():
    material = material_from_texts([(_user("tell me about bees"), PROSE, True),
                                    (_user("a doubling function?"), CODE, True)])
    prompts = list(islice(derived_prompts(material, seed=3), 120))
    assert Counter(p["kind"] for p in prompts).keys() == {f"derived-{k}" for k in KINDS}
    texts = [json.dumps(p["messages"]) for p in prompts]
    assert len(set(texts)) == len(texts)
    assert texts == [json.dumps(p["messages"]) for p in islice(derived_prompts(material, seed=3), 120)]
    for p in prompts:
        messages = p["messages"]
        assert messages[-1]["role"] == "user"
        if p["kind"] == "derived-follow-up":  # the earlier exchange, the verifier's reply, a new question
            assert messages[-2]["role"] == "assistant" and messages[-2]["content"] in (PROSE, CODE)
        elif p["kind"] == "derived-snippet":
            assert "def double(x):" in messages[-1]["content"]
        elif p["kind"] == "derived-passage":
            assert PROSE in messages[-1]["content"]


def test_a_corpus_without_material_derives_nothing():
    assert list(derived_prompts(material_from_texts([]))) == []


@pytest.fixture(scope="module")
def verifier():
    tokenizer = make_tokenizer()
    return as_loaded(make_model("llama", tokenizer, seed=1, logit_scale=8.0), tokenizer, "tiny-verifier")


def test_a_corpus_grows_from_its_own_replies_and_says_so(tmp_path, verifier):
    tokenizer = verifier.tokenizer
    prompts = [{"kind": "question", "messages": _user("tell me about bees")},
               {"kind": "code", "messages": _user("a doubling function?")}]
    write_shard(tmp_path / "shard-00000.npz", prompts, [tokenizer.encode(p["messages"][0]["content"]) for p in prompts],
                [tokenizer.encode(PROSE), tokenizer.encode(CODE)],
                {"verifier": "tiny-verifier", "max_new_tokens": 200}, len(tokenizer))
    assert len(material_from_shards([read_shard(tmp_path / "shard-00000.npz")], tokenizer).exchanges) == 2
    [path] = grow_corpus(verifier, tmp_path, shards=1, shard_size=6, batch_size=6, max_new_tokens=4, source="derived")
    new, _, replies, facts = read_shard(path)
    assert facts["source"] == "derived" and facts["dtype"] == "float32"
    assert len(new) == 6 and all(p["kind"].startswith("derived-") for p in new) and all(replies)
    assert all(any(text in json.dumps(p["messages"]) for text in ("bees", "double", "Workers", "queen", "twice"))
               for p in new)
    with pytest.raises(ValueError, match="source must be one of"):
        grow_corpus(verifier, tmp_path, shards=1, shard_size=2, max_new_tokens=4, source="everything")
    assert len(shard_paths(tmp_path)) == 2


def test_features_with_labels_write_what_the_separate_label_step_writes_in_one_pass(tmp_path, verifier):
    import torch

    from distill.corpus import corpus_to_replies
    from distill.data import label_replies
    from distill.head import compute_features

    grow_corpus(verifier, tmp_path / "c", shards=2, shard_size=4, batch_size=4, max_new_tokens=6)
    for work in ("two", "one"):
        corpus_to_replies(tmp_path / "c", tmp_path / work, teacher_forced=True)
    label_replies(verifier, tmp_path / "two", top_k=4)
    compute_features(verifier, tmp_path / "two")
    compute_features(verifier, tmp_path / "one", top_k=4)
    for name in ("corpustf-00000.pt", "corpustf-00001.pt"):
        separate, joint = (torch.load(tmp_path / w / "labels" / name) for w in ("two", "one"))
        assert len(joint["top_ids"]) == len(separate["top_ids"]) == 4
        for a, b, la, lb in zip(separate["top_ids"], joint["top_ids"], separate["top_logp"], joint["top_logp"]):
            assert torch.equal(a, b) and torch.allclose(la.float(), lb.float(), atol=2e-3)
        states = [torch.load(tmp_path / w / "features" / name)["states"] for w in ("two", "one")]
        assert all(torch.equal(x, y) for x, y in zip(*states))

"""The distillation pipeline and the draft architecture, end to end on a tiny random verifier (seconds)."""

from __future__ import annotations

import json

import pytest
import torch
from tiny import as_loaded, make_model, make_tokenizer
from transformers import AutoModelForCausalLM

from distill.data import generate_replies, label_replies, load_sequences, reply_files
from distill.export import export_draft
from distill.measure import measure_pair
from distill.prompts import TOPICS, build_extra_train_set, build_prompt_sets, read_jsonl, write_jsonl
from distill.train import DraftShape, TrainSettings, train
from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import ModelDrafter
from specdec_core.engine import Engine
from specdec_core.events import Finished
from specdec_core.loading.draft_model import SpecdecDraftConfig, SpecdecDraftForCausalLM
from specdec_core.loading.models import load_model
from specdec_core.pairs.doctor import check_models
from specdec_core.verification.kv import CachedForward

SHAPE = DraftShape(layers=1, hidden=32, heads=2, kv_heads=1, intermediate=64, embedding_rank=8, head_size=48)
PROMPTS = [[{"role": "user", "content": "Tell me about the sea."}],
           [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "def add(a, b):"}],
           [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi."},
            {"role": "user", "content": "How can I help you today?"}]]


@pytest.fixture(scope="module")
def tokenizer():
    return make_tokenizer()


@pytest.fixture(scope="module")
def verifier(tokenizer):
    return as_loaded(make_model("llama", tokenizer, seed=1, logit_scale=8.0), tokenizer, "tiny-verifier")


def tiny_draft(vocab_size: int, head_size: int = 48) -> SpecdecDraftForCausalLM:
    torch.manual_seed(0)
    config = SpecdecDraftConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=2, num_key_value_heads=1, embedding_rank=8, head_size=head_size,
                                max_position_embeddings=512, eos_token_id=2, pad_token_id=0)
    draft = SpecdecDraftForCausalLM(config).eval()
    draft.set_token_ranking(torch.randperm(vocab_size, generator=torch.Generator().manual_seed(0)))
    return draft


def test_prompt_sets_are_seeded_and_held_out_by_topic(tmp_path):
    train_set, held_out = build_prompt_sets(seed=0)
    again, _ = build_prompt_sets(seed=0)
    assert train_set == again and len(train_set) > 2000 and len(held_out) > 200
    seen = {json.dumps(m) for m in train_set}
    assert not any(json.dumps(m) in seen for m in held_out)
    assert any(len(m) >= 3 for m in held_out)  # multi-turn
    assert any("```" in m[-1]["content"] or "def " in m[-1]["content"] for m in train_set)  # code
    write_jsonl(tmp_path / "p.jsonl", held_out[:5])
    assert read_jsonl(tmp_path / "p.jsonl") == held_out[:5]


def test_the_extra_training_set_brings_new_topics_and_never_a_held_out_one():
    train_set, held_out = build_prompt_sets(seed=0)
    extra = build_extra_train_set(seed=0)
    assert extra == build_extra_train_set(seed=0) and len(extra) > 2000
    earlier = {json.dumps(m, sort_keys=True) for m in train_set + held_out}
    assert not any(json.dumps(m, sort_keys=True) in earlier for m in extra)
    held_topics = {t for t in TOPICS if any(t in m[-1]["content"] for m in held_out)} - \
        {t for t in TOPICS if any(t in m[-1]["content"] for m in train_set)}
    assert len(held_topics) > 10
    assert not any(t in message["content"] for m in extra for message in m for t in held_topics)
    assert sum("rock music" in m[-1]["content"] for m in extra) > 5


def test_draft_logits_are_full_vocabulary_with_minus_inf_outside_the_subset():
    draft = tiny_draft(320)
    logits = draft(torch.tensor([[5, 9, 11, 300]])).logits
    assert logits.shape == (1, 4, 320)
    finite = torch.isfinite(logits[0, -1])
    assert int(finite.sum()) == 48
    assert set(finite.nonzero().flatten().tolist()) == set(draft.model.embed_tokens.ranked_ids[:48].tolist())
    assert draft(torch.tensor([[5, 9, 11]]), logits_to_keep=1).logits.shape == (1, 1, 320)


def test_draft_kv_cache_matches_a_full_forward_and_rolls_back():
    draft = tiny_draft(320)
    ids = [3, 17, 250, 8, 41, 99, 7]
    full = draft(torch.tensor([ids])).logits[0]
    forward = CachedForward(draft, torch.device("cpu"))
    forward.logits_for(ids[:4])
    forward.logits_for([*ids[:4], 1, 2])  # a rejected draft, cut again by the next call
    step = forward.logits_for(ids, n_last=3)
    torch.testing.assert_close(step, full[-3:], rtol=1e-4, atol=1e-4)


def test_draft_save_load_round_trip_and_doctor(tmp_path, tokenizer, verifier):
    draft = tiny_draft(len(tokenizer))
    draft.save_pretrained(tmp_path / "d")
    tokenizer.save_pretrained(tmp_path / "d")
    loaded = load_model(str(tmp_path / "d"), device="cpu")
    assert type(loaded.model).__name__ == "SpecdecDraftForCausalLM"
    x = torch.tensor([[4, 8, 15, 16, 23, 42]])
    torch.testing.assert_close(loaded.model(x).logits, draft(x).logits)
    verdict = check_models(verifier, loaded)
    assert verdict.compatible and verdict.shared_vocab_size == len(tokenizer), verdict.report()


def test_ranking_must_be_a_permutation():
    draft = tiny_draft(320)
    with pytest.raises(ValueError):
        draft.set_token_ranking(torch.zeros(320, dtype=torch.long))


def test_pipeline_generate_label_train_export_measure(tmp_path, tokenizer, verifier):
    work = tmp_path / "work"
    generate_replies(verifier, PROMPTS, work, modes=["greedy", "t07"], shard_size=2, batch_size=2,
                     max_new_tokens=12, seed=0)
    assert len(reply_files(work)) == 4
    recorded = {p.name: torch.load(work / "labels" / p.name) for p in reply_files(work)}

    # Resuming writes nothing new; a separate labelling pass reproduces the labels recorded while generating.
    before = {p: p.stat().st_mtime_ns for p in reply_files(work)}
    generate_replies(verifier, PROMPTS, work, modes=["greedy", "t07"], shard_size=2, batch_size=2,
                     max_new_tokens=12, seed=0)
    assert {p: p.stat().st_mtime_ns for p in reply_files(work)} == before
    for path in (work / "labels").glob("*.pt"):
        path.unlink()
    label_replies(verifier, work, top_k=16)
    for name, labels in recorded.items():
        relabelled = torch.load(work / "labels" / name)
        for a, b in zip(labels["top_ids"], relabelled["top_ids"]):
            assert torch.equal(a[:, 0], b[:, 0])
    greedy = load_sequences(work / "replies" / "greedy-00000.pt")
    assert greedy and all(s.reply_ids for s in greedy)

    settings = TrainSettings(steps=30, batch_tokens=64, lr=1e-2, warmup=5, validation_fraction=0.2)
    special = sorted({tokenizer.eos_token_id, tokenizer.pad_token_id})
    figures = train(verifier.model, work, work / "runs" / "t", SHAPE, settings, torch.device("cpu"), special)
    history = json.loads((work / "runs" / "t" / "train.json").read_text())["history"]
    assert figures["val_loss"] < 10 and history[-1]["step"] == 30
    # Resuming a finished run trains no further and keeps its step count.
    again = train(verifier.model, work, work / "runs" / "t", SHAPE, settings, torch.device("cpu"), special)
    assert again["step"] == 30

    dest = export_draft(work / "runs" / "t", tokenizer, tmp_path / "draft", {"verifier": "tiny"})
    model = AutoModelForCausalLM.from_pretrained(dest)
    assert next(model.parameters()).dtype == torch.float16  # stored in half precision
    draft = load_model(str(dest), device="cpu")
    assert draft.dtype == torch.float32  # loaded in fp32 on the CPU
    figures = measure_pair(verifier, draft, PROMPTS[:2], gammas=(3,), max_new_tokens=10, hybrid=(4, 1))
    assert figures["identical_greedy_output"]
    assert 0.0 <= figures["greedy_acceptance_rate"] <= 1.0
    shipped = figures["hybrid"]  # the draft as the embedded pair runs it: with prompt lookup
    assert shipped["identical_greedy_output"] and (shipped["gamma"], shipped["draft_tokens"]) == (4, 1)
    assert shipped["new_tokens"] == figures["verifier_alone"]["new_tokens"]
    assert 0.0 <= shipped["sampled_t0.7_acceptance_rate"] <= 1.0 and shipped["speedup"] > 0


def test_greedy_with_subset_draft_matches_verifier_alone(tokenizer, verifier):
    draft = as_loaded(tiny_draft(len(tokenizer)), tokenizer, "subset-draft")
    engine = Engine(verifier, ModelDrafter(draft))
    config = GenerationConfig(max_new_tokens=20, gamma=3)
    ids = tokenizer("Once upon a time").input_ids

    def run(c: GenerationConfig) -> Finished:
        engine.reset_caches()
        return [e for e in engine.generate(ids, c) if isinstance(e, Finished)][0]

    assert run(config).token_ids == run(config.with_(speculate=False)).token_ids
    sampled = run(config.with_(temperature=0.7))  # tokens outside the draft's subset still come out
    assert sampled.error is None and sampled.stats.new_tokens > 0


@pytest.mark.parametrize("native", [True, False])
def test_training_autocasts_to_bfloat16_only_where_the_cpu_has_it_unless_told(monkeypatch, native):
    # Emulated bfloat16 (AVX2, plain AVX-512) made the head pipeline test 3x slower than fp32.
    import argparse

    from distill.__main__ import _bf16
    from distill.head import HeadSettings
    from specdec_core.loading import cpu_speed

    monkeypatch.setattr(cpu_speed, "native_bfloat16", lambda: native)
    assert HeadSettings().bf16 is native
    assert _bf16(argparse.Namespace(bf16=False, fp32=False)) is native
    assert _bf16(argparse.Namespace(bf16=True, fp32=False)) is True
    assert _bf16(argparse.Namespace(bf16=False, fp32=True)) is False


def test_generated_replies_keep_a_prompts_system_message_as_the_engine_does(tmp_path, tokenizer, verifier):
    from specdec_core.text.chat import build_prompt

    generate_replies(verifier, PROMPTS[1:2], tmp_path, modes=["greedy"], shard_size=4, batch_size=2,
                     max_new_tokens=4)
    [path] = reply_files(tmp_path)
    [prompt_ids] = torch.load(path)["prompt_ids"]
    engine_ids = build_prompt(tokenizer, PROMPTS[1][1:], system="Be brief.", context_length=verifier.context_length,
                              reserve_new_tokens=4).ids
    assert prompt_ids == engine_ids
    assert prompt_ids != build_prompt(tokenizer, PROMPTS[1][1:], context_length=verifier.context_length).ids

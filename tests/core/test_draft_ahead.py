"""A draft that needs nothing from the verifier reads the prompt, and drafts round 1, on a thread of its own
during the verifier's prefill (Engine.drafts_ahead): same replies, less waiting, every thread ended."""

import threading
import time

import pytest
import tiny

from specdec_core import defaults
from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import HeadDrafter, HybridDrafter, ModelDrafter, PromptLookupDrafter
from specdec_core.engine import Controls, Engine
from specdec_core.events import Finished, Prefilled, RoundVerified, StopReason


@pytest.fixture(scope="module")
def pair(tiny_tokenizer):
    return tiny.make_pair("llama", tiny_tokenizer)


@pytest.fixture
def two_cpus(monkeypatch):
    """A machine with a core to spare for the draft whatever runs these tests (1 torch thread, 2 CPUs)."""
    import torch

    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    monkeypatch.setattr(defaults, "available_cpus", lambda: 2)


def prompt(tokenizer):
    return tokenizer("Once upon a time there was a little robot").input_ids


def reply(engine, ids, **config):
    return list(engine.generate(ids, GenerationConfig(**{"max_new_tokens": 40, **config})))


def committed(events):
    assert isinstance(events[-1], Finished) and events[-1].error is None
    return events[-1].token_ids


def engine_for(drafter, verifier, ahead: bool) -> Engine:
    engine = Engine(verifier, drafter)
    engine.draft_ahead = ahead
    return engine


@pytest.mark.parametrize("config", [{}, {"tree_nodes": 0}, {"tree_nodes": 0, "gamma": 3},
                                    {"temperature": 0.9, "seed": 7}, {"temperature": 1.3, "top_k": 20, "seed": 2}])
def test_drafting_ahead_gives_the_same_reply_and_rounds_as_drafting_after_the_prefill(pair, tiny_tokenizer, two_cpus,
                                                                                       config):
    verifier, draft = pair
    ids = prompt(tiny_tokenizer)
    ahead = reply(engine_for(ModelDrafter(draft), verifier, True), ids, **config)
    after = reply(engine_for(ModelDrafter(draft), verifier, False), ids, **config)
    assert committed(ahead) == committed(after)

    def rounds(events):
        return [(r.n_accepted, [v.token_id for v in r.drafted], len(r.tree)) for r in events
                if isinstance(r, RoundVerified)]

    assert rounds(ahead) == rounds(after)


def test_the_draft_reads_the_prompt_on_another_thread_while_the_verifier_prefills(pair, tiny_tokenizer, two_cpus):
    verifier, draft = pair
    drafter = ModelDrafter(draft)
    engine = engine_for(drafter, verifier, True)
    assert engine.drafts_ahead()
    seen: dict[str, set[str]] = {"verifier": set(), "draft": set()}
    drafted = threading.Event()
    read_and_draft = engine._read_and_draft

    def drafting(*args):
        try:
            return read_and_draft(*args)
        finally:
            drafted.set()

    engine._read_and_draft = drafting
    for name, forward in (("verifier", engine.verifier_forward), ("draft", drafter.forward)):
        def traced(ids, *args, _original=forward.logits_for, _name=name, **kwargs):
            seen[_name].add(threading.current_thread().name)
            if _name == "verifier":
                drafted.wait(5)  # a prefill slower than the draft's read and round 1, as with a real pair
            return _original(ids, *args, **kwargs)
        forward.logits_for = traced
    events = reply(engine, prompt(tiny_tokenizer))
    assert seen["verifier"] == {threading.current_thread().name}
    assert "specdec-draft-ahead" in seen["draft"]  # the prompt, and round 1's drafting
    first = next(e for e in events if isinstance(e, RoundVerified))
    assert first.drafted and first.draft_s < 0.05  # round 1 waited for nothing: its drafting was done
    assert not [t for t in threading.enumerate() if t.name == "specdec-draft-ahead"]


def test_a_draft_head_and_busy_cpus_never_draft_ahead(pair, tiny_tokenizer, monkeypatch, two_cpus):
    verifier, draft = pair
    head = HeadDrafter(tiny.make_head(verifier))
    assert not Engine(verifier, head).drafts_ahead()  # it reads the verifier's hidden states
    assert not Engine(verifier, HybridDrafter(head)).drafts_ahead()
    assert Engine(verifier, HybridDrafter(ModelDrafter(draft))).drafts_ahead()
    assert Engine(verifier, PromptLookupDrafter()).drafts_ahead()
    assert not Engine(verifier, None).drafts_ahead()
    import torch

    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)  # two passes at once would need 4 CPUs
    assert not Engine(verifier, ModelDrafter(draft)).drafts_ahead()


def test_a_failure_while_drafting_ahead_ends_the_reply_with_its_message(pair, tiny_tokenizer, two_cpus):
    verifier, draft = pair
    drafter = ModelDrafter(draft)

    def broken(ids):
        raise RuntimeError("out of memory while reading the prompt")

    drafter.prefill = broken
    events = reply(engine_for(drafter, verifier, True), prompt(tiny_tokenizer))
    assert isinstance(events[0], Prefilled)
    fin = events[-1]
    assert isinstance(fin, Finished) and fin.stop_reason is StopReason.ERROR and "out of memory" in fin.error


def test_a_reply_cancelled_before_its_first_round_ends_the_drafting_thread_too(pair, tiny_tokenizer, two_cpus):
    verifier, draft = pair
    drafter = ModelDrafter(draft)
    release = threading.Event()
    original = drafter.prefill

    def slow(ids):
        release.wait(5)
        original(ids)

    drafter.prefill = slow
    engine = engine_for(drafter, verifier, True)
    controls = Controls()
    events = []
    for event in engine.generate(prompt(tiny_tokenizer), GenerationConfig(max_new_tokens=40), controls):
        events.append(event)
        if isinstance(event, Prefilled):
            controls.cancel()
            release.set()
    assert events[-1].stop_reason is StopReason.CANCELLED
    assert not [t for t in threading.enumerate() if t.name == "specdec-draft-ahead"]
    # The engine is ready for the next reply, drafting as before.
    assert committed(reply(engine, prompt(tiny_tokenizer))) == committed(
        reply(engine_for(ModelDrafter(draft), verifier, False), prompt(tiny_tokenizer)))


def test_speculation_switched_off_during_the_prefill_makes_round_1_a_plain_step(pair, tiny_tokenizer, two_cpus):
    verifier, draft = pair
    engine = engine_for(ModelDrafter(draft), verifier, True)
    controls = Controls()
    events = []
    for event in engine.generate(prompt(tiny_tokenizer), GenerationConfig(max_new_tokens=12), controls):
        events.append(event)
        if isinstance(event, Prefilled):
            controls.speculate = False  # the draft has read the prompt and drafted meanwhile
    rounds = [e for e in events if isinstance(e, RoundVerified)]
    assert rounds and not any(r.drafted for r in rounds)
    assert committed(events) == committed(reply(engine_for(None, verifier, False), prompt(tiny_tokenizer),
                                                max_new_tokens=12))

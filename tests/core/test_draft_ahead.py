"""A draft that needs nothing from the verifier reads the prompt, and drafts round 1, on a thread of its own
during the verifier's prefill (Engine.drafts_ahead): same replies, less waiting, every thread ended."""

import threading
import time

import pytest
import tiny

from specdec_core import defaults
from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import HeadDrafter, HybridDrafter, ModelDrafter, PromptLookupDrafter
from specdec_core.drafting.planner import DraftPlanner, DraftPolicy
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
    return Engine(verifier, drafter, DraftPlanner(DraftPolicy(draft_during_prefill=ahead)))


@pytest.mark.parametrize("config", [{}, {"tree_nodes": 0}, {"tree_nodes": 0, "gamma": 3}, {"tree_nodes": 8},
                                    {"tree_nodes": 8, "cost_aware": False}, {"temperature": 0.9, "seed": 7},
                                    {"temperature": 1.3, "top_k": 20, "seed": 2}])
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

    # Greedy `auto` sizes chains and trees from timings, which differ from run to run; fixed sizes draft alike.
    if "temperature" in config or config.get("cost_aware") is False or config.get("tree_nodes") == 0:
        assert rounds(ahead) == rounds(after)


def test_the_draft_reads_the_prompt_on_another_thread_while_the_verifier_prefills(pair, tiny_tokenizer, two_cpus,
                                                                                  monkeypatch):
    verifier, draft = pair
    # A clock that moves only while a model computes (a verifier pass 1 s, a draft pass 0.1 s): the timings the
    # rounds report are then exact whatever the machine's speed or load.
    clock, ticking = [0.0], threading.Lock()
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
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
            with ticking:
                clock[0] += 1.0 if _name == "verifier" else 0.1
            return _original(ids, *args, **kwargs)
        forward.logits_for = traced
    events = reply(engine, prompt(tiny_tokenizer))
    assert seen["verifier"] == {threading.current_thread().name}
    assert "specdec-draft-ahead" in seen["draft"]  # the prompt, and round 1's drafting
    first = next(e for e in events if isinstance(e, RoundVerified))
    assert first.drafted and first.draft_s == 0.0  # round 1 waited for nothing: its drafting was done
    assert first.hidden_draft_s > 0  # ... which the round reports apart, and the draft's cost `c` counts
    later = [e for e in events if isinstance(e, RoundVerified) and e.round_index > 0]
    assert later and all(e.hidden_draft_s == 0 for e in later)
    stats = events[-1].stats
    drafting_s = sum(e.draft_s + e.hidden_draft_s for e in events if isinstance(e, RoundVerified))
    assert stats.c == pytest.approx(drafting_s / stats.drafted / (stats.verify_s / stats.rounds))
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
        if isinstance(event, Finished):  # a caller may stop reading here: the thread has ended already
            assert not [t for t in threading.enumerate() if t.name == "specdec-draft-ahead"]
            break
    assert events[-1].stop_reason is StopReason.CANCELLED
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


def test_a_weakened_drafter_drafts_ahead_only_around_a_draft_that_runs_on_its_own(pair, two_cpus):
    from app.talk.drafters import WeakenedDrafter

    verifier, draft = pair
    assert Engine(verifier, WeakenedDrafter(ModelDrafter(draft))).drafts_ahead()
    assert not Engine(verifier, WeakenedDrafter(HeadDrafter(tiny.make_head(verifier)))).drafts_ahead()
    assert not Engine(verifier, WeakenedDrafter(None)).drafts_ahead()


@pytest.mark.parametrize("files, cpus", [({"cpu.max": "max 100000\n"}, None), ({"cpu.max": "150000 100000\n"}, 2),
                                         ({"cpu.max": "50000 100000"}, 1),
                                         ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.cfs_period_us": "100000"}, None),
                                         ({"cpu/cpu.cfs_quota_us": "300000", "cpu/cpu.cfs_period_us": "100000"}, 3),
                                         ({}, None)])
def test_a_containers_cpu_quota_caps_the_cpus_taken_as_free(tmp_path, files, cpus):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert defaults.cgroup_cpu_quota(str(tmp_path)) == cpus


def test_drafting_ahead_beside_the_prefill_is_not_timed_as_the_drafts_cost(pair, tiny_tokenizer, two_cpus):
    verifier, draft = pair
    engine = engine_for(ModelDrafter(draft), verifier, True)
    observed = []
    original = engine.planner.sizer.observe_draft

    def observe(steps, seconds):
        observed.append(threading.current_thread().name)
        original(steps, seconds)

    engine.planner.sizer.observe_draft = observe
    events = reply(engine, prompt(tiny_tokenizer), tree_nodes=8, cost_aware=False)  # a tree every round
    trees = sum(1 for e in events if isinstance(e, RoundVerified) and e.tree)
    assert trees >= 3 and len(observed) == trees - 1  # all but round 1's
    assert set(observed) == {threading.current_thread().name}


def test_the_cli_stats_line_says_how_much_drafting_ran_beside_the_prefill(pair, tiny_tokenizer, two_cpus):
    from specdec_core.commands.cli import stats_line

    verifier, draft = pair
    ahead = reply(engine_for(ModelDrafter(draft), verifier, True), prompt(tiny_tokenizer))[-1]
    after = reply(engine_for(ModelDrafter(draft), verifier, False), prompt(tiny_tokenizer))[-1]
    # (How much of round 1's drafting hid behind this tiny verifier's prefill depends on the timing: any or none.)
    assert ahead.stats.hidden_draft_s >= 0 and after.stats.hidden_draft_s == 0
    import dataclasses

    shown = dataclasses.replace(ahead, stats=dataclasses.replace(ahead.stats, hidden_draft_s=0.25))
    assert "(+0.25 s beside the prefill)" in stats_line(shown)
    assert "beside the prefill" not in stats_line(after)

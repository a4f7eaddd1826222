"""The speculative loop on tiny random models: exactness, caches, stop conditions, controls."""

import pytest
import tiny
import torch

from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import ModelDrafter, PromptLookupDrafter
from specdec_core.drafting.planner import DraftPlanner, DraftPolicy
from specdec_core.engine import Controls, Engine
from specdec_core.errors import ConfigError, PromptTooLongError
from specdec_core.events import (
    DraftStop,
    Finished,
    Prefilled,
    RoundVerified,
    StopReason,
    TokenCommitted,
    TokenRejected,
    TokenState,
)

ARCHS = ("llama", "qwen2", "gpt2")


@pytest.fixture(scope="module")
def pairs(tiny_tokenizer):
    return {arch: tiny.make_pair(arch, tiny_tokenizer) for arch in ARCHS}


def prompt_ids(tokenizer, text="The capital of France is"):
    return tokenizer(text).input_ids


def run(engine, prompt, **config):
    return list(engine.generate(prompt, GenerationConfig(**config)))


def finished(events) -> Finished:
    assert isinstance(events[-1], Finished)
    return events[-1]


def hf_greedy(loaded, prompt, n):
    out = loaded.model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n,
                                eos_token_id=loaded.tokenizer.eos_token_id, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("drafter_kind", ["model", "prompt-lookup", "off"])
@pytest.mark.parametrize("gamma", [1, 4, 8])
def test_greedy_speculation_equals_the_verifiers_own_greedy_generate(pairs, tiny_tokenizer, arch, drafter_kind,
                                                                     gamma):
    verifier, draft = pairs[arch]
    prompt = prompt_ids(tiny_tokenizer, "Once upon a time there was a little robot")
    drafter = {"model": ModelDrafter(draft), "prompt-lookup": PromptLookupDrafter(), "off": None}[drafter_kind]
    events = run(Engine(verifier, drafter), prompt, max_new_tokens=48, gamma=gamma)
    assert list(finished(events).token_ids) == hf_greedy(verifier, prompt, 48)


def test_rounds_have_both_acceptances_and_rejections_with_the_noisy_draft(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    stats = finished(run(Engine(verifier, ModelDrafter(draft)), prompt_ids(tiny_tokenizer), max_new_tokens=60,
                         gamma=4)).stats
    assert 0 < stats.accepted < stats.drafted  # the test pair exercises both branches


def test_event_stream_tells_the_whole_round(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    events = run(Engine(verifier, ModelDrafter(draft)), prompt_ids(tiny_tokenizer), max_new_tokens=40, gamma=4)
    assert isinstance(events[0], Prefilled)
    rounds = [e for e in events if isinstance(e, RoundVerified)]
    committed = [e for e in events if isinstance(e, TokenCommitted)]
    rejected = [e for e in events if isinstance(e, TokenRejected)]
    verdict_first = [e.round_index for e in events if isinstance(e, (RoundVerified, TokenCommitted, TokenRejected))]
    assert verdict_first == sorted(verdict_first)  # each round's verdicts come before its tokens
    for r in rounds:
        assert len(r.drafted) <= r.gamma
        assert [v.accepted for v in r.drafted] == [i < r.n_accepted for i in range(len(r.drafted))]
        assert [v.parent for v in r.drafted] == list(range(-1, len(r.drafted) - 1))  # a tree of width one
        assert r.emitted_state in (TokenState.CORRECTED, TokenState.BONUS, TokenState.ACCEPTED)
        mine = [e for e in committed if e.round_index == r.round_index]
        assert [e.state for e in mine][: r.n_accepted] == [TokenState.ACCEPTED] * r.n_accepted
        rej = [e for e in rejected if e.round_index == r.round_index]
        assert len(rej) == len(r.drafted) - r.n_accepted
        if rej:
            assert mine[-1].state is TokenState.CORRECTED
            assert rej[0].accept_prob == 0.0  # greedy: a rejected token had no chance
    fin = finished(events)
    assert [e.token_id for e in committed] == list(fin.token_ids)
    assert "".join(e.text for e in committed) == fin.text
    assert fin.stats.new_tokens == len(fin.token_ids) == 40
    assert fin.stats.rounds == len(rounds)
    assert fin.stats.drafted == sum(len(r.drafted) for r in rounds)
    assert fin.stats.accepted == sum(r.n_accepted for r in rounds)
    assert fin.stats.mean_accepted_length == pytest.approx(40 / len(rounds))
    for t in committed:
        assert 0 < t.target_prob <= 1 and t.alternatives and t.alternatives[0].prob >= t.alternatives[-1].prob


def test_speculation_off_streams_plain_tokens(pairs, tiny_tokenizer):
    verifier, draft = pairs["gpt2"]
    events = run(Engine(verifier, ModelDrafter(draft)), prompt_ids(tiny_tokenizer), max_new_tokens=10,
                 speculate=False)
    states = {e.state for e in events if isinstance(e, TokenCommitted)}
    assert states == {TokenState.PLAIN}
    assert not any(isinstance(e, TokenRejected) for e in events)
    rounds = [e for e in events if isinstance(e, RoundVerified)]
    assert all(not r.drafted and r.stop is DraftStop.OFF and r.gamma == 0 for r in rounds)


def test_both_kv_caches_equal_a_fresh_forward_after_rounds_with_rejections(pairs, tiny_tokenizer):
    verifier, draft = pairs["qwen2"]
    drafter = ModelDrafter(draft)
    engine = Engine(verifier, drafter)
    prompt = prompt_ids(tiny_tokenizer)
    fin = finished(run(engine, prompt, max_new_tokens=50, gamma=5))
    assert fin.stats.accepted < fin.stats.drafted
    sequence = prompt + list(fin.token_ids)
    for cached in (engine.verifier_forward, drafter.forward):
        # What the cache holds is a prefix of the committed sequence (rejected positions are gone) ...
        n = len(cached.cached_ids)
        assert cached.cached_ids == sequence[:n]
        # ... and its keys/values equal a fresh forward over that prefix.
        fresh = cached.model(input_ids=torch.tensor([sequence[:n]]), use_cache=True).past_key_values
        for layer, fresh_layer in zip(cached.cache.layers, fresh.layers):
            assert layer.keys.shape[-2] == n
            torch.testing.assert_close(layer.keys, fresh_layer.keys, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(layer.values, fresh_layer.values, atol=1e-4, rtol=1e-4)


def test_next_chat_turn_reuses_the_cached_prefix_and_changes_nothing(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    engine = Engine(verifier, ModelDrafter(draft))
    first_prompt = prompt_ids(tiny_tokenizer)
    first = finished(run(engine, first_prompt, max_new_tokens=12))
    second_prompt = first_prompt + list(first.token_ids) + prompt_ids(tiny_tokenizer, " And Italy?")
    events = run(engine, second_prompt, max_new_tokens=12)
    assert events[0].reused_tokens >= len(first_prompt) + len(first.token_ids) - 2
    fresh = finished(run(Engine(verifier, ModelDrafter(draft)), second_prompt, max_new_tokens=12))
    assert finished(events).token_ids == fresh.token_ids


def test_the_same_prompt_again_costs_no_forward_pass_before_its_first_round_and_changes_nothing(pairs,
                                                                                                tiny_tokenizer):
    verifier, draft = pairs["llama"]
    drafter = ModelDrafter(draft)
    # The draft reads the prompt after the prefill, not on a thread beside it: its passes are then counted here.
    engine = Engine(verifier, drafter, DraftPlanner(DraftPolicy(draft_during_prefill=False)))
    prompt = prompt_ids(tiny_tokenizer)
    first = finished(run(engine, prompt, max_new_tokens=12, temperature=1.0, seed=5))
    passes = engine.verifier_forward.forward_calls, drafter.forward.forward_calls
    events = engine.generate(prompt, GenerationConfig(max_new_tokens=12, temperature=1.0, seed=5))
    assert next(events).reused_tokens == len(prompt)
    assert (engine.verifier_forward.forward_calls, drafter.forward.forward_calls) == passes
    assert finished(list(events)).token_ids == first.token_ids
    # A prompt the cache holds only part of drops the kept distribution: the shorter one and the first one
    # again each read their last token, and reply as a fresh engine does.
    for again in (prompt[:-1], prompt):
        events = run(engine, again, max_new_tokens=12, temperature=1.0, seed=5)
        assert events[0].reused_tokens == len(again) - 1
        fresh = finished(run(Engine(verifier, ModelDrafter(draft)), again, max_new_tokens=12, temperature=1.0,
                             seed=5))
        assert finished(events).token_ids == fresh.token_ids


def test_max_tokens_reached_mid_round_stops_exactly(pairs, tiny_tokenizer):
    verifier, _ = pairs["gpt2"]  # prompt lookup on a repetitive model drafts long runs
    for n in (1, 2, 3, 7):
        fin = finished(run(Engine(verifier, PromptLookupDrafter()), prompt_ids(tiny_tokenizer), max_new_tokens=n,
                           gamma=8))
        assert len(fin.token_ids) == n and fin.stop_reason is StopReason.MAX_TOKENS


def test_eos_inside_a_draft_ends_the_reply_at_the_eos(tiny_tokenizer):
    verifier, draft = tiny.make_pair("llama", tiny_tokenizer)
    prompt = prompt_ids(tiny_tokenizer)
    reference = hf_greedy(verifier, prompt, 30)
    # Pretend the verifier's 6th greedy token is end-of-sequence: the identical draft proposes it mid-round.
    eos = frozenset({reference[5]})
    verifier = tiny.as_loaded(verifier.model, tiny_tokenizer, eos_token_ids=eos)
    same = tiny.as_loaded(verifier.model, tiny_tokenizer, eos_token_ids=eos)
    events = run(Engine(verifier, ModelDrafter(same)), prompt, max_new_tokens=30, gamma=8)
    fin = finished(events)
    cut = reference.index(reference[5]) + 1
    assert list(fin.token_ids) == reference[:cut] and fin.stop_reason is StopReason.EOS
    assert any(isinstance(e, RoundVerified) and e.stop is DraftStop.EOS for e in events)


def test_cancel_ends_generation_within_one_round(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    controls = Controls()
    rounds = 0
    events = []
    for event in Engine(verifier, ModelDrafter(draft)).generate(prompt_ids(tiny_tokenizer),
                                                                 GenerationConfig(max_new_tokens=200), controls):
        events.append(event)
        if isinstance(event, RoundVerified):
            rounds += 1
            if rounds == 2:
                controls.cancel()
    assert sum(isinstance(e, RoundVerified) for e in events) == 2
    assert finished(events).stop_reason is StopReason.CANCELLED


def test_speculation_switches_off_and_on_mid_reply_without_changing_greedy_output(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    prompt = prompt_ids(tiny_tokenizer)
    controls = Controls()
    states = []
    for event in Engine(verifier, ModelDrafter(draft)).generate(prompt, GenerationConfig(max_new_tokens=40),
                                                                 controls):
        if isinstance(event, TokenCommitted):
            states.append(event.state)
            if len(states) == 10:
                controls.speculate = False
            if len(states) == 20:
                controls.speculate = True
        last = event
    assert TokenState.PLAIN in states and TokenState.ACCEPTED in states
    assert list(last.token_ids) == hf_greedy(verifier, prompt, 40)


def test_same_seed_same_sampled_reply_and_other_seed_differs(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    engine = Engine(verifier, ModelDrafter(draft))
    prompt = prompt_ids(tiny_tokenizer)
    a = finished(run(engine, prompt, max_new_tokens=30, temperature=1.5, seed=3)).token_ids
    b = finished(run(engine, prompt, max_new_tokens=30, temperature=1.5, seed=3)).token_ids
    c = finished(run(engine, prompt, max_new_tokens=30, temperature=1.5, seed=4)).token_ids
    assert a == b and a != c


def test_adaptive_drafting_grows_after_full_acceptance_and_shrinks_after_rejection(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    events = run(Engine(verifier, ModelDrafter(draft)), prompt_ids(tiny_tokenizer), max_new_tokens=80, gamma=2,
                 adaptive=True, gamma_max=7)
    rounds = [e for e in events if isinstance(e, RoundVerified)]
    for before, after in zip(rounds, rounds[1:]):
        if len(before.drafted) < before.gamma:
            continue  # cut short by the budget or EOS
        expected = min(before.gamma + 2, 7) if before.n_accepted == len(before.drafted) else max(1, before.gamma - 1)
        assert after.gamma == expected
    assert len({r.gamma for r in rounds}) > 1


def test_confidence_cutoff_stops_drafting_early_and_says_why(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    events = run(Engine(verifier, ModelDrafter(draft)), prompt_ids(tiny_tokenizer), max_new_tokens=40, gamma=8,
                 confidence_cutoff=0.9)
    stops = {e.stop for e in events if isinstance(e, RoundVerified)}
    assert DraftStop.CONFIDENCE in stops
    assert list(finished(events).token_ids) == hf_greedy(verifier, prompt_ids(tiny_tokenizer), 40)


def test_prompt_lookup_says_when_it_has_nothing_to_copy(pairs, tiny_tokenizer):
    verifier, _ = pairs["llama"]
    events = run(Engine(verifier, PromptLookupDrafter()), [5, 6, 7], max_new_tokens=3)
    assert next(e for e in events if isinstance(e, RoundVerified)).stop is DraftStop.NO_MATCH


@pytest.mark.parametrize("bad", [dict(gamma=0), dict(temperature=-0.1), dict(top_p=0.0), dict(top_p=1.5),
                                 dict(max_new_tokens=0), dict(top_k=-1)])
def test_bad_settings_are_refused_before_generation(pairs, tiny_tokenizer, bad):
    verifier, draft = pairs["llama"]
    with pytest.raises(ConfigError):
        Engine(verifier, ModelDrafter(draft)).generate([1, 2, 3], GenerationConfig(**bad))


def test_a_prompt_longer_than_the_context_is_refused_with_both_lengths(tiny_tokenizer):
    verifier, _ = tiny.make_pair("llama", tiny_tokenizer, context_length=64)
    with pytest.raises(PromptTooLongError, match="100 tokens.*64"):
        Engine(verifier).generate(list(range(3, 103)), GenerationConfig())


def test_reply_stops_when_the_context_is_full(tiny_tokenizer):
    verifier, draft = tiny.make_pair("llama", tiny_tokenizer, context_length=40)
    fin = finished(run(Engine(verifier, ModelDrafter(draft)), list(range(3, 33)), max_new_tokens=100))
    assert len(fin.token_ids) == 10 and fin.stop_reason is StopReason.CONTEXT  # 30 + 10 = 40 positions


def test_stop_string_ends_the_reply_and_is_cut_from_the_text(pairs, tiny_tokenizer):
    verifier, _ = pairs["llama"]
    full = finished(run(Engine(verifier), prompt_ids(tiny_tokenizer), max_new_tokens=30)).text
    marker = full[10:13]
    fin = finished(run(Engine(verifier), prompt_ids(tiny_tokenizer), max_new_tokens=30, stop_strings=(marker,)))
    assert fin.stop_reason is StopReason.STOP_STRING and fin.text == full[:full.index(marker)]


def test_a_failure_mid_reply_is_an_error_event_that_keeps_the_text(pairs, tiny_tokenizer, monkeypatch):
    verifier, _ = pairs["llama"]
    engine = Engine(verifier)
    calls = {"n": 0}
    original = engine.verifier_forward.logits_for

    def flaky(ids, n_last=1):
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return original(ids, n_last)

    monkeypatch.setattr(engine.verifier_forward, "logits_for", flaky)
    fin = finished(run(engine, prompt_ids(tiny_tokenizer), max_new_tokens=20))
    assert fin.stop_reason is StopReason.ERROR and "out of memory" in fin.error
    assert len(fin.token_ids) == 3  # the tokens before the failure are kept


def test_folding_the_round_events_gives_the_engines_own_stats_and_tallies_merge(pairs, tiny_tokenizer):
    from specdec_core.stats import StatsAccumulator

    verifier, draft = pairs["llama"]
    engine = Engine(verifier, ModelDrafter(draft))
    tallies, stats = [], []
    for text, gamma, tree_nodes in (("The capital of France is", 4, 0), ("Once upon a time", 2, 0),
                                     ("Hello! How can I help", 3, 8)):  # the last one drafts trees
        events = run(engine, prompt_ids(tiny_tokenizer, text), max_new_tokens=20, gamma=gamma, tree_nodes=tree_nodes,
                     cost_aware=False)
        tally = StatsAccumulator()
        for event in events:
            if isinstance(event, RoundVerified):
                event.add_to(tally)
        own = finished(events).stats
        folded = tally.snapshot()
        for name in ("new_tokens", "rounds", "drafted", "accepted", "acceptance_rate", "per_position_acceptance",
                     "accepted_length_histogram", "mean_gamma", "c"):
            assert getattr(folded, name) == pytest.approx(getattr(own, name)), name
        tallies.append(tally)
        stats.append(own)
    assert any(isinstance(e, RoundVerified) and e.tree for e in events)
    both = (tallies[0] + tallies[1]).snapshot()
    assert both.drafted == stats[0].drafted + stats[1].drafted
    assert both.accepted == stats[0].accepted + stats[1].accepted
    assert both.acceptance_rate == pytest.approx(both.accepted / both.drafted)
    assert StatsAccumulator.total(tallies[:2]).snapshot() == both
    assert len(both.per_position_acceptance) == max(len(s.per_position_acceptance) for s in stats[:2])
    assert tallies[0].rounds == stats[0].rounds  # merging made a new tally and left both parts alone

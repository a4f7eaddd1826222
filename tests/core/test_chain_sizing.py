"""Greedy `auto` chains draft only as many tokens as pay on this machine (prompt lookup included), and a
drafter priced out is tried again; the output never changes."""

import pytest
import tiny
import torch

from specdec_core.config import TREE_AUTO, GenerationConfig
from specdec_core.drafting.drafters import Draft, DrafterBase, ModelDrafter, PromptLookupDrafter
from specdec_core.drafting.planner import CheckedRound, DraftPlanner
from specdec_core.drafting.trees import DraftTree
from specdec_core.engine import Engine
from specdec_core.events import DraftStop, Finished, RoundVerified
from specdec_core.verification.cost import PositionRecord, TreeSizer, UsualRecord, VerifyCost

# A text that repeats itself, so prompt lookup has copies to propose at every round.
REPEATS = "The capital of France is Paris. The capital of Italy is Rome. " * 3


@pytest.fixture(scope="module")
def pair(tiny_tokenizer):
    return tiny.make_pair("llama", tiny_tokenizer)


def rounds_of(engine, prompt, **config) -> tuple[list[RoundVerified], Finished]:
    events = list(engine.generate(prompt, GenerationConfig(**config)))
    assert isinstance(events[-1], Finished) and events[-1].error is None
    return [e for e in events if isinstance(e, RoundVerified)], events[-1]


def test_the_chain_length_is_the_one_that_maximises_expected_tokens_per_second():
    cheap = TreeSizer(cost=VerifyCost({1: 0.050, 2: 0.051, 3: 0.052, 4: 0.053, 5: 0.054}))
    dear = TreeSizer(cost=VerifyCost({1: 0.050, 2: 0.100, 3: 0.150, 4: 0.200, 5: 0.250}))

    assert cheap.best_length([0.9] * 4, gamma=4) == 4
    assert dear.best_length([0.9] * 4, gamma=4) == 0  # each row costs a step: no chain can pay
    assert cheap.best_length([0.01] * 4, gamma=4) == 0  # a draft almost always wrong: not even cheap rows pay
    assert TreeSizer().best_length([0.1] * 4, gamma=3) == 3  # nothing measured yet: draft γ, and time it


def test_the_drafting_time_counts_against_a_longer_chain():
    sizer = TreeSizer(cost=VerifyCost({1: 0.050, 2: 0.051, 3: 0.052, 4: 0.053, 5: 0.054}))
    assert sizer.best_length([0.7] * 4, gamma=4) == 4
    sizer.draft_per_expansion = 0.040  # a draft model nearly as slow as the verifier
    assert sizer.best_length([0.7] * 4, gamma=4) < 4


def test_one_slow_first_draft_step_does_not_price_the_draft_out():
    """A draft's first step is slow while it warms (~1 s in the app's first reply): until it has been timed
    SETTLED times, the fastest timing prices it, and once settled the median does."""
    sizer = TreeSizer(cost=VerifyCost({1: 0.050, 2: 0.051, 3: 0.052, 4: 0.053, 5: 0.054}))
    sizer.observe_draft(expansions=1, draft_s=1.0)  # warming up
    sizer.observe_draft(expansions=4, draft_s=0.008)
    assert sizer.draft_per_expansion == pytest.approx(0.002)
    assert sizer.best_length([0.8] * 4, gamma=4) == 4  # still worth drafting the whole chain
    sizer.observe_draft(expansions=2, draft_s=0.006)
    assert sizer.draft_settled and sizer.draft_per_expansion == pytest.approx(0.003)  # median of 1.0, .002, .003
    for _ in range(VerifyCost.WINDOW):
        sizer.observe_draft(expansions=1, draft_s=0.2)  # a draft that really is slow is priced out once settled
    assert sizer.best_length([0.8] * 4, gamma=4) == 0


def test_the_position_record_follows_the_rounds_and_drifts_back_to_its_prior():
    record = PositionRecord(prior=(0.5, 0.5))
    for _ in range(30):
        record.observe(drafted=2, accepted=0)  # position 0 always wrong; position 1 never reached
    assert record.rates()[0] < 0.2 and record.rates()[1] == pytest.approx(0.5)
    for _ in range(10):
        record.age()
    assert record.rates()[0] < 0.3  # priced out: not retried within a few rounds ...
    for _ in range(150):
        record.age()
    assert record.rates()[0] == pytest.approx(0.5, abs=0.05)  # ... but in the end


def test_where_rows_cost_more_than_copies_bring_prompt_lookup_drafts_nothing_and_the_text_is_the_same(
        pair, tiny_tokenizer):
    verifier, _ = pair
    prompt = tiny_tokenizer(REPEATS).input_ids
    _, plain = rounds_of(Engine(verifier, None), prompt, max_new_tokens=16)
    engine = Engine(verifier, PromptLookupDrafter())
    engine.planner.sizer.cost = VerifyCost({1: 0.001, 2: 1.0})  # a second row would cost a thousand plain steps

    rounds, finished = rounds_of(engine, prompt, max_new_tokens=16, tree_nodes=TREE_AUTO)

    assert not any(r.drafted for r in rounds)
    assert {r.stop for r in rounds[1:-1]} == {DraftStop.COST}  # the last has room for the verifier's token only
    assert rounds[-1].stop is DraftStop.MAX_TOKENS
    assert finished.token_ids == plain.token_ids


def test_where_rows_are_cheap_prompt_lookup_copies_as_before(pair, tiny_tokenizer):
    verifier, _ = pair
    prompt = tiny_tokenizer(REPEATS).input_ids
    engine = Engine(verifier, PromptLookupDrafter())
    engine.planner.sizer.cost = VerifyCost({rows: 0.001 for rows in range(1, 8)})

    rounds, _ = rounds_of(engine, prompt, max_new_tokens=16, tree_nodes=TREE_AUTO)

    assert any(len(r.drafted) >= 2 for r in rounds)


def test_an_explicit_chain_and_sampling_keep_gamma_whatever_the_cost(pair, tiny_tokenizer):
    verifier, draft = pair
    prompt = tiny_tokenizer("The capital of France is").input_ids
    for config in (dict(tree_nodes=0), dict(tree_nodes=TREE_AUTO, temperature=0.8, seed=3)):
        engine = Engine(verifier, ModelDrafter(draft))
        engine.planner.sizer.cost = VerifyCost({1: 0.001, 2: 1.0})
        rounds, _ = rounds_of(engine, prompt, max_new_tokens=10, gamma=3, **config)
        assert len(rounds[0].drafted) == 3, config


def test_the_predicted_speedup_uses_this_machines_plain_step(pair, tiny_tokenizer):
    verifier, _ = pair
    engine = Engine(verifier, PromptLookupDrafter())
    _, finished = rounds_of(engine, tiny_tokenizer(REPEATS).input_ids, max_new_tokens=16, tree_nodes=TREE_AUTO)
    stats = finished.stats
    plain = engine.planner.sizer.cost.estimate(1)
    assert plain is not None and stats.drafted
    assert stats.predicted_speedup == pytest.approx(stats.new_tokens * plain / stats.decode_s, rel=0.05)


def test_estimates_never_fall_as_rows_grow_even_with_one_slow_unsettled_timing():
    """A size timed once, slowly (a busy moment), reads no more than its guess; the sizes between it and the
    settled ones below must not read dearer than it, or trees stop growing below it for good."""
    cost = VerifyCost({1: 0.354, 2: 0.374, 3: 0.374})
    cost.observe(5, 0.621)  # once: unsettled
    estimates = [cost.estimate(rows) for rows in range(1, 7)]
    assert estimates == sorted(estimates)
    assert cost.estimate(4) <= cost.estimate(5) < 0.621


def test_a_draft_priced_out_by_a_bad_start_comes_back_sooner_where_this_pair_usually_does_well():
    """A priced-out record drifts back to what this pair usually achieves (here, what an earlier engine remembered),
    not to prompt lookup's rates: after two wrong rounds at the start, a draft that is usually right 85 % of the time
    drafts again before its first probe is due."""
    config = GenerationConfig(max_new_tokens=64, tree_nodes=TREE_AUTO)

    def lengths(usual: UsualRecord | None) -> list[int]:
        sizer = TreeSizer(cost=VerifyCost({1: 0.037, 2: 0.040, 3: 0.042, 4: 0.046, 5: 0.058}))
        for _ in range(VerifyCost.SETTLED):
            sizer.observe_draft(1, 0.0095)
        planner = DraftPlanner(sizer=sizer)
        planner.usual = usual or planner.usual
        for _ in range(2):
            planner.learn(CheckedRound(config, rows=4, verify_s=0.042, drafted=_chain(3), n_accepted=0))
        out = []
        for _ in range(DraftPlanner.PROBE_AFTER):
            out.append(planner.plan(config, 4, first_round=False, tree=False).length)
            if out[-1]:
                planner.learn(CheckedRound(config, rows=out[-1] + 1, verify_s=0.042, drafted=_chain(out[-1]),
                                           n_accepted=out[-1]))
        return out

    assert not any(lengths(None))  # drifting back to 0.5 for the first token: priced out until the probe
    assert any(lengths(UsualRecord.starting_from((0.85, 0.92, 0.9, 0.9))))


def _chain(length: int) -> Draft:
    return Draft(tuple(range(length)), torch.zeros(length, 8), (0.9,) * length, DraftStop.GAMMA, 0.0095 * length)


class ScriptedTreeDrafter(DrafterBase):
    """Grows a one-node tree (or drafts a one-token chain, when asked for one): the verifier's next
    greedy token (right) or that token + 1 (wrong), valued 0.95, reporting a drafting time of `cost(call, behind)`
    plain steps as the engine has measured them (`behind`: the tokens it reads first, that it had not seen)."""

    name = "scripted"
    grows_trees = True

    def __init__(self, prompt_length: int, reference: tuple[int, ...], vocab: int, right: bool, cost):
        self.prompt_length, self.reference, self.vocab, self.right, self.cost = \
            prompt_length, reference, vocab, right, cost
        self.engine: Engine | None = None
        self.calls = 0
        self.read = 0  # how far into the sequence the draft has read (a draft reads what it missed first)

    def _next(self, ids) -> tuple[int, float]:
        self.calls += 1
        behind, self.read = (len(ids) - self.read if self.read else 1), len(ids)
        token = self.reference[len(ids) - self.prompt_length] + (0 if self.right else 1)
        steps = self.cost(self.calls, behind)
        return token % self.vocab, steps * (self.engine.planner.sizer.cost.estimate(1) or 0.01)

    def propose(self, ids, max_tokens):
        vocab_size = self.target.vocab_size
        if max_tokens <= 0:
            return Draft.empty(DraftStop.MAX_TOKENS, vocab_size)
        token, draft_s = self._next(ids)
        return Draft((token,), torch.nn.functional.one_hot(torch.tensor([token]), vocab_size).float(), (0.95,),
                     DraftStop.GAMMA, draft_s)

    def propose_tree(self, ids, request):
        if request.max_depth <= 0:
            return DraftTree.empty(DraftStop.MAX_TOKENS)
        token, draft_s = self._next(ids)
        return DraftTree((token,), (-1,), (0.95,), (0.95,), DraftStop.TREE, draft_s=draft_s, expansions=1)


class FixedCost(VerifyCost):
    """Verify costs as given, whatever the tiny model's passes take on a busy machine (a test's timings)."""

    def observe(self, rows: int, seconds: float) -> None:
        pass


def scripted(pair, tiny_tokenizer, right: bool, cost, tokens: int = 40):
    verifier, _ = pair
    prompt = tiny_tokenizer("The capital of France is").input_ids
    _, plain = rounds_of(Engine(verifier, None), prompt, max_new_tokens=tokens)
    drafter = ScriptedTreeDrafter(len(prompt), plain.token_ids, len(tiny_tokenizer), right, cost)
    drafter.engine = Engine(verifier, drafter)
    drafter.engine.planner.sizer.cost = FixedCost({1: 0.050, 2: 0.052, 3: 0.054})
    rounds, finished = rounds_of(drafter.engine, prompt, max_new_tokens=tokens, tree_nodes=TREE_AUTO)
    assert finished.token_ids == plain.token_ids
    return drafter, rounds


def test_a_tree_drafter_that_is_never_right_and_costs_time_ends_paused_and_the_text_is_the_same(
        pair, tiny_tokenizer):
    # Drafting costs 30 % of a plain step: worth it only if right more than 30 % of the time; never here.
    drafter, rounds = scripted(pair, tiny_tokenizer, right=False, cost=lambda call, behind: 0.3)
    # A few drafts to learn that none pays, then plain steps, with a draft now and then to try again.
    assert drafter.calls <= len(rounds) / 4
    assert sum(r.stop is DraftStop.COST and not r.tree for r in rounds[-20:]) >= 15


def test_a_draft_slow_in_its_first_rounds_is_not_priced_out_for_good(pair, tiny_tokenizer):
    # The app's first reply: the draft's first steps take 40 plain steps (warming up), then 5 % of one.
    drafter, rounds = scripted(pair, tiny_tokenizer, right=True, cost=lambda call, behind: 40.0 if call <= 2 else 0.05,
                               tokens=60)
    # Priced out by its slow start (the median of its first timings), it drafts again after a probe or two ...
    assert any(r.stop is DraftStop.COST for r in rounds)
    late = rounds[-8:]
    assert all(len(r.drafted) == r.n_accepted == 1 for r in late)  # ... every round, its tokens accepted


def test_a_draft_priced_out_is_not_kept_out_by_the_tokens_it_must_read_when_it_comes_back(pair, tiny_tokenizer):
    # Each token the draft reads costs 5 % of a plain step; its first two steps take 40 plain steps (warming
    # up), which price it out. Its first round back must read every token it sat out (17 of them: 85 % of a
    # plain step): timed as its cost, that would price it out again at every probe.
    def per_token(call, behind):
        return (40.0 if call <= 2 else 0.05) * behind

    drafter, rounds = scripted(pair, tiny_tokenizer, right=True, cost=per_token, tokens=80)
    assert any(r.stop is DraftStop.COST for r in rounds)
    assert all(len(r.drafted) == r.n_accepted == 1 for r in rounds[-8:])


def test_a_hybrid_whose_model_is_priced_out_still_checks_the_free_copies_that_pay_and_the_text_is_the_same(
        pair, tiny_tokenizer):
    """On a verifier whose rows are cheap but whose draft model costs 90 % of a plain step and is never right,
    the model's drafting is priced out; prompt lookup's copies cost no drafting and are checked on their own."""
    from specdec_core.drafting.drafters import HybridDrafter

    verifier, _ = pair
    prompt = tiny_tokenizer(REPEATS).input_ids
    _, plain = rounds_of(Engine(verifier, None), prompt, max_new_tokens=40)
    model = ScriptedTreeDrafter(len(prompt), plain.token_ids, len(tiny_tokenizer), False, lambda call, behind: 0.9)
    engine = model.engine = Engine(verifier, HybridDrafter(model))
    engine.planner.sizer.cost = FixedCost({1: 0.050, 2: 0.051, 3: 0.052, 4: 0.053, 5: 0.054})

    rounds, finished = rounds_of(engine, prompt, max_new_tokens=40, tree_nodes=TREE_AUTO)

    assert finished.token_ids == plain.token_ids
    late = rounds[len(rounds) // 2:]
    copied = [r for r in late if r.drafted and all(v.draft_prob == 1.0 for v in r.drafted)]
    assert copied and all(not r.tree for r in copied)  # copies checked as chains, alone
    assert sum(r.stop is DraftStop.COST and not r.drafted for r in late) >= 1  # the model sat rounds out
    assert model.calls < len(rounds) / 2


def test_a_draft_too_dear_to_pay_even_when_always_right_is_not_probed_every_sixteen_rounds(pair, tiny_tokenizer):
    # Each drafted token costs 1.2 plain steps: even a draft that is always right cannot pay for itself here.
    drafter, rounds = scripted(pair, tiny_tokenizer, right=True, cost=lambda call, behind: 1.2, tokens=60)
    settled = drafter.calls  # its first few rounds time it ...
    assert settled <= 8
    assert all(r.stop is DraftStop.COST and not r.drafted for r in rounds[settled + 2:-1])  # ... then no probes


def test_a_draft_that_could_gain_little_even_when_always_right_counts_as_hopeless():
    """The real pair on a 2-core AVX2 EPYC: a plain step 0.26 s, 4 rows 0.68 s, the 0.5B draft 0.1 s a token at best:
    always right, it would gain 1 % at most; a draft ten times cheaper could gain 70 %."""
    from specdec_core.drafting.planner import DraftPlanner

    planner = DraftPlanner()
    planner.sizer.cost = FixedCost({1: 0.26, 2: 0.40, 3: 0.54, 4: 0.68, 5: 0.82})
    for _ in range(3):
        planner.sizer.observe_draft(expansions=1, draft_s=0.1)
    assert planner._hopeless(gamma=4)
    planner.sizer.draft_timings.clear()
    for _ in range(3):
        planner.sizer.observe_draft(expansions=1, draft_s=0.01)
    assert not planner._hopeless(gamma=4)


def measured(cost: VerifyCost, seconds: dict[int, float], times: int = 3) -> VerifyCost:
    for _ in range(times):
        for rows, took in seconds.items():
            cost.observe(rows, took)
    return cost


# The Qwen2.5-Coder 1.5B (Q4_K_M) on a 2-core AVX2 EPYC, two threads: a check of k rows costs nearly k plain steps.
QUANTISED_CURVE = {1: 0.144, 2: 0.209, 5: 0.459}


def test_a_size_whose_timings_aged_out_keeps_its_measured_share_of_the_plain_step():
    """A reply of plain steps ages every other size's timings out. A 2-row check guessed from the plain step
    at a few per cent a row (0.155 s) made the 0.5B draft look worth probing every 16 rounds; its measured
    share stays, and follows the plain step's pace."""
    cost = measured(VerifyCost(), QUANTISED_CURVE)
    measured(cost, {1: 0.144}, times=VerifyCost.MAX_AGE + 10)
    assert cost.stale(2) and cost.estimate(2) == pytest.approx(0.209)
    assert cost.estimate(5) == pytest.approx(0.459) and 0.209 < cost.estimate(3) < 0.459
    measured(cost, {1: 0.200}, times=VerifyCost.WINDOW)  # the machine got busier: every size with it
    assert cost.estimate(2) == pytest.approx(0.200 * 0.209 / 0.144)
    measured(cost, {2: 0.250})  # measured afresh, a size reads its own timings again
    assert cost.estimate(2) == pytest.approx(0.250)


def test_a_draft_too_dear_to_pay_stays_hopeless_after_a_reply_of_plain_steps():
    from specdec_core.drafting.planner import DraftPlanner

    planner = DraftPlanner()
    measured(planner.sizer.cost, QUANTISED_CURVE)
    for _ in range(3):
        planner.sizer.observe_draft(expansions=1, draft_s=0.056)  # the 0.5B draft, per token
    assert planner._hopeless(gamma=4)
    measured(planner.sizer.cost, {1: 0.144}, times=VerifyCost.MAX_AGE + 10)
    assert planner._hopeless(gamma=4)


def test_a_check_timed_only_twice_counts_at_its_timings_when_judging_whether_a_draft_could_pay():
    """The 0.5B draft's first trees checked 4 rows twice (0.36 s): read as the guess from the 2 rows below
    (0.25 s), an always-right draft of 4 seemed to gain 27 %, and it was probed every 16 rounds."""
    from specdec_core.drafting.planner import DraftPlanner

    planner = DraftPlanner()
    measured(planner.sizer.cost, {1: 0.143, 2: 0.213})
    measured(planner.sizer.cost, {4: 0.358}, times=2)
    for _ in range(3):
        planner.sizer.observe_draft(expansions=1, draft_s=0.056)
    assert planner.sizer.cost.estimate(4) < 0.3  # a tree may still try 4 rows again ...
    assert planner._hopeless(gamma=4)  # ... but the draft is not worth a probe every 16 rounds


def test_a_priced_out_draft_reads_what_it_sat_out_beside_the_verifier_before_its_probe(pair, tiny_tokenizer,
                                                                                       monkeypatch):
    """A few rounds before a probe is due, the draft reads the tokens it sat out on a thread of its own (where a core
    is free: the test says there is), so the probe does not pay for them; the text is the verifier's."""
    import threading

    from specdec_core.drafting.planner import DraftPlanner

    verifier, draft = pair
    prompt = tiny_tokenizer("The capital of France is").input_ids
    _, plain = rounds_of(Engine(verifier, None), prompt, max_new_tokens=40)
    drafter = ModelDrafter(draft)
    reads = []
    read = drafter.prefill
    monkeypatch.setattr(drafter, "prefill", lambda ids: reads.append((threading.current_thread().name, len(ids)))
                        or read(ids))
    engine = Engine(verifier, drafter)
    engine.planner.sizer.cost = FixedCost({1: 0.001, 2: 1.0})  # a second row costs a thousand plain steps
    monkeypatch.setattr(DraftPlanner, "may_draft_ahead", lambda self, *args, **kwargs: True)
    rounds, finished = rounds_of(engine, prompt, max_new_tokens=40, tree_nodes=TREE_AUTO)
    assert finished.token_ids == plain.token_ids
    beside = [length for thread, length in reads if thread == "specdec-draft-ahead" and length > len(prompt)]
    probes = [r.round_index for r in rounds if r.tree and r.round_index > DraftPlanner.PROBE_AFTER // 2]
    assert beside and probes  # it caught up on a thread of its own, and drafted again later
    assert len(prompt) + DraftPlanner.PROBE_AFTER - DraftPlanner.CATCH_UP_LEAD <= beside[0] < len(prompt) + probes[0]


def test_a_draft_this_machine_remembers_as_too_dear_to_pay_skips_its_first_trees_in_a_new_engine(
        pair, tiny_tokenizer, tmp_path, monkeypatch):
    """A new engine's first trees are checked whatever the cost model says (its calibration must see the verifier);
    where this machine remembers the draft's time per step beside this verifier, and even an always-right draft of
    that cost could not pay, they are skipped: the app's first reply after each load paid for them."""
    import dataclasses

    from specdec_core.loading import cost_memory

    monkeypatch.setenv(cost_memory.OFF_ENV, "on")  # the suite turns it off (conftest.py)
    verifier = dataclasses.replace(pair[0], cache_dir=tmp_path)
    prompt = tiny_tokenizer("The capital of France is").input_ids
    _, plain = rounds_of(Engine(verifier, None), prompt, max_new_tokens=30)

    def reply() -> tuple[ScriptedTreeDrafter, Finished]:
        drafter = ScriptedTreeDrafter(len(prompt), plain.token_ids, len(tiny_tokenizer), True, lambda call, behind: 1.2)
        drafter.engine = Engine(verifier, drafter)
        drafter.engine.planner.sizer.cost = FixedCost({1: 0.050, 2: 0.052, 3: 0.054})
        return drafter, rounds_of(drafter.engine, prompt, max_new_tokens=30, tree_nodes=TREE_AUTO)[1]

    first, finished = reply()
    assert first.calls >= 3 and finished.token_ids == plain.token_ids  # its first trees time it
    second, finished = reply()
    assert second.calls == 0 and finished.token_ids == plain.token_ids

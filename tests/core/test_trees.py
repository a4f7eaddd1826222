"""Draft trees: many candidates per position, checked in one verifier pass with a tree attention mask.

Greedy output stays the verifier's own token for token, sampled output keeps the verifier's distribution
(test_lossless.py), the cache keeps only the accepted path, and `tree_nodes=0` is the chain of before.
"""

import pytest
import tiny
import torch

from specdec_core.config import GenerationConfig
from specdec_core.drafting import trees
from specdec_core.drafting.drafters import DraftTarget, HeadDrafter, HybridDrafter, ModelDrafter, PromptLookupDrafter
from specdec_core.drafting.planner import DraftPlanner
from specdec_core.drafting.trees import LOOKUP_ACCEPTANCE, Copy, CopyRecord, TreeRequest, grow_tree
from specdec_core.engine import Engine
from specdec_core.events import DraftStop, Finished, RoundVerified
from specdec_core.verification.cost import Calibration, TreeSizer, VerifyCost
from specdec_core.verification.kv import CachedForward
from specdec_core.verification.sampling import accept_tree

ARCHS = ("llama", "qwen2", "gpt2")


@pytest.fixture(scope="module")
def pairs(tiny_tokenizer):
    return {arch: tiny.make_pair(arch, tiny_tokenizer) for arch in ARCHS}


def generate(engine, prompt, **config):
    events = list(engine.generate(prompt, GenerationConfig(**config)))
    assert isinstance(events[-1], Finished) and events[-1].error is None
    return events


def hf_greedy(loaded, prompt, n):
    out = loaded.model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n,
                                eos_token_id=loaded.tokenizer.eos_token_id, pad_token_id=0)
    return list(out[0, len(prompt):].tolist())


@pytest.mark.parametrize("arch", ARCHS)
def test_a_tree_pass_gives_each_node_the_logits_of_its_own_path_and_keeps_only_the_accepted_one(pairs,
                                                                                               tiny_tokenizer, arch):
    model = pairs[arch][0].model
    ids = tiny_tokenizer("The capital of France is").input_ids
    nodes, parents = [5, 9, 7, 11, 13, 17], [-1, -1, 0, 0, 2, 1]

    def path(node):
        tokens = []
        while node >= 0:
            tokens.insert(0, nodes[node])
            node = parents[node]
        return tokens

    def plain(sequence):
        with torch.no_grad():
            return model(torch.tensor([sequence])).logits[0, -1]

    for warm in (False, True):  # the cache holds the whole sequence already, or only part of it
        forward = CachedForward(model, torch.device("cpu"))
        forward.logits_for(ids if warm else ids[:3])
        logits = forward.logits_for_tree(ids, nodes, parents)
        expected = torch.stack([plain(ids)] + [plain(ids + path(i)) for i in range(len(nodes))])
        assert torch.allclose(logits, expected, atol=1e-4)
        forward.keep_path([0, 2, 4])
        assert forward.cached_ids == ids + path(4)
        after = forward.logits_for(ids + path(4) + [3])
        assert forward.last_run == 1  # only the new token ran: the kept rows are the path's
        assert torch.allclose(after[0], plain(ids + path(4) + [3]), atol=1e-4)


def drafters_for(verifier, draft):
    return {"model": ModelDrafter(draft), "head": HeadDrafter(tiny.make_head(verifier, scale=0.5)),
            "hybrid": HybridDrafter(HeadDrafter(tiny.make_head(verifier, scale=0.5)), model_tokens=1)}


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("kind", ["model", "head", "hybrid"])
@pytest.mark.parametrize("cost_aware", [False, True])
def test_greedy_speculation_with_trees_equals_the_verifiers_own_greedy_generate(pairs, tiny_tokenizer, arch, kind,
                                                                                cost_aware):
    verifier, draft = pairs[arch]
    prompt = tiny_tokenizer("Once upon a time there was a little robot").input_ids
    engine = Engine(verifier, drafters_for(verifier, draft)[kind])
    events = generate(engine, prompt, max_new_tokens=40, gamma=4, tree_nodes=8, cost_aware=cost_aware)
    assert list(events[-1].token_ids) == hf_greedy(verifier, prompt, 40)
    rounds = [e for e in events if isinstance(e, RoundVerified)]
    if not cost_aware:
        assert any(len(r.tree) > 1 for r in rounds)
        assert all(len(r.tree) <= 8 for r in rounds)
        # more than one candidate at some position: a tree, not a chain
        assert any(len({n.parent for n in r.tree}) < len(r.tree) for r in rounds)
    # The second reply reuses the caches after tree rounds: still exact.
    assert list(generate(engine, prompt, max_new_tokens=40, gamma=4, tree_nodes=8)[-1].token_ids) == \
        hf_greedy(verifier, prompt, 40)


@pytest.mark.parametrize("kind", ["model", "head"])
def test_every_node_of_a_tree_has_the_drafts_probability_along_its_own_path(pairs, tiny_tokenizer, kind):
    """A level's paths are scored in one head call (each seeing only its ancestors): node by node, the
    probability shown equals drafting that path alone, one token at a time."""
    verifier, draft = pairs["llama"]
    drafter, alone = (drafters_for(verifier, draft)[kind] for _ in range(2))
    vocab = verifier.producible_ids
    prompt = tiny_tokenizer("Once upon a time there was a little robot").input_ids
    for each in (drafter, alone):
        each.attach(DraftTarget(CachedForward(verifier.model, verifier.device), vocab, frozenset()))
        if kind == "head":
            each.verifier_forward.logits_for(prompt)
    tree = drafter.propose_tree(prompt, TreeRequest(24, 4))
    assert tree.expansions < len(tree) and max(len(tree.path_to(n)) for n in range(len(tree))) >= 3
    for node in range(len(tree)):
        path_tokens = [tree.token_ids[n] for n in tree.path_to(node)]
        if kind == "model":
            logits = alone.forward.logits_for(prompt + path_tokens[:-1])[-1][:vocab]
        else:
            alone.reset_cache()
            with torch.inference_mode():
                state = alone._catch_up(list(prompt))
                for depth, token in enumerate(path_tokens[:-1]):
                    state = alone._step(state[None], [token], len(prompt) - 1 + depth)[-1]
                logits = alone._logits(state[None], vocab)[0]
        expected = float(torch.softmax(logits.float(), -1)[path_tokens[-1]])
        assert tree.display_probs[node] == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_a_draft_model_pays_one_forward_pass_per_level_whatever_its_width(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    drafter = ModelDrafter(draft)
    drafter.attach(DraftTarget(None, verifier.producible_ids, frozenset()))
    prompt = tiny_tokenizer("Once upon a time there was a little robot").input_ids
    drafter.prefill(prompt)
    calls = drafter.forward.forward_calls

    tree = drafter.propose_tree(prompt, TreeRequest(24, 4))

    widest = max(sum(len(tree.path_to(n)) == depth for n in range(len(tree))) for depth in range(1, 5))
    assert widest > 1 and tree.expansions >= 3
    assert drafter.forward.forward_calls - calls <= tree.expansions
    # the levels' branches are rolled back: the cache holds the committed tokens and ancestors all branches shared
    cached = drafter.forward.cached_ids
    assert cached[:len(prompt)] == prompt
    assert any(cached[len(prompt):] == [tree.token_ids[n] for n in tree.path_to(node)][:len(cached) - len(prompt)]
               for node in range(len(tree)))


def test_a_tree_that_grows_along_one_path_drafts_as_cheaply_as_a_chain(pairs, tiny_tokenizer, monkeypatch):
    """Each level feeds the draft only its new token (its ancestors stay cached), and the next round, after
    the verifier took the path, feeds only what the draft has not read: no level re-reads its path."""
    monkeypatch.setattr(trees, "TREE_WIDTH", 1)  # one child per node, one node per level: a path
    verifier, draft = pairs["llama"]
    drafter = ModelDrafter(draft)
    drafter.attach(DraftTarget(None, verifier.producible_ids, frozenset()))
    prompt = tiny_tokenizer("Once upon a time there was a little robot").input_ids
    drafter.prefill(prompt)
    fed: list[int] = []
    run = drafter.forward._run
    monkeypatch.setattr(drafter.forward, "_run",
                        lambda new_ids, *a, **k: fed.append(len(new_ids)) or run(new_ids, *a, **k))

    tree = drafter.propose_tree(prompt, TreeRequest(8, 4))

    path = [tree.token_ids[n] for n in tree.path_to(len(tree) - 1)]
    assert len(path) == len(tree) == 4 and tree.expansions == 4
    assert fed == [1, 1, 1]  # the root's row was kept from the prefill; then one token per level
    assert drafter.forward.cached_ids == prompt + path[:-1]
    fed.clear()
    drafter.propose_tree(prompt + path + [5], TreeRequest(8, 4))
    assert fed[0] == 2  # the path's last token and the verifier's bonus token; the rest was cached


def test_tree_nodes_zero_is_the_chain_of_before(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    prompt = tiny_tokenizer("Once upon a time there was a little robot").input_ids
    config = dict(max_new_tokens=30, gamma=4, temperature=0.8, seed=3)
    chain = generate(Engine(verifier, ModelDrafter(draft)), prompt, **config)
    zero = generate(Engine(verifier, ModelDrafter(draft)), prompt, tree_nodes=0, **config)
    assert chain[-1].token_ids == zero[-1].token_ids
    assert all(not e.tree for e in zero if isinstance(e, RoundVerified))


def test_the_verdict_lists_every_node_with_its_parent_and_the_accepted_path(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    prompt = tiny_tokenizer("The capital of France is").input_ids
    events = generate(Engine(verifier, ModelDrafter(draft)), prompt, max_new_tokens=20, tree_nodes=6,
                      cost_aware=False)
    for r in (e for e in events if isinstance(e, RoundVerified) and e.tree):
        assert all(-1 <= n.parent < i for i, n in enumerate(r.tree))
        accepted = [i for i, n in enumerate(r.tree) if n.accepted]
        assert len(accepted) == r.n_accepted
        # the accepted nodes form one path from the root down
        for parent, child in zip([-1, *accepted[:-1]], accepted):
            assert r.tree[child].parent == parent
        assert [v.token_id for v in r.drafted[:r.n_accepted]] == [r.tree[i].token_id for i in accepted]
        assert r.stop is DraftStop.TREE


def test_accept_tree_checks_siblings_one_at_a_time_and_removes_each_rejected_one():
    # Verifier: after the root, token 2 (p 0.5), 1 (0.3), 0 (0.2). Candidates 1 then 2 under the root.
    target = torch.tensor([[0.2, 0.3, 0.5], [1 / 3, 1 / 3, 1 / 3], [1 / 3, 1 / 3, 1 / 3]])
    counts = torch.zeros(3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(6000):
        result = accept_tree([1, 2], [-1, -1], target, generator)
        first = [1, 2][result.path[0]] if result.path else result.next_token
        counts[first] += 1
        assert result.accept_probs[0] == pytest.approx(0.3)
        if not result.path or result.path[0] == 1:
            assert result.accept_probs[1] == pytest.approx(0.5 / 0.7)  # 2's share once 1 is removed
    assert torch.allclose(counts / counts.sum(), target[0], atol=0.02)


def test_accept_tree_when_greedy_follows_the_argmax_down_the_tree():
    one_hot = torch.eye(4)
    # root -> argmax 3; node 1 (token 3) -> argmax 0; node 2 (token 0 under node 1) -> argmax 2.
    target = torch.stack([one_hot[3], one_hot[1], one_hot[0], one_hot[2]])
    result = accept_tree([1, 3, 0], [-1, -1, 1], target, torch.Generator())
    assert result.path == (1, 2) and result.next_token == 2
    assert result.accept_probs == (0.0, 1.0, 1.0)


def test_the_sizer_checks_nothing_when_a_plain_step_is_faster_and_more_when_checking_is_cheap():
    cost = VerifyCost({1: 0.050, 2: 0.056, 3: 0.065, 5: 0.090, 9: 0.150})
    sizer = TreeSizer(cost=cost)
    assert sizer.best_size([0.05, 0.03, 0.02]) == 0
    assert sizer.best_size([0.9, 0.8, 0.7, 0.6]) >= 3
    sizer.observe([0.9] * 4, accepted=0)  # a draft that promises much and delivers nothing is trusted less
    sizer.observe([0.9] * 4, accepted=0)
    assert sizer.best_size([0.9, 0.8, 0.7, 0.6]) < 3
    assert VerifyCost({1: 0.05, 3: 0.07}).estimate(2) == pytest.approx(0.06)


def test_growing_stops_where_the_next_node_cannot_pay():
    sizer = TreeSizer(cost=VerifyCost({1: 0.050, 2: 0.056, 3: 0.065, 5: 0.090}), draft_per_expansion=0.002)
    # A second row costs 6 ms: it must bring 0.12 tokens to break even, and beat a plain step by MARGIN ...
    assert sizer.least_value([]) == pytest.approx((1 + TreeSizer.MARGIN) * 0.056 / 0.050 - 1)
    # ... and pay for 2 ms more if its children are scored
    assert sizer.least_value([], more=1) == pytest.approx((1 + TreeSizer.MARGIN) * 0.058 / 0.050 - 1)
    assert sizer.least_value([0.9]) < sizer.least_value([0.1]) + 1  # finite either way
    # the threshold is what best_size uses: a node just above it is kept, one just below is not
    need = sizer.least_value([])
    assert sizer.best_size([need * 1.05]) == 1 and sizer.best_size([need * 0.95]) == 0


def test_drafting_already_spent_does_not_shrink_the_tree_checked():
    sizer = TreeSizer(cost=VerifyCost({1: 0.050, 2: 0.051, 3: 0.052, 4: 0.053}), draft_per_expansion=0.020)
    # rows are nearly free here, so siblings whose drafting is done are worth checking however slow it was
    assert sizer.best_size([0.3, 0.2, 0.1], spent_s=0.040) == 3
    # but growing on costs an expansion each time, so a node worth 0.1 is not expanded, only checked
    assert sizer.least_value([0.3], expansions=2, more=0) < 0.1 < sizer.least_value([0.3], expansions=2, more=1)


def test_a_hybrids_tree_holds_the_copy_prompt_lookup_found_beside_the_drafts_guesses(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    hybrid = HybridDrafter(ModelDrafter(draft), model_tokens=1)
    hybrid.attach(DraftTarget(None, len(tiny_tokenizer), frozenset()))
    repeated = tiny_tokenizer("one two three four one two three four one two").input_ids
    copied = hybrid.lookup.propose(repeated, 3).token_ids
    assert len(copied) == 3
    tree = hybrid.propose_tree(repeated, TreeRequest(12, 3))
    # the copy is one branch, root to depth 3
    node, parent = None, -1
    for token in copied:
        node = next(i for i, (t, p) in enumerate(zip(tree.token_ids, tree.parents)) if t == token and p == parent)
        parent = node
    assert len(tree.path_to(node)) == 3
    assert len({p for p in tree.parents if p == -1}) == 1 and tree.parents.count(-1) > 1  # other guesses too
    assert len(set(zip(tree.parents, tree.token_ids))) == len(tree)  # no candidate twice under one parent


def test_a_hybrid_joins_a_given_copy_where_its_own_lookup_finds_none(pairs, tiny_tokenizer):
    _, draft = pairs["llama"]
    hybrid = HybridDrafter(ModelDrafter(draft), model_tokens=1)
    fresh = tiny_tokenizer("a quiet lake").input_ids
    hybrid.attach(DraftTarget(None, len(tiny_tokenizer), frozenset()))
    assert not hybrid.lookup.propose(fresh, 3).token_ids
    tree = hybrid.propose_tree(fresh, TreeRequest(12, 3, Copy((40, 41, 42), (0.99,))))
    assert [tree.token_ids[n] for n in range(len(tree)) if tree.is_copy(n)] == [40, 41, 42]


def test_a_hybrid_grows_trees_exactly_when_its_model_drafter_does(pairs):
    _, draft = pairs["llama"]
    assert HybridDrafter(ModelDrafter(draft)).grows_trees
    assert not HybridDrafter(PromptLookupDrafter()).grows_trees


def test_a_new_reply_does_not_judge_the_last_replys_copy_by_the_chat_template(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    hybrid = HybridDrafter(ModelDrafter(draft), model_tokens=1)
    hybrid.attach(DraftTarget(None, len(tiny_tokenizer), frozenset()))
    text = tiny_tokenizer("one two three four one two three four one two").input_ids
    hybrid.propose_tree(text, TreeRequest(8, 3))
    assert hybrid._last_copy is not None
    hybrid.reset(seed=1)
    template = tiny_tokenizer(" user says hello assistant").input_ids
    hybrid.propose_tree(text + template, TreeRequest(8, 3))
    assert hybrid.copies.tried == [0.0] * len(LOOKUP_ACCEPTANCE)


def test_a_copied_node_is_expanded_only_after_the_copied_node_above_it():
    """The head scores a path with its ancestors' predicted states, so every expanded path's ancestors must
    have been expanded in earlier levels, even where the copy ranks high deep down but low at the root."""
    vocab, fed = 50, set()

    def logits_for(paths, paths_tokens):
        rows = []
        for path in paths:
            assert all(node in fed for node in path[:-1]), f"path {path} has an ancestor never expanded"
            fed.update(path[-1:])
            logits = torch.zeros(vocab)  # below the root: every token alike
            if not path:
                logits[1:5] = 4.0  # the root: four likely tokens, the copy's first token unlikely
            rows.append(logits)
        return torch.stack(rows), None  # columns are the ids themselves

    copy = Copy((10, 11, 12), acceptance=(0.05, 0.99, 0.99))  # a doubtful start, then sure
    tree = grow_tree(logits_for, 0.0, 64, 4, GenerationConfig(), frozenset(), copy)
    assert len(tree) > 8 and all(p < i for i, p in enumerate(tree.parents))
    copied = [n for n in range(len(tree)) if tree.is_copy(n)]
    assert [tree.token_ids[n] for n in copied] == [10, 11, 12]


def test_the_copy_record_follows_how_often_copies_were_right_position_by_position():
    record = CopyRecord()
    assert record.acceptance() == pytest.approx(LOOKUP_ACCEPTANCE)
    for _ in range(12):
        record.record([5, 6, 7, 8, 9], [5, 6, 7, 8, 9, 10])  # long copies, all right
    assert all(rate > max(prior, 0.8) for rate, prior in zip(record.acceptance(), LOOKUP_ACCEPTANCE))
    for _ in range(12):
        record.record([5, 6, 7], [4, 6, 7])  # wrong at once: later positions are not judged
    rates = record.acceptance()
    assert rates[0] < 0.4 < LOOKUP_ACCEPTANCE[0] and rates[1] > LOOKUP_ACCEPTANCE[1]
    reached = record.tried[1]
    record.record([5, 6, 7], [5])  # the verifier produced one token there: only position 0 is judged
    assert record.tried[1] < reached and record.acceptance()[0] > rates[0]


def test_a_hybrid_values_its_copy_by_how_often_copies_were_right_in_the_conversation(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    hybrid = HybridDrafter(ModelDrafter(draft), model_tokens=1)
    text = tiny_tokenizer("one two three four five six one two three four five six one two").input_ids
    hybrid.attach(DraftTarget(None, len(tiny_tokenizer), frozenset()))

    def copy_values(ids):
        tree = hybrid.propose_tree(ids, TreeRequest(16, 4))
        copy = hybrid._last_copy[1]
        node, values = -1, []
        for token in copy[:3]:
            node = next(i for i, (t, p) in enumerate(zip(tree.token_ids, tree.parents)) if t == token and p == node)
            values.append(tree.values[node])
        return copy, values

    copy, first = copy_values(text)
    assert first[0] >= LOOKUP_ACCEPTANCE[0] - 1e-9
    ids = list(text)
    for _ in range(6):  # the verifier keeps producing what was copied
        ids += list(copy)
        copy, later = copy_values(ids)
    assert later[2] > first[2] and hybrid.copies.acceptance()[2] > LOOKUP_ACCEPTANCE[2]


def test_where_checking_costs_more_than_it_brings_a_round_is_a_plain_step(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    engine = Engine(verifier, ModelDrafter(draft))
    engine.planner.sizer.cost = VerifyCost({1: 0.001, 2: 1.0})  # a second row would cost a thousand plain steps
    prompt = tiny_tokenizer("The capital of France is").input_ids
    events = generate(engine, prompt, max_new_tokens=16, tree_nodes=8)
    rounds = [e for e in events if isinstance(e, RoundVerified)]
    first, rest = rounds[:DraftPlanner.FIRST_TREES_CHECKED], rounds[DraftPlanner.FIRST_TREES_CHECKED:]
    assert all(r.tree for r in first)  # a new draft is tried on its first rounds: the priors alone do not decide
    assert rest and all(not r.tree and not r.drafted for r in rest)
    assert all(r.stop is DraftStop.COST for r in rest[:-1])  # the last round had no room to draft anyway
    assert list(events[-1].token_ids) == hf_greedy(verifier, prompt, 16)


def test_a_tree_priced_out_is_tried_again_after_a_while_and_checked_however_little_it_seems_worth(
        pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    engine = Engine(verifier, ModelDrafter(draft))
    engine.planner.sizer.cost = VerifyCost({1: 0.001, 2: 1.0})  # by the cost model, no node is ever worth its row
    prompt = tiny_tokenizer("The capital of France is").input_ids
    # Not even a draft that is always right could pay for such rows: once its cost is settled (timed three
    # times; a first tree drafted beside the prefill is not timed) it is tried again only rarely.
    first = DraftPlanner.FIRST_TREES_CHECKED
    tokens = first + DraftPlanner.PROBE_AFTER * DraftPlanner.HOPELESS_PROBE_FACTOR + 12
    events = generate(engine, prompt, max_new_tokens=tokens, tree_nodes=8)
    rounds = [e for e in events if isinstance(e, RoundVerified)]
    back = next(i for i, r in enumerate(rounds) if i >= first and r.tree)
    assert back >= first + DraftPlanner.PROBE_AFTER
    assert rounds[back].tree and rounds[back + 1].tree  # evidence, not the priors' verdict again
    assert list(events[-1].token_ids) == hf_greedy(verifier, prompt, tokens)


def test_a_size_measured_slow_long_ago_is_guessed_again_and_so_tried_again():
    cost = VerifyCost()
    for _ in range(3):
        cost.observe(1, 0.050)
        cost.observe(5, 0.200)  # measured while the machine was busy
    assert cost.estimate(5) == pytest.approx(0.200)
    for _ in range(VerifyCost.MAX_AGE):
        cost.observe(1, 0.050)  # only plain steps since: 5 rows would never be chosen, so never re-timed
    assert cost.estimate(5) == pytest.approx(0.200)  # its share of the plain step, for a while (SHAPE_AGE) ...
    for _ in range(VerifyCost.SHAPE_AGE - VerifyCost.MAX_AGE):
        cost.observe(1, 0.050)
    assert cost.estimate(5) == pytest.approx(0.050 * (1 + 4 * 0.08))  # ... then the guess from below again
    assert cost.estimate(1) == pytest.approx(0.050)


def test_sizes_below_the_ones_timed_lately_are_guessed_cheaper_so_the_plain_step_is_tried_again():
    cost = VerifyCost()
    cost.observe(1, 0.050)
    for _ in range(VerifyCost.MAX_AGE):
        cost.observe(9, 0.065)  # only trees of 8 nodes since: the plain step's timing has aged out
    assert cost.estimate(1) < cost.estimate(5) < cost.estimate(9) == pytest.approx(0.065)


def test_a_given_figure_counts_as_settled_timings_not_as_one():
    cost = VerifyCost({1: 0.050, 5: 0.060})
    cost.observe(5, 0.500)  # one slow pass does not replace a given figure
    assert cost.estimate(5) == pytest.approx(0.060)


def test_one_slow_pass_does_not_move_the_verify_cost():
    cost = VerifyCost()
    for seconds in (0.050, 0.051, 0.049, 0.300, 0.050):  # one pass slowed by other work on the machine
        cost.observe(1, seconds)
    assert cost.estimate(1) == pytest.approx(0.050)
    cost.observe(3, 0.200)  # timed once, and slowly: read no higher than the guess from below until settled
    assert cost.estimate(3) < 0.06
    cost.observe(3, 0.190)
    cost.observe(3, 0.210)
    assert cost.estimate(3) == pytest.approx(0.200)


def test_a_size_timed_slow_at_a_busy_moment_does_not_stop_trees_growing_past_it():
    cost = VerifyCost()
    for _ in range(3):
        for rows, seconds in ((1, 0.050), (2, 0.050), (3, 0.051), (4, 0.080), (5, 0.052), (6, 0.053)):
            cost.observe(rows, seconds)  # 4 rows happened to be timed while something else ran
    estimates = [cost.estimate(rows) for rows in range(1, 7)]
    assert estimates == sorted(estimates)  # more rows never read as cheaper
    assert cost.estimate(4) == pytest.approx((0.080 + 0.052 + 0.053) / 3)  # pooled with the sizes above it
    sizer = TreeSizer(cost=cost)
    # Two nodes checked (3 rows); a third of value 0.45 pays once the bump is pooled (it could not pay at 80 ms:
    # it would have had to be worth more than one token).
    assert sizer.least_value([0.6, 0.5]) < 0.45


def test_the_drafts_calibration_follows_the_recent_rounds_so_a_text_it_fails_on_stops_costing_rows():
    sizer = TreeSizer(cost=VerifyCost({1: 0.050, 2: 0.067}), draft_per_expansion=0.002)
    for _ in range(300):  # a long English reply: the draft's 0.6 is right more often than it says
        sizer.observe([0.6], 1)
    assert sizer.calibration > 1.4 and sizer.best_size([0.6]) == 1
    for _ in range(30):  # then French: as sure of itself, and wrong every time
        sizer.observe([0.6], 0)
    assert sizer.calibration < 0.6 and sizer.best_size([0.6]) == 0  # a plain step is faster now
    for _ in range(100):  # rounds that check nothing only age the evidence: the draft is tried again
        sizer.observe([], 0)
    assert sizer.calibration > 0.9 and sizer.best_size([0.6]) == 1


def test_a_size_is_stale_until_timed_a_few_times_and_again_when_not_timed_lately():
    cost = VerifyCost()
    assert cost.stale(1)  # never timed
    cost.observe(1, 0.127)  # one pass that met other work: not to be trusted alone
    assert cost.stale(1)
    cost.observe(1, 0.050)
    cost.observe(1, 0.051)
    assert not cost.stale(1) and cost.estimate(1) == pytest.approx(0.051)
    for _ in range(VerifyCost.MAX_AGE - 2):
        cost.observe(5, 0.060)  # trees only since
    assert cost.stale(1) and not cost.stale(5)  # the oldest plain step has aged out
    retimed = 0
    while cost.stale(1) and retimed < 5:  # timed again, until enough recent timings
        cost.observe(1, 0.052)
        retimed += 1
    assert not cost.stale(1) and retimed <= VerifyCost.SETTLED
    assert not VerifyCost({1: 0.05}).stale(1)  # a given figure never goes stale


def test_a_tree_reply_times_a_plain_step_when_it_has_none_lately_and_stays_exact(pairs, tiny_tokenizer):
    verifier, draft = pairs["llama"]
    engine = Engine(verifier, ModelDrafter(draft))
    engine.forget_verify_costs()  # as the app does after its idle calibration
    prompt = tiny_tokenizer("Once upon a time there was").input_ids
    events = generate(engine, prompt, max_new_tokens=24, tree_nodes=6)
    rounds = [e for e in events if isinstance(e, RoundVerified)]
    probes = [r for r in rounds if r.stop is DraftStop.PROBE]
    assert rounds[0].stop is not DraftStop.PROBE  # the first round has no plain step to time
    assert probes == rounds[1:1 + VerifyCost.SETTLED]  # then a few, and none until they age
    assert all(not r.drafted and not r.tree and r.rows == 1 for r in probes)
    assert not engine.planner.sizer.cost.stale(1)
    assert list(events[-1].token_ids) == hf_greedy(verifier, prompt, 24)


def test_the_drafts_confidence_is_read_as_the_verifier_measured_it_band_by_band():
    confidence = Calibration()
    assert confidence(0.7) == pytest.approx(0.7) and confidence(0.05) == pytest.approx(0.05)  # untried: at its word
    for _ in range(40):  # a 0.5B coder for its 1.5B verifier: its 0.7s are taken 9 times in 10, its 0.2s rarely
        confidence.observe([0.72, 0.21], [True, False])
    assert confidence(0.72) > 0.85 and confidence(0.21) < 0.1
    probs = [i / 100 for i in range(101)]
    assert [confidence(p) for p in probs] == sorted(confidence(p) for p in probs)  # surer is never worth less
    for _ in range(300):  # then a text where the same 0.7s are wrong: the recent rounds decide
        confidence.observe([0.72], [False])
    assert confidence(0.72) < 0.2  # (pooled with the untried bands below it, which must not read higher)


def chain_logits(prob: float, vocab: int = 8):
    """A draft that is `prob` sure of token 1 after any path (its other mass spread over the rest)."""
    def logits_for(paths, paths_tokens):
        row = torch.full((vocab,), (1 - prob) / (vocab - 1))
        row[1] = prob
        return row.log().expand(len(paths), vocab).clone(), None
    return logits_for


def test_an_underconfident_draft_grows_deeper_once_its_confidence_is_measured():
    # Rows cost little and each level 20 % of a plain step: by its own 0.6s, a third level does not pay.
    sizer = TreeSizer(cost=VerifyCost({1: 0.050, 2: 0.052, 3: 0.054, 4: 0.056, 5: 0.058}), draft_per_expansion=0.010)
    config = GenerationConfig()
    before = grow_tree(chain_logits(0.6), 0.0, max_nodes=4, max_depth=4, config=config,
                       eos_token_ids=frozenset(), worth=sizer)
    for _ in range(60):  # ... but the verifier takes them 19 times in 20
        sizer.confidence.observe([0.6], [True])
    after = grow_tree(chain_logits(0.6), 0.0, max_nodes=4, max_depth=4, config=config,
                      eos_token_ids=frozenset(), worth=sizer)
    depth = lambda tree: max(len(tree.path_to(n)) for n in range(len(tree)))  # noqa: E731
    assert depth(before) < depth(after) and after.expansions > before.expansions
    assert after.display_probs[0] == pytest.approx(0.6)  # people still read the draft's own probability


def test_a_nearly_free_row_for_an_unlikely_sibling_does_not_stop_the_likely_path_growing():
    # Rows 2-3 timed as cheap as one (noise pooled them), the 4th dear: a sibling worth 0.007 takes the cheap
    # row; the 0.95-sure path's next token must still get it, and the sibling none.
    sizer = TreeSizer(cost=VerifyCost({1: 0.050, 2: 0.050, 3: 0.050, 4: 0.090, 5: 0.095}), draft_per_expansion=0.015)
    tree = grow_tree(chain_logits(0.95), 0.0, max_nodes=4, max_depth=3, config=GenerationConfig(),
                     eos_token_ids=frozenset(), worth=sizer)
    assert tree.expansions >= 2 and tree.parents[:2] == (-1, 0)  # the path, not the sibling


def test_a_new_drafts_first_trees_grow_a_chains_worth_of_nodes_not_the_whole_tree(pairs, tiny_tokenizer):
    """Drafted for evidence whatever the cost model says, they would otherwise be grown and checked whole: 16 rows,
    as much as 10 plain steps on a CPU whose quantised products are compute-bound."""
    verifier, draft = pairs["llama"]
    engine = Engine(verifier, ModelDrafter(draft))
    prompt = tiny_tokenizer("The capital of France is").input_ids
    events = generate(engine, prompt, max_new_tokens=24, tree_nodes=16, gamma=4)
    rounds = [e for e in events if isinstance(e, RoundVerified)]
    first = [r for r in rounds if r.tree][:DraftPlanner.FIRST_TREES_CHECKED]  # plain steps that time a row between
    assert len(first) == DraftPlanner.FIRST_TREES_CHECKED and all(len(r.tree) <= 4 for r in first)
    assert list(events[-1].token_ids) == hf_greedy(verifier, prompt, 24)

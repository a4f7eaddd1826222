"""Drafts with another tokenizer (issue 24): token-level intersection (TLI) and string-level exact match
(SLEM) are lossless, greedy and sampled, and the draft reads the verifier's text through its own tokens.

The verifier speaks the tiny BPE; its drafts speak other vocabularies: the same texts numbered backwards
without the last merges (a draft built from the verifier's own weights, so it often agrees), one trained on
another corpus (a stranger that rarely does), and hand-made 8- and 9-token vocabularies for the
distribution test, one spelled byte-level ('Ġa'), the other SentencePiece-style ('▁a').
"""

import pytest
import tiny
import torch
from test_lossless import first_two_tokens

from specdec_core.config import GenerationConfig
from specdec_core.drafting.cross_vocab import StringMatchDrafter, TokenIntersectionDrafter
from specdec_core.drafting.drafters import DraftTarget, HybridDrafter
from specdec_core.drafting.planner import DraftPolicy
from specdec_core.drafting.trees import TreeRequest
from specdec_core.drafting.vocabularies import Retokenizer, map_vocabularies, token_texts
from specdec_core.engine import Engine
from specdec_core.events import RoundVerified, TokenCommitted, TokenRejected
from specdec_core.verification.sampling import processed_probs

PROMPTS = ["The capital of France is", "def add(a, b):\n", "Once upon a time there was a little robot"]


@pytest.fixture(scope="module")
def verifier(tiny_tokenizer):
    return tiny.as_loaded(tiny.make_model("llama", tiny_tokenizer, seed=1, logit_scale=8.0), tiny_tokenizer,
                          "verifier")


@pytest.fixture(scope="module")
def look_alike(verifier, tiny_tokenizer):
    """A draft over the renumbered vocabulary, built from the verifier's weights (with some noise)."""
    other = tiny.renumbered_tokenizer(tiny_tokenizer, drop_merges=20)
    model = tiny.renumbered_model(verifier.model, tiny_tokenizer, other, noise=0.2, noise_seed=3)
    return tiny.as_loaded(model, other, "look-alike")


@pytest.fixture(scope="module")
def stranger():
    other = tiny.make_tokenizer(vocab_size=300, corpus=[line.upper() for line in tiny.CORPUS])
    return tiny.as_loaded(tiny.make_model("llama", other, seed=2, logit_scale=8.0), other, "stranger")


def verifier_alone(verifier, prompt, max_new_tokens=40):
    ids = torch.tensor([prompt])  # the mask: a start token that is also the padding token must count
    out = verifier.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                  max_new_tokens=max_new_tokens, eos_token_id=verifier.tokenizer.eos_token_id,
                                  pad_token_id=0)
    return out[0, len(prompt):].tolist()


def run(engine, prompt, **config):
    *_, finished = engine.generate(prompt, GenerationConfig(**config))
    assert finished.error is None
    return finished


# --------------------------------------------------------------------------- the vocabulary map


def test_tokens_of_the_same_text_match_whatever_their_spelling_and_id():
    verifier = tiny.hand_tokenizer(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "Ġ", "Ġa", "ab"],
                                   [("Ġ", "a"), ("a", "b")])
    draft = tiny.hand_tokenizer(["<|endoftext|>", "<|im_end|>", "<|im_start|>", "b", "a", "▁", "▁a", "▁b", "ba"],
                                [("▁", "a"), ("▁", "b"), ("b", "a")], spelling="metaspace")
    assert token_texts(draft, 9)[6] == token_texts(verifier, 8)[6] == b" a"
    vocab_map = map_vocabularies(verifier, draft)
    pairs = dict(zip(vocab_map.verifier_ids.tolist(), vocab_map.draft_ids.tolist()))
    # chat markers by their text, 'a' and 'b' swapped, 'Ġ'/'▁' and 'Ġa'/'▁a' alike; 'ab' has no match
    assert pairs == {0: 0, 1: 2, 2: 1, 3: 4, 4: 3, 5: 5, 6: 6}
    assert vocab_map.id_share == 7 / 8


def test_the_draft_reads_the_verifiers_text_in_its_own_tokens_with_one_start_token(tiny_tokenizer):
    draft = tiny.renumbered_tokenizer(tiny_tokenizer, drop_merges=20, start_token=True)
    read = Retokenizer(tiny_tokenizer, draft, len(draft))
    text = "<|im_start|>user\nThe capital of France is Paris."
    ids = tiny_tokenizer(text).input_ids
    assert read(ids) == draft(text).input_ids  # <|endoftext|>, then the text in the draft's ids
    more = ids + tiny_tokenizer(" The capital of Italy").input_ids
    assert read(more).count(draft.bos_token_id) == 1  # a re-encoding never adds a second start token


# --------------------------------------------------------------------------- greedy: identical output


@pytest.mark.parametrize("kind", ["tli", "tli-trees", "tli-hybrid", "slem"])
def test_greedy_speculation_with_another_vocabulary_equals_the_verifier_alone(verifier, look_alike, stranger, kind):
    drafted = accepted = 0
    for draft, text, gamma in ((look_alike, PROMPTS[0], 4), (look_alike, PROMPTS[1], 1), (stranger, PROMPTS[2], 4)):
        inner = StringMatchDrafter(draft, verifier) if kind == "slem" else TokenIntersectionDrafter(draft, verifier)
        engine = Engine(verifier, HybridDrafter(inner) if kind == "tli-hybrid" else inner)
        prompt = verifier.tokenizer(text).input_ids
        finished = run(engine, prompt, max_new_tokens=24, gamma=gamma, tree_nodes=8 if kind == "tli-trees" else 0,
                       cost_aware=False)
        assert list(finished.token_ids) == verifier_alone(verifier, prompt, 24), (draft.name, text, gamma)
        drafted, accepted = drafted + finished.stats.drafted, accepted + finished.stats.accepted
    assert 0 < accepted < drafted  # the rounds mixed acceptances and rejections


# --------------------------------------------------------------------------- sampling: the verifier's distribution

SMALL_VERIFIER = (["<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "Ġ", "Ġa", "ab"], [("Ġ", "a"), ("a", "b")])
SMALL_DRAFT = (["<|endoftext|>", "<|im_end|>", "<|im_start|>", "b", "a", "▁", "▁a", "▁b", "ba"],
               [("▁", "a"), ("▁", "b"), ("b", "a")])
PROMPT = [1, 3, 5]  # "<|im_start|>a "
CONFIGS = [
    GenerationConfig(temperature=1.0, max_new_tokens=3, gamma=3, top_alternatives=0),
    GenerationConfig(temperature=0.7, top_k=6, top_p=0.9, max_new_tokens=3, gamma=3, top_alternatives=0),
]


@pytest.fixture(scope="module")
def small_pair():
    """An 8-token byte-level verifier and a 9-token SentencePiece-style draft: 7 texts shared (at other ids
    in part), the verifier's 'ab' unknown to the draft, the draft's ' b' and 'ba' unknown to the verifier."""
    def loaded(vocabulary, seed, **spelling):
        tokenizer = tiny.hand_tokenizer(*vocabulary, **spelling)
        model = tiny.make_model("llama", tokenizer, seed=seed, logit_scale=20.0, layers=1, hidden=16)
        return tiny.as_loaded(model, tokenizer, eos_token_ids=frozenset())
    return loaded(SMALL_VERIFIER, 3), loaded(SMALL_DRAFT, 4, spelling="metaspace")


def exact_joint(verifier, config):
    """P(first token = a, second token = b) under the verifier's processed distribution."""
    size = len(verifier.tokenizer)
    with torch.no_grad():
        first = processed_probs(verifier.model(torch.tensor([PROMPT])).logits[0, -1], config)
        nexts = processed_probs(verifier.model(torch.tensor([PROMPT + [a] for a in range(size)])).logits[:, -1],
                                config)
    return first[:, None] * nexts


def sampled_joint(engine, config, size, runs):
    after_prefill = DraftPolicy(draft_during_prefill=False)  # the same draws (test_draft_ahead.py), without a thread
    counts = torch.zeros(size, size)
    for seed in range(runs):
        counts[first_two_tokens(engine.generate(PROMPT, config.with_(seed=seed), policy=after_prefill))] += 1
    return counts


def chi_square_p_value(counts, probs):
    expected, observed = probs.flatten() * counts.sum(), counts.flatten()
    assert observed[expected == 0].sum() == 0, "a token the verifier rules out was emitted"
    keep = expected >= 5  # pool sparse cells into one
    obs = torch.cat([observed[keep], observed[~keep].sum()[None]])
    exp = torch.cat([expected[keep], expected[~keep].sum()[None]])
    obs, exp = obs[exp > 0], exp[exp > 0]
    stat = ((obs - exp) ** 2 / exp).sum()
    return float(torch.special.gammaincc(torch.tensor((len(obs) - 1) / 2.0), stat / 2.0))


@pytest.mark.parametrize("config", CONFIGS, ids=["t1", "t0.7-topk6-topp0.9"])
def test_tli_sampling_follows_the_verifiers_processed_distribution(small_pair, config):
    verifier, draft = small_pair
    exact = exact_joint(verifier, config)
    assert float(exact[7].sum() + exact[:, 7].sum()) > 0.05  # the test needs mass on 'ab', which TLI never drafts
    engine = Engine(verifier, TokenIntersectionDrafter(draft, verifier))
    *_, probe = engine.generate(PROMPT, config)
    assert probe.stats.drafted > 0
    assert chi_square_p_value(sampled_joint(engine, config, 8, runs=1000), exact) > 1e-3


def test_slem_proposals_are_one_hot_so_sampling_follows_the_verifiers_distribution_too(small_pair):
    verifier, draft = small_pair
    config = CONFIGS[1]
    engine = Engine(verifier, StringMatchDrafter(draft, verifier))
    counts = sampled_joint(engine, config, 8, runs=600)
    assert chi_square_p_value(counts, exact_joint(verifier, config)) > 1e-3


# --------------------------------------------------------------------------- SLEM: where the spellings meet


def slem(verifier, draft):
    return StringMatchDrafter(draft, verifier)


def test_slem_leaves_out_a_last_word_the_draft_may_not_have_finished(verifier, look_alike):
    tokenizer = verifier.tokenizer
    committed = tokenizer("The capital of").input_ids
    finished = tokenizer("The capital of France is").input_ids[len(committed):]
    assert slem(verifier, look_alike).proposal(committed, " France is Par", complete=False) == finished
    # a draft that ended its reply has finished its last word
    whole = tokenizer("The capital of France is Par").input_ids[len(committed):]
    assert slem(verifier, look_alike).proposal(committed, " France is Par", complete=True) == whole


def test_slem_proposes_nothing_where_the_committed_text_would_merge_with_the_new(verifier, look_alike):
    tokenizer = verifier.tokenizer
    committed = tokenizer("The capital of F").input_ids  # '...Ġ', 'F': in context 'Fra' is one token
    assert tokenizer("The capital of France").input_ids[:len(committed)] != committed
    assert slem(verifier, look_alike).proposal(committed, "rance is", complete=True) == []


@pytest.fixture(scope="module")
def start_token_pair(tiny_tokenizer):
    """A verifier whose tokenizer starts every encoding with <|endoftext|> (as Llama's add <s>), and a draft
    built from it over the renumbered vocabulary."""
    tokenizer = tiny.renumbered_tokenizer(tiny_tokenizer, start_token=True)
    verifier = tiny.as_loaded(tiny.make_model("llama", tokenizer, seed=1, logit_scale=8.0), tokenizer, "starts")
    other = tiny.renumbered_tokenizer(tiny_tokenizer, drop_merges=20)
    draft = tiny.renumbered_model(verifier.model, tokenizer, other, noise=0.2, noise_seed=3)
    return verifier, tiny.as_loaded(draft, other, "draft")


def test_slem_never_proposes_the_start_token_a_fresh_encoding_adds(start_token_pair):
    verifier, draft = start_token_pair
    tokenizer, start = verifier.tokenizer, verifier.tokenizer.bos_token_id
    committed = tokenizer("The capital of").input_ids
    assert committed[0] == start and tokenizer(" France is").input_ids[0] == start  # every encoding starts so
    proposed = slem(verifier, draft).proposal(committed, " France is Paris", complete=True)
    assert proposed == tokenizer("The capital of France is Paris").input_ids[len(committed):]
    assert start not in proposed


def test_greedy_slem_with_a_start_token_tokenizer_equals_the_verifier_alone_and_is_accepted(start_token_pair):
    verifier, draft = start_token_pair
    engine = Engine(verifier, slem(verifier, draft))
    accepted = 0
    for text in PROMPTS:
        prompt = verifier.tokenizer(text).input_ids
        finished = run(engine, prompt, max_new_tokens=24, gamma=4)
        assert list(finished.token_ids) == verifier_alone(verifier, prompt, 24)
        accepted += finished.stats.accepted
    assert accepted > 0


def test_reading_a_growing_text_again_gives_what_encoding_it_whole_gives(tiny_tokenizer):
    draft = tiny.renumbered_tokenizer(tiny_tokenizer, drop_merges=20)
    read = Retokenizer(tiny_tokenizer, draft, len(draft))
    text = " ".join(tiny.CORPUS[:6]) * 2
    ids = tiny_tokenizer(text).input_ids
    for end in range(40, len(ids), 7):  # the end of the text changes each time, as rounds commit tokens
        assert read(ids[:end]) == draft(tiny_tokenizer.decode(ids[:end])).input_ids, end
    other = tiny_tokenizer("Hello! How can I help you today?").input_ids + ids[:60]  # another conversation
    assert read(other) == draft(tiny_tokenizer.decode(other)).input_ids


# --------------------------------------------------------------------------- what people see


def drafted_tokens(engine, prompt):
    from specdec_core.events import TokenCommitted, TokenRejected, TokenState

    events = list(engine.generate(prompt, GenerationConfig(max_new_tokens=16, gamma=4, tree_nodes=0)))
    return [e for e in events if isinstance(e, TokenRejected)
            or isinstance(e, TokenCommitted) and e.state is TokenState.ACCEPTED]


def test_each_drafted_token_names_the_draft_token_it_came_from(verifier, look_alike):
    drafter = TokenIntersectionDrafter(look_alike, verifier)
    tokens = drafted_tokens(Engine(verifier, drafter), verifier.tokenizer(PROMPTS[0]).input_ids)
    assert tokens
    to_draft = drafter.map.to_draft()
    for token in tokens:  # the same text, the draft's own spelling and id
        draft_id = to_draft[token.token_id]
        assert token.draft_source == f"{look_alike.tokenizer.convert_ids_to_tokens(draft_id)!r} (id {draft_id})"


def test_slem_names_the_draft_tokens_each_proposed_token_was_spelled_from_and_claims_no_draft_probability(
        verifier, look_alike):
    tokens = drafted_tokens(Engine(verifier, StringMatchDrafter(look_alike, verifier)),
                            verifier.tokenizer(PROMPTS[0]).input_ids)
    assert tokens and all(token.draft_source and "(id" in token.draft_source for token in tokens)
    assert all(token.draft_prob is None for token in tokens)  # proposed by string match, not drawn with p = 1


def test_every_node_of_a_tli_tree_round_names_the_draft_token_it_came_from_as_a_chain_round_does(verifier,
                                                                                                look_alike):
    drafter = TokenIntersectionDrafter(look_alike, verifier)
    to_draft = drafter.map.to_draft()
    config = GenerationConfig(max_new_tokens=16, tree_nodes=8, cost_aware=False)
    events = list(Engine(verifier, drafter).generate(verifier.tokenizer(PROMPTS[0]).input_ids, config))
    rounds = [e for e in events if isinstance(e, RoundVerified) and e.tree]
    assert rounds
    for verdict in (node for r in rounds for node in (*r.tree, *r.drafted)):
        draft_id = to_draft[verdict.token_id]
        assert verdict.draft_source == f"{look_alike.tokenizer.convert_ids_to_tokens(draft_id)!r} (id {draft_id})"
    tokens = [e for e in events if isinstance(e, (TokenCommitted, TokenRejected)) and e.draft_prob is not None]
    assert tokens and all(token.draft_source for token in tokens)  # the bubble's tokens carry it too


def test_a_tli_tree_level_costs_one_draft_pass_and_each_node_has_its_paths_probability(verifier, look_alike):
    """A level's paths run as one tree in the draft (tree attention); a node's draft probability is still
    the one drafting its path alone gives."""
    drafter, alone = TokenIntersectionDrafter(look_alike, verifier), TokenIntersectionDrafter(look_alike, verifier)
    prompt = verifier.tokenizer(PROMPTS[0]).input_ids
    vocab = verifier.producible_ids
    for each in (drafter, alone):
        each.attach(DraftTarget(None, vocab, frozenset()))
    drafter.prefill(prompt)
    calls = drafter.forward.forward_calls

    tree = drafter.propose_tree(prompt, TreeRequest(16, 3))

    assert tree.expansions >= 2 and len(tree) > tree.expansions
    assert drafter.forward.forward_calls - calls <= tree.expansions
    context = alone.read(prompt)
    for node in range(len(tree)):
        path = [tree.token_ids[n] for n in tree.path_to(node)]
        row = alone.forward.logits_for(alone._own(prompt, context, path[:-1]))[-1, alone._columns]
        column = int((alone._targets == path[-1]).nonzero()[0, 0])
        expected = float(torch.softmax(row.float(), -1)[column])
        assert tree.display_probs[node] == pytest.approx(expected, rel=1e-4, abs=1e-6)

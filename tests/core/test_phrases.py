"""The phrase store: what the verifier said before, copied where the conversation itself has no match."""

import numpy as np
import pytest
import tiny

from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import DraftTarget, HybridDrafter, ModelDrafter, drafter_for
from specdec_core.drafting.phrases import FILE_NAME, PhraseStore, _context_key, _window_keys, shipped_store
from specdec_core.drafting.trees import PHRASE_ACCEPTANCE, TreeRequest
from specdec_core.engine import Engine
from specdec_core.events import Finished


def test_the_store_follows_the_most_frequent_continuation_of_the_longest_known_context():
    store = PhraseStore([[1, 2, 3, 4]] * 4 + [[1, 2, 3, 9]], min_share=0.7, min_support=3)
    assert store.next_token([7, 1, 2, 3]) == 4  # 4 of 5 sightings of "1 2 3"
    assert store.continuation([8, 1, 2], 5) == [3, 4]  # nothing ever followed "2 3 4"
    assert store.continuation([5, 6], 3) == []


def test_an_undecided_or_rare_context_copies_nothing_rather_than_a_shorter_ones_guess():
    store = PhraseStore([[5, 2, 3, 4]] * 5 + [[1, 2, 3, 9]], min_share=0.8, min_support=3)
    assert store.next_token([0, 2, 3]) == 4  # "0 2 3" is unknown; "2 3" -> 4 five times in six
    assert store.next_token([1, 2, 3]) is None  # "1 2 3" is known but seen once: no copy, and not "2 3"'s
    undecided = PhraseStore([[1, 2, 3, 4]] * 2 + [[1, 2, 3, 9]] * 2, min_share=0.8, min_support=3)
    assert undecided.next_token([1, 2, 3]) is None  # split 2 / 2


def test_contexts_never_run_from_one_sequence_into_the_next():
    store = PhraseStore([[1, 2]] * 3 + [[3, 4]] * 3, min_order=2, max_order=2, min_support=1)
    assert store.next_token([1, 2]) is None  # "1 2" ends every first sequence: no "3" after it


def test_window_keys_and_context_keys_agree():
    tokens = np.array([5, 49151, 0, 17, 65535, 3], dtype=np.int64)
    for n in (1, 2, 4):
        keys = _window_keys(tokens, n)
        assert [int(k) for k in keys] == [_context_key(tokens[i:i + n].tolist()) for i in range(len(tokens) - n)]


def test_a_saved_store_loads_the_same(tmp_path):
    rng = np.random.default_rng(0)
    sequences = [rng.integers(0, 6, size=int(rng.integers(3, 30))).tolist() for _ in range(40)]
    store = PhraseStore(sequences, min_support=1, min_share=0.3)
    store.save(tmp_path / FILE_NAME)
    assert shipped_store(tmp_path) is not None
    loaded = PhraseStore.load(tmp_path / FILE_NAME, min_support=1, min_share=0.3)
    assert len(loaded) == 40 and loaded.tokens == store.tokens
    for seq in sequences[:10]:
        assert loaded.continuation(seq[:3], 4) == store.continuation(seq[:3], 4)
    assert shipped_store(tmp_path / "elsewhere") is None and shipped_store(None) is None


@pytest.fixture(scope="module")
def pair(tiny_tokenizer):
    return tiny.make_pair("llama", tiny_tokenizer)


def _store_of(engine_verifier, prompt, tokens=24):
    """A store that holds the verifier's own greedy reply to `prompt` (as the shipped one holds its corpus replies)."""
    events = list(Engine(engine_verifier, None).generate(prompt, GenerationConfig(max_new_tokens=tokens)))
    reply = list(events[-1].token_ids)
    return PhraseStore([reply] * 3), reply


def test_where_lookup_finds_nothing_the_hybrid_copies_from_its_phrase_store(pair, tiny_tokenizer):
    verifier, draft = pair
    prompt = tiny_tokenizer("a quiet lake").input_ids
    store, reply = _store_of(verifier, prompt)
    hybrid = HybridDrafter(ModelDrafter(draft), model_tokens=1, phrases=store)
    ids = prompt + reply[:4]
    hybrid.attach(DraftTarget(None, len(tiny_tokenizer), frozenset()))
    if hybrid.lookup.propose(ids, 4).token_ids:
        pytest.skip("the tiny verifier's reply repeats itself here; lookup, not the store, drafts")
    copied = hybrid.propose(ids, 4)
    assert list(copied.token_ids) == store.continuation(ids, 4) and copied.token_ids
    tree = hybrid.propose_tree(ids, TreeRequest(12, 3))
    parent = -1  # the copy is one branch, root to depth 3 (its first node may be one of the draft's guesses too)
    for token in store.continuation(ids, 3):
        parent = next(i for i, (t, p) in enumerate(zip(tree.token_ids, tree.parents)) if t == token and p == parent)
    assert len(tree.path_to(parent)) == 3
    assert hybrid.phrase_copies.acceptance()[0] == pytest.approx(PHRASE_ACCEPTANCE[0])


def test_greedy_output_with_a_phrase_store_is_the_verifiers_own_and_it_drafts_fewer_rounds(pair, tiny_tokenizer):
    verifier, draft = pair
    prompt = tiny_tokenizer("a quiet lake").input_ids
    store, reply = _store_of(verifier, prompt, tokens=32)
    wrong = PhraseStore([[t + 1 for t in reply]] * 3)  # a store of phrases the verifier never says
    for phrases in (None, store, wrong):
        events = list(Engine(verifier, HybridDrafter(ModelDrafter(draft), model_tokens=1, phrases=phrases))
                      .generate(prompt, GenerationConfig(max_new_tokens=32, gamma=4)))
        assert isinstance(events[-1], Finished) and list(events[-1].token_ids) == reply
        if phrases is store:
            assert events[-1].stats.rounds < len(reply) / 2  # the store knew the reply: long copies


def test_a_draft_folder_with_a_phrase_store_gets_it_in_its_hybrid_and_one_without_does_not(tmp_path, tiny_tokenizer):
    from specdec_core.loading.models import load_model

    verifier_folder = tiny.save_model(tmp_path / "verifier", "llama", tiny_tokenizer, seed=1)
    head_folder = tiny.save_head_folder(tmp_path, verifier_folder, tiny_tokenizer)
    head = load_model(str(head_folder), device="cpu")
    assert drafter_for(head, with_lookup=True).phrases is None
    PhraseStore([[4, 5, 6, 7]] * 3).save(head_folder / FILE_NAME)
    hybrid = drafter_for(load_model(str(head_folder), device="cpu"), with_lookup=True)
    assert hybrid.phrases is not None and hybrid.phrases.continuation([4, 5], 2) == [6, 7]
    assert not hasattr(drafter_for(head), "phrases")  # no lookup asked for: the head alone

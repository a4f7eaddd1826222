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

from specdec_core.config import GenerationConfig
from specdec_core.cross_vocab import (
    Retokenizer,
    StringMatchDrafter,
    TokenIntersectionDrafter,
    map_vocabularies,
    token_texts,
)
from specdec_core.drafters import HybridDrafter
from specdec_core.engine import Engine
from specdec_core.sampling import processed_probs

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
    out = verifier.model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=max_new_tokens,
                                  eos_token_id=verifier.tokenizer.eos_token_id, pad_token_id=0)
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

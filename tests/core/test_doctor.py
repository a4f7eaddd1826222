"""Pairing checks: which verifier/draft pairs are compatible, and what the user is told when not."""

import json

import pytest
import tiny
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from specdec_core.errors import IncompatiblePairError
from specdec_core.loading.models import load_model
from specdec_core.pairs.doctor import Finding, Verdict, check_models, check_pair


def rebuild(tokenizer, edit_vocab=None, **special_tokens) -> PreTrainedTokenizerFast:
    """A copy of `tokenizer`, with its BPE vocabulary edited and/or other special tokens."""
    data = json.loads(tokenizer.backend_tokenizer.to_str())
    if edit_vocab:
        edit_vocab(data["model"]["vocab"])
    specials = {"bos_token": tokenizer.bos_token, "eos_token": tokenizer.eos_token, "pad_token": tokenizer.pad_token}
    specials.update(special_tokens)
    copy = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(data)), **specials)
    copy.chat_template = tokenizer.chat_template
    return copy


def swap(first: str, second: str):
    def edit(vocab):
        vocab[first], vocab[second] = vocab[second], vocab[first]
    return edit


def test_the_same_tokenizer_is_compatible(tiny_tokenizer):
    verdict = check_pair(tiny_tokenizer, rebuild(tiny_tokenizer))

    assert verdict.compatible
    assert verdict.shared_vocab_size == len(tiny_tokenizer)
    assert verdict.summary() == f"compatible: same tokenizer ({len(tiny_tokenizer):,} tokens)"


def test_a_changed_token_names_its_id_and_both_texts_and_the_pair_drafts_through_the_text(tiny_tokenizer):
    vocab = tiny_tokenizer.get_vocab()
    draft = rebuild(tiny_tokenizer, swap("he", "Ġthe"))
    verdict = check_pair(tiny_tokenizer, draft)

    # Another vocabulary is no longer refused (issue 24): the draft proposes through the texts both hold.
    assert verdict.compatible and verdict.cross_vocabulary and not verdict.warnings
    first = min(vocab["he"], vocab["Ġthe"])
    assert verdict.findings[0].message.startswith(
        f"different vocabularies (token {first} is 'he' in the verifier and ' the' in the draft, 2 of the 320 ids "
        "both have differ): the draft proposes through the 320 token texts both hold, 100% of the verifier's ids "
        "and 100% of its tokens in sample text; strategy: token-level intersection")
    assert verdict.summary().startswith(f"compatible: different vocabularies (token {first} is 'he'")
    assert verdict.id_share == verdict.text_share == 1.0


def test_an_incompatible_verdict_raises_its_first_error():
    verdict = Verdict(compatible=False, findings=(Finding("error", "the draft head reads hidden states 48 wide"),),
                      shared_vocab_size=0)
    with pytest.raises(IncompatiblePairError, match="48 wide"):
        verdict.raise_if_incompatible()


def test_a_draft_trained_on_fewer_merges_of_the_same_corpus_shares_a_prefix(tiny_tokenizer):
    # BPE learns merges in the same order, so a smaller vocabulary is a prefix of the larger one.
    verdict = check_pair(tiny_tokenizer, tiny.make_tokenizer(vocab_size=300))

    assert verdict.compatible and verdict.shared_vocab_size == 300
    assert verdict.findings[0].message.startswith(
        "the draft knows 300 of the verifier's 320 tokens; the others can still be produced, never drafted "
        "(the draft lacks ids 300-319: ")
    assert not verdict.warnings  # the verifier loses nothing
    assert verdict.verifier_vocab_size == 320
    assert "The verifier samples over all its 320 token ids; the draft proposes from the first 300." in \
        verdict.report()


def test_different_vocabularies_report_their_overlap_and_warn_when_it_is_low(tiny_tokenizer):
    other = rebuild(tiny.make_tokenizer(vocab_size=300), swap("Ġa", "Ġt"))
    verdict = check_pair(tiny_tokenizer, other)
    assert verdict.compatible and verdict.cross_vocabulary
    assert verdict.findings[0].message.startswith("different vocabularies (token 259 is ' a' in the verifier and "
                                                  "' t' in the draft")
    assert verdict.shared_vocab_size == 300 and verdict.id_share == 300 / 320 and not verdict.warnings
    assert verdict.report().splitlines()[-1] == ("The draft proposes the verifier's ids of the 300 token texts both "
                                                 "vocabularies hold; the verifier samples over all its 320 token ids.")

    letters = tiny.hand_tokenizer(tiny.SPECIALS + list("abcdef"), [])  # a few letters, no words
    verdict = check_pair(tiny_tokenizer, letters)
    assert verdict.compatible and verdict.text_share < 0.5
    assert verdict.warnings[0].message.startswith(f"the draft can propose only {verdict.text_share:.0%} of the "
                                                  "verifier's tokens in sample text")


def test_the_doctor_weighs_the_verifiers_probability_the_draft_can_propose_and_warns_when_it_is_low(tiny_tokenizer):
    import torch

    from specdec_core.drafting.vocabularies import SAMPLE_TEXTS

    verifier = tiny.as_loaded(tiny.make_model("llama", tiny_tokenizer, seed=1, logit_scale=8.0), tiny_tokenizer)

    def draft(tokenizer):
        return tiny.as_loaded(tiny.make_model("llama", tokenizer, seed=2), tokenizer, "draft")

    def mass_off(proposable: set[int]) -> float:  # what is left for the tokens the draft cannot propose
        off = [i for i in range(len(tiny_tokenizer)) if i not in proposable]
        left, n = 0.0, 0
        with torch.no_grad():
            for text in SAMPLE_TEXTS:
                ids = tiny_tokenizer(text, add_special_tokens=False).input_ids
                left += float(torch.softmax(verifier.model(torch.tensor([ids])).logits[0], -1)[:, off].sum())
                n += len(ids)
        return left / n

    look_alike = tiny.renumbered_tokenizer(tiny_tokenizer, drop_merges=20)
    verdict = check_models(verifier, draft(look_alike), weigh_mass=True)
    proposable = {i for i, text in enumerate(tiny_tokenizer.convert_ids_to_tokens(range(320)))
                  if text in look_alike.get_vocab()}
    assert verdict.mass_share == pytest.approx(1 - mass_off(proposable), abs=1e-4)
    assert not verdict.warnings and (f"the verifier puts {verdict.mass_share:.0%} of its next-token probability in "
                                     "sample text on tokens the draft can propose") in verdict.report()

    letters = tiny.hand_tokenizer(tiny.SPECIALS + list("abcdef"), [])
    verdict = check_models(verifier, draft(letters), weigh_mass=True)
    assert verdict.compatible and verdict.mass_share < 0.5
    assert verdict.warnings[0].message.startswith(f"the draft can propose only {verdict.mass_share:.0%} of the "
                                                  "verifier's next-token probability in sample text: few drafts")
    assert len(verdict.warnings) == 1  # one warning: the probability, not the tokens as well
    assert check_models(verifier, draft(letters)).mass_share is None  # loading a pair runs no verifier pass


def test_extra_tokens_in_the_verifier_shrink_only_what_the_draft_can_propose(tiny_tokenizer):
    verifier = rebuild(tiny_tokenizer)
    verifier.add_tokens(["<|tool_call|>", "<|tool_result|>"], special_tokens=True)

    verdict = check_pair(verifier, tiny_tokenizer)
    assert verdict.compatible
    assert verdict.shared_vocab_size == len(tiny_tokenizer) == 320
    assert verdict.verifier_vocab_size == 322
    assert verdict.findings[0].message == (
        "the draft knows 320 of the verifier's 322 tokens; the others can still be produced, never drafted "
        "(the draft lacks ids 320-321: '<|tool_call|>', '<|tool_result|>')")


def test_extra_tokens_in_the_draft_are_a_warning_too(tiny_tokenizer):
    draft = rebuild(tiny_tokenizer)
    draft.add_tokens(["Ġzebra"])

    verdict = check_pair(tiny_tokenizer, draft)
    assert verdict.compatible and verdict.shared_vocab_size == 320
    assert "the draft has 1 token(s) the verifier lacks (id 320: ' zebra'); the draft never proposes them" \
        in verdict.summary()


def test_a_different_eos_is_reported_with_both_tokens(tiny_tokenizer):
    # A base draft (EOS <|endoftext|>) for an instruct verifier (EOS <|im_end|>): same vocabulary, and
    # the verifier decides where replies end, so the pair works; the user is still told.
    base = rebuild(tiny_tokenizer, eos_token="<|endoftext|>")
    verdict = check_pair(tiny_tokenizer, base)

    assert verdict.compatible
    (warning,) = verdict.warnings
    assert warning.message.startswith("EOS differs: '<|im_end|>' (id 2) in the verifier, "
                                      "'<|endoftext|>' (id 0) in the draft")


def test_padded_logit_rows_are_not_a_mismatch(tiny_tokenizer):
    verdict = check_pair(tiny_tokenizer, rebuild(tiny_tokenizer), verifier_logits=384, draft_logits=320)

    assert verdict.compatible and not verdict.warnings
    assert verdict.shared_vocab_size == 320
    assert any("384 (verifier) and 320 (draft) rows" in f.message for f in verdict.findings)


def test_an_output_layer_smaller_than_the_tokenizer_limits_the_shared_vocabulary(tiny_tokenizer):
    verdict = check_pair(tiny_tokenizer, tiny_tokenizer, verifier_logits=300, draft_logits=320)

    assert verdict.compatible
    assert verdict.shared_vocab_size == 300
    assert "ids from 300 on can never be generated" in verdict.warnings[0].message


def test_a_verifier_without_chat_template_is_a_warning_a_draft_without_one_is_fine(tiny_tokenizer):
    plain = rebuild(tiny_tokenizer)
    plain.chat_template = None

    assert "no chat template" in check_pair(plain, tiny_tokenizer).warnings[0].message
    assert not check_pair(tiny_tokenizer, plain).warnings


def test_the_report_lists_every_finding_and_the_shared_size(tiny_tokenizer):
    verdict = check_pair(tiny_tokenizer, rebuild(tiny_tokenizer, eos_token="<|endoftext|>"),
                         verifier_logits=384, draft_logits=320)
    report = verdict.report()

    assert report.splitlines()[0] == "Compatible: verifier and draft"
    assert all(finding.message in report for finding in verdict.findings)
    assert report.splitlines()[-1] == "Both models use the same 320 token ids."


def test_check_models_uses_the_output_layer_rows(tiny_models_dir):
    verifier = load_model(str(tiny_models_dir["qwen2-verifier"]), device="cpu")
    draft = load_model(str(tiny_models_dir["gpt2-draft"]), device="cpu")

    verdict = check_models(verifier, draft)
    assert isinstance(verdict, Verdict) and verdict.compatible
    assert verdict.shared_vocab_size == verifier.vocab_size


def word_level(size: int, changed_id: int | None = None) -> PreTrainedTokenizerFast:
    vocab = {f"w{i}": i for i in range(size)}
    if changed_id is not None:
        del vocab[f"w{changed_id}"]
        vocab["changed"] = changed_id
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="w0")))


def test_a_150k_vocabulary_is_compared_without_decoding_each_id(monkeypatch):
    verifier, draft = word_level(150_000), word_level(150_000, changed_id=149_000)
    # Dictionaries and lists, no per-id decoding: every call that turns ids or tokens into text is counted,
    # on both tokenizers.
    calls = []
    for tokenizer in (verifier, draft):
        for name in ("decode", "batch_decode", "convert_ids_to_tokens", "convert_tokens_to_string"):
            original = getattr(tokenizer, name)

            def counted(*args, _original=original, **kwargs):
                calls.append(1)
                return _original(*args, **kwargs)
            monkeypatch.setattr(tokenizer, name, counted)
    verdict = check_pair(verifier, draft)
    assert len(calls) < 100  # a handful, where decoding each id would make 150,000
    assert verdict.findings[0].message.startswith("different vocabularies (token 149000 is 'w149000' in the "
                                                  "verifier and 'changed'")
    assert verdict.id_share == 149_999 / 150_000

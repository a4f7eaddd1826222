"""Installed models offered as drafts (issue 24): each with the overlap of its vocabulary with the verifier's,
read from tokenizers alone."""

import tiny

from specdec_core.pairs.draft_candidates import draft_candidates, installed_hub_models


def test_candidates_come_with_their_overlap_best_first_and_unreadable_specs_are_left_out(tmp_path, tiny_tokenizer):
    same = tmp_path / "same"
    tiny_tokenizer.save_pretrained(same)
    other = tmp_path / "other"
    tiny.make_tokenizer(vocab_size=300, corpus=[line.upper() for line in tiny.CORPUS]).save_pretrained(other)
    specs = [str(other), str(same), str(tmp_path / "missing"), str(tmp_path / "model.gguf"), str(same)]
    found = draft_candidates(tiny_tokenizer, specs)
    assert [c.spec for c in found] == [str(same), str(other)]
    assert found[0].label == "same tokenizer" and found[0].overlap == 1.0
    assert found[1].label == f"other tokenizer, {found[1].overlap:.0%} overlap" and 0 < found[1].overlap < 1
    assert draft_candidates(tiny_tokenizer, specs, exclude=str(same)) == found[1:]


def test_no_hub_cache_means_no_installed_models(tmp_path):
    assert installed_hub_models(str(tmp_path / "no-cache")) == []

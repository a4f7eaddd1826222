"""The pair offered first among the models found (suggestions.best_pair): the largest model with a smaller draft
of its own vocabulary, read from headers only."""

from __future__ import annotations

import fake_homes
import pytest

from specdec_core.loading import discovery
from specdec_core.pairs import suggestions


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory, tiny_tokenizer) -> dict[str, bytes]:
    return fake_homes.tiny_ggufs(tmp_path_factory.mktemp("ggufs"), tiny_tokenizer)


@pytest.fixture
def home(monkeypatch, tmp_path):
    return fake_homes.isolate(monkeypatch, tmp_path / "home")


def test_the_largest_model_with_a_smaller_draft_of_its_vocabulary_is_offered_with_its_smallest(home, ggufs,
                                                                                              monkeypatch):
    ollama = home / ".ollama" / "models"
    fake_homes.ollama_model(ollama, "qwen2.5-coder", "1.5b", ggufs["verifier"])
    fake_homes.ollama_model(ollama, "qwen2.5-coder", "0.5b", ggufs["draft"])
    fake_homes.write(home / ".lmstudio/models/pub/other-GGUF/other.gguf", ggufs["other"])
    monkeypatch.setattr(suggestions, "real_tokenizer", lambda model: pytest.fail("a tokenizer was built"))

    pair = suggestions.best_pair(discovery.find_models())

    assert pair.verifier.name == "ollama:qwen2.5-coder:1.5b"
    assert pair.best.draft.name == "ollama:qwen2.5-coder:0.5b" and pair.best.verdict.compatible
    assert pair.other == ()  # other tokenizers are not weighed for the first offer


def test_no_pair_is_offered_when_no_two_models_share_a_vocabulary(home, ggufs):
    fake_homes.write(home / ".lmstudio/models/pub/a/a.gguf", ggufs["verifier"])
    fake_homes.write(home / ".lmstudio/models/pub/b/b.gguf", ggufs["other"])
    assert suggestions.best_pair(discovery.find_models()) is None

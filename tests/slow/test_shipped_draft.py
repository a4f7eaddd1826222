"""The shipped draft (assets/smollm2-135m-draft) with the real embedded verifier (SmolLM2-135M-Instruct from its
GGUF), offline: it loads, the doctor passes the pair, greedy speculation reproduces the verifier's own output,
the figures its model card states still hold (so the card cannot drift from the model), and the embedded default
pair generates. Every test of the session's embedded pair is in this file, so that `make test`'s test processes
(whole files each) load it once."""

from __future__ import annotations

import json
import re

import pytest

from distill.measure import measure_pair
from distill.prompts import read_jsonl
from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import HeadDrafter, HybridDrafter, drafter_for
from specdec_core.events import TokenCommitted, TokenState
from specdec_core.loading.resources import assets_dir
from specdec_core.loading.specs import EMBEDDED_DRAFT
from specdec_core.pairs.doctor import check_models
from specdec_core.text.chat import build_prompt

pytestmark = pytest.mark.slow

DRAFT_DIR = assets_dir() / EMBEDDED_DRAFT
HELD_OUT = assets_dir() / "prompts" / "distill-heldout.jsonl"


@pytest.fixture(scope="module")
def pair(embedded_pair):
    # The session's embedded pair (conftest.py sets HF_HUB_OFFLINE: loading it needed no network).
    assert embedded_pair.verifier.name == "SmolLM2-135M-Instruct" and embedded_pair.draft.spec == EMBEDDED_DRAFT
    return embedded_pair.verifier, embedded_pair.draft


@pytest.fixture(scope="module")
def card() -> dict:
    return json.loads((DRAFT_DIR / "card.json").read_text())


def test_shipped_draft_loads_offline_small_and_in_fp32(pair):
    _, draft = pair
    assert type(draft.model).__name__ == "SpecdecHeadModel"  # a draft head: reads the verifier's hidden states
    assert isinstance(drafter_for(draft), HeadDrafter)
    assert draft.source == "the draft shipped in assets/"
    assert str(draft.dtype) == "torch.float32"
    size = sum(p.stat().st_size for p in DRAFT_DIR.iterdir() if p.is_file())
    assert size <= 30e6, f"the shipped draft folder is {size / 1e6:.1f} MB"


def test_doctor_passes_the_embedded_pair(pair):
    verifier, draft = pair
    verdict = check_models(verifier, draft)
    assert verdict.compatible, verdict.report()
    assert not verdict.warnings, verdict.report()
    assert verdict.shared_vocab_size == len(verifier.tokenizer) == 49152


@pytest.fixture(scope="module")
def measured(pair, card) -> dict:
    """The card's quick check, measured once for this module's tests: on the card's held-out prompts, the verifier
    alone, the draft at the card's gamma and at 4, and the draft as shipped (a hybrid with prompt lookup)."""
    verifier, draft = pair
    quick = card["quick_check"]
    prompts = read_jsonl(HELD_OUT)[:quick["prompts"]]
    return measure_pair(verifier, draft, prompts, gammas=(quick["gamma"], 4), max_new_tokens=quick["max_new_tokens"],
                        hybrid=(quick["hybrid_gamma"], quick["draft_tokens"]),
                        sampled=False)  # no assertion reads the sampled runs: 2 of 6 runs per prompt saved


def test_greedy_speculation_reproduces_the_verifier(measured):
    # Every greedy reply with speculation, token for token the verifier's own reply (measure_pair compares them).
    assert measured["prompts"] == 4
    for gamma, figures in measured["speculative"].items():
        assert figures["mismatches"] == [], f"gamma {gamma}"
    assert measured["hybrid"]["identical_greedy_output"]


def test_model_card_figures_hold(measured, card):
    """Greedy acceptance depends on the weights and the prompts only (not on timing), so a fresh quick
    measurement must reproduce the card's quick check closely, and the card's headline figure loosely."""
    quick = card["quick_check"]
    figures = measured["speculative"][str(quick["gamma"])]
    assert figures["acceptance_rate"] == pytest.approx(quick["greedy_acceptance_rate"], abs=0.03)
    assert measured["hybrid"]["acceptance_rate"] == pytest.approx(quick["as_shipped_greedy_acceptance_rate"], abs=0.03)
    assert measured["hybrid"]["acceptance_rate"] == pytest.approx(card["as_shipped"]["acceptance_rate"], abs=0.12)
    # The human-readable card states the same headline figures as card.json, as shipped and alone.
    text = (DRAFT_DIR / "README.md").read_text()
    shipped_part, alone_part = text.split("## The draft alone", 1)
    stated = re.search(r"greedy acceptance rate[^0-9]*([0-9.]+)", shipped_part, re.IGNORECASE)
    assert stated and float(stated.group(1)) == pytest.approx(card["as_shipped"]["acceptance_rate"], abs=0.005)
    stated = re.search(r"greedy acceptance rate[^0-9]*([0-9.]+)", alone_part, re.IGNORECASE)
    assert stated and float(stated.group(1)) == pytest.approx(card["greedy_acceptance_rate"], abs=0.005)


# The embedded default pair as `load_pair()` builds it: the shipped head with prompt lookup.

def test_the_embedded_default_pair_is_the_shipped_head_with_prompt_lookup(embedded_pair):
    drafter = embedded_pair.drafter
    assert isinstance(drafter, HybridDrafter) and isinstance(drafter.model_drafter, HeadDrafter)
    assert drafter.model_tokens == 1
    assert embedded_pair.verdict is not None and embedded_pair.verdict.compatible


def test_capital_of_france_is_paris_with_speculation_on_and_off_and_identical(embedded_pair):
    ids = build_prompt(embedded_pair.verifier.tokenizer,
                       [{"role": "user", "content": "What is the capital of France?"}],
                       context_length=embedded_pair.verifier.context_length).ids
    config = GenerationConfig(max_new_tokens=40)
    *_, on = embedded_pair.engine.generate(ids, config)
    *_, off = embedded_pair.engine.generate(ids, config.with_(speculate=False))
    assert "Paris" in on.text and "Paris" in off.text
    assert on.token_ids == off.token_ids
    assert on.stats.drafted > 0 and off.stats.drafted == 0


def test_prompt_lookup_accepts_copied_text_when_rewriting(embedded_pair):
    text = "The quick brown fox jumps over the lazy dog near the quiet river bank."
    ids = build_prompt(embedded_pair.verifier.tokenizer,
                       [{"role": "user", "content": f"Repeat this sentence exactly: {text}"}],
                       context_length=embedded_pair.verifier.context_length).ids
    events = list(embedded_pair.engine.generate(ids, GenerationConfig(max_new_tokens=30, gamma=6)))
    accepted = [e for e in events if isinstance(e, TokenCommitted) and e.state is TokenState.ACCEPTED]
    assert len(accepted) >= 5 and events[-1].stats.acceptance_rate > 0.2

"""The shipped draft (assets/smollm2-135m-draft) with the real embedded verifier: it loads offline, the
doctor passes the pair, greedy speculation reproduces the verifier's own output, and the figures its
model card states still hold (so the card cannot drift from the model)."""

from __future__ import annotations

import json
import re

import pytest

from distill.measure import measure_pair
from distill.prompts import read_jsonl
from specdec_core.config import GenerationConfig
from specdec_core.drafting.drafters import HeadDrafter, drafter_for
from specdec_core.engine import Engine
from specdec_core.events import Finished
from specdec_core.loading.resources import assets_dir
from specdec_core.loading.specs import EMBEDDED_DRAFT
from specdec_core.pairs.doctor import check_models

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


def test_greedy_speculation_reproduces_the_verifier(pair):
    verifier, draft = pair
    engine = Engine(verifier, drafter_for(draft))
    from specdec_core.text.chat import build_prompt

    for messages in read_jsonl(HELD_OUT)[:3]:
        ids = build_prompt(verifier.tokenizer, messages, context_length=verifier.context_length).ids
        replies = []
        for config in (GenerationConfig(max_new_tokens=40, speculate=False), GenerationConfig(max_new_tokens=40,
                                                                                               gamma=4)):
            engine.reset_caches()
            replies.append([e for e in engine.generate(ids, config) if isinstance(e, Finished)][0].token_ids)
        assert replies[0] == replies[1]


def test_model_card_figures_hold(pair, card):
    """Greedy acceptance depends on the weights and the prompts only (not on timing), so a fresh quick
    measurement must reproduce the card's quick check closely, and the card's headline figure loosely."""
    verifier, draft = pair
    quick = card["quick_check"]
    prompts = read_jsonl(HELD_OUT)[:quick["prompts"]]
    figures = measure_pair(verifier, draft, prompts, gammas=(quick["gamma"],), max_new_tokens=quick["max_new_tokens"],
                           hybrid=(quick["hybrid_gamma"], quick["draft_tokens"]),
                           sampled=False)  # no assertion reads the sampled runs: 2 of 5 runs per prompt saved
    assert figures["identical_greedy_output"] and figures["hybrid"]["identical_greedy_output"]
    assert figures["greedy_acceptance_rate"] == pytest.approx(quick["greedy_acceptance_rate"], abs=0.03)
    assert figures["hybrid"]["acceptance_rate"] == pytest.approx(quick["as_shipped_greedy_acceptance_rate"], abs=0.03)
    assert figures["hybrid"]["acceptance_rate"] == pytest.approx(card["as_shipped"]["acceptance_rate"], abs=0.12)
    # The human-readable card states the same headline figures as card.json, as shipped and alone.
    text = (DRAFT_DIR / "README.md").read_text()
    shipped_part, alone_part = text.split("## The draft alone", 1)
    stated = re.search(r"greedy acceptance rate[^0-9]*([0-9.]+)", shipped_part, re.IGNORECASE)
    assert stated and float(stated.group(1)) == pytest.approx(card["as_shipped"]["acceptance_rate"], abs=0.005)
    stated = re.search(r"greedy acceptance rate[^0-9]*([0-9.]+)", alone_part, re.IGNORECASE)
    assert stated and float(stated.group(1)) == pytest.approx(card["greedy_acceptance_rate"], abs=0.005)

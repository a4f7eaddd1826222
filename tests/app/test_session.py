"""The app's loading (Qt-free): the CLI's pairing, with held models reused, each load reported, cancels."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.session import HYBRID, MODEL, LoadRequest, load_session


@pytest.fixture
def request_(tiny_models_dir):
    return LoadRequest(verifier=str(tiny_models_dir["llama-verifier"]), draft=str(tiny_models_dir["llama-draft"]),
                       drafter=MODEL, device="cpu", dtype="float32", calibrate=False)


def test_a_second_load_reuses_the_held_models_and_engine_and_reports_only_what_it_loads(request_):
    from specdec_core.drafters import HybridDrafter, ModelDrafter

    steps = []
    first = load_session(request_, steps.append, lambda: False)
    assert [s.what for s in steps if s.message.startswith("loading")] == ["verifier", "draft"]
    assert "doctor" in {s.what for s in steps} and first.verdict_ok
    assert isinstance(first.drafter, ModelDrafter) and first.engine.drafter is first.drafter

    steps.clear()
    second = load_session(replace(request_, drafter=HYBRID, draft_tokens=1), steps.append, lambda: False,
                          previous=first)
    assert not [s for s in steps if s.message.startswith("loading")]
    assert second.verifier is first.verifier and second.draft is first.draft and second.engine is first.engine
    assert isinstance(second.drafter, HybridDrafter) and second.drafter.model_tokens == 1
    assert second.engine.drafter is second.drafter and second.drafter_name.endswith("+ prompt lookup")


def test_no_draft_chosen_keeps_the_verifier_alone_and_says_so(request_):
    session = load_session(replace(request_, draft=""), lambda step: None, lambda: False)
    assert not session.verdict_ok and "No draft model chosen" in session.verdict
    assert session.drafter is None and session.engine.drafter is None


def test_a_cancel_takes_effect_after_the_verifier_loads(request_):
    from app.worker import Cancelled

    steps = []
    with pytest.raises(Cancelled):
        load_session(request_, steps.append, lambda: any(s.what == "verifier" for s in steps))
    assert "draft" not in {s.what for s in steps}

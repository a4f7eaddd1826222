"""The app's loading (Qt-free): the CLI's pairing, with held models reused, each load reported, cancels."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.session import LoadRequest, load_session
from specdec_core.defaults import HYBRID, MODEL


@pytest.fixture
def request_(tiny_models_dir):
    return LoadRequest(verifier=str(tiny_models_dir["llama-verifier"]), draft=str(tiny_models_dir["llama-draft"]),
                       drafter=MODEL, device="cpu", dtype="float32", calibrate=False)


def test_a_second_load_reuses_the_held_models_and_engine_and_reports_only_what_it_loads(request_):
    from specdec_core.drafting.drafters import HybridDrafter, ModelDrafter

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
    from app.session import Cancelled  # the work's own (Qt-free) exception, which the workers end quietly
    from app.worker import Cancelled as WorkerCancelled

    assert WorkerCancelled is Cancelled
    steps = []
    with pytest.raises(Cancelled):
        load_session(request_, steps.append, lambda: any(s.what == "verifier" for s in steps))
    assert "draft" not in {s.what for s in steps}


@pytest.fixture(scope="module")
def loud_pair(tmp_path_factory, tiny_tokenizer):
    """A verifier whose logits reach ~100, as real models' do (logits / 1e-38 leaves float32), and its draft."""
    import tiny

    root = tmp_path_factory.mktemp("loud_pair")
    return (tiny.save_model(root / "verifier", "llama", tiny_tokenizer, seed=1, logit_scale=100.0),
            tiny.save_model(root / "draft", "llama", tiny_tokenizer, seed=1, logit_scale=100.0, noise=0.3,
                            noise_seed=7))


@pytest.mark.parametrize("temperature", [1e-300, 1e-40, 1e-38])
def test_a_tiny_temperature_in_settings_json_replies_as_greedy(request_, loud_pair, tmp_path, temperature):
    """Issue 25: settings.json's temperature 1e-300 gave a NaN distribution and a reply of one id repeated."""
    import json

    from app.session import config_from_settings, reply_events
    from app.settings import Settings
    from specdec_core.events import Finished

    loud = replace(request_, verifier=str(loud_pair[0]), draft=str(loud_pair[1]))
    session = load_session(loud, lambda step: None, lambda: False)
    messages = [{"role": "user", "content": "The capital of France is"}]

    def reply(settings_json: dict) -> list[int]:
        (tmp_path / "settings.json").write_text(json.dumps({"max_new_tokens": 12, **settings_json}))
        config = config_from_settings(Settings.load(tmp_path))
        (done,) = [e for e in reply_events(session, messages, None, config, None) if isinstance(e, Finished)]
        assert done.error is None
        return list(done.token_ids)

    assert reply({"temperature": temperature, "seed": 5}) == reply({"temperature": 0})


def test_a_quantised_gguf_verifier_a_bench_measured_shows_llama_cpps_figure_beside_ours(tmp_path, monkeypatch):
    """The models line and its tooltip (app/models_line.py) name what llama.cpp decoded on the same file here, from
    the bench's run (specdec_core/measuring/llama_cpp_figures.py); a verifier without such a run shows none."""
    from types import SimpleNamespace

    from app.models_line import llama_cpp_tooltip, models_line
    from app.session import _llama_cpp_figure
    from specdec_core.measuring import llama_cpp_figures
    from specdec_core.measuring.llama_cpp import ALONE, WITH_DRAFT

    monkeypatch.setenv("SPECDEC_COST_MEMORY", "on")
    gguf = tmp_path / "verifier.gguf"
    gguf.write_bytes(b"GGUF" + bytes(60))
    verifier = SimpleNamespace(weights="Q4_K 88 %, Q6_K 12 %", cache_dir=tmp_path / "cache", name="V",
                               dtype="torch.float32", device="cpu")
    assert _llama_cpp_figure(str(gguf), verifier) is None  # no bench ran
    lanes = {"threads": 1, "version": "version: 6969 (abc)", "lanes": [
        {"lane": ALONE, "tokens_per_s": 57.87}, {"lane": WITH_DRAFT, "tokens_per_s": 40.5, "draft": "/x/d.gguf"}]}
    llama_cpp_figures.remember(verifier.cache_dir, gguf, lanes, 34.3, prompts=4, max_new_tokens=64)
    figure = _llama_cpp_figure(str(gguf), verifier)
    assert figure is not None and figure.version == "6969 (abc)"
    assert _llama_cpp_figure(str(gguf), SimpleNamespace(**{**vars(verifier), "weights": "float32"})) is None
    assert _llama_cpp_figure(str(tmp_path), verifier) == figure  # a folder holding one GGUF file loads that file
    (tmp_path / "config.json").write_text("{}")
    assert _llama_cpp_figure(str(tmp_path), verifier) is None  # a folder in transformers format: no GGUF file

    session = SimpleNamespace(verifier=verifier, drafter=None, draft=None, verifier_name="V", llama_cpp=figure,
                              request=SimpleNamespace(drafter="none"))
    line = models_line(session, SimpleNamespace(tokens_per_s=33.9))
    assert line.endswith("· verifier alone 33.9 tok/s · llama.cpp alone 57.9 tok/s")
    tip = llama_cpp_tooltip(figure)
    assert "llama.cpp 6969 (abc) alone on this GGUF file: 57.9 tok/s (1 thread, 4 prompts of up to 64 tokens)" in tip
    assert "specdec's verifier alone decoded 34.3 tok/s (0.59 of llama.cpp's)" in tip and "d.gguf: 40.5" in tip
    assert "llama.cpp" not in models_line(SimpleNamespace(**{**vars(session), "llama_cpp": None}), None)

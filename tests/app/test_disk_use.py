"""The Models dialog says what an installed model takes on disk (the GGUF file, and a converted copy where one
was made), not only what it downloads."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

from app.disk_use import disk_use, size_cell
from specdec_core.loading import catalog
from specdec_core.loading.catalog import ChunkedGguf, KnownModel

GGUF = b"GGUF" + bytes(2_000)


def known_model(monkeypatch) -> KnownModel:
    model = KnownModel("tiny-listed", "tiny", "1M", "Apache-2.0", "test",
                       ChunkedGguf(("tiny-listed-part1",), "1.0", len(GGUF), hashlib.sha256(GGUF).hexdigest()))
    monkeypatch.setitem(catalog.KNOWN, model.name, model)
    return model


def test_before_install_the_size_is_the_download_and_after_it_what_the_files_take(monkeypatch, tmp_path):
    model = known_model(monkeypatch)
    assert disk_use(model, tmp_path) is None
    cell, tip = size_cell(model, tmp_path)
    assert cell == "0.00 GB download" and "Download" in tip

    catalog.gguf_path(model, tmp_path).parent.mkdir(parents=True)
    catalog.gguf_path(model, tmp_path).write_bytes(GGUF)
    use = disk_use(model, tmp_path)
    assert (use.gguf, use.converted) == (len(GGUF), 0)
    cell, tip = size_cell(model, tmp_path)
    assert cell.endswith("GB on disk") and "the GGUF file itself" in tip and "loaded from" in tip

    converted = tmp_path / "gguf" / model.download.sha256
    (converted / "sub").mkdir(parents=True)
    (converted / "model.safetensors").write_bytes(bytes(5_000))
    (converted / "sub" / "config.json").write_bytes(bytes(100))
    use = disk_use(model, tmp_path)
    assert (use.gguf, use.converted, use.total) == (len(GGUF), 5_100, len(GGUF) + 5_100)
    assert "converted copy" in size_cell(model, tmp_path)[1]


def test_the_models_dialog_shows_the_on_disk_size_of_an_installed_model(qtbot, monkeypatch, tmp_path):
    from app.models_dialog import ModelsDialog

    model = known_model(monkeypatch)
    catalog.gguf_path(model, tmp_path).parent.mkdir(parents=True)
    catalog.gguf_path(model, tmp_path).write_bytes(GGUF)

    class Window:  # the dialog's parent; installing and loading are not used here
        settings = SimpleNamespace(model_dirs=[])  # folders of the user's own to search for models: none

        def window(self):
            return None

    dialog = ModelsDialog(Window(), cache_dir=tmp_path)
    qtbot.addWidget(dialog)
    row = dialog.names.index(model.name)
    item = dialog.table.item(row, 2)
    assert item.text() == size_cell(model, tmp_path)[0] and item.text().endswith("on disk")
    assert "the GGUF file itself" in item.toolTip()
    qwen = dialog.names.index(catalog.QWEN_CODER_1_5B)
    assert dialog.table.item(qwen, 2).text() == "1.12 GB download"  # not installed in this cache

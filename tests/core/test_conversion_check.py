"""Conversions in the user cache carry checksums of their own (conversion_check.py): same-size damage in a
converted model.safetensors is found on the next load, said in one line, and the conversion made again from the
GGUF; never loaded silently. An unchanged conversion is hashed once, then trusted by its size, times and inode."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
import tiny
import torch

from specdec_core.loading import conversion_check, gguf_cache
from specdec_core.loading.models import load_model


@pytest.fixture(scope="module")
def converted(tmp_path_factory, tiny_tokenizer):
    """A tiny GGUF and a cache holding its conversion (copied per test: converting is the slow part)."""
    root = tmp_path_factory.mktemp("conversion")
    gguf = tiny.write_gguf(root / "tiny.gguf", tiny.make_model("llama", tiny_tokenizer, seed=5), tiny_tokenizer)
    first = load_model(str(gguf), device="cpu", dtype="float32", cache_dir=root / "cache")
    weights = {name: tensor.clone() for name, tensor in first.model.state_dict().items()}
    return gguf, root / "cache", weights


@pytest.fixture
def cache(converted, tmp_path):
    """(the GGUF, a copy of the cache, the conversion's folder in it), its files' times a minute old, as they
    are by the time a conversion is used again."""
    gguf, original, _ = converted
    shutil.copytree(original, tmp_path / "cache")
    (folder,) = [p for p in (tmp_path / "cache" / "gguf").iterdir() if not p.name.startswith(".")]
    old = time.time() - 60
    for path in folder.iterdir():
        os.utime(path, (old, old))
    (folder / conversion_check.VERDICT).unlink(missing_ok=True)
    return gguf, tmp_path / "cache", folder


def _same_weights(loaded, weights) -> bool:
    state = loaded.model.state_dict()
    return all(torch.equal(state[name], tensor) for name, tensor in weights.items())


def _damage_4kb_same_size_same_mtime(path):
    info = path.stat()
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 4096] = bytes(255 - b for b in data[middle:middle + 4096])
    path.write_bytes(bytes(data))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))  # as if nothing had changed it
    assert path.stat().st_size == info.st_size and path.stat().st_mtime_ns == info.st_mtime_ns


def test_4kb_of_same_size_damage_in_a_converted_model_is_found_said_once_and_converted_again(
        converted, cache, capsys):
    gguf, cache_dir, folder = cache
    load_model(str(gguf), device="cpu", dtype="float32", cache_dir=cache_dir)  # checked once: a verdict kept
    assert (folder / conversion_check.VERDICT).is_file()
    capsys.readouterr()
    _damage_4kb_same_size_same_mtime(folder / "model.safetensors")
    stages = []

    loaded = load_model(str(gguf), device="cpu", dtype="float32", cache_dir=cache_dir,
                        progress=lambda step: stages.append((step.stage, step.message)))

    lines = [line for line in capsys.readouterr().err.splitlines() if "damaged" in line]
    assert len(lines) == 1 and str(folder) in lines[0] and "model.safetensors does not match" in lines[0]
    assert any("damaged" in message for _, message in stages)  # the app's status bar says it too
    assert loaded.source.endswith("(converted on this load)")
    assert _same_weights(loaded, converted[2])  # the weights of the GGUF, not the damaged copy's
    assert gguf_cache.cache_damage(folder) is None  # the folder was made again, whole


def test_an_unchanged_conversion_is_hashed_on_its_first_use_only(cache, monkeypatch):
    gguf, cache_dir, folder = cache
    hashed = []
    real = conversion_check.file_sha256
    monkeypatch.setattr(conversion_check, "file_sha256", lambda path: hashed.append(path.name) or real(path))
    load_model(str(gguf), device="cpu", dtype="float32", cache_dir=cache_dir)
    assert "model.safetensors" in hashed
    hashed.clear()
    loaded = load_model(str(gguf), device="cpu", dtype="float32", cache_dir=cache_dir)
    assert hashed == [] and loaded.source.endswith("(cached safetensors)")


def test_a_conversion_without_checksums_is_made_again_with_one_line(converted, cache, capsys):
    gguf, cache_dir, folder = cache
    marker_path = folder / "specdec-cache.json"
    marker = json.loads(marker_path.read_text())
    del marker["files_sha256"]
    marker_path.write_text(json.dumps(marker))
    loaded = load_model(str(gguf), device="cpu", dtype="float32", cache_dir=cache_dir)
    lines = [line for line in capsys.readouterr().err.splitlines() if "damaged" in line]
    assert len(lines) == 1 and "carries no checksums" in lines[0]
    assert loaded.source.endswith("(converted on this load)") and _same_weights(loaded, converted[2])


def test_a_damaged_bfloat16_copy_is_made_again_from_the_conversion(converted, cache, capsys):
    gguf, cache_dir, folder = cache
    load_model(str(gguf), device="cpu", dtype="bfloat16", cache_dir=cache_dir)
    copy = folder / "as-bfloat16" / "model.safetensors"
    assert copy.is_file()
    capsys.readouterr()
    _damage_4kb_same_size_same_mtime(copy)
    loaded = load_model(str(gguf), device="cpu", dtype="bfloat16", cache_dir=cache_dir)
    lines = [line for line in capsys.readouterr().err.splitlines() if "damaged" in line]
    assert len(lines) == 1 and "bfloat16 copy" in lines[0]
    state = loaded.model.state_dict()
    assert all(torch.equal(state[name], tensor.to(torch.bfloat16)) for name, tensor in converted[2].items())


def test_a_gguf_is_hashed_again_only_when_it_changes_even_in_place_with_its_times_kept(tmp_path, monkeypatch):
    import os

    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(4096))
    old = 1_600_000_000
    os.utime(path, (old, old))
    hashed = []
    real = conversion_check.file_sha256
    monkeypatch.setattr(conversion_check, "file_sha256", lambda p: hashed.append(p.name) or real(p))
    first = conversion_check.remembered_sha256(path, tmp_path)
    monkeypatch.setattr(conversion_check, "_SEEN", {})  # as a new process
    assert conversion_check.remembered_sha256(path, tmp_path) == first and hashed == ["model.gguf"]
    path.write_bytes(b"GGUF" + bytes(4095) + b"x")  # same size, times put back: only its ctime tells
    os.utime(path, (old, old))
    monkeypatch.setattr(conversion_check, "_SEEN", {})
    assert conversion_check.remembered_sha256(path, tmp_path) != first and len(hashed) == 2


def test_the_models_list_reads_a_conversions_kept_verdict_and_flags_a_changed_file_without_hashing(
        cache, monkeypatch):
    gguf, cache_dir, folder = cache
    assert conversion_check.unchecked(folder) is None  # as converted: no verdict kept yet, nothing to flag
    load_model(str(gguf), device="cpu", dtype="float32", cache_dir=cache_dir)  # checked: a verdict kept
    hashed = []
    monkeypatch.setattr(conversion_check, "file_sha256", lambda path: hashed.append(path) or "")
    assert conversion_check.unchecked(folder) is None
    _damage_4kb_same_size_same_mtime(folder / "model.safetensors")  # its change time and the verdict differ now
    assert conversion_check.unchecked(folder) == "model.safetensors changed since it was checked"
    (folder / "config.json").unlink()
    assert conversion_check.unchecked(folder) in ("config.json is missing",
                                                  "model.safetensors changed since it was checked")
    (folder / conversion_check.MARKER).write_text("[")
    assert conversion_check.unchecked(folder) == "its marker cannot be read"
    assert hashed == []  # the list answers at once, whatever the size of the conversion

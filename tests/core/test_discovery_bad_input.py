"""Bad input where models are searched for, beyond test_discovery.py's set: files that are not files (FIFOs),
manifests built to hurt a parser, a damaged memo of found facts, a broken hub folder. Each is skipped with one
line, the rest is still listed, and nothing is written into the folders searched."""

from __future__ import annotations

import os

import fake_homes
import pytest

from specdec_core.commands.cli import main
from specdec_core.loading import discovery, model_facts


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory, tiny_tokenizer) -> dict[str, bytes]:
    return fake_homes.tiny_ggufs(tmp_path_factory.mktemp("ggufs"), tiny_tokenizer)


@pytest.fixture
def home(monkeypatch, tmp_path):
    monkeypatch.setitem(model_facts._memo_state, "loaded_from", None)  # each test starts as a new process would
    return fake_homes.isolate(monkeypatch, tmp_path / "home")


def _lines_for(listing, path) -> list[str]:
    return [line for line in listing.skipped if line.startswith(f"{path}: ")]


def test_fifos_and_hostile_manifests_are_skipped_one_line_each_without_blocking(home, ggufs):
    good = fake_homes.write(home / ".lmstudio/models/pub/good/good.gguf", ggufs["draft"])
    fifo_gguf = home / ".lmstudio/models/pub/good/pipe.gguf"
    os.mkfifo(fifo_gguf)  # opening it to read would wait for a writer forever
    manifests = home / ".ollama/models/manifests/registry.ollama.ai/library"
    fifo_manifest = manifests / "pipe" / "1b"
    fifo_manifest.parent.mkdir(parents=True)
    os.mkfifo(fifo_manifest)
    deep = fake_homes.write(manifests / "deep" / "1b", b"[" * 100_000 + b"]" * 100_000)
    huge = fake_homes.write(manifests / "huge" / "1b", b" " * (2 << 20) + b"{}")
    no_layer = fake_homes.write(manifests / "nolayer" / "1b", b'{"layers": [{"mediaType": "text/plain"}]}')
    bad_digest = fake_homes.write(manifests / "digest" / "1b",
                                  b'{"layers": [{"mediaType": "application/vnd.ollama.image.model", '
                                  b'"digest": "sha256:../../../etc/passwd"}]}')
    before = fake_homes.snapshot(home)

    listing = discovery.find_models()

    assert [m.path for m in listing.models] == [good]
    expected = {fifo_gguf: "not a regular file", fifo_manifest: "a FIFO", deep: "not a valid Ollama manifest",
                huge: "over the", no_layer: "no model layer", bad_digest: "is not sha256:<64 hex digits>"}
    for path, why in expected.items():
        lines = _lines_for(listing, path)
        assert len(lines) == 1 and why in lines[0], (path, listing.skipped)
    assert len(listing.skipped) == len(expected)
    assert fake_homes.snapshot(home) == before


def test_a_broken_hub_folder_is_skipped_and_the_cli_still_answers_with_each_line(home, ggufs, capsys):
    hub = home / ".cache" / "huggingface" / "hub"
    broken = fake_homes.hub_repo(hub, "org/broken")
    fake_homes.write(broken / "config.json", b"{not json")
    fake_homes.write(broken / "model.safetensors", b"\x08")
    cut = fake_homes.write(home / "jan/models/cut/model.gguf", ggufs["draft"][:100])
    fake_homes.write(home / "jan/models/tiny/model.gguf", ggufs["draft"])

    assert main(["models", "list"]) == 0
    out = capsys.readouterr()
    found = out.out[out.out.index("Found on this machine"):]
    assert "jan:tiny/model.gguf" in found and "jan:cut/model.gguf" not in found
    skipped = found[found.index("Skipped:"):].splitlines()[1:]
    assert len(skipped) == 2
    assert any(line.strip().startswith(f"{broken}: config.json is not valid JSON") for line in skipped)
    assert any(line.strip().startswith(f"{cut}: ") and "cut short" in line for line in skipped)
    assert "Traceback" not in out.err


@pytest.mark.parametrize("damage", ["garbage", "nested", "fifo", "wrong facts"])
def test_a_damaged_memo_of_found_facts_is_set_aside_and_the_headers_read_again(home, ggufs, capsys, damage):
    fake_homes.write(home / ".lmstudio/models/pub/repo/m.gguf", ggufs["draft"])
    memo = home.parent / "specdec-cache" / "found-models.json"
    first = discovery.find_models().models[0].facts
    assert memo.is_file()
    memo.unlink()
    if damage == "fifo":
        os.mkfifo(memo)
    else:
        memo.write_bytes({"garbage": b"\x00\xffnot json", "nested": b"[" * 50_000 + b"]" * 50_000,
                          "wrong facts": b'{"format": 1, "files": {"x": [1, 2, {"size": "big"}]}}'}[damage])
    model_facts._memo_state["loaded_from"] = None  # as a new process would start

    assert discovery.find_models().models[0].facts == first
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(memo) in err[0] and "set aside" in err[0]
    assert memo.with_name(memo.name + ".damaged").exists()
    assert memo.is_file()  # written again, whole, from the headers just read


def test_a_folder_of_thousands_of_broken_files_is_a_dozen_lines_and_a_count_unless_every_one_is_asked_for(
        home, ggufs, capsys):
    """Each skipped file still has its line (`--skipped`, the listing itself); what is shown by default is the first
    dozen and one line counting the rest by reason, so 5,000 broken files are not 5,000 lines on the screen (nor a
    tooltip taller than it: the Models dialog shows the same summary)."""
    folder = home / ".lmstudio" / "models" / "pub" / "broken"
    fake_homes.write(home / ".lmstudio" / "models" / "pub" / "good" / "good.gguf", ggufs["draft"])
    for index in range(3000):
        fake_homes.write(folder / f"empty{index:04}.gguf", b"")
    for index in range(2000):
        fake_homes.write(folder / f"text{index:04}.gguf", b"hello, not a model")
    listing = discovery.find_models()
    assert len(listing.models) == 1 and len(listing.skipped) == 1 + 4096  # the folder's line: only 4,096 looked at
    assert len([line for line in listing.skipped if "(it is empty)" in line]) > 1000

    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    shown = out[out.index("Skipped:"):].splitlines()[1:]
    assert len(shown) == discovery.SKIPPED_SHOWN + 2
    assert shown[-2].startswith(f"  ... and {len(listing.skipped) - discovery.SKIPPED_SHOWN:,} more (")
    assert "not a GGUF file (it is empty)" in shown[-2] and "does not start with the GGUF signature" in shown[-2]
    assert "--skipped" in shown[-1] and "good.gguf" in out

    assert main(["models", "list", "--skipped"]) == 0
    out = capsys.readouterr().out
    assert out[out.index("Skipped:"):].splitlines()[1:] == [f"  {line}" for line in listing.skipped]


def test_a_few_skipped_files_are_each_shown():
    lines = [f"/m/{index}.gguf: not a GGUF file (it is empty)" for index in range(discovery.SKIPPED_SHOWN)]
    one_more = [*lines, "/m/x.gguf: holds more than 4,096 entries: only 4,096 of them were looked at"]
    assert discovery.skipped_summary(lines) == lines
    assert discovery.skipped_summary(one_more) == one_more  # "and 1 more" would take the line it stands for
    assert discovery.skipped_summary([*one_more, "/m/y.gguf: its header is cut short (it needs byte 9 of 5)"])[-1] == (
        "... and 2 more (1: holds more than N entries: only N of them were looked at; "
        "1: its header is cut short (it needs byte N of N))")

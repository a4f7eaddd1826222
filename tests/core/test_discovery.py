"""Models found where other apps keep them (discovery.py): every layout, named, paired, loaded by name; and bad
input skipped with one line each, the rest still listed, nothing written."""

from __future__ import annotations

import json
import os
import shutil

import fake_homes
import pytest
import tiny

from specdec_core.commands.cli import main
from specdec_core.errors import ModelLoadError
from specdec_core.loading import discovery, gguf_header
from specdec_core.loading.models import load_model
from specdec_core.pairs.suggestions import suggest_drafts


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory, tiny_tokenizer) -> dict[str, bytes]:
    return fake_homes.tiny_ggufs(tmp_path_factory.mktemp("ggufs"), tiny_tokenizer)


@pytest.fixture
def home(monkeypatch, tmp_path):
    return fake_homes.isolate(monkeypatch, tmp_path / "home")


@pytest.fixture
def every_layout(monkeypatch, home, ggufs, tiny_tokenizer):
    return fake_homes.every_layout(monkeypatch, home, ggufs, tiny_tokenizer)


def test_a_model_in_each_layout_is_found_under_a_name_with_the_facts_of_its_header(every_layout, tiny_tokenizer):
    listing = discovery.find_models()
    found = {model.name: model for model in listing.models}
    assert set(found) == set(every_layout) and listing.skipped == ()
    for name, path in every_layout.items():
        assert found[name].path == path
    verifier = found["ollama:qwen2.5-coder:1.5b"]
    assert verifier.source == "ollama" and verifier.where.startswith("Ollama: ")
    facts = verifier.facts
    size = sum(p.numel() for p in tiny.make_model("llama", tiny_tokenizer, seed=1).parameters())
    assert (facts.format, facts.architecture, facts.quantisation, facts.parameters) == ("gguf", "llama", "F32", size)
    assert facts.size == every_layout["ollama:qwen2.5-coder:1.5b"].stat().st_size
    folder = found["hf:org/tiny-chat"].facts
    assert (folder.format, folder.architecture, folder.quantisation) == ("transformers", "llama", "float32")
    # One vocabulary, one hash, whether it comes as a GGUF's token list or a folder's tokenizer.json
    tokens = [t for t, _ in sorted(tiny_tokenizer.get_vocab().items(), key=lambda item: item[1])]
    assert folder.vocabulary_hash == facts.vocabulary_hash == gguf_header.vocabulary_hash(tokens)
    assert found["lmstudio:old/repo/old.gguf"].facts.vocabulary_hash != facts.vocabulary_hash


def test_ollama_names_keep_a_namespace_and_default_to_latest(home, ggufs):
    root = home / ".ollama" / "models"
    fake_homes.ollama_model(root, "tiny", "latest", ggufs["draft"], namespace="someone")
    fake_homes.ollama_model(root, "tiny", "latest", ggufs["draft"])
    assert {m.name for m in discovery.find_models().models} == {"ollama:someone/tiny:latest", "ollama:tiny:latest"}
    assert discovery.locate("ollama:tiny").name == "ollama:tiny"
    assert discovery.locate("ollama:someone/tiny:latest").path.name.startswith("sha256-")


def test_ollama_models_moved_with_OLLAMA_MODELS_are_found_there(home, ggufs, monkeypatch, tmp_path):
    moved = tmp_path / "elsewhere"
    fake_homes.ollama_model(moved, "tiny", "q8", ggufs["draft"])
    monkeypatch.setenv("OLLAMA_MODELS", str(moved))
    assert [m.name for m in discovery.find_models().models] == ["ollama:tiny:q8"]


def test_the_hub_cache_is_found_through_HF_HUB_CACHE_and_HF_HOME(home, ggufs, monkeypatch, tmp_path):
    fake_homes.hub_gguf(tmp_path / "hf-home" / "hub", "org/a", "a.gguf", ggufs["draft"])
    fake_homes.hub_gguf(tmp_path / "hub-cache", "org/b", "b.gguf", ggufs["draft"])
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    assert [m.name for m in discovery.find_models().models] == ["hf:org/a/a.gguf"]
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    assert [m.name for m in discovery.find_models().models] == ["hf:org/b/b.gguf"]


def test_folders_named_by_the_caller_are_searched_for_ggufs_and_transformers_folders(home, ggufs, tmp_path,
                                                                                      tiny_models_dir):
    extra = tmp_path / "extra"
    fake_homes.write(extra / "a" / "x.gguf", ggufs["draft"])
    shutil.copytree(tiny_models_dir["llama-draft"], extra / "folder-model")
    names = {m.name for m in discovery.find_models([extra]).models}
    assert names == {str(extra / "a" / "x.gguf"), str(extra / "folder-model")}


def test_a_found_name_loads_anywhere_a_model_spec_does(every_layout, ggufs):
    loaded = load_model("ollama:qwen2.5-coder:1.5b", device="cpu", dtype="float32")
    assert loaded.name == "qwen2.5-coder:1.5b" and loaded.source.startswith("Ollama GGUF")
    assert loaded.model.config.num_hidden_layers == 2
    folder = load_model("hf:org/tiny-chat", device="cpu", dtype="float32")
    assert folder.model.config.num_hidden_layers == 1 and folder.source == "Hugging Face cache folder"


def test_a_found_name_that_is_not_there_fails_with_where_it_looked(home):
    with pytest.raises(ModelLoadError, match=r"'ollama:nothing:1b' is not on this machine.*manifests"):
        load_model("ollama:nothing:1b", device="cpu")
    with pytest.raises(ModelLoadError, match="stays inside"):
        discovery.locate("lmstudio:../../etc/passwd")


def test_drafts_sharing_the_verifiers_vocabulary_come_first_smallest_first_then_other_tokenizers(every_layout):
    listing = discovery.find_models()
    found = suggest_drafts("ollama:qwen2.5-coder:1.5b", listing)
    same = [s.draft.name for s in found.same]
    # Every smaller model with the verifier's vocabulary, the transformers folder included, smallest first
    assert set(same) == {"lmstudio:pub/tiny-GGUF/tiny-q8.gguf", "hf:org/tiny-GGUF/tiny.Q8_0.gguf", "hf:org/tiny-chat",
                         "gpt4all:tiny.gguf", "jan:tiny-1b/model.gguf", "jan:tiny-new/model.gguf"}
    sizes = [s.draft.facts.parameters for s in found.same]
    assert sizes == sorted(sizes)
    assert all(s.verdict.compatible and s.overlap == 1.0 for s in found.same)
    assert found.same[0].verdict.summary().startswith("compatible: same tokenizer")
    others = {s.draft.name: s for s in found.other}
    assert set(others) == {name for name in every_layout if name.endswith(("old.gguf", "mine.gguf"))}
    assert all(s.verdict.cross_vocabulary and 0 < s.overlap < 1 for s in others.values())
    assert found.best is found.same[0] and found.skipped == ()


def test_a_draft_larger_than_the_verifier_is_not_suggested(every_layout):
    found = suggest_drafts("jan:tiny-1b/model.gguf", discovery.find_models())
    assert "ollama:qwen2.5-coder:1.5b" not in {s.draft.name for s in (*found.same, *found.other)}


def test_the_cli_lists_found_models_and_pairs_a_verifier(every_layout, capsys):
    assert main(["models", "list"]) == 0
    listed = capsys.readouterr().out
    section = listed[listed.index("Found on this machine"):]
    for name in every_layout:
        assert name in section
    assert main(["models", "pair", "ollama:qwen2.5-coder:1.5b"]) == 0
    paired = capsys.readouterr().out
    assert "Same tokenizer (smallest first):" in paired and "Another tokenizer" in paired
    assert "Try: specdec chat --verifier ollama:qwen2.5-coder:1.5b --draft " in paired


def test_pairing_a_verifier_that_is_not_there_is_one_error_line(home, capsys):
    assert main(["models", "pair", "ollama:nothing:1b"]) != 0
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err


# ------------------------------------------------------------------------------------------------- bad input


def _skipped_for(listing, path) -> list[str]:
    return [line for line in listing.skipped if line.startswith(f"{path}: ")]


def test_bad_input_is_skipped_one_line_each_and_the_good_model_still_listed(home, ggufs, monkeypatch):
    good = fake_homes.write(home / ".lmstudio/models/pub/good/good.gguf", ggufs["draft"])
    ollama = home / ".ollama" / "models"
    broken = fake_homes.write(ollama / "manifests/registry.ollama.ai/library/broken/1b", b"{not json")
    dangling = fake_homes.ollama_model(ollama, "dangling", "1b", ggufs["verifier"])
    for blob in (ollama / "blobs").iterdir():
        blob.unlink()
    truncated = fake_homes.write(home / ".lmstudio/models/pub/cut/cut.gguf", ggufs["draft"][:300])
    not_gguf = fake_homes.write(home / ".lmstudio/models/pub/cut/text.gguf", b"hello, not a model")
    locked = home / ".lmstudio/models/locked"
    locked.mkdir()
    nowhere = home / ".lmstudio/models/pub/good/gone.gguf"
    nowhere.symlink_to(home / "deleted.gguf")  # a link to a file since deleted
    loop = home / ".lmstudio/models/pub/loop"
    loop.symlink_to(loop)  # a link to itself
    (home / ".lmstudio/models/pub/up").symlink_to(home / ".lmstudio/models")  # a link round a loop
    crowded = home / ".local/share/nomic.ai/GPT4All"
    crowded.mkdir(parents=True)
    for index in range(10_000):
        (crowded / f"note{index:05}.txt").touch()
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: (_ for _ in ()).throw(PermissionError(13, "Permission denied"))
                        if str(path) == str(locked) else real_scandir(path))
    before = fake_homes.snapshot(home)

    listing = discovery.find_models()

    assert [m.path for m in listing.models] == [good]
    expected = {broken: "not a valid Ollama manifest", dangling: "model blob sha256-", truncated: "cut short",
                not_gguf: "not a GGUF file", nowhere: "a link to a file that does not exist",
                locked: "Permission denied", loop: "symbolic links", home / ".lmstudio/models/pub/up": "a loop",
                crowded: "more than 4,096 entries"}
    for path, why in expected.items():
        lines = _skipped_for(listing, path)
        assert len(lines) == 1 and why in lines[0], (path, listing.skipped)
    assert len(listing.skipped) == len(expected)
    assert fake_homes.snapshot(home) == before  # nothing written, nothing touched


def test_listing_and_pairing_write_nothing_into_the_folders_searched(every_layout, home):
    before = fake_homes.snapshot(home)
    suggest_drafts("ollama:qwen2.5-coder:1.5b", discovery.find_models())
    assert fake_homes.snapshot(home) == before


def test_a_gguf_cut_anywhere_in_its_header_is_a_header_error(tmp_path, ggufs):
    data = ggufs["draft"]
    header_end = data.index(b"token_embd.weight") + 200  # past the start of the tensor table
    for cut in range(0, header_end, max(1, header_end // 40)):
        path = fake_homes.write(tmp_path / "cut.gguf", data[:cut])
        with pytest.raises(gguf_header.GgufHeaderError):
            gguf_header.read_gguf_facts(path)


def test_fifty_models_in_a_folder_are_all_listed(home, ggufs, monkeypatch):
    folder = home / ".lmstudio" / "models" / "pub" / "many"
    for index in range(50):
        fake_homes.write(folder / f"m{index:02}.gguf", ggufs["draft"])
    listing = discovery.find_models()
    assert len(listing.models) == 50 and listing.skipped == ()


def test_the_vocabulary_hash_leaves_out_trailing_padding_fillers_only():
    tokens = ["a", "b", "[PAD2]", "c"]
    assert gguf_header.vocabulary_hash(tokens + ["[PAD4]", "[PAD5]"]) == gguf_header.vocabulary_hash(tokens)
    assert gguf_header.vocabulary_hash(["a", "b", "c"]) != gguf_header.vocabulary_hash(tokens)


def test_facts_are_kept_in_specdecs_cache_and_read_again_when_a_file_changes(home, ggufs, monkeypatch):
    from specdec_core.loading import model_facts

    path = fake_homes.write(home / ".lmstudio/models/pub/repo/m.gguf", ggufs["draft"])
    first = discovery.find_models().models[0].facts
    assert (home.parent / "specdec-cache" / "found-models.json").is_file()

    with monkeypatch.context() as patched:
        patched.setitem(model_facts._memo_state, "loaded_from", None)  # as a new process would start
        patched.setattr(gguf_header, "read_gguf_facts", lambda *a, **k: pytest.fail("the kept facts were not used"))
        assert discovery.find_models().models[0].facts == first

    path.write_bytes(ggufs["other"])  # another size: read again
    assert discovery.find_models().models[0].facts.vocabulary_hash != first.vocabulary_hash


def test_a_gguf_is_listed_by_the_size_its_publisher_names_it_by_else_by_its_count(home, tiny_tokenizer, capsys):
    """Qwen2.5-Coder-1.5B's GGUF keeps its tied output layer twice (1.78B elements): listed as the 1.5B its file
    says it is. A label that does not read like a size is not shown."""
    folder = home / ".lmstudio" / "models" / "pub" / "sizes"
    model = tiny.make_model("llama", tiny_tokenizer, seed=2, layers=1, hidden=16)
    for name, label in (("labelled", "1.5B"), ("unlabelled", ""), ("odd", "<b>huge</b>"), ("year", "2024")):
        tiny.write_gguf(fake_homes.write(folder / f"{name}.gguf", b""), model, tiny_tokenizer, size_label=label)
    facts = {m.name.rsplit("/", 1)[-1]: m.facts for m in discovery.find_models().models}
    counted = facts["unlabelled.gguf"].parameters_text()
    assert counted.endswith("K") and facts["labelled.gguf"].parameters == facts["unlabelled.gguf"].parameters
    assert [facts[f"{name}.gguf"].parameters_text() for name in ("labelled", "unlabelled", "odd", "year")] == [
        "1.5B", counted, counted, counted]
    assert main(["models", "list"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "labelled.gguf" in line and "un" not in line)
    assert row.split()[1] == "1.5B"


def test_facts_an_earlier_version_kept_are_read_again_from_the_header_quietly(home, ggufs, capsys):
    from specdec_core.loading import model_facts

    path = fake_homes.write(home / ".lmstudio/models/pub/repo/m.gguf", ggufs["draft"])
    status = path.stat()
    earlier = {"format": "gguf", "size": status.st_size, "architecture": "llama", "quantisation": "F32",
               "parameters": 1, "vocabulary_hash": "kept-before", "vocabulary_size": 1, "title": ""}  # no size_label
    fake_homes.write(home.parent / "specdec-cache" / "found-models.json", json.dumps(
        {"format": 1, "files": {str(path): [status.st_size, status.st_mtime_ns, earlier]}}).encode())
    model_facts._memo_state["loaded_from"] = None  # as a new process would start
    facts = discovery.find_models().models[0].facts
    assert facts.vocabulary_hash != "kept-before" and facts.parameters > 1
    assert "set aside" not in capsys.readouterr().err
    assert (home.parent / "specdec-cache" / "found-models.json").is_file()


@pytest.mark.parametrize("platform", ["darwin", "win32"])
def test_gpt4all_and_jan_are_searched_where_each_os_keeps_them(home, ggufs, monkeypatch, platform, tmp_path):
    monkeypatch.setattr(discovery, "PLATFORM", platform)
    if platform == "darwin":
        gpt4all, jan = home / "Library/Application Support/nomic.ai/GPT4All", home / "Library/Application Support/Jan"
    else:
        monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "Local"))
        monkeypatch.setenv("APPDATA", str(tmp_path / "Roaming"))
        gpt4all, jan = tmp_path / "Local/nomic.ai/GPT4All", tmp_path / "Roaming/Jan"
    fake_homes.write(gpt4all / "tiny.gguf", ggufs["draft"])
    fake_homes.write(jan / "data/models/tiny/model.gguf", ggufs["draft"])
    assert {m.name for m in discovery.find_models().models} == {"gpt4all:tiny.gguf", "jan:tiny/model.gguf"}

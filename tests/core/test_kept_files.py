"""Issue 56: every file specdec keeps between runs is read one way (kept_files.py). Whatever a file holds, its
reader gives a valid value or nothing, never an exception or a hang; a damaged file is set aside with one line
saying which and why, and a speed aid that fails never stops a reply."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import tiny
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.settings import Settings
from specdec_core.commands.cli import main
from specdec_core.drafting import adapt, phrases
from specdec_core.drafting.adapt import ADAPTED_FILE, HeadAdapter
from specdec_core.loading import cost_memory, cpu_speed, kept_files
from specdec_core.loading.kept_files import DamagedFile, kept_json, read_bytes, read_json

# ---- the reader itself ---------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
def test_a_fifo_in_place_of_a_kept_file_is_refused_without_blocking(tmp_path, capsys):
    """Issue 56: `settings.json` replaced by a FIFO hung the app at start."""
    os.mkfifo(tmp_path / "settings.json")
    loaded = Settings.load(tmp_path)
    assert loaded == Settings() and "a FIFO" in loaded.notices[0]
    assert (tmp_path / "settings.json.damaged").exists() and not (tmp_path / "settings.json").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "settings.json" in err[0] and "set aside" in err[0]


@pytest.mark.parametrize("make", ["directory", "device"])
def test_a_directory_or_a_device_is_not_read_as_a_kept_file(tmp_path, make):
    path = tmp_path / "kept.json"
    if make == "directory":
        path.mkdir()
    elif os.path.exists("/dev/zero"):
        path.symlink_to("/dev/zero")  # endless: read as a file it would never end
    else:
        pytest.skip("no /dev/zero here")
    with pytest.raises(DamagedFile, match="a directory|a device"):
        read_bytes(path, 1 << 20)


def test_a_file_over_its_limit_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 2000)
    with pytest.raises(DamagedFile, match="2,000 bytes"):
        read_bytes(path, 1000)
    assert read_bytes(tmp_path / "missing.json", 1000) is None


def test_a_damaged_file_is_set_aside_once_and_an_earlier_damaged_folder_is_kept(tmp_path, capsys):
    folder = tmp_path / "head"
    for _ in range(2):
        folder.mkdir()
        kept_files.set_aside(folder, "it is broken", "it is rebuilt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["head.damaged", "head.damaged-2"]
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and lines[0] == (f"specdec: {folder} is damaged (it is broken); it was set aside as "
                                            "head.damaged, and it is rebuilt")


# ---- each reader on the damage issue 56 found ---------------------------------------------------------

DEEP = "[" * 100_000 + "]" * 100_000


def test_deeply_nested_cost_memory_and_cpu_plans_are_set_aside_not_a_recursion_error(tmp_path, capsys):
    """Issue 56: `RecursionError` and exit 1."""
    costs = tmp_path / "costs.json"
    costs.write_text('{"seconds": ' + DEEP + "}")
    assert kept_json(costs, cost_memory.costs_in, "measured afresh") is None
    plans = cpu_speed._plan_file(tmp_path, torch.float32)
    plans.parent.mkdir(parents=True, exist_ok=True)
    plans.write_text(DEEP)
    assert cpu_speed._read_plans(tmp_path, torch.float32) == {}
    assert not costs.exists() and not plans.exists()
    assert capsys.readouterr().err.count("nests deeper than") == 2


def phrase_bytes(**arrays) -> bytes:
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


GOOD_PHRASES = phrase_bytes(tokens=np.array([5, 6, 7, 5, 6, 8], dtype=np.uint16), ends=np.array([3, 6]))
DAMAGED_PHRASES = {
    "garbage": b"\x89garbage" * 50, "truncated": GOOD_PHRASES[:len(GOOD_PHRASES) // 2], "empty": b"",
    "pickled object array": phrase_bytes(tokens=np.array([{"x": 1}, None], dtype=object), ends=np.array([2])),
    "missing keys": phrase_bytes(tokens=np.array([1, 2, 3])),
    "2-D tokens": phrase_bytes(tokens=np.array([[1, 2], [3, 4]]), ends=np.array([4])),
    "ends past the tokens": phrase_bytes(tokens=np.array([1, 2]), ends=np.array([9])),
}


@pytest.mark.parametrize("damage", DAMAGED_PHRASES)
def test_a_damaged_phrase_store_is_set_aside_and_replies_go_on_without_it(tmp_path, capsys, damage):
    """Issue 56: each of these stopped the reply with `error: unexpected ... (a bug in specdec)`, exit 1."""
    (tmp_path / phrases.FILE_NAME).write_bytes(DAMAGED_PHRASES[damage])
    assert phrases.shipped_store(tmp_path) is None
    assert (tmp_path / f"{phrases.FILE_NAME}.damaged").is_file()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "phrases.npz is damaged" in err[0] and "drafted without it" in err[0]


def test_a_reply_with_a_damaged_phrase_store_beside_its_draft_is_written(tmp_path, tiny_models_dir, capsys):
    draft = tmp_path / "draft"
    shutil.copytree(tiny_models_dir["llama-draft"], draft)
    (draft / phrases.FILE_NAME).write_bytes(DAMAGED_PHRASES["pickled object array"])
    code = main(["generate", "Hello", "--verifier", str(tiny_models_dir["llama-verifier"]), "--draft", str(draft),
                 "--drafter", "hybrid", "--max-new-tokens", "8", "--device", "cpu", "--json"])
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out.splitlines()[-1])["stats"]["new_tokens"] > 0
    assert "phrases.npz is damaged" in captured.err and "a bug in specdec" not in captured.err


@pytest.fixture(scope="module")
def head_pair(tiny_tokenizer):
    verifier = tiny.make_pair("llama", tiny_tokenizer)[0]
    return verifier, tiny.make_head(verifier).model


def saved_head(folder: Path, head_pair) -> Path:
    verifier, head = head_pair
    HeadAdapter(head, verifier.model).save(folder)
    return folder


def header_claiming(size: int) -> bytes:
    header = json.dumps({"fc.weight": {"dtype": "F32", "shape": [size // 4], "data_offsets": [0, size]}}).encode()
    return len(header).to_bytes(8, "little") + header + b"\0" * 64


ADAPTED_DAMAGE = {
    "weights garbage": ("model.safetensors", b"garbage" * 100),
    "weights half-written": ("model.safetensors", None),
    "a header claiming 2^40 bytes": ("model.safetensors", header_claiming(1 << 40)),
    "adapted.json is []": (ADAPTED_FILE, b"[]"),
    "tokens null": (ADAPTED_FILE, b'{"tokens": null}'),
    "deeply nested": (ADAPTED_FILE, ('{"tokens": ' + DEEP + "}").encode()),
}


@pytest.mark.parametrize("damage", ADAPTED_DAMAGE)
def test_a_damaged_adapted_draft_is_refused_in_one_line_and_the_head_is_left_alone(tmp_path, head_pair, damage):
    """Issue 56: each of these printed a traceback in the app."""
    folder = saved_head(tmp_path / "adapted", head_pair)
    name, content = ADAPTED_DAMAGE[damage]
    if content is None:
        content = (folder / name).read_bytes()[:-100]
    (folder / name).write_bytes(content)
    verifier, head = head_pair
    before = {k: v.clone() for k, v in head.state_dict().items()}
    with pytest.raises(DamagedFile) as refused:
        HeadAdapter(head, verifier.model).load(folder)
    assert "\n" not in str(refused.value)
    assert all(torch.equal(head.state_dict()[k], v) for k, v in before.items())


@pytest.mark.parametrize("name,value", [("seed", 2**40), ("top_k", 2**31), ("max_new_tokens", 2**31 + 5)])
def test_a_setting_larger_than_the_panel_holds_is_refused_at_load(tmp_path, name, value):
    """Issue 56: ≥ 2^31 stopped the app at start with an OverflowError from the settings panel."""
    (tmp_path / "settings.json").write_text(json.dumps({name: value, "gamma": 3}))
    loaded = Settings.load(tmp_path)
    assert getattr(loaded, name) == getattr(Settings(), name) and loaded.gamma == 3
    assert name in loaded.notices[0] and "settings panel" in loaded.notices[0]


# ---- property tests: every reader, whatever its file holds -----------------------------------------------

FUZZ = settings(max_examples=420, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
LEAVES = (None, True, 0, -1, 2**63, 1.5, -0.0, 1e308, "", "x", "é\u2603\U0001f600", "seconds", "tokens", "gamma",
          "shape", "forms", "ms", "linear", "1", [], {})
KEYS = ("seconds", "tokens", "gamma", "seed", "shape", "forms", "ms", "linear", "1", "9", "", "\x00")


def nested(steps: list[int]) -> object:
    """A JSON value built inside out from drawn numbers: each wraps what is built so far in a list, an object
    under one of KEYS, or beside a leaf (cheaper to draw than hypothesis' recursive strategies, seconds apart)."""
    value: object = LEAVES[steps[0] % len(LEAVES)] if steps else None
    for step in steps[1:]:
        kind, pick = divmod(step, len(KEYS))
        value = ([value], {KEYS[pick]: value}, [value, LEAVES[pick]], {KEYS[pick]: value, "x": LEAVES[pick]})[kind % 4]
    return value


json_values = st.lists(st.integers(0, 4 * len(KEYS) - 1), max_size=12).map(nested)


def good_contents() -> dict[str, bytes]:
    """One file each reader accepts, to cut short or nest inside."""
    plans = [{"shape": [8, 8], "forms": {str(r): "linear" for r in cpu_speed.ROW_COUNTS},
              "ms": {"linear": {str(r): 0.1 for r in cpu_speed.ROW_COUNTS}}}]
    return {"settings": json.dumps({"gamma": 4, "seed": 7, "recent_specs": ["a"]}).encode(),
            "cost memory": json.dumps({"seconds": {"1": 0.01, "4": 0.02}}).encode(),
            "cpu plans": json.dumps(plans).encode(), "adapted.json": b'{"tokens": 12}', "phrase store": GOOD_PHRASES}


GOOD = good_contents()


def contents(reader: str) -> st.SearchStrategy[bytes]:
    good = GOOD[reader]
    nested = st.builds(lambda n, open_, close: (open_ * n + close * n).encode(), st.integers(1, 3000),
                       st.sampled_from(["[", '{"a":', '{"seconds":[']), st.sampled_from(["]", "}", ""]))
    return st.one_of(st.binary(max_size=300),
                     st.integers(0, len(good)).map(lambda cut: good[:cut]),
                     json_values.map(lambda value: json.dumps(value).encode()),
                     json_values.map(lambda value: json.dumps({"seconds": value, "tokens": value, "gamma": value})
                                     .encode()),
                     nested,
                     st.binary(max_size=40).map(lambda tail: good + tail))


def read_with(reader: str, data: bytes, folder: Path) -> object:
    """Write `data` in `folder` where `reader` looks, read it, and check that what came back is what the reader may
    give. What it leaves (the file, or the file set aside) is removed, so the folder serves the next input."""
    try:
        if reader == "settings":
            (folder / "settings.json").write_bytes(data)
            loaded = Settings.load(folder)
            assert isinstance(loaded.gamma, int) and isinstance(loaded.recent_specs, list)
            return loaded
        if reader == "cost memory":
            (folder / "costs.json").write_bytes(data)
            seconds = kept_json(folder / "costs.json", cost_memory.costs_in, "measured afresh")
            assert seconds is None or all(r >= 1 and 0 < s < 3600 for r, s in seconds.items())
            return seconds
        if reader == "cpu plans":
            path = cpu_speed._plan_file(folder, torch.float32)
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(data)
            plans = cpu_speed._read_plans(folder, torch.float32)
            assert isinstance(plans, dict)
            return plans
        if reader == "adapted.json":
            (folder / ADAPTED_FILE).write_bytes(data)
            try:
                tokens = read_json(folder / ADAPTED_FILE, adapt._adapted_tokens)
            except DamagedFile:
                return None
            assert isinstance(tokens, int) and tokens >= 0
            return tokens
        (folder / phrases.FILE_NAME).write_bytes(data)
        phrases._LOADED.clear()  # each input is a new file, whatever its time stamp
        store = phrases.shipped_store(folder)
        assert store is None or isinstance(store, phrases.PhraseStore)
        return store
    finally:
        for path in folder.rglob("*"):
            if path.is_file():
                path.unlink()


@pytest.mark.parametrize("reader", list(GOOD))
def test_each_reader_reads_its_own_file(reader, tmp_path):
    assert read_with(reader, GOOD[reader], tmp_path)


@pytest.mark.parametrize("reader", list(GOOD))
def test_whatever_a_kept_file_holds_its_reader_gives_a_valid_value_or_nothing(reader, capsys, tmp_path):
    """Random bytes, files cut short, any JSON, and brackets thousands deep: 5 readers x 420 inputs."""

    @FUZZ
    @given(data=contents(reader))
    def check(data):
        read_with(reader, data, tmp_path)

    check()
    said = [line for line in capsys.readouterr().err.splitlines() if line]
    assert all(line.startswith("specdec: ") and "is damaged (" in line for line in said)
    assert "Traceback" not in "\n".join(said)


def test_pickles_are_never_loaded_from_a_phrase_store(tmp_path, monkeypatch):
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: pytest.fail("a pickle was loaded"))
    (tmp_path / phrases.FILE_NAME).write_bytes(DAMAGED_PHRASES["pickled object array"])
    assert phrases.shipped_store(tmp_path) is None

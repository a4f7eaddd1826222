"""Fault tests for the CLI and the core: interrupts, hostile input and files, broken caches and disks.

Each test names the defect it guards against (issue 15); each fails on the code before its fix.
"""

from __future__ import annotations

import builtins
import importlib.util
import io
import json
import math
import os
import pickle
import shutil
import sys
from pathlib import Path

import pytest
import tiny

from specdec_core import errors
from specdec_core.commands import cli
from specdec_core.commands.cli import main
from specdec_core.config import GenerationConfig
from specdec_core.errors import ConfigError, ModelLoadError
from specdec_core.events import Finished
from specdec_core.loading import conversion_check, gguf_cache, models
from specdec_core.loading.models import load_model
from specdec_core.pairs.pairing import LoadOptions, load_pair
from specdec_core.text import chat
from specdec_core.text.chat import build_prompt


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_tokenizer):
    root = tmp_path_factory.mktemp("reliability_models")
    verifier = tiny.save_model(root / "verifier", "llama", tiny_tokenizer, seed=1, logit_scale=8.0)
    draft = tiny.save_model(root / "draft", "llama", tiny_tokenizer, seed=1, logit_scale=8.0, noise=0.3,
                            noise_seed=7)
    return {"verifier": str(verifier), "draft": str(draft), "root": root}


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def run_cli(capsys, *args) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().err


# --------------------------------------------------------------------------- 1. Ctrl-C in chat


def interrupt_on_call(model, call: int):
    """Make the `call`-th pass through the model's last decoder layer raise KeyboardInterrupt: the
    earlier layers have then cached keys and values for positions the later ones (and the engine's
    record of cached ids) lack, which is where a real Ctrl-C usually lands."""
    layer = model.model.layers[-1]
    real = layer.forward
    count = {"n": 0}

    def forward(*args, **kwargs):
        count["n"] += 1
        if count["n"] == call:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    layer.forward = forward
    return lambda: setattr(layer, "forward", real)


def test_ctrl_c_mid_reply_keeps_the_engine_and_history_consistent(folders, capsys):
    pair = load_pair(folders["verifier"], folders["draft"], "model", LoadOptions(device="cpu"))
    config = GenerationConfig(max_new_tokens=40, gamma=3)
    messages = [{"role": "user", "content": "Once upon a time"}]
    restore = interrupt_on_call(pair.verifier.model, 4)
    partial = cli.chat_turn(pair, messages, None, config, color=False, out=io.StringIO())
    restore()
    assert partial is not None and partial["interrupted"] and partial["content"]  # kept, marked
    messages += [partial, {"role": "user", "content": "The capital of France is"}]
    reply = cli.chat_turn(pair, messages, None, config, color=False, out=io.StringIO())

    # The same history on a fresh engine gives the same reply: nothing stale survived the interrupt.
    fresh = load_pair(folders["verifier"], folders["draft"], "model", LoadOptions(device="cpu"))
    ids = build_prompt(fresh.verifier.tokenizer, messages, context_length=fresh.verifier.context_length,
                       reserve_new_tokens=config.max_new_tokens).ids
    expected = [e for e in fresh.engine.generate(ids, config) if isinstance(e, Finished)][0]
    assert expected.error is None
    assert reply == {"role": "assistant", "content": expected.text}


_REAL_LOAD = cli.load_from_args


def chat_session(monkeypatch, capsys, folders, lines, interrupt_call=None) -> tuple[int, str, str]:
    def load(args):
        pair = _REAL_LOAD(args)
        if interrupt_call is not None:
            interrupt_on_call(pair.verifier.model, interrupt_call)
        return pair

    feed = iter(lines)
    monkeypatch.setattr(cli, "load_from_args", load)
    monkeypatch.setattr(builtins, "input", lambda prompt="": next(feed))
    code = main(["chat", "--verifier", folders["verifier"], "--draft", folders["draft"], "--device", "cpu",
                 "--max-new-tokens", "24", "--color", "never"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_ctrl_c_in_the_chat_command_leaves_later_turns_and_reset_working(folders, capsys, monkeypatch):
    code, out, err = chat_session(monkeypatch, capsys, folders,
                                  ["Tell me a long story", "Again please", "/reset", "Hello", "/quit"],
                                  interrupt_call=3)
    assert code == 0
    assert "(stopped" in err
    assert "error" not in err.lower() and "failed" not in err.lower(), err
    assert err.count("stop: ") == 2  # both later turns finished
    # After /reset the reply is the one a fresh session gives: no stale cache entry changed it.
    _, clean_out, _ = chat_session(monkeypatch, capsys, folders, ["Hello", "/quit"])
    assert clean_out.strip() and out.endswith(clean_out)


# --------------------------------------------------------------------------- 5. finite floats


@pytest.mark.parametrize("field", ["temperature", "top_p", "confidence_cutoff"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_generation_config_refuses_non_finite_floats(field, value):
    with pytest.raises(ConfigError, match="finite"):
        GenerationConfig(**{field: value}).validate()


@pytest.mark.parametrize("flag", ["--temperature", "--top-p", "--confidence-cutoff"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_the_cli_refuses_non_finite_floats(capsys, folders, flag, value):
    code, err = run_cli(capsys, "generate", "hi", "--verifier", folders["verifier"], "--device", "cpu",
                        f"{flag}={value}")
    assert code == 2 and "finite" in one_error_line(err)


def cli_reply(capsys, folders, *args, draft: str = "draft") -> dict:
    code = main(["generate", "The capital of France is", "--verifier", folders["verifier"], "--draft",
                 folders[draft], "--device", "cpu", "--max-new-tokens", "12", "--json", *args])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out.splitlines()[0])


@pytest.fixture(scope="module")
def loud(tmp_path_factory, tiny_tokenizer):
    """A verifier whose logits reach ~100, as real models' do (logits / 1e-38 then leaves float32), a draft
    with its tokenizer, and one with another tokenizer (its logits are -inf outside the ids it maps to)."""
    root = tmp_path_factory.mktemp("loud_models")
    other = tiny.make_tokenizer(corpus=[line.upper() for line in tiny.CORPUS])
    return {"verifier": str(tiny.save_model(root / "verifier", "llama", tiny_tokenizer, seed=1, logit_scale=100.0)),
            "draft": str(tiny.save_model(root / "draft", "llama", tiny_tokenizer, seed=1, logit_scale=100.0,
                                         noise=0.3, noise_seed=7)),
            "stranger": str(tiny.save_model(root / "stranger", "llama", other, seed=2))}


@pytest.mark.parametrize("speculation", [[], ["--no-speculation"]])
@pytest.mark.parametrize("temperature", ["1e-300", "1e-40", "1e-38"])
def test_a_temperature_too_small_for_float32_replies_as_greedy(capsys, loud, speculation, temperature):
    """Issue 25: logits / 1e-300 overflowed to NaN and the reply was one id repeated at acceptance 1.0."""
    greedy = cli_reply(capsys, loud, "--temperature", "0", "--max-new-tokens", "24", *speculation)
    tiny_t = cli_reply(capsys, loud, "--temperature", temperature, "--seed", "3", "--max-new-tokens", "24",
                       *speculation)
    assert tiny_t["token_ids"] == greedy["token_ids"] and len(greedy["token_ids"]) == 24


def test_a_temperature_too_large_for_float32_samples_uniformly(capsys, loud):
    """Issue 25: 1e39 is inf in float32, and a draft's -inf logit over inf is NaN (here a draft with another
    tokenizer: -inf outside the ids it maps to). Verifier-only, logits / inf are all 0: uniform already."""
    reply = cli_reply(capsys, loud, "--temperature", "1e39", "--seed", "3", "--max-new-tokens", "48",
                      draft="stranger")
    ids = reply["token_ids"]
    assert len(ids) == 48 and reply["error"] is None and reply["stats"]["drafted"] > 0
    # 48 draws from the uniform distribution over 320 ids: ~3.5 repeats expected (greedy here: 24 distinct).
    assert len(set(ids)) >= 40 and max(ids.count(i) for i in ids) <= 3, ids
    numbers = [v for v in reply["stats"].values() if isinstance(v, float)]
    assert numbers and all(math.isfinite(v) for v in numbers), reply["stats"]


# --------------------------------------------------------------------------- 8. one error line, exit 2


def test_argparse_errors_are_one_error_line(capsys):
    for args in (["generate", "hi", "--bogus"], ["generate", "hi", "--gamma", "many"], ["frobnicate"], []):
        code, err = run_cli(capsys, *args)
        assert code == 2, args
        one_error_line(err)
        assert len(err.strip().splitlines()) == 1, err  # no usage block


def test_a_seed_past_64_bits_is_refused(capsys, folders):
    code, err = run_cli(capsys, "generate", "hi", "--verifier", folders["verifier"], "--device", "cpu",
                        "--seed", "9223372036854775808")
    assert code == 2 and "seed" in one_error_line(err)


def test_invalid_utf8_in_argv_is_refused(capsys, folders):
    prompt = os.fsdecode(b"Hi \xff")  # what Python makes of `specdec generate "$(printf 'Hi \xff')"`
    code, err = run_cli(capsys, "generate", prompt, "--verifier", folders["verifier"], "--device", "cpu")
    assert code == 2 and "UTF-8" in one_error_line(err)


def test_invalid_utf8_on_stdin_is_refused(capsys, folders, monkeypatch):
    class Stdin(io.TextIOWrapper):
        def isatty(self):
            return False

    monkeypatch.setattr(sys, "stdin", Stdin(io.BytesIO(b"Hi \xff there")))
    code, err = run_cli(capsys, "generate", "--verifier", folders["verifier"], "--device", "cpu")
    assert code == 2 and "UTF-8" in one_error_line(err)


def test_invalid_utf8_in_chat_is_one_error_and_the_chat_goes_on(capsys, folders, monkeypatch):
    def lines():
        yield os.fsdecode(b"Hi \xff")
        yield "Hello"
        yield "/quit"

    feed = lines()
    monkeypatch.setattr(builtins, "input", lambda prompt="": next(feed))
    code = main(["chat", "--verifier", folders["verifier"], "--device", "cpu", "--max-new-tokens", "8",
                 "--color", "never", "--no-speculation"])
    err = capsys.readouterr().err
    assert code == 0 and "UTF-8" in one_error_line(err) and "stop: " in err


@pytest.mark.parametrize("args", [
    ["--max-memory", "cpu=1GiB"],  # without --device-map it was silently ignored
    ["--device-map", "auto", "--max-memory", "0=lots"],
    ["--device-map", "auto", "--max-memory", "cpu=1MiB"],
    ["--device-map", "auto", "--max-memory", "gpu=1GiB"],
    ["--device-map", "auto", "--max-memory", "cpu"],
])
def test_bad_max_memory_is_refused(capsys, folders, args):
    code, err = run_cli(capsys, "generate", "hi", "--verifier", folders["verifier"], "--device", "cpu", *args)
    assert code == 2 and "--max-memory" in one_error_line(err)


def test_a_malicious_bin_file_is_refused_with_one_line(capsys, folders, tmp_path):
    folder = tmp_path / "evil"
    shutil.copytree(folders["verifier"], folder)
    for weights in folder.glob("*.safetensors"):
        weights.unlink()

    class Payload:
        def __reduce__(self):
            return (print, ("this ran while loading",))

    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"model.embed_tokens.weight": Payload()}))
    code = main(["generate", "hi", "--verifier", str(folder), "--device", "cpu"])
    captured = capsys.readouterr()
    assert code == 2 and "this ran" not in captured.out
    one_error_line(captured.err)


# --------------------------------------------------------------------------- 6. chat templates


def with_template(tokenizer, template: str):
    clone = tiny.make_tokenizer()
    clone.chat_template = template
    return clone


@pytest.mark.parametrize("template", [
    "{{ raise_exception('System role not supported') }}",
    "{% for m in messages %}{{ m.nope.deeper }}{% endfor %}",
    "{{ messages[0]['content'] | undefined_filter }}",
])
def test_a_failing_template_is_a_chat_template_error(tiny_tokenizer, template):
    tokenizer = with_template(tiny_tokenizer, template)
    with pytest.raises(errors.ChatTemplateError):
        build_prompt(tokenizer, [{"role": "user", "content": "hi"}], context_length=512)


def test_a_template_that_never_ends_is_stopped(tiny_tokenizer, monkeypatch):
    monkeypatch.setattr(chat, "TEMPLATE_TIME_LIMIT_S", 0.3)
    tokenizer = with_template(tiny_tokenizer, "{% for i in range(100000) %}{% for j in range(100000) %}"
                                              "{% endfor %}{% endfor %}")
    with pytest.raises(errors.ChatTemplateError, match="longer than"):
        build_prompt(tokenizer, [{"role": "user", "content": "hi"}], context_length=512)


def test_a_template_that_explodes_its_output_is_stopped(tiny_tokenizer):
    tokenizer = with_template(tiny_tokenizer, "{{ 'x ' * 20000000 }}")
    with pytest.raises(errors.ChatTemplateError, match="characters"):
        build_prompt(tokenizer, [{"role": "user", "content": "hi"}], context_length=512)


LONG_STRING_LOOP = "{% for a in 'x'*1000 %}{% for c in 'x'*10000000 %}{% endfor %}{% endfor %}"
HUGE_ALLOCATION = "{{ ('x'*3000000000)[:10] }}"


def test_a_loop_over_a_long_string_is_stopped_by_the_time_limit(tiny_tokenizer, monkeypatch):
    """Issue 25: a loop over a string makes no Python calls, so the old in-process hook never saw it."""
    monkeypatch.setattr(chat, "TEMPLATE_TIME_LIMIT_S", 1.0)
    tokenizer = with_template(tiny_tokenizer, LONG_STRING_LOOP)
    with pytest.raises(errors.ChatTemplateError, match="longer than 1 s"):  # stopped by the limit, not finished
        build_prompt(tokenizer, [{"role": "user", "content": "hi"}], context_length=512)
    # the killed renderer is replaced: the next template renders
    assert build_prompt(tiny_tokenizer, [{"role": "user", "content": "hi"}], context_length=512).ids


def test_one_huge_allocation_is_refused_by_the_memory_cap(tiny_tokenizer):
    """Issue 25: 'x' * 3000000000 is one allocation, which passed the old cap (checked between calls)."""
    tokenizer = with_template(tiny_tokenizer, HUGE_ALLOCATION)
    with pytest.raises(errors.ChatTemplateError, match="memory"):
        build_prompt(tokenizer, [{"role": "user", "content": "hi"}], context_length=512)


# Each hostile template is stopped by its limit (the message names it), so the command ends within the limits.
@pytest.mark.parametrize("template, limit", [(LONG_STRING_LOOP, "longer than"), (HUGE_ALLOCATION, "memory")])
def test_a_hostile_template_in_the_cli_is_one_line_naming_the_limit_it_hit(capsys, folders, tmp_path, template,
                                                                           limit, monkeypatch):
    monkeypatch.setattr(chat, "TEMPLATE_TIME_LIMIT_S", 1.0)  # the loop is stopped at any limit; 5 s is the app's
    folder = tmp_path / "hostile"
    shutil.copytree(folders["verifier"], folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    for extra in folder.glob("chat_template.*"):
        extra.unlink()
    code, err = run_cli(capsys, "generate", "hi", "--verifier", str(folder), "--device", "cpu")
    line = one_error_line(err)
    assert code == 2 and "chat template" in line and limit in line


def test_a_hostile_template_embedded_in_a_gguf_is_one_line_naming_the_time_limit(capsys, tiny_tokenizer, tmp_path,
                                                                         monkeypatch):
    """Issue 25: the same template embedded in a GGUF file (its tokenizer.chat_template key) hung too."""
    import copy

    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(chat, "TEMPLATE_TIME_LIMIT_S", 1.0)
    tokenizer = copy.deepcopy(tiny_tokenizer)
    tokenizer.chat_template = LONG_STRING_LOOP
    path = tiny.write_gguf(tmp_path / "hostile.gguf", tiny.make_model("llama", tiny_tokenizer, seed=1), tokenizer)
    code, err = run_cli(capsys, "generate", "hi", "--verifier", str(path), "--device", "cpu")
    line = one_error_line(err)
    assert code == 2 and "chat template" in line and "longer than" in line


def test_bounded_rendering_gives_the_same_ids_as_transformers(tiny_tokenizer):
    messages = [{"role": "user", "content": "Hello there"}, {"role": "assistant", "content": "Hi!"},
                {"role": "user", "content": "The capital of France is"}]
    expected = tiny_tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    expected = expected["input_ids"] if hasattr(expected, "keys") else expected
    assert build_prompt(tiny_tokenizer, messages, context_length=512).ids == list(expected)


def test_a_template_error_in_the_cli_is_one_line(capsys, folders, tmp_path):
    folder = tmp_path / "refuses"
    shutil.copytree(folders["verifier"], folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ raise_exception('System role not supported') }}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    for extra in folder.glob("chat_template.*"):
        extra.unlink()
    code, err = run_cli(capsys, "generate", "hi", "--verifier", str(folder), "--device", "cpu")
    assert code == 2 and "System role not supported" in one_error_line(err)


# --------------------------------------------------------------------------- 4, 8, 9. the GGUF cache


def _write_tiny_gguf():
    spec = importlib.util.spec_from_file_location("_gguf_writer", Path(__file__).with_name("test_models.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.write_tiny_gguf


@pytest.fixture(scope="module")
def converted(tmp_path_factory, tiny_tokenizer):
    """A tiny GGUF file and a cache that already holds its conversion (copied per test: converting is slow)."""
    root = tmp_path_factory.mktemp("gguf_cache")
    gguf = _write_tiny_gguf()(root / "tiny.F32.gguf", tiny.make_model("llama", tiny_tokenizer, seed=3),
                              tiny_tokenizer)
    load_model(str(gguf), device="cpu", cache_dir=root / "cache")
    return gguf, root / "cache"


def cache_copy(converted, tmp_path) -> tuple[Path, Path, Path]:
    gguf, cache = converted
    shutil.copytree(cache, tmp_path / "cache")
    (folder,) = [p for p in (tmp_path / "cache" / "gguf").iterdir() if not p.name.startswith(".")]
    return gguf, tmp_path / "cache", folder


def test_a_load_error_from_the_cache_keeps_the_cache(converted, tmp_path, monkeypatch):
    gguf, cache, folder = cache_copy(converted, tmp_path)
    def files():  # the conversion's own files (the record of their check may be added: conversion_check.py)
        return {p.name: p.stat().st_mtime_ns for p in folder.iterdir() if p.name != conversion_check.VERDICT}

    before = files()

    def refuse(*args, **kwargs):
        raise ModelLoadError("could not load: max_memory leaves no room for the model")

    monkeypatch.setattr(models, "_load_folder", refuse)
    stages = []
    with pytest.raises(ModelLoadError, match="max_memory"):
        load_model(str(gguf), device="cpu", cache_dir=cache, progress=lambda p: stages.append(p.stage))
    assert "convert" not in stages
    assert files() == before


def test_a_cache_file_whose_hash_changed_is_rebuilt(converted, tmp_path):
    gguf, cache, folder = cache_copy(converted, tmp_path)
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-8:] = b"\xff" * 8  # same size, damaged tensor bytes: loads, but wrong. Only the hash can tell.
    weights.write_bytes(bytes(data))
    assert gguf_cache.cache_damage(folder) is not None
    assert gguf_cache.cache_damage(converted[1] / "gguf" / folder.name) is None


def test_stale_partial_conversions_are_removed_at_start(converted, tmp_path):
    gguf, cache, folder = cache_copy(converted, tmp_path)
    root = cache / "gguf"
    here = gguf_cache._HOST
    dead = root / f".partial-{'a' * 12}-999999999-{here}-x1"  # no such process
    alive = root / f".partial-{'b' * 12}-{os.getppid()}-{here}-x2"  # a conversion still running
    elsewhere = root / f".partial-{'c' * 12}-999999999-{'0' * 8}-x3"  # another machine's, sharing the cache
    for partial in (dead, alive, elsewhere):
        partial.mkdir()
        (partial / "model.safetensors").write_bytes(b"\0" * 1000)
    loaded = load_model(str(gguf), device="cpu", cache_dir=cache)  # a cache hit: nothing to convert
    assert loaded.source.endswith("(cached safetensors)")
    assert not dead.exists() and alive.exists() and elsewhere.exists()


def test_a_cache_dir_that_is_a_file_is_one_error_line(capsys, converted, tmp_path, monkeypatch):
    not_a_dir = tmp_path / "cache"
    not_a_dir.write_text("")
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(not_a_dir))
    code, err = run_cli(capsys, "generate", "hi", "--verifier", str(converted[0]), "--device", "cpu")
    assert code == 2 and "cache" in one_error_line(err)


def test_a_read_only_cache_is_one_error_line(capsys, converted, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))

    def read_only(*args, **kwargs):  # the tests may run as root, for whom chmod does not bite
        raise PermissionError(13, "Permission denied", str(tmp_path / "cache"))

    monkeypatch.setattr(gguf_cache.tempfile, "mkdtemp", read_only)
    code, err = run_cli(capsys, "generate", "hi", "--verifier", str(converted[0]), "--device", "cpu")
    assert code == 2 and "SPECDEC_CACHE_DIR" in one_error_line(err)


@pytest.mark.parametrize("error", ["oserror", "safetensors"])
def test_a_full_disk_during_conversion_is_one_error_line_and_leaves_nothing(capsys, converted, tmp_path,
                                                                            monkeypatch, error):
    """A full disk surfaces as OSError from Python's writes, but as safetensors' own SafetensorError (not an
    OSError) from the weights' writer."""
    from safetensors import SafetensorError
    from transformers import PreTrainedModel

    def disk_full(self, folder, *args, **kwargs):  # writes half a shard, then the disk is full
        (Path(folder) / "model.safetensors").write_bytes(b"\0" * 1000)
        if error == "oserror":
            raise OSError(28, "No space left on device")
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: '
                              '"No space left on device" })')

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", disk_full)
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path / "cache"))
    code, err = run_cli(capsys, "generate", "hi", "--verifier", str(converted[0]), "--device", "cpu")
    assert code == 2 and "No space left" in one_error_line(err)
    assert list((tmp_path / "cache" / "gguf").iterdir()) == []


def test_max_memory_too_small_for_the_model_is_a_load_error(folders):
    """accelerate puts what fits nowhere on the meta device; the first forward pass then failed with
    'Tensor.item() cannot be called on meta tensors' (a traceback, exit 1)."""
    with pytest.raises(ModelLoadError, match="does not fit"):
        load_model(folders["verifier"], device="cpu", device_map="auto", max_memory={"cpu": 2000})


# --------------------------------------------------------------------------- issue 25: configs claiming absurd sizes


@pytest.mark.parametrize("field, value", [("num_hidden_layers", 1_000_000), ("hidden_size", 10**9),
                                          ("intermediate_size", 10**12), ("vocab_size", 10**11)])
def test_a_config_claiming_absurd_sizes_is_refused_before_building_the_model(capsys, folders, tmp_path, field, value):
    """Issue 25: a config claiming 10^6 layers made loading hang while memory grew by ~40 MB/s."""
    folder = tmp_path / "absurd"
    shutil.copytree(folders["verifier"], folder)
    config = json.loads((folder / "config.json").read_text())
    config[field] = value
    (folder / "config.json").write_text(json.dumps(config))
    code, err = run_cli(capsys, "generate", "hi", "--verifier", str(folder), "--device", "cpu")
    assert code == 2 and "config.json describes at least" in one_error_line(err)  # the check before building


def test_the_weights_check_passes_every_tiny_architecture(tiny_models_dir):
    from specdec_core.loading.weights_check import check_weights, implied_parameters, stored_elements

    for name, folder in tiny_models_dir.items():
        check_weights(folder, spec=name)
        config = json.loads((folder / "config.json").read_text())
        stored = sum(stored_elements(p) for p in folder.glob("*.safetensors"))
        assert implied_parameters(config) <= stored, name  # a lower bound, even with tied embeddings


def test_help_says_a_seed_reproduces_a_tree_reply_only_with_the_same_tree_size(capsys):
    """Issue 25: a seed did not reproduce a sampled reply across --tree-nodes N, and nothing said so."""
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "reproduces a reply only with the same N" in help_text


def test_a_negative_seed_is_refused_as_the_readme_says(capsys, folders):
    code, err = run_cli(capsys, "generate", "hi", "--verifier", folders["verifier"], "--device", "cpu",
                        "--seed", "-1")
    assert code == 2 and "seed" in one_error_line(err)
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    assert "a seed outside 0 to 2^63 − 1" in readme

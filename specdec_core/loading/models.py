"""Model specs -> loaded models: the one entry point, `load_model`, and what it returns (`LoadedModel`).

A load resolves the spec to a folder (specs.py; GGUF files through gguf_cache.py), loads it with
transformers on the chosen device and dtype, checks the weights, and on a CPU applies the CPU backend
(cpu_speed.py, cpu_attention.py). This module knows nothing about generation or Qt.
"""

from __future__ import annotations

import functools
import json
import pickle
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from specdec_core.errors import ModelLoadError, first_line
from specdec_core.loading import cpu_attention, cpu_speed, gguf_cache, quantised, specs
from specdec_core.loading.gguf_cache import default_cache_dir
from specdec_core.loading.progress import ProgressCallback, ProgressError, Reporter, quiet_transformers_bars
from specdec_core.loading.weights_check import check_weights

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

_CONTEXT_ATTRS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")

_FALLBACK_CONTEXT = 2048

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}


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
    # What the weights run as: a GGUF's own quantisation ("Q4_K 88 %, Q6_K 12 %"), "int8"/"int4" quantised at load,
    # or the float dtype ("float32").
    weights: str = ""
    notes: tuple[str, ...] = ()  # lines for the user about how the model was loaded (a format fallen back from)

    @property
    def vocab_size(self) -> int:
        return len(self.tokenizer)

    @property
    def producible_ids(self) -> int:
        """Token ids 0..n-1 this model can produce: its tokenizer's, cut to its output layer's rows
        (rows past the tokenizer are padding; a layer smaller than the tokenizer drops the rest)."""
        head = self.model.get_output_embeddings()
        rows = int(getattr(head, "out_features", 0) or head.weight.shape[0]) if head is not None \
            else int(self.model.config.vocab_size)
        return min(len(self.tokenizer), rows)


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


# A draft language model's "auto": bfloat16 on a CPU whose oneDNN runs bfloat16 natively (AVX512-BF16, AMX), else
# "auto". A draft on the CPU is read whole for every token it drafts: in bfloat16 it reads half the bytes, and the
# verifier checks every drafted token, so the output stays the verifier's (docs/performance.md, "bfloat16, and
# what stays exact"). A draft head keeps "auto": it trains on the verifier's float32 states.
DRAFT_AUTO = "draft-auto"


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


WEIGHT_FORMATS = ("auto", "float", "int8", "int4")


def load_model(spec: str, *, device: str = "auto", dtype: str = "auto", trust_remote_code: bool = False,
               device_map: str | None = None, max_memory: dict | None = None,
               progress: ProgressCallback | None = None, cache_dir: Path | None = None,
               weights: str = "auto", activation_bits: int = 16) -> LoadedModel:
    """Resolve `spec`, load its tokenizer and weights, and return them ready for generation.

    `activation_bits` (quantised weights only): 16 quantises each product's input rows to about 15 bits; 8 to one
    byte, as llama.cpp does (half the integer work; a small model's replies may change).

    `weights` (on a CPU): "auto" runs a quantised GGUF file in its own quantisation where the kernel takes it
    (quantised.py), else floats; "float" always converts to floats (`dtype`); "int8" and "int4" quantise the float
    weights at load (groups of 32). A format that cannot run here falls back to floats with a note saying why.

    `device_map="auto"` (with optional `max_memory`) lets accelerate spread a large model over GPUs and
    CPU; otherwise the whole model goes to `device`. An exception raised by `progress` aborts the load
    and is re-raised as is (the app uses that to cancel).
    """
    start = time.perf_counter()
    report = Reporter(progress)
    spec = str(spec)
    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    try:
        with quiet_transformers_bars():
            loaded = _load(spec, device=device, dtype=dtype, trust_remote_code=trust_remote_code,
                           device_map=device_map, max_memory=max_memory, report=report, cache=cache, start=start,
                           weights=weights)
    except ProgressError as error:
        raise error.original from None
    _set_activation_bits(loaded, activation_bits)
    return loaded


def _set_activation_bits(loaded: LoadedModel, bits: int) -> None:
    if bits == 16:
        return
    if bits != 8:
        raise ModelLoadError(f"activations are quantised to 8 or 16 bits, not {bits}")
    if quantised.set_activation_bytes(loaded.model, 1):
        loaded.weights += ", 8-bit activations"
    else:
        loaded.notes += (f"{loaded.name} runs {loaded.weights} weights: 8-bit activations apply to quantised "
                         "weights only",)


def _load(spec: str, *, device: str, dtype: str, trust_remote_code: bool, device_map: str | None,
          max_memory: dict | None, report: Reporter, cache: Path, start: float, weights: str = "auto") -> LoadedModel:
    report("resolve", None, f"Resolving {spec}")
    target = resolve_device(device)
    if weights not in WEIGHT_FORMATS:
        raise ModelLoadError(f"unknown weight format {weights!r}: use {', '.join(WEIGHT_FORMATS)}")
    # A quantised GGUF runs in its own quantisation: on the CPU in the kernel library's products, on a GPU its 4-bit
    # tensors in torch's int4 product and the rest in bfloat16 (device_quantised.py, untested on a GPU here).
    own = weights == "auto" and device_map is None and (
        target.type == "cpu" and dtype in ("auto", DRAFT_AUTO, "float32")
        or target.type in ("cuda", "mps") and dtype in ("auto", DRAFT_AUTO, "bfloat16"))
    resolved = specs.resolve(spec, report=report, trust_remote_code=trust_remote_code, cache_dir=cache, quantised=own)
    if resolved.gguf is not None:
        return _load_quantised_gguf(spec, resolved, report=report, cache=cache, start=start, target=target,
                                    narrow=dtype == DRAFT_AUTO)
    if dtype == DRAFT_AUTO:
        native = target.type == "cpu" and cpu_speed.packing_available(torch.bfloat16)
        dtype = "bfloat16" if native and not _is_draft_head(resolved.folder) else "auto"
    torch_dtype = resolve_dtype(dtype, target)
    placement = device_map or str(target)
    report("load", None, f"Loading {resolved.name} ({gguf_cache.dtype_name(torch_dtype)}, {placement})")
    load = functools.partial(_load_folder, spec=spec, dtype=torch_dtype, device=target, device_map=device_map,
                             max_memory=max_memory, trust_remote_code=trust_remote_code)
    if resolved.folder.parent == cache / "gguf" and torch_dtype != torch.float32:
        resolved = resolved._replace(folder=gguf_cache.dtype_variant(resolved.folder, torch_dtype, report))
    try:
        model, tokenizer = load(resolved.folder)
    except ModelLoadError:
        # A cached conversion that looks whole but does not load may hold a damaged file of the right
        # size: convert again, once, but only when its files prove it (a hash that no longer matches, a
        # weights file that cannot be read). Any other failure is the request's (--max-memory, a device
        # that is full ...): reconverting would cost ~20 s and then fail the same way.
        if not resolved.from_gguf_cache or gguf_cache.cache_damage(resolved.folder) is None:
            raise
        shutil.rmtree(resolved.folder, ignore_errors=True)
        resolved = specs.resolve(spec, report=report, trust_remote_code=trust_remote_code, cache_dir=cache)
        model, tokenizer = load(resolved.folder)
    loaded = _describe(model, tokenizer, spec=spec, name=resolved.name, source=resolved.source, load_s=0.0)
    loaded.cache_dir = cache
    loaded.head_output = _head_output_layer(model)
    loaded.notes = (resolved.note,) if resolved.note else ()
    if weights in ("int8", "int4"):
        _quantise_at_load(loaded, int(weights[3:]), target, report)
    if device_map is None and target.type == "cpu":
        _apply_cpu_backend(loaded, report)
    loaded.weights = quantised.weight_format(loaded.model)
    loaded.load_s = time.perf_counter() - start
    report("done", 1.0, f"Loaded {resolved.name} from {resolved.source} in {loaded.load_s:.1f} s")
    return loaded


def _load_quantised_gguf(spec: str, resolved: specs.Resolved, *, report: Reporter, cache: Path,
                         start: float, target: torch.device, narrow: bool = False) -> LoadedModel:
    """A GGUF file's model with its quantised weights read from the file (packed_gguf.py), on the CPU; on a GPU
    (`target`), its 4-bit tensors moved into torch's int4 form and the rest into bfloat16 (device_quantised.py).
    `narrow` (a draft's own auto): on the CPU its 5- to 8-bit layers are requantised to 4 bits, half the bytes a
    drafted token reads; the verifier checks every drafted token, so what it outputs does not change."""
    from transformers import AutoTokenizer

    from specdec_core.loading import device_quantised, packed_gguf

    report("load", None, f"Loading {resolved.name} in its own quantisation ({target.type})")
    try:
        tokenizer = AutoTokenizer.from_pretrained(resolved.folder)
        narrow = narrow and not device_quantised.moves_to(target)
        if narrow:
            report("load", None, f"Loading {resolved.name} with its wider layers in 4 bits, for drafting")
        model = packed_gguf.build(resolved.gguf, resolved.folder, narrow=narrow)
    except (OSError, ValueError, KeyError) as error:
        raise ModelLoadError(f"could not load {spec!r} from {resolved.gguf}: {first_line(error)}") from error
    notes: tuple[str, ...] = ()
    moved = device_quantised.moves_to(target)
    if moved:
        _, _, why = device_quantised.to_device(model, target)
        notes = (f"{resolved.name}'s 4-bit weights run as bfloat16: {why}",) if why else ()
    loaded = _describe(model, tokenizer, spec=spec, name=resolved.name, source=resolved.source, load_s=0.0)
    loaded.cache_dir = cache
    loaded.notes += notes
    if moved:
        loaded.weights = device_quantised.weight_format(model)
    else:
        if narrow:  # a tied output layer shares the embeddings' rows, which stay as they are: it gets its own
            quantised.narrow_to_4_bits(model)
            quantised.keep_frequent_outputs(model, _special_ids(tokenizer))
        loaded.weights = quantised.weight_format(model)
        _run_quantised(model)
    loaded.load_s = time.perf_counter() - start
    report("done", 1.0, f"Loaded {resolved.name} ({loaded.weights}) in {loaded.load_s:.1f} s")
    return loaded


def _special_ids(tokenizer) -> list[int]:
    """A tokenizer's special and added tokens' ids (the end of a turn among them, far past the frequent ids)."""
    return sorted({*tokenizer.all_special_ids, *tokenizer.get_added_vocab().values()})


def _quantise_at_load(loaded: LoadedModel, bits: int, target: torch.device, report: Reporter) -> None:
    """`--weights int8/int4` on a float model: its linear layers quantised in groups of 32, or a note why not."""
    from specdec_core.loading import qkernel

    lib = qkernel.library(loaded.cache_dir) if target.type == "cpu" else None
    if lib is None or loaded.head_output is not None:
        why = "a draft head keeps float weights" if loaded.head_output is not None else (
            qkernel.unavailable_reason() or f"the quantised kernel runs on the CPU only, not {target}")
        loaded.notes += (f"{loaded.name} runs as {gguf_cache.dtype_name(loaded.dtype)} weights, not int{bits}: {why}",)
        return
    report("load", None, f"Quantising {loaded.name} to int{bits}")
    quantised.quantise_linears(loaded.model.float(), bits=bits, lib=lib)
    loaded.dtype = torch.float32
    _run_quantised(loaded.model)


def _run_quantised(model: PreTrainedModel) -> None:
    """A model with quantised layers: batch-invariant attention, and the lean decoder layers where they fit."""
    from specdec_core.loading import lean_layers

    cpu_attention.attend_row_by_row(model)
    lean_layers.streamline(model)


def _is_draft_head(folder: Path) -> bool:
    from specdec_core.loading.draft_head import MODEL_TYPE

    try:
        return json.loads((Path(folder) / "config.json").read_text()).get("model_type") == MODEL_TYPE
    except (OSError, ValueError, AttributeError):
        return False


def _head_output_layer(model: PreTrainedModel) -> torch.nn.Linear | None:
    """For a draft head, its output layer (hidden size -> head size), zero until a drafter fills it; else None."""
    from specdec_core.loading.draft_head import SpecdecHeadModel

    if not isinstance(model, SpecdecHeadModel):
        return None
    weight = next(model.parameters())
    layer = torch.nn.utils.skip_init(torch.nn.Linear, model.config.hidden_size, model.config.head_size, bias=False,
                                     device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        layer.weight.zero_()
    return layer.requires_grad_(False)


def _apply_cpu_backend(loaded: LoadedModel, report: Reporter) -> None:
    """The CPU backend, for a model loaded whole onto the CPU in fp32: each linear layer's fastest few-row
    product form on this machine (cpu_speed.py; a draft head's output layer included) and grouped-query
    attention without copies (cpu_attention.py). A model loaded without it computes the same, only slower."""
    if not cpu_speed.applies_to(loaded.model):
        return
    layers = loaded.model if loaded.head_output is None else torch.nn.ModuleList([loaded.model, loaded.head_output])
    # A draft head trains (adaptation) and fills its output layer later: its weights stay plain tensors.
    timing = "Timing this CPU's matrix kernels for the model's shapes (first load only)"
    cpu_speed.speed_up(layers, cache_dir=loaded.cache_dir, hold_packed=loaded.head_output is None,
                       on_measure=lambda: report("tune", None, timing))
    cpu_attention.keep_grouped_heads(loaded.model)


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
                                 f"weights are unpickled ({reason.group(1) if reason else first_line(error)})"
                                 ) from error
        raise ModelLoadError(f"could not load {spec!r} from {folder}: {first_line(error)}") from error
    model.eval()
    return model, tokenizer


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
    if isinstance(embeddings, quantised.QuantEmbedding):  # its `weight` would dequantise the whole table
        device, dtype = embeddings.storage.data.device, torch.float32  # its rows come out as float32
    else:
        embeddings = embeddings.weight if embeddings is not None else next(model.parameters())  # a head has none
        device, dtype = embeddings.device, embeddings.dtype
    return LoadedModel(model=model, tokenizer=tokenizer, spec=spec, name=name, device=device,
                       dtype=dtype, context_length=_context_length(model.config),
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

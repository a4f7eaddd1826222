"""A GGUF file -> a transformers model whose weights stay in the file's own quantisation.

The model's skeleton comes from its config (converted once from the file's metadata, with the tokenizer: gguf_cache);
its weights are read from the memory-mapped file: each quantised linear layer becomes a QuantLinear over the same
numbers the file holds, the embeddings a QuantEmbedding (shared with a tied output layer), and the small float
tensors (norms, biases) float32 parameters. Nothing is written to disk but the small config and tokenizer.

`plan(path)` says first whether this path applies (an architecture whose tensors map one to one, every large tensor
of a type the kernel takes) and why not otherwise; the loader then converts the file to floats as before.
"""

from __future__ import annotations

import mmap
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from specdec_core.defaults import available_cpus
from specdec_core.loading import gguf_blocks, qkernel
from specdec_core.loading.quantised import QuantEmbedding, QuantLinear, QuantStorage

# GGUF architectures whose tensors map one to one onto a transformers model of the same name. "llama" files store
# the query and key rows of each head with their rotary halves interleaved (llama.cpp's converter does this).
_ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "mistral": "llama"}
_INTERLEAVED = {"llama", "mistral"}
_FLOAT_TYPES = {"F32", "F16", "BF16"}
NOT_QUANTISED = "its weights are not quantised"


@dataclass(frozen=True)
class Plan:
    """Whether a GGUF file can run in its own quantisation here, and the file's facts that decide it."""

    usable: bool
    reason: str  # why not, for the one line the loader prints; "" when usable
    architecture: str
    types: dict[str, int]  # GGUF type name -> weights of that type among 2-D tensors


@dataclass(frozen=True)
class _Tensor:
    """One tensor of the file: its GGML type's name, GGUF shape (row length first) and data, mapped, not read:
    [rows, bytes per row] uint8 for a quantised type, the values for a float one."""

    name: str
    type_name: str
    shape: tuple[int, ...]
    data: np.ndarray


def _read(path: Path) -> tuple[dict, dict[str, _Tensor], np.memmap]:
    """The file's metadata (without its big arrays), its tensors, and the read-only mapping they lie in. The header
    is read by gguf_header (the gguf package's reader parses a large vocabulary field by field, slowly)."""
    import gguf

    from specdec_core.loading.gguf_header import read_gguf_facts

    facts = read_gguf_facts(path)
    mapped = np.memmap(path, dtype=np.uint8, mode="r")
    tensors = {}
    for name, shape, ggml_type, offset in facts.tensors:
        kind = gguf.GGMLQuantizationType(ggml_type)
        per_block, size = gguf.GGML_QUANT_SIZES[kind]
        cols, rows = int(shape[0]), int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1
        start = facts.data_start + offset
        row_bytes = cols // per_block * size
        raw = mapped[start:start + rows * row_bytes]
        if raw.size != rows * row_bytes or cols % per_block:
            raise ValueError(f"the tensor {name} lies outside the file or does not fill its blocks")
        raw = raw.reshape(rows, row_bytes)
        if kind.name in _FLOAT_TYPES:
            raw = raw.view({"F32": np.float32, "F16": np.float16, "BF16": np.uint16}[kind.name])
            if kind.name == "BF16":
                raw = (raw.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = _Tensor(name, kind.name, tuple(int(s) for s in shape), raw)
    return facts.metadata, tensors, mapped


def plan(path: Path, *, kernel: bool = True) -> Plan:
    """Whether `path` runs in its own quantisation here. `kernel=False` asks only what is known of the kernel without
    building it (turned off, no compiler): the caller builds it beside other work and asks qkernel.library() itself
    (specs.py)."""
    metadata, tensors, _ = _read(path)
    arch = str(metadata.get("general.architecture") or "?")
    types: dict[str, int] = {}
    for tensor in tensors.values():
        if len(tensor.shape) == 2:
            types[tensor.type_name] = types.get(tensor.type_name, 0) + int(np.prod(tensor.shape))
    quantised = {name for name in types if name not in _FLOAT_TYPES}
    if arch not in _ARCHITECTURES:
        return Plan(False, f"its architecture {arch!r} has no quantised path here", arch, types)
    if not quantised:
        return Plan(False, NOT_QUANTISED, arch, types)
    missing = sorted(name for name in quantised if not gguf_blocks.decodable(name))
    if missing:
        return Plan(False, f"no kernel for its {', '.join(missing)} tensors", arch, types)
    refused = qkernel.refusal()
    if refused:
        return Plan(False, refused, arch, types)
    if kernel and qkernel.library() is None:
        return Plan(False, qkernel.unavailable_reason(), arch, types)
    return Plan(True, "", arch, types)


def build(path: Path, folder: Path, *, narrow: bool = False) -> nn.Module:
    """The model of `folder`'s config with the weights of the GGUF file `path`, quantised layers kept quantised;
    with `narrow` (a draft), the projections held in more than 4 bits requantised to 4 (QuantStorage.narrowed) as each
    is decoded, so that the wider form is never held whole."""
    import gguf
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    metadata, tensors, mapped = _read(path)
    arch = str(metadata.get("general.architecture"))
    config = AutoConfig.from_pretrained(folder)
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[_ARCHITECTURES[arch].upper()], config.num_hidden_layers)
    lib = qkernel.library()
    storages = _decode_all(tensors, config, arch, lib, mapped, narrow)

    def storage(gguf_name: str) -> QuantStorage:
        return storages[gguf_name]  # decoded with its rows in transformers' order already

    embed_name = names.get_name("model.embed_tokens.weight", try_suffixes=(".weight",))
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            full = f"{parent_name}.{child_name}" if parent_name else child_name
            if isinstance(child, nn.Linear):
                gguf_name = names.get_name(f"{full}.weight", try_suffixes=(".weight",))
                if gguf_name not in tensors and full == "lm_head":
                    gguf_name = embed_name  # a tied output layer: the embeddings' rows
                heads = _interleaved_heads(config, full) if arch in _INTERLEAVED else None
                bias = _float(tensors, names.get_name(f"{full}.bias", try_suffixes=(".bias",))) \
                    if child.bias is not None else None
                setattr(parent, child_name, _linear(tensors, gguf_name, heads, bias, storage, lib))
            elif isinstance(child, nn.Embedding) and embed_name in tensors \
                    and tensors[embed_name].type_name not in _FLOAT_TYPES:
                setattr(parent, child_name, QuantEmbedding(storage(embed_name)))
    _fill_floats(model, names, tensors)
    model.eval()
    return model


# Projections that read the same input: decoded side by side, so that a lean layer multiplies them in one call.
_SIDE_BY_SIDE = (("attn_q", "attn_k", "attn_v"), ("ffn_gate", "ffn_up"))


def _decode_all(tensors: dict, config, arch: str, lib, root: np.memmap | None = None,
                narrow: bool = False) -> dict[str, QuantStorage]:
    """Every quantised matrix of the file, decoded by the kernel library straight from the mapped file into the
    kernel's layout; q, k and v (and gate and up) of a layer into one storage when they share a type. The tensors
    decode on every CPU at once (the C calls release the GIL)."""
    batches: list[list[tuple[str, _Tensor]]] = []
    joined: set[str] = set()
    for layer in range(config.num_hidden_layers):
        for group in _SIDE_BY_SIDE:  # runs of neighbours of one type (a Q4_K_M file keeps v in Q6_K, q and k not)
            names = [f"blk.{layer}.{part}.weight" for part in group]
            for run in _runs([(name, tensors.get(name)) for name in names]):
                if len(run) > 1:
                    batches.append(run)
                    joined.update(name for name, _ in run)
    batches += [[(name, tensor)] for name, tensor in tensors.items()
                if name not in joined and len(tensor.shape) == 2 and tensor.type_name in qkernel.DECODED]
    storages: dict[str, QuantStorage] = {}
    with ThreadPoolExecutor(max_workers=max(1, available_cpus())) as pool:
        decoded = pool.map(lambda run: _decode_together([n for n, _ in run], [t for _, t in run], config, arch, lib,
                                                        root, narrow), batches)
        for part in decoded:
            storages.update(part)
    return storages


def _runs(named: list[tuple[str, _Tensor | None]]) -> list[list[tuple[str, _Tensor]]]:
    """Consecutive decodable tensors of one type and row length."""
    runs: list[list[tuple[str, _Tensor]]] = []
    for name, tensor in named:
        if tensor is None or tensor.type_name not in qkernel.DECODED:
            runs.append([])
            continue
        last = runs[-1][-1][1] if runs and runs[-1] else None
        if last is not None and (last.type_name, last.shape[0]) == (tensor.type_name, tensor.shape[0]):
            runs[-1].append((name, tensor))
        else:
            runs.append([(name, tensor)])
    return [run for run in runs if run]


def _decode_together(names: list[str], found: list[_Tensor], config, arch: str, lib,
                     root: np.memmap | None = None, narrow: bool = False) -> dict[str, QuantStorage]:
    type_name, cols = found[0].type_name, int(found[0].shape[0])
    counts = [int(t.data.shape[0]) for t in found]
    tables = qkernel.table_form(lib, type_name)
    data_shape, table_shape = qkernel.decoded_shapes(type_name, sum(counts), cols, tables == 1)
    _, _, group, nibbles = qkernel.DECODED[type_name]
    data = torch.empty(data_shape, dtype=torch.uint8 if nibbles else torch.int8)
    if tables == 1:  # the K-quant's own tables, bytes a row; no float offsets
        scales, offsets = torch.empty(table_shape, dtype=torch.uint8), torch.empty((sum(counts), 0))
    else:
        scales, offsets = torch.empty(table_shape, dtype=torch.float32), torch.empty(table_shape, dtype=torch.float32)
    start = 0
    for name, tensor, count in zip(names, found, counts):
        heads = _file_heads(config, name) if arch in _INTERLEAVED else None
        order = None if heads is None else _deinterleave_order(count, heads)
        qkernel.decode_into(lib, type_name, np.asarray(tensor.data), cols, order, data[start:start + count],
                            scales[start:start + count], offsets[start:start + count], tables == 1)
        if root is not None:
            _release(root, np.asarray(tensor.data))
        start += count
    if tables == 2:  # the file's own halves (decoded into floats, which hold them exactly)
        scales, offsets = scales.half(), offsets.half()
    whole = QuantStorage.of_tensors(data, scales, offsets, cols=cols, group=group, nibbles=nibbles,
                                    source_type=type_name, tables=tables)
    if narrow and not nibbles and _EMBEDDINGS not in names:  # (the embeddings' rows are looked up, not multiplied)
        whole = whole.narrowed(lib)
    if len(names) == 1:
        return {names[0]: whole}
    starts = np.cumsum([0, *counts])
    return {name: whole.part(int(a), int(b), whole.source_type) for name, a, b in zip(names, starts[:-1], starts[1:])}


_EMBEDDINGS = "token_embd.weight"


def _release(root: np.memmap, part: np.ndarray) -> None:
    """Let go of the file's pages under a decoded tensor `part` of the mapping `root`: they stay in the page cache,
    but no longer count in this process's memory, so a load never holds the file and its decoded weights at once."""
    handle = getattr(root, "_mmap", None)
    if handle is None or not hasattr(mmap, "MADV_DONTNEED"):
        return
    start = part.ctypes.data - root.ctypes.data
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE  # whole pages only: neighbours may share the edge pages
    length = (start + part.nbytes - first) // mmap.PAGESIZE * mmap.PAGESIZE
    if length > 0:
        try:
            handle.madvise(mmap.MADV_DONTNEED, first, length)
        except (OSError, ValueError):
            pass


def _file_heads(config, gguf_name: str) -> int | None:
    """The heads whose rotary halves a llama GGUF interleaves in this tensor's rows (q and k), else None."""
    part = gguf_name.split(".")[-2]
    return {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads}.get(part)


def _linear(tensors: dict, gguf_name: str, heads: int | None, bias: torch.Tensor | None, storage, lib) -> QuantLinear:
    tensor = tensors.get(gguf_name)
    if tensor is None:
        raise ValueError(f"the file has no tensor {gguf_name}")
    if tensor.type_name in _FLOAT_TYPES:  # a float layer in a quantised file: 8 bits in groups of 32
        weight = _rows_in_order(np.asarray(tensor.data, dtype=np.float32), heads)
        grouped = gguf_blocks.requantise(weight, bits=8)
        return QuantLinear(QuantStorage(grouped, f"{tensor.type_name}->int8"), bias, lib)
    return QuantLinear(storage(gguf_name), bias, lib)


def _interleaved_heads(config, name: str) -> int | None:
    if name.endswith("q_proj"):
        return config.num_attention_heads
    if name.endswith("k_proj"):
        return config.num_key_value_heads
    return None


def _deinterleave_order(rows: int, heads: int) -> np.ndarray:
    """Row order that undoes llama.cpp's interleaving of each head's rotary halves: `gguf_rows[order]` are the rows in
    transformers' order (within a head, GGUF keeps pairs (j, half) where transformers keeps (half, j))."""
    per_head = rows // heads // 2
    return np.arange(rows).reshape(heads, per_head, 2).swapaxes(1, 2).reshape(rows)


def _rows_in_order(weight: np.ndarray, heads: int | None) -> np.ndarray:
    return weight if heads is None else weight[_deinterleave_order(weight.shape[0], heads)]


def _float(tensors: dict, gguf_name: str) -> torch.Tensor:
    tensor = tensors.get(gguf_name)
    if tensor is None:
        raise ValueError(f"the file has no tensor {gguf_name}")
    if tensor.type_name not in _FLOAT_TYPES:
        cols = int(tensor.shape[0])
        raw = np.asarray(tensor.data).reshape(-1, np.asarray(tensor.data).shape[-1])
        return torch.from_numpy(gguf_blocks.decode(tensor.type_name, raw, cols).dequantise().reshape(-1))
    return torch.from_numpy(np.array(tensor.data, dtype=np.float32).reshape(-1))


def _fill_floats(model: nn.Module, names, tensors: dict) -> None:
    """Every parameter still without data (norms, biases, float embeddings) from the file's float tensors."""
    for module_name, module in model.named_modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if param.device.type != "meta":
                continue
            full = f"{module_name}.{name}" if module_name else name
            gguf_name = names.get_name(full, try_suffixes=(".weight", ".bias"))
            if gguf_name is None or gguf_name not in tensors:
                raise ValueError(f"the file has no tensor for {full}")
            values = _float(tensors, gguf_name).reshape(param.shape)
            setattr(module, name, nn.Parameter(values, requires_grad=False))

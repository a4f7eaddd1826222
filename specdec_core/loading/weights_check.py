"""A model folder's config.json against the tensors its safetensors files hold, before building the model.

transformers builds the model the config describes, then fills it from the weights: a config claiming a
million layers (or a hidden size of 10^9) allocates for minutes, gigabytes at a time, before any weight
is read. The sizes a config implies are cheap to check: a lower bound on its parameters (embeddings, and
per layer the attention's four projections and two MLP matrices) against the elements listed in the
safetensors headers (8 bytes of length, then JSON; no tensor is read). Torch-free.

Only an absurd gap is refused: quantised weights pack several parameters into one element, and the
bound leaves out norms, biases and experts, so a real model is never near it.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

from specdec_core.errors import ModelLoadError

PACKING_LIMIT = 16  # parameters one stored element may stand for (4-bit weights in int32: 8)
SLACK = 10_000_000  # parameters allowed beyond that, so tiny models with rounding never trip it
_HEADER_LIMIT = 100_000_000  # bytes of a safetensors header; larger is damage, left to the loader


def check_weights(folder: Path, *, spec: str) -> None:
    """Raise ModelLoadError when `folder`'s config implies far more parameters than its weights hold.
    Folders without safetensors files, or with a config this cannot read, are left to transformers."""
    files = sorted(Path(folder).glob("*.safetensors"))
    config = _read_json(Path(folder) / "config.json")
    if not files or not isinstance(config, dict):
        return
    implied = implied_parameters(config)
    present = 0
    for path in files:
        elements = stored_elements(path)
        if elements is None:
            return
        present += elements
    if implied is not None and implied > PACKING_LIMIT * present + SLACK:
        raise ModelLoadError(
            f"refused to load {spec!r}: its config.json describes at least {implied:,} parameters, but its "
            f"weights hold {present:,} values: the config's sizes (layers, hidden size, vocabulary) are "
            "wrong or hostile")


def implied_parameters(config: dict) -> int | None:
    """A lower bound on the parameters a decoder-only config describes (None: sizes it does not state)."""
    text = config.get("text_config")
    if isinstance(text, dict):  # multimodal configs keep the language model's sizes apart
        config = {**config, **text}
    hidden = _size(config, "hidden_size", "n_embd", "d_model")
    layers = _size(config, "num_hidden_layers", "n_layer", "num_layers")
    if hidden is None or layers is None:
        return None
    vocab = _size(config, "vocab_size") or 0
    inner = _size(config, "intermediate_size", "n_inner", "ffn_dim") or 4 * hidden
    heads = _size(config, "num_attention_heads", "n_head") or 1
    kv_heads = min(_size(config, "num_key_value_heads") or heads, heads)
    kv_width = hidden * kv_heads // heads
    per_layer = 2 * hidden * hidden + 2 * hidden * kv_width + 2 * hidden * inner
    return vocab * hidden + layers * per_layer


def stored_elements(path: Path) -> int | None:
    """The number of values a safetensors file's header lists (None: a header this cannot read)."""
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > _HEADER_LIMIT:
                return None
            header = json.loads(f.read(length))
    except (OSError, struct.error, ValueError):
        return None
    if not isinstance(header, dict):
        return None
    total = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
            return None
        total += math.prod(shape)
    return total


def _size(config: dict, *names: str) -> int | None:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None


__all__ = ["check_weights", "implied_parameters", "stored_elements"]

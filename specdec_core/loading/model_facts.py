"""The facts a listing shows about a model on disk, read from headers only: GGUF files and transformers folders.

A GGUF file's come from its header (gguf_header.py); a folder's from config.json, the safetensors headers (the
parameter count without reading a weight) and tokenizer.json (the vocabulary's hash, computed the way a GGUF's is,
so a model's GGUF and its transformers folder share one). Failures are OSError or ValueError with one line.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from specdec_core.loading import gguf_header, kept_files

_WEIGHTS = ("*.safetensors", "pytorch_model*.bin")

_SAFETENSORS_HEADER_MAX = 100 << 20  # a header larger than this is a damaged file


@dataclass(frozen=True)
class ModelFacts:
    format: str  # "gguf" | "transformers"
    size: int  # bytes on disk (a folder: its weights)
    architecture: str  # "qwen2", "llama" ... ("" when not said)
    quantisation: str  # "Q4_K_M", "F16", "bfloat16" ...
    parameters: int  # 0: unknown
    vocabulary_hash: str | None  # gguf_header.vocabulary_hash of its tokens; None: no tokenizer found
    vocabulary_size: int  # tokens in its list (GGUF: fillers included)
    title: str = ""  # the name the file gives itself
    # The size its publisher names it by (a GGUF's general.size_label: "1.5B"), "" where the file gives none. The
    # count above can differ: Qwen2.5-Coder-1.5B's GGUF keeps its tied output layer as a second copy (1.78B).
    size_label: str = ""

    def parameters_text(self) -> str:
        """What a listing shows: the publisher's size label, else the count ("1.54B"), else "?"."""
        return self.size_label or count_text(self.parameters)


def count_text(count: int) -> str:
    """1,543,714,304 -> "1.54B"; 0 -> "?" (unknown)."""
    if not count:
        return "?"
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g}{unit}"
    return str(count)


# A GGUF's facts are kept by (path, size, modification time): in this process, and in specdec's cache folder
# (found-models.json), so that listing again skips the token lists (a Qwen GGUF's takes a tenth of a second).
_memo: dict[str, tuple[int, int, ModelFacts]] = {}
_memo_lock = threading.Lock()
_memo_state = {"loaded_from": None, "changed": False}
_MEMO_FILE, _MEMO_FORMAT, _MEMO_MAX = "found-models.json", 1, 4000


def gguf_facts(path: Path) -> ModelFacts:
    """A GGUF file's facts; GgufHeaderError (a ValueError) or OSError when it cannot be read."""
    status = path.stat()
    with _memo_lock:
        _load_memo()
        known = _memo.get(str(path))
    if known is not None and known[:2] == (status.st_size, status.st_mtime_ns):
        return known[2]
    header = gguf_header.read_gguf_facts(path)
    facts = ModelFacts("gguf", status.st_size, header.architecture, header.quantisation, header.parameters,
                       header.vocabulary_hash, header.token_count, str(header.metadata.get("general.name") or ""),
                       _size_label(header.metadata.get("general.size_label")))
    with _memo_lock:
        _memo[str(path)] = (status.st_size, status.st_mtime_ns, facts)
        _memo_state["changed"] = True
    return facts


def _size_label(value: object) -> str:
    """A GGUF's general.size_label where it reads like one ("1.5B", "135M", "8x7B"), else ""."""
    return value if isinstance(value, str) and _SIZE_LABEL.fullmatch(value) else ""


_SIZE_LABEL = re.compile(r"([0-9]+x)?[0-9]+(\.[0-9]+)?[KMBT]", re.IGNORECASE)  # 1.5B, 135M, 8x7B


def _memo_path() -> Path:
    from specdec_core.loading.resources import default_cache_dir

    return default_cache_dir() / _MEMO_FILE


def _load_memo() -> None:
    """Read the kept facts once per cache folder (kept_files: a damaged file is set aside with one line, a FIFO
    or a huge file refused; it is only a speed aid, so the listing reads the headers instead)."""
    path = _memo_path()
    if _memo_state["loaded_from"] == path:
        return
    _memo.clear()
    _memo_state.update(loaded_from=path, changed=False)
    _memo.update(kept_files.kept_json(path, _memo_schema, "the headers are read again") or {})


def _memo_schema(value: object) -> dict[str, tuple[int, int, ModelFacts]]:
    if not isinstance(value, dict) or value.get("format") != _MEMO_FORMAT or not isinstance(value["files"], dict):
        raise ValueError(f"it is not format {_MEMO_FORMAT} of specdec's found-models memo")
    out = {}
    for key, (size, mtime, facts) in value["files"].items():
        if not (isinstance(size, int) and isinstance(mtime, int) and isinstance(facts, dict)):
            raise TypeError(f"the entry for {key} is not [size, mtime, facts]")
        missing = set(_FACT_TYPES) - set(facts)
        if missing and missing <= _ADDED_LATER:
            continue  # an entry an earlier version wrote, without the facts added since: its header is read again
        wrong = [name for name, kind in _FACT_TYPES.items() if not isinstance(facts.get(name), kind)]
        if wrong or set(facts) != set(_FACT_TYPES):
            raise TypeError(f"the facts for {key} are not what specdec writes ({', '.join(wrong) or 'their keys'})")
        out[key] = (size, mtime, ModelFacts(**facts))
    return out


_FACT_TYPES = {"format": str, "size": int, "architecture": str, "quantisation": str, "parameters": int,
               "vocabulary_hash": (str, type(None)), "vocabulary_size": int, "title": str, "size_label": str}
_ADDED_LATER = {"size_label"}  # facts an earlier version did not keep


def save_memo() -> None:
    """Keep this process's facts in the cache folder for the next listing (quietly not, where it cannot write)."""
    with _memo_lock:
        if not _memo_state["changed"]:
            return
        files = dict(list(_memo.items())[-_MEMO_MAX:])
        data = {"format": _MEMO_FORMAT, "files": {k: [s, m, asdict(f)] for k, (s, m, f) in files.items()}}
        path = _memo_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
            partial.write_text(json.dumps(data), encoding="utf-8")
            os.replace(partial, path)
            _memo_state["changed"] = False
        except OSError:
            pass


def has_weights(folder: Path) -> bool:
    return any(next(folder.glob(pattern), None) is not None for pattern in _WEIGHTS)


def folder_facts(folder: Path) -> ModelFacts:
    """A transformers folder's facts (config.json, weights, tokenizer.json)."""
    config = _json(folder / "config.json")
    if not isinstance(config, dict):
        raise ValueError("config.json is not a JSON object")
    weights = sorted(p for pattern in _WEIGHTS for p in folder.glob(pattern))
    if not weights:
        raise ValueError("has config.json but no weights (*.safetensors or pytorch_model*.bin)")
    size = 0
    for weight in weights:
        try:
            size += weight.stat().st_size
        except FileNotFoundError as error:
            raise ValueError(f"its weights file {weight.name} is missing (a link to nothing)") from error
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    architecture = str(text.get("model_type") or config.get("model_type") or "")
    quantisation = config.get("quantization_config")
    if isinstance(quantisation, dict):
        bits = quantisation.get("bits") or quantisation.get("weight_bits")
        quantisation = str(quantisation.get("quant_method") or "quantised") + (f" {bits}-bit" if bits else "")
    else:
        quantisation = str(config.get("torch_dtype") or config.get("dtype") or "")
    parameters = sum(_safetensors_elements(w) for w in weights if w.suffix == ".safetensors")
    tokens = _tokenizer_tokens(folder / "tokenizer.json")
    return ModelFacts("transformers", size, architecture, quantisation, parameters,
                      gguf_header.vocabulary_hash(tokens) if tokens else None, len(tokens or ()),
                      str(config.get("_name_or_path") or ""))


def _json(path: Path):
    try:
        return json.loads(path.read_bytes())
    except ValueError as error:
        raise ValueError(f"{path.name} is not valid JSON ({error})") from error


def _safetensors_elements(path: Path) -> int:
    """Elements over all tensors of a safetensors file, from its JSON header (the first 8 bytes give its length)."""
    with path.open("rb") as file:
        prefix = file.read(8)
        if len(prefix) < 8:
            raise ValueError(f"{path.name} is cut short (no safetensors header)")
        (length,) = struct.unpack("<Q", prefix)
        if length > _SAFETENSORS_HEADER_MAX:
            raise ValueError(f"{path.name} has a damaged safetensors header (it says {length:,} bytes)")
        try:
            header = json.loads(file.read(length))
        except ValueError as error:
            raise ValueError(f"{path.name} has a damaged safetensors header ({error})") from error
    return sum(math.prod(entry.get("shape", ())) for key, entry in header.items()
               if key != "__metadata__" and isinstance(entry, dict))


def _tokenizer_tokens(path: Path) -> list[str] | None:
    """tokenizer.json's tokens in id order (the model's vocabulary and the added tokens); None without one."""
    if not path.is_file():
        return None
    data = _json(path)
    if not isinstance(data, dict):
        raise ValueError("tokenizer.json is not a JSON object")
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    vocab = model.get("vocab")
    by_id: dict[int, str] = {}
    if isinstance(vocab, dict):  # BPE, WordPiece: token -> id
        by_id.update((i, t) for t, i in vocab.items() if isinstance(i, int))
    elif isinstance(vocab, list):  # Unigram: [token, score] by id
        by_id.update((i, entry[0]) for i, entry in enumerate(vocab) if isinstance(entry, list) and entry)
    for added in data.get("added_tokens") or ():
        if isinstance(added, dict) and isinstance(added.get("id"), int):
            by_id[added["id"]] = str(added.get("content", ""))
    if not by_id:
        return None
    return [by_id.get(i, "") for i in range(max(by_id) + 1)]  # a hole counts as an empty token

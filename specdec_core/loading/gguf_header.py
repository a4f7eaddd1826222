"""What a GGUF file is, read from its header alone: architecture, quantisation, parameters, vocabulary.

For listing the models found on this machine (discovery.py), where reading dozens of files must take well
under a second. The file is mapped read-only and parsed up to the end of its tensor table; no tensor data is
read. The token list (150k strings in a Qwen file) is walked once, not decoded: its bytes are hashed as they
lie in the file, in the same form `vocabulary_hash` gives a token list from anywhere else (a tokenizer.json),
so one vocabulary gets one hash whether it comes as GGUF or as a transformers folder.

Every way a file can be damaged (cut short, not GGUF, absurd counts) is a GgufHeaderError with one line.
"""

from __future__ import annotations

import hashlib
import itertools
import mmap
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")

# GGUF value types -> struct format of a scalar (strings and arrays are walked separately)
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9

TOKENS_KEY = "tokenizer.ggml.tokens"

# llama.cpp's converter pads a token list up to the output layer's rows with "[PAD<id>]" fillers, and two sizes of
# one family pad to different lengths (Qwen2.5: 151,936 and 152,064 rows over the same 151,665 tokens). Fillers at
# the end are left out of the hash, so those share one.
_FILLER = re.compile(rb"\[PAD\d+\]")

_MAX_COUNT = 1 << 40  # a count past this is a damaged header, not a real file


class GgufHeaderError(ValueError):
    """The file is not GGUF, or its header is damaged or cut short."""


@dataclass(frozen=True)
class GgufFacts:
    metadata: dict[str, object]  # every key but the big arrays (tokens, merges, scores...): scalars and strings
    token_count: int  # 0 when the file has no token list
    vocabulary_hash: str | None  # see vocabulary_hash(); None without a token list
    parameters: int  # elements over all tensors
    tensor_types: dict[int, int] = field(default_factory=dict)  # ggml type -> elements of matrices of that type
    tokens: tuple[str, ...] | None = None  # only when asked for (read_gguf_facts(keep_tokens=True))
    # (name, dims with the row length first as GGUF lists them, ggml type, offset of its data from data_start)
    tensors: tuple[tuple[str, tuple[int, ...], int, int], ...] = ()
    data_start: int = 0  # where the tensors' data begins in the file (aligned to general.alignment)

    @property
    def architecture(self) -> str:
        return str(self.metadata.get("general.architecture") or "")

    @property
    def quantisation(self) -> str:
        """The file type llama.cpp named ("Q4_K_M"), else the type of most weights ("Q8_0")."""
        from gguf.constants import GGMLQuantizationType, LlamaFileType

        file_type = self.metadata.get("general.file_type")
        if isinstance(file_type, int):
            try:
                return LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
            except ValueError:
                pass
        if not self.tensor_types:
            return ""
        dominant = max(self.tensor_types, key=self.tensor_types.__getitem__)
        try:
            return GGMLQuantizationType(dominant).name
        except ValueError:
            return f"type {dominant}"


def vocabulary_hash(tokens: Iterable[str | bytes]) -> str:
    """A short hash of a token list in id order (trailing "[PAD<id>]" fillers left out): equal hashes, equal
    vocabularies. Each token counts as its UTF-8 length (8 bytes, little-endian) then its bytes, which is how a GGUF
    file stores them, so a file's hash needs no decoding."""
    encoded = [t.encode("utf-8") if isinstance(t, str) else t for t in tokens]
    while encoded and _FILLER.fullmatch(encoded[-1]):
        encoded.pop()
    digest = hashlib.sha256()
    for token in encoded:
        digest.update(_U64.pack(len(token)))
        digest.update(token)
    return digest.hexdigest()[:16]


def read_gguf_facts(path: Path, *, keep_tokens: bool = False) -> GgufFacts:
    """The facts in `path`'s header. Raises GgufHeaderError (damaged, cut short, not GGUF) or OSError."""
    with open(path, "rb") as file:
        if file.read(4) != b"GGUF":
            raise GgufHeaderError("not a GGUF file (it does not start with the GGUF signature)")
        try:
            view = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)  # read-only: nothing is ever written
        except ValueError as error:
            raise GgufHeaderError(f"cannot be mapped ({error})") from error
    with view:
        try:
            return _Parser(view, keep_tokens).facts()
        except (struct.error, IndexError) as error:
            raise GgufHeaderError(f"its header is cut short ({error})") from error


class _Parser:
    """A cursor over the mapped file; each read checks the bounds so a cut-short file fails cleanly."""

    def __init__(self, view: mmap.mmap, keep_tokens: bool) -> None:
        self.view, self.pos, self.keep_tokens = view, 4, keep_tokens
        self.tokens_hash: str | None = None
        self.token_count = 0
        self.tokens: tuple[str, ...] | None = None

    def facts(self) -> GgufFacts:
        version = self.u32()
        if version not in (2, 3):
            raise GgufHeaderError(f"GGUF version {version} is not supported (2 and 3 are)")
        tensor_count, kv_count = self.count(), self.count()
        metadata: dict[str, object] = {}
        for _ in range(kv_count):
            key = self.string().decode("utf-8", "replace")
            value_type = self.u32()
            if value_type == _ARRAY:
                self.array(key)
            else:
                metadata[key] = self.value(value_type)
        parameters, types, tensors = self.tensor_table(tensor_count)
        alignment = metadata.get("general.alignment", 32)
        alignment = alignment if isinstance(alignment, int) and alignment > 0 else 32
        data_start = -(-self.pos // alignment) * alignment
        return GgufFacts(metadata, self.token_count, self.tokens_hash, parameters, types, self.tokens,
                         tuple(tensors), data_start)

    # ---------------------------------------------------------------- primitives

    def take(self, size: int) -> int:
        start, self.pos = self.pos, self.pos + size
        if self.pos > len(self.view):
            raise GgufHeaderError(f"its header is cut short (it needs byte {self.pos:,} of {len(self.view):,})")
        return start

    def u32(self) -> int:
        return _U32.unpack_from(self.view, self.take(4))[0]

    def count(self) -> int:
        value = _U64.unpack_from(self.view, self.take(8))[0]
        if value > _MAX_COUNT:
            raise GgufHeaderError(f"its header is damaged (a count of {value:,})")
        return value

    def string(self) -> bytes:
        size = self.count()
        start = self.take(size)
        return self.view[start:start + size]

    def value(self, value_type: int) -> object:
        if value_type == _STRING:
            return self.string().decode("utf-8", "replace")
        scalar = _SCALARS.get(value_type)
        if scalar is None:
            raise GgufHeaderError(f"its header is damaged (value type {value_type})")
        return struct.unpack_from(scalar, self.view, self.take(struct.calcsize(scalar)))[0]

    # ---------------------------------------------------------------- arrays and tensors

    def array(self, key: str) -> None:
        """Skip an array, hashing the token list on the way (arrays of numbers are skipped in one step)."""
        item_type, count = self.u32(), self.count()
        if item_type in _SCALARS:
            self.take(count * struct.calcsize(_SCALARS[item_type]))
            return
        if item_type != _STRING:
            raise GgufHeaderError(f"its header is damaged (array {key!r} of type {item_type})")
        start = self.pos
        starts = self.walk_strings(count, keep_starts=key == TOKENS_KEY)
        if key != TOKENS_KEY:
            return
        self.token_count = count
        end = self.pos
        while starts and _FILLER.fullmatch(self.view[starts[-1] + 8:end]):
            end = starts.pop()
        # The bytes between start and end are exactly what vocabulary_hash() feeds its digest.
        self.tokens_hash = hashlib.sha256(self.view[start:end]).hexdigest()[:16]
        if self.keep_tokens:
            ends = starts[1:] + [end]
            self.tokens = tuple(self.view[a + 8:b].decode("utf-8", "replace") for a, b in zip(starts, ends))

    def walk_strings(self, count: int, *, keep_starts: bool) -> list[int]:
        """Step over `count` strings (the hot loop of a listing: one unpack per token); their start offsets."""
        view, pos, unpack, starts = self.view, self.pos, _U64.unpack_from, []
        if keep_starts:
            append = starts.append
            for _ in itertools.repeat(None, count):
                append(pos)
                pos += 8 + unpack(view, pos)[0]
        else:
            for _ in itertools.repeat(None, count):
                pos += 8 + unpack(view, pos)[0]
        self.take(pos - self.pos)  # one bounds check for the lot: a length past the end lands here
        return starts

    def tensor_table(self, tensor_count: int) -> tuple[int, dict[int, int], list]:
        parameters, types, tensors = 0, {}, []
        for _ in range(tensor_count):
            name = self.string().decode("utf-8", "replace")
            dims = self.u32()
            if dims > 8:
                raise GgufHeaderError(f"its header is damaged (a tensor of {dims} dimensions)")
            shape = tuple(self.count() for _ in range(dims))
            elements = 1
            for size in shape:
                elements *= size
            ggml_type = self.u32()
            offset = _U64.unpack_from(self.view, self.take(8))[0]  # the tensor's offset in the data section
            tensors.append((name, shape, ggml_type, offset))
            parameters += elements
            if dims >= 2:
                types[ggml_type] = types.get(ggml_type, 0) + elements
        return parameters, types, tensors

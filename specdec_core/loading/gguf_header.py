"""What a GGUF file is, read from its header alone: architecture, quantisation, parameters, vocabulary.

For listing the models found on this machine (discovery.py), where reading dozens of files must take well
under a second. Only the header is read (in growing pieces, up to the end of its tensor table); no tensor data
is. The token list (150k strings in a Qwen file) is walked, not decoded: its bytes are hashed as they lie in the
file, in the same form `vocabulary_hash` gives a token list from anywhere else (a tokenizer.json), so one
vocabulary gets one hash whether it comes as GGUF or as a transformers folder.

Every way a file can be damaged (cut short, not GGUF, absurd counts) is a GgufHeaderError with one line.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import stat
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    import numpy as np

_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
_TYPE_OFFSET = struct.Struct("<IQ")  # a tensor's ggml type and the offset of its data
_ENTRY = 8 + 256 + 4 + 8 * 8 + 12  # the most bytes a tensor entry with a name of up to 256 bytes takes

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
    # Non-blocking: a FIFO named .gguf does not hang the open; it is refused below.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb", buffering=0) as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise GgufHeaderError("not a GGUF file (it is not a regular file)")
        stamp = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns, keep_tokens)
        known = _READ.get(stamp)
        if known is not None:  # one load reads a header several times (checks, plan, build): parse it once
            return known
        if info.st_size == 0:
            raise GgufHeaderError("not a GGUF file (it is empty)")
        source = _Header(file, info.st_size)
        if source.bytes_at(0, 4) != b"GGUF":
            raise GgufHeaderError("not a GGUF file (it does not start with the GGUF signature)")
        try:
            facts = _Parser(source, keep_tokens).facts()
        except (struct.error, IndexError) as error:
            raise GgufHeaderError(f"its header is cut short ({error})") from error
    _remember(source)
    if len(_READ) >= 8:
        _READ.clear()
    _READ[stamp] = facts
    return facts


_READ: dict[tuple, GgufFacts] = {}  # the last few headers parsed, by file identity and state


class _Header:
    """The file's first bytes, read as far as the parser has needed so far: the header only, never the tensors'
    data (a step past what was asked is at most _STEP bytes)."""

    def __init__(self, file: BinaryIO, size: int) -> None:
        self.file, self.size, self.data = file, size, bytearray()
        self.walked: list[tuple[int, int, object, int]] = []  # (start, count, starts, end) of long string arrays

    def need(self, end: int) -> None:
        """Have the bytes up to `end` read; GgufHeaderError when the file ends first."""
        if end <= len(self.data):
            return
        if end > self.size:
            raise GgufHeaderError(f"its header is cut short (it needs byte {end:,} of {self.size:,})")
        if end > HEADER_LIMIT:
            raise GgufHeaderError(f"its header runs past {HEADER_LIMIT >> 20} MB, far beyond any model's: damaged")
        # Growing by at least the size read so far (up to _STEP) keeps the number of reads small.
        want = min(self.size, max(end, len(self.data) + min(max(len(self.data), _FIRST_READ), _STEP)))
        while len(self.data) < want:
            piece = self.file.read(want - len(self.data))
            if not piece:  # the file shrank under us
                raise GgufHeaderError(f"its header is cut short (it ends at byte {len(self.data):,})")
            self.data += piece

    def bytes_at(self, start: int, size: int) -> bytes:
        self.need(start + size)
        return bytes(self.data[start:start + size])


_FIRST_READ, _STEP = 64 << 10, 1 << 20
HEADER_LIMIT = 256 << 20  # the largest headers (a 256k-token vocabulary and its merges) take tens of MB


class _Parser:
    """A cursor over the header; each read checks the bounds so a cut-short file fails cleanly."""

    def __init__(self, source: _Header, keep_tokens: bool) -> None:
        self.source, self.pos, self.keep_tokens = source, 4, keep_tokens
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
        self.source.need(self.pos)
        return start

    def u32(self) -> int:
        return _U32.unpack_from(self.source.data, self.take(4))[0]

    def count(self) -> int:
        value = _U64.unpack_from(self.source.data, self.take(8))[0]
        if value > _MAX_COUNT:
            raise GgufHeaderError(f"its header is damaged (a count of {value:,})")
        return value

    def string(self) -> bytes:
        size = self.count()
        start = self.take(size)
        return bytes(self.source.data[start:start + size])

    def value(self, value_type: int) -> object:
        if value_type == _STRING:
            return self.string().decode("utf-8", "replace")
        scalar = _SCALARS.get(value_type)
        if scalar is None:
            raise GgufHeaderError(f"its header is damaged (value type {value_type})")
        return struct.unpack_from(scalar, self.source.data, self.take(struct.calcsize(scalar)))[0]

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
        starts, end = string_starts(self.source, start, count)
        self.take(end - start)
        if key != TOKENS_KEY:
            return
        self.token_count = count
        data, end = self.source.data, self.pos
        kept = len(starts)
        while kept and _FILLER.fullmatch(data, int(starts[kept - 1]) + 8, end):
            kept -= 1
            end = int(starts[kept])
        # The bytes between start and end are exactly what vocabulary_hash() feeds its digest.
        self.tokens_hash = hashlib.sha256(memoryview(data)[start:end]).hexdigest()[:16]
        if self.keep_tokens:
            bounds = [*starts.tolist(), self.pos]
            self.tokens = tuple(data[a + 8:b].decode("utf-8", "replace") for a, b in itertools.pairwise(bounds))

    def tensor_table(self, tensor_count: int) -> tuple[int, dict[int, int], list]:
        parameters, types, tensors = 0, {}, []
        for _ in itertools.repeat(None, tensor_count):
            name, shape, ggml_type, offset = self.tensor_entry()
            tensors.append((name, shape, ggml_type, offset))
            elements = 1
            for size in shape:
                elements *= size
            parameters += elements
            if len(shape) >= 2:
                types[ggml_type] = types.get(ggml_type, 0) + elements
        return parameters, types, tensors

    def tensor_entry(self) -> tuple[str, tuple[int, ...], int, int]:
        """(name, dims, ggml type, offset of its data): one entry of the tensor table, read in one step."""
        source, pos = self.source, self.pos
        data = source.data
        if pos + _ENTRY > len(data):  # a name of up to 256 bytes and 8 dimensions: one read
            source.need(min(pos + _ENTRY, source.size))
        name_size = _U64.unpack_from(data, pos)[0]
        if pos + _ENTRY - 256 + name_size > len(data):  # a longer name
            if name_size > _MAX_COUNT:
                raise GgufHeaderError(f"its header is damaged (a count of {name_size:,})")
            source.need(min(pos + _ENTRY - 256 + name_size, source.size))
        name = bytes(data[pos + 8:pos + 8 + name_size]).decode("utf-8", "replace")
        pos += 8 + name_size
        (dims,) = _U32.unpack_from(data, pos)
        if dims > 8:
            raise GgufHeaderError(f"its header is damaged (a tensor of {dims} dimensions)")
        shape = struct.unpack_from(f"<{dims}Q", data, pos + 4)
        if any(size > _MAX_COUNT for size in shape):
            raise GgufHeaderError(f"its header is damaged (a tensor of shape {shape})")
        ggml_type, offset = _TYPE_OFFSET.unpack_from(data, pos + 4 + 8 * dims)  # struct.error past the end
        self.pos = pos + 4 + 8 * dims + 12
        return name, shape, ggml_type, offset


# ---------------------------------------------------------------------------------------------- string arrays


def string_starts(source: _Header, start: int, count: int) -> tuple[np.ndarray, int]:
    """Where each of `count` strings (an 8-byte length, then the bytes) from `start` begins, and where the last
    ends. A Qwen file holds two arrays of 150k strings (tokens and merges): stepping through them one by one in
    Python is most of a listing's time, so they are found with numpy when the guess below holds (it does in
    every vocabulary we know), and one by one otherwise."""
    known = _seen_before(source, start, count)
    if known is not None:
        return known
    found = _starts_at_once(source, start, count)
    starts, end = found if found is not None else _starts_one_by_one(source, start, count)
    if count >= _SEEN_MIN_COUNT:
        source.walked.append((start, count, starts, end))  # remembered once the whole header is read
    return starts, end


# Arrays walked in this process, by (count, their first bytes): [(the header that holds one, where it lies in it,
# its starts from its own start)]. A listing meets one vocabulary again and again (a model's quantisations, a
# family's sizes); bytes equal to an array already walked are laid out the same, and comparing bytes is far
# cheaper than walking them. The headers are kept as they were read (no copy), up to _SEEN_BYTES of them.
_SEEN: dict[tuple[int, bytes], list[tuple[bytearray, int, int, np.ndarray]]] = {}
_SEEN_MIN_COUNT, _PREFIX, _SEEN_BYTES = 4096, 4096, 64 << 20
_SEEN_LOCK = threading.Lock()  # listings may read headers on several threads (the app's workers)


def _seen_before(source: _Header, start: int, count: int) -> tuple[np.ndarray, int] | None:
    if count < _SEEN_MIN_COUNT:
        return None
    source.need(start + _PREFIX)  # the array takes at least 8 bytes a string: these are all in it
    with _SEEN_LOCK:
        candidates = list(_SEEN.get((count, bytes(source.data[start:start + _PREFIX])), ()))
    for data, first, last, starts in candidates:
        end = start + last - first
        if end <= source.size:
            source.need(end)
            with memoryview(data) as view:  # a header read in full: it grows no more
                if source.data.startswith(view[first:last], start):  # a comparison of memory, no copy
                    return starts + start, end
    return None


def _remember(source: _Header) -> None:
    """Keep the arrays `source` walked for the next headers (its bytes are read in full: they change no more)."""
    if not source.walked or len(source.data) > _SEEN_BYTES:
        return
    with _SEEN_LOCK:
        while _SEEN and _kept_bytes() + len(source.data) > _SEEN_BYTES:
            _SEEN.pop(next(iter(_SEEN)))  # the oldest first
        for start, count, starts, end in source.walked:
            key = (count, bytes(source.data[start:start + _PREFIX]))
            _SEEN.setdefault(key, []).append((source.data, start, end, starts - start))


def _kept_bytes() -> int:
    return sum({id(data): len(data) for arrays in _SEEN.values() for data, *_ in arrays}.values())


def _starts_at_once(source: _Header, start: int, count: int) -> tuple[np.ndarray, int] | None:
    """Guess every start at once (_guess_starts), and keep the guesses only when, from `start`, each guessed
    start's length leads exactly to the next guess: they are then the true starts, whatever the bytes hold. None
    when the guess fails (a token holding a NUL byte, a length of 256)."""
    import numpy as np  # here: a listing whose facts are all kept in the memo needs none
    pieces, pos, left = [], start, count
    while left:
        # Every string takes at least 8 bytes, so this reads no further than the array (and its first string's
        # first byte, which the guess looks at).
        source.need(pos + 8 * left)  # a file too short for them is cut short
        source.need(min(pos + 8 * left + 1, source.size))
        span = len(source.data) - pos - 8  # the offsets a guess can be made at: their 9th byte has been read
        guess = _guess_starts(source.data, pos, span, left)
        lengths = np.ndarray((span,), "<u8", buffer=source.data, offset=pos, strides=(1,))  # at each byte
        ends = guess + 8 + lengths[guess].view(np.int64)  # a damaged length wraps round: it links to no guess
        del lengths  # the bytes read may grow only when no array looks at them
        if not len(guess) or guess[0] != 0 or bool((ends[:-1] != guess[1:]).any()):
            return None
        pieces.append(guess + pos)
        last_end, left = pos + int(ends[-1]), left - len(guess)
        if not left:
            source.need(last_end)
            return np.concatenate(pieces), last_end
        if ends[-1] < span:  # the next string lay where guesses were made, and was not guessed
            return None
        pos = last_end  # the rest lies past what was read: read on from the next string
    return np.zeros(0, np.int64), start


_BLOCK = 1 << 16  # bytes looked at in one step: the steps' arrays stay in the CPU's cache


def _guess_starts(data: bytearray, pos: int, span: int, wanted: int) -> np.ndarray:
    """The first `wanted` offsets p < span (from `pos`) where a string seems to start: byte p+7 is zero (the top
    byte of every length) and byte p+8 is not (the string's first byte; a NUL in a token is the rare miss)."""
    import numpy as np
    found, total = [], 0
    for block in range(0, span, _BLOCK):
        size = min(_BLOCK, span - block)
        zero = np.frombuffer(data, np.uint8, size + 1, pos + block + 7) == 0
        found.append(np.flatnonzero(zero[:-1] > zero[1:]) + block)  # a zero, then not
        total += len(found[-1])
        if total >= wanted:
            break
    return np.concatenate(found)[:wanted] if found else np.zeros(0, np.int64)


def _starts_one_by_one(source: _Header, start: int, count: int) -> tuple[np.ndarray, int]:
    import numpy as np
    data, pos, starts, unpack = source.data, start, [], _U64.unpack_from
    append = starts.append
    for _ in itertools.repeat(None, count):
        if pos + 8 > len(data):
            source.need(pos + 8)  # `data` grows in place
        append(pos)
        pos += 8 + unpack(data, pos)[0]
    source.need(pos)
    return np.array(starts, np.int64), pos

"""The verifier's own phrases: an n-gram store of what it has said before, as a drafter's copy.

Prompt lookup copies from this conversation only. A small verifier also says the same things from one reply
to the next ("Here's an example of", "I hope this helps!", a language's grammar words), and a store of its
own earlier replies knows what usually follows the last 2-4 tokens even where this conversation does not.
Like llama.cpp's static n-gram cache (examples/lookup), the store keeps, for each context of n tokens, how
often each next token followed it; the copy follows the longest context it knows, token by token, for as
long as one next token holds at least `min_share` of that context's `min_support` or more sightings.

The copy is deterministic, so its draft distribution is one-hot (as prompt lookup's) and verification stays
exact whatever the store holds: a wrong copy costs the verifier a few more rows, never the output.

The shipped store for the embedded verifier is built from the lasting corpus's replies (`python -m distill
phrases`) and sits next to the draft head (`phrases.npz`: the replies' token ids and where each ends).
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specdec_core.loading.kept_files import DamagedFile, read_bytes, read_or_set_aside

FILE_NAME = "phrases.npz"
FILE_LIMIT = 256 << 20  # bytes of a store, and of each array in it: the embedded verifier's is about 1 MB
_MULTIPLIER = 0x9E3779B97F4A7C15  # the 64-bit golden-ratio constant: spreads consecutive ids over the key space
_MASK = (1 << 64) - 1


def _context_key(tokens: Sequence[int]) -> int:
    """The 64-bit key of a context, the same as `_window_keys` gives (ids shifted by one so that 0 is no id)."""
    key = 0
    for token in tokens:
        key = (key * _MULTIPLIER + token + 1) & _MASK
    return key


def _window_keys(tokens: np.ndarray, n: int) -> np.ndarray:
    """The key of every window tokens[i:i+n] that has a token after it (uint64 arithmetic wraps, as the
    Python version's mask does)."""
    count = len(tokens) - n
    keys = np.zeros(count, dtype=np.uint64)
    multiplier = np.uint64(_MULTIPLIER)
    with np.errstate(over="ignore"):
        for k in range(n):
            keys = keys * multiplier + (tokens[k:k + count].astype(np.uint64) + np.uint64(1))
    return keys


@dataclass(frozen=True)
class _Order:
    """One context length's table: sorted keys, each with its most frequent next token, that token's count and
    how often the context was seen at all."""

    keys: np.ndarray  # uint64, sorted
    next_ids: np.ndarray  # int64
    counts: np.ndarray  # int64
    totals: np.ndarray  # int64

    def look_up(self, key: int) -> tuple[int, int, int] | None:
        at = int(np.searchsorted(self.keys, np.uint64(key)))
        if at < len(self.keys) and int(self.keys[at]) == key:
            return int(self.next_ids[at]), int(self.counts[at]), int(self.totals[at])
        return None


def _build_order(tokens: np.ndarray, starts: np.ndarray, n: int) -> _Order:
    """The table of contexts of n tokens over `tokens` (sequences laid end to end, each starting at one of
    `starts`): windows that cross from one sequence into the next are left out."""
    empty = np.zeros(0, dtype=np.int64)
    if len(tokens) <= n:
        return _Order(np.zeros(0, dtype=np.uint64), empty, empty, empty)
    keys = _window_keys(tokens, n)
    following = tokens[n:].astype(np.int64)
    # sequence index of each position: a window [i, i + n] is whole when its first and its next token agree
    sequence = np.searchsorted(starts, np.arange(len(tokens)), side="right")
    whole = sequence[:len(keys)] == sequence[n:]
    keys, following = keys[whole], following[whole]
    order = np.lexsort((following, keys))
    keys, following = keys[order], following[order]
    new_pair = np.ones(len(keys), dtype=bool)
    new_pair[1:] = (keys[1:] != keys[:-1]) | (following[1:] != following[:-1])
    pair_at = np.flatnonzero(new_pair)
    pair_keys, pair_next = keys[pair_at], following[pair_at]
    pair_counts = np.diff(np.append(pair_at, len(keys)))
    by_count = np.lexsort((-pair_counts, pair_keys))  # within a key, its most frequent next token first
    pair_keys, pair_next, pair_counts = pair_keys[by_count], pair_next[by_count], pair_counts[by_count]
    unique_keys, first = np.unique(pair_keys, return_index=True)
    totals = np.add.reduceat(pair_counts, first) if len(first) else empty
    return _Order(unique_keys, pair_next[first], pair_counts[first], totals)


class PhraseStore:
    """What followed each context of `min_order`..`max_order` tokens in a set of token sequences."""

    def __init__(self, sequences: Sequence[Sequence[int]] | None = None, *, min_order: int = 2, max_order: int = 4,
                 min_share: float = 0.8, min_support: int = 3):
        if not 1 <= min_order <= max_order:
            raise ValueError(f"orders must satisfy 1 <= min_order <= max_order (got {min_order}, {max_order})")
        self.min_order, self.max_order = min_order, max_order
        self.min_share, self.min_support = min_share, min_support
        self._sequences: list[np.ndarray] = []
        self._orders: dict[int, _Order] = {}
        if sequences:
            self.add(sequences)

    @property
    def tokens(self) -> int:
        return sum(len(s) for s in self._sequences)

    def __len__(self) -> int:
        return len(self._sequences)

    def add(self, sequences: Sequence[Sequence[int]]) -> None:
        """Take in more sequences (rebuilds the tables: about a second per million tokens)."""
        self._sequences.extend(np.asarray(s, dtype=np.int64) for s in sequences if len(s))
        tokens = np.concatenate(self._sequences) if self._sequences else np.zeros(0, dtype=np.int64)
        starts = np.cumsum([0] + [len(s) for s in self._sequences[:-1]])
        self._orders = {n: _build_order(tokens, starts, n) for n in range(self.min_order, self.max_order + 1)}

    def next_token(self, context: Sequence[int]) -> int | None:
        """The token that follows the longest known ending of `context`, if one next token holds enough of
        that context's sightings; else None (a longer context that is known but undecided is not passed over
        for a shorter one: it says the text has left the store's phrases)."""
        for n in range(min(self.max_order, len(context)), self.min_order - 1, -1):
            found = self._orders[n].look_up(_context_key(context[-n:])) if n in self._orders else None
            if found is None:
                continue
            token, count, total = found
            return token if total >= self.min_support and count >= self.min_share * total else None
        return None

    def continuation(self, ids: Sequence[int], max_tokens: int) -> list[int]:
        """Up to `max_tokens` tokens, each the store's next token after the sequence and the ones before it."""
        context = list(ids[-self.max_order:])
        out: list[int] = []
        while len(out) < max_tokens:
            token = self.next_token(context)
            if token is None:
                break
            out.append(token)
            context = context[1:] + [token] if len(context) >= self.max_order else context + [token]
        return out

    def save(self, path: Path) -> None:
        tokens = np.concatenate(self._sequences) if self._sequences else np.zeros(0, dtype=np.int64)
        dtype = np.uint16 if tokens.size == 0 or tokens.max() < 1 << 16 else np.uint32
        ends = np.cumsum([len(s) for s in self._sequences]).astype(np.int64)
        np.savez_compressed(path, tokens=tokens.astype(dtype), ends=ends)

    @classmethod
    def load(cls, path: Path, **settings) -> PhraseStore:
        """The store `save` wrote; DamagedFile (kept_files.py) for anything else (no pickles are read)."""
        data = read_bytes(path, FILE_LIMIT)
        if data is None:
            raise DamagedFile("it is missing")
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                if any(member.file_size > FILE_LIMIT for member in archive.infolist()):
                    raise DamagedFile("an array in it is larger than a store may be")
            with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
                tokens, ends = arrays["tokens"], arrays["ends"]
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, MemoryError) as error:
            raise DamagedFile(f"it is not a phrase store ({type(error).__name__}: {str(error)[:80]})") from error
        _check_arrays(tokens, ends)
        tokens = tokens.astype(np.int64)
        return cls(np.split(tokens, ends[:-1]) if len(ends) else [], **settings)


def _check_arrays(tokens: np.ndarray, ends: np.ndarray) -> None:
    """DamagedFile unless `tokens` is a row of token ids and `ends` where each reply in it ends."""
    if tokens.ndim != 1 or ends.ndim != 1 or tokens.dtype.kind not in "iu" or ends.dtype.kind not in "iu":
        raise DamagedFile(f"its arrays are {tokens.dtype} {tokens.shape} and {ends.dtype} {ends.shape}, not rows "
                          "of whole numbers")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= 1 << 32):
        raise DamagedFile("a token id in it is out of range")
    if ends.size and (ends[0] < 0 or ends[-1] != len(tokens) or bool(np.any(np.diff(ends) < 0))):
        raise DamagedFile("where its replies end does not match its tokens")


_LOADED: dict[tuple[str, float], PhraseStore] = {}  # (path, mtime) -> store: each engine over a draft shares one


def shipped_store(folder: str | Path | None) -> PhraseStore | None:
    """The store that ships in a draft's folder (FILE_NAME), or None where there is none or it is damaged (then
    set aside and said: a speed aid never stops a reply). Loaded once per file (about half a second for the
    embedded verifier's); callers only read it."""
    if not folder:
        return None
    path = Path(folder) / FILE_NAME
    try:
        key = (str(path.resolve()), path.stat().st_mtime)
    except (OSError, RuntimeError):  # missing, or a link loop
        return None
    if key not in _LOADED:
        store = read_or_set_aside(path, PhraseStore.load, "replies are drafted without it")
        if store is None:
            return None
        _LOADED[key] = store
    return _LOADED[key]

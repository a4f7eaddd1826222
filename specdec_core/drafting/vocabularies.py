"""Two tokenizers side by side: the tokens their vocabularies share by text (`VocabMap`, `map_vocabularies`), how
much of a verifier's usual text and probability those reach (`text_share`, `probability_share`), and reading one
tokenizer's ids as the same text in the other's (`Retokenizer`).

The drafters that draft through the text (cross_vocab.py) and the doctor (pairs/doctor.py) use them; this module
knows tokenizers, not drafting.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from specdec_core.loading.models import LoadedModel


# --------------------------------------------------------------------------- token texts


@lru_cache(maxsize=1)
def _byte_level_table() -> dict[int, int]:
    """GPT-2's byte-level alphabet read backwards, as a str.translate table: the printable stand-in of each
    byte -> the character of that code (so that .encode('latin-1') gives the byte)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = byte
        else:
            table[256 + extra] = byte
            extra += 1
    return table


def _spelling(tokenizer) -> str:
    """How the token strings spell text: "byte-level" (GPT-2: 'Ġthe'), "metaspace" (SentencePiece: '▁the',
    '<0x0A>'), "plain" (no decoder: the string is the text) or "other" (read each token through the
    tokenizer)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    if decoder is None:
        return "plain" if backend is not None else "other"  # no decoder: a token's string is its text
    try:
        spec = json.dumps(json.loads(decoder.__getstate__()))
    except (AttributeError, TypeError, ValueError):
        return "other"
    if '"ByteLevel"' in spec:
        return "byte-level"
    if '"Metaspace"' in spec or "\u2581" in spec:
        return "metaspace"
    return "other"


def token_texts(tokenizer, size: int) -> list[bytes | None]:
    """id -> the bytes its token stands for, for ids 0..size-1 (None: a hole). Byte-level and SentencePiece
    spellings are read into the same bytes, so 'Ġthe' and '▁the' are both b' the'; added tokens (chat
    markers) stand for their own text."""
    spelling = _spelling(tokenizer)
    added = {i: t.content for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
    texts: list[bytes | None] = [None] * size
    table = _byte_level_table()
    for token, i in tokenizer.get_vocab().items():
        if not 0 <= i < size:
            continue
        if i in added:
            texts[i] = added[i].encode("utf-8")
        elif spelling == "byte-level":
            try:
                texts[i] = token.translate(table).encode("latin-1")
            except UnicodeEncodeError:  # a character outside the alphabet: the token's own text
                texts[i] = token.encode("utf-8")
        elif spelling == "plain":
            texts[i] = token.encode("utf-8")
        elif spelling == "metaspace":
            if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
                texts[i] = bytes([int(token[3:5], 16)])  # SentencePiece's byte fallback
            else:
                texts[i] = token.replace("\u2581", " ").encode("utf-8")
        else:
            texts[i] = tokenizer.convert_tokens_to_string([token]).encode("utf-8")
    return texts


@dataclass(frozen=True)
class VocabMap:
    """The tokens both vocabularies hold, by text: draft_ids[j] and verifier_ids[j] stand for the same bytes.
    One to one (a text held twice on one side keeps its lowest id)."""

    draft_ids: torch.Tensor  # [n] long
    verifier_ids: torch.Tensor  # [n] long
    verifier_size: int  # the verifier's producible ids
    draft_size: int

    @property
    def shared(self) -> int:
        return int(self.draft_ids.numel())

    @property
    def id_share(self) -> float:
        """The share of the verifier's ids the draft can propose (TLI)."""
        return self.shared / self.verifier_size if self.verifier_size else 0.0

    def to_draft(self) -> dict[int, int]:
        return dict(zip(self.verifier_ids.tolist(), self.draft_ids.tolist()))


def map_vocabularies(verifier_tokenizer, draft_tokenizer, verifier_size: int | None = None,
                     draft_size: int | None = None) -> VocabMap:
    """The shared tokens of two tokenizers, over ids 0..size-1 on each side (default: the whole tokenizer)."""
    verifier_size = len(verifier_tokenizer) if verifier_size is None else verifier_size
    draft_size = len(draft_tokenizer) if draft_size is None else draft_size
    verifier_by_text: dict[bytes, int] = {}
    for i, text in enumerate(token_texts(verifier_tokenizer, verifier_size)):
        if text and text not in verifier_by_text:
            verifier_by_text[text] = i
    draft_ids, verifier_ids = [], []
    for i, text in enumerate(token_texts(draft_tokenizer, draft_size)):
        target = verifier_by_text.pop(text, None) if text else None
        if target is not None:
            draft_ids.append(i)
            verifier_ids.append(target)
    return VocabMap(torch.tensor(draft_ids, dtype=torch.long), torch.tensor(verifier_ids, dtype=torch.long),
                    verifier_size, draft_size)


SAMPLE_TEXTS = (
    "The quick brown fox jumps over the lazy dog. Speculative decoding drafts a few tokens with a small "
    "model and checks them all in one pass of the large one, so the reply comes sooner and stays the same.",
    "def fibonacci(n: int) -> list[int]:\n    \"\"\"The first n Fibonacci numbers.\"\"\"\n    out = [0, 1]\n"
    "    while len(out) < n:\n        out.append(out[-1] + out[-2])\n    return out[:n]\n",
    "Q: What is the capital of France?\nA: Paris. It has been the capital since 987, and about 2.1 million "
    "people live there.",
)


def text_share(vocab_map: VocabMap, verifier_tokenizer, texts: Sequence[str] = SAMPLE_TEXTS) -> float:
    """The share of the verifier's tokens in some everyday text (prose, code, a question) that the draft
    could propose: how much of the verifier's usual mass TLI can reach."""
    shared = set(vocab_map.verifier_ids.tolist())
    ids = [t for text in texts for t in verifier_tokenizer(text, add_special_tokens=False).input_ids]
    return sum(t in shared for t in ids) / len(ids) if ids else 0.0


@torch.inference_mode()
def probability_share(verifier: LoadedModel, vocab_map: VocabMap, texts: Sequence[str] = SAMPLE_TEXTS) -> float:
    """The share of the verifier's next-token probability that falls on tokens the draft can propose, averaged
    over every position of some everyday text: a bound on TLI's acceptance there (a draft token is accepted
    with probability at most the verifier's, and TLI drafts only shared tokens). One verifier pass per text."""
    shared = vocab_map.verifier_ids.to(verifier.device)
    total = positions = 0.0
    for text in texts:
        ids = verifier.tokenizer(text, add_special_tokens=False).input_ids
        if not ids:
            continue
        logits = verifier.model(input_ids=torch.tensor([ids], device=verifier.device), use_cache=False).logits[0]
        probs = torch.softmax(logits[:, :vocab_map.verifier_size].float(), dim=-1)  # padding rows cut off
        total += float(probs[:, shared].sum())
        positions += len(ids)
    return total / positions if positions else 0.0


# --------------------------------------------------------------------------- reading the verifier's text


def _adds_start_token(tokenizer) -> bool:
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return False
    try:
        ids = tokenizer("a").input_ids
    except Exception:  # noqa: BLE001 - an odd tokenizer: assume it adds nothing
        return False
    return bool(ids) and ids[0] == bos


def _common_prefix(a: str, b: str) -> int:
    """Characters `a` and `b` share at their start (a binary search of C-level slice comparisons)."""
    if b.startswith(a):
        return len(a)
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


SPLICE_BACK = 8  # tokens re-encoded before the first changed character (their last ones may merge with it)


class Retokenizer:
    """Token ids of one tokenizer -> the same text in another's ids.

    Special tokens (chat markers) cross over when the other tokenizer has a token of the same text, and are
    dropped otherwise (their text would read as ordinary characters). A start token the target adds to
    every encoding is added once, at the start of the sequence, and never again (encoding a piece of text
    in the middle must not put one there).

    Encoding a long conversation again every round would cost milliseconds per round, so only the end is
    encoded again: from SPLICE_BACK tokens before the first character that changed, kept when those tokens
    come out as they were (the cut then lies between words), else the whole text is encoded."""

    def __init__(self, source_tokenizer, target_tokenizer, known_target: int):
        self.source = source_tokenizer
        self.target = target_tokenizer
        self.known_target = known_target
        target_specials = {t.content for t in getattr(target_tokenizer, "added_tokens_decoder", {}).values()}
        self._dropped = {i for i, t in getattr(source_tokenizer, "added_tokens_decoder", {}).items()
                         if t.content not in target_specials}
        self._start = target_tokenizer.bos_token_id if _adds_start_token(target_tokenizer) else None
        self._offsets = bool(getattr(target_tokenizer, "is_fast", False))
        self._last: tuple[tuple[int, ...], list[int]] = ((), [])
        self._text = ""
        self._body: list[int] = []  # the target's ids of _text, without the start token
        self._ends: list[int] = []  # where each of them ends in _text

    def text(self, ids: Sequence[int]) -> str:
        kept = [t for t in ids if t not in self._dropped]
        return self.source.decode(kept, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def _encode(self, text: str) -> tuple[list[int], list[int]]:
        if not self._offsets:
            return self.target(text, add_special_tokens=False).input_ids, []
        encoded = self.target(text, add_special_tokens=False, return_offsets_mapping=True)
        return encoded.input_ids, [end for _, end in encoded.offset_mapping]

    def _spliced(self, text: str) -> tuple[list[int], list[int]]:
        """The target's ids of `text` and their ends, re-encoding only what follows the unchanged start."""
        same = _common_prefix(self._text, text)
        first_changed = bisect.bisect_right(self._ends, same)  # the first token that ends past it
        cut = first_changed - SPLICE_BACK
        if cut < 1 or not self._ends:
            return self._encode(text)
        restart = self._ends[cut - 1]
        tail, tail_ends = self._encode(text[restart:])
        check = first_changed - cut - 1  # old tokens after the cut that lie wholly in the unchanged text, but one
        if check < 1 or tail[:check] != self._body[cut:cut + check]:
            return self._encode(text)
        return self._body[:cut] + tail, self._ends[:cut] + [restart + end for end in tail_ends]

    def __call__(self, ids: Sequence[int]) -> list[int]:
        key = tuple(ids)
        if key == self._last[0]:
            return list(self._last[1])
        text = self.text(ids)
        self._body, self._ends = self._spliced(text)
        self._text = text
        out = self._body
        if self._start is not None and (not out or out[0] != self._start):
            out = [self._start, *out]
        out = [t for t in out if t < self.known_target]  # ids past the draft's output rows it cannot read
        self._last = (key, out)
        return list(out)

"""Incremental detokenisation: the text each new token adds, without decoding the whole reply again.

Decoding one token on its own loses leading spaces (SentencePiece) and splits multi-byte characters
(byte-level BPE), so each delta is taken from a short window: text(prefix..new) - text(prefix..read).
A token that ends in an incomplete character yields "" until the character completes.
"""

from __future__ import annotations

from collections.abc import Sequence

REPLACEMENT = "\ufffd"


class TextStream:
    def __init__(self, tokenizer, context_ids: Sequence[int] = ()):
        self.tokenizer = tokenizer
        # A few prompt tokens give the first reply token the context it needs to decode correctly.
        self.ids: list[int] = list(context_ids[-4:])
        self.prefix_offset = 0
        self.read_offset = len(self.ids)

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def push(self, token_id: int) -> str:
        """Append a committed token; return the text it completes."""
        self.ids.append(token_id)
        prefix_text = self._decode(self.ids[self.prefix_offset:self.read_offset])
        new_text = self._decode(self.ids[self.prefix_offset:])
        if len(new_text) > len(prefix_text) and not new_text.endswith(REPLACEMENT):
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.ids)
            return new_text[len(prefix_text):]
        return ""

    def peek(self, token_ids: Sequence[int]) -> list[str]:
        """The text each of `token_ids` would add in turn, without committing them (rejected drafts)."""
        base = self._decode(self.ids[self.prefix_offset:])
        texts, previous = [], base
        for i in range(len(token_ids)):
            text = self._decode(self.ids[self.prefix_offset:] + list(token_ids[:i + 1]))
            texts.append(text[len(previous):] if text.startswith(previous) else text)
            previous = text if text.startswith(previous) else previous
        return texts

"""The drafter that needs no model: prompt lookup copies from the conversation (PromptLookupDrafter)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from specdec_core.drafting.base import Draft, DrafterBase
from specdec_core.events import DraftStop


class PromptLookupDrafter(DrafterBase):
    """Copy the continuation of the latest earlier occurrence of the sequence's last n-gram
    (n = max_ngram down to min_ngram). No model: the proposal is deterministic, so each token's
    draft distribution is a one-hot, and the acceptance rule accepts it with probability target(x).

    min_ngram is 2: a single repeated token is usually a coincidence (about 10% of such copies were
    accepted on our prompt sets, against 30-60% after a 2- or 3-token match), and on a CPU checking
    even one drafted token costs the verifier over half a plain step (docs/performance.md)."""

    reads_verifier = False

    def __init__(self, max_ngram: int = 3, min_ngram: int = 2):
        self.name = "prompt lookup"
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def _continuation(self, ids: list[int], max_tokens: int) -> list[int]:
        for n in range(min(self.max_ngram, len(ids) - 1), self.min_ngram - 1, -1):
            tail = ids[-n:]
            first = tail[0]
            best: list[int] = []
            # Scan right to left: the most recent occurrence is the most relevant one, unless it sits so
            # near the end that it has fewer than max_tokens to copy (a repeating phrase matches itself
            # one period back); then an earlier occurrence with a longer continuation wins.
            for start in range(len(ids) - n - 1, -1, -1):
                if ids[start] == first and ids[start:start + n] == tail:
                    follow = ids[start + n:start + n + max_tokens]
                    if len(follow) == max_tokens:
                        return follow
                    if len(follow) > len(best):
                        best = follow
            if best:
                return best
        return []

    def propose(self, ids: Sequence[int], max_tokens: int) -> Draft:
        start, vocab_size, eos_token_ids = time.perf_counter(), self.target.vocab_size, self.target.eos_token_ids
        tokens = self._continuation(list(ids), max_tokens) if max_tokens > 0 else []
        tokens = [t for t in tokens if t < vocab_size]
        for i, token in enumerate(tokens):
            if token in eos_token_ids:
                tokens = tokens[:i + 1]
                break
        if max_tokens <= 0:
            stop = DraftStop.MAX_TOKENS
        elif tokens and tokens[-1] in eos_token_ids:
            stop = DraftStop.EOS
        elif len(tokens) < max_tokens:
            stop = DraftStop.NO_MATCH  # nothing (more) to copy
        else:
            stop = DraftStop.GAMMA
        index = torch.tensor(tokens, dtype=torch.long)
        probs = torch.nn.functional.one_hot(index, vocab_size).float() if tokens else torch.empty(0, vocab_size)
        return Draft(tuple(tokens), probs, tuple(1.0 for _ in tokens), stop, time.perf_counter() - start,
                     copied=True)

"""Drafters: whatever proposes tokens for the verifier to check.

The contract is two methods (after transformers' candidate generators): `propose` returns up to
`max_tokens` tokens with the exact distribution each was sampled from, and `observe` is told how many
the verifier accepted (adaptive strategies may use it; rollback itself is implicit, see kv.py).
A drafter need not be a model: prompt lookup copies from the conversation.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from specdec_core.config import GenerationConfig
from specdec_core.events import DraftStop
from specdec_core.kv import CachedForward
from specdec_core.sampling import processed_probs, sample

if TYPE_CHECKING:
    from specdec_core.models import LoadedModel


@dataclass(frozen=True)
class Draft:
    token_ids: tuple[int, ...]
    draft_probs: torch.Tensor  # [k, V] the processed distribution each token was sampled from
    display_probs: tuple[float, ...]  # draft(x_i) for people: softmax at temperature 1 when greedy
    stop: DraftStop
    draft_s: float


class Drafter(Protocol):
    name: str

    def propose(self, ids: Sequence[int], max_tokens: int, config: GenerationConfig, vocab_size: int,
                eos_token_ids: frozenset[int]) -> Draft:
        """Up to `max_tokens` tokens continuing `ids` (prompt + verified tokens), autoregressively."""
        ...

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        """How the verifier judged the last proposal."""
        ...

    def prefill(self, ids: Sequence[int]) -> None:
        """Read the prompt before the first round (so round 1's draft time is drafting only)."""
        ...

    def reset(self, seed: int) -> None:
        """Start of a reply: reseed random draws (caches may be kept; they are keyed by token ids)."""
        ...


class ModelDrafter:
    """A small causal LM with its own KV cache, sampling from the same processed distribution rule
    as the verifier (temperature, top-k, top-p) so that the acceptance ratio is exact."""

    def __init__(self, draft: LoadedModel):
        self.draft = draft
        self.name = draft.name
        self.forward = CachedForward(draft.model, draft.device)
        self.generator = torch.Generator(device=draft.device)

    def reset(self, seed: int) -> None:
        # Seeded apart from the verifier's generator so the two streams of draws never coincide.
        self.generator.manual_seed(seed * 2 + 1)

    def prefill(self, ids: Sequence[int]) -> None:
        if ids:
            self.forward.logits_for(ids)  # the first propose() then reuses these logits (kv.py)

    def propose(self, ids: Sequence[int], max_tokens: int, config: GenerationConfig, vocab_size: int,
                eos_token_ids: frozenset[int]) -> Draft:
        start = time.perf_counter()
        context = list(ids)
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        shown: list[float] = []
        stop = DraftStop.GAMMA if max_tokens > 0 else DraftStop.MAX_TOKENS
        while len(tokens) < max_tokens:
            # Token t of the round conditions on the prompt, the verified tokens and tokens 1..t-1.
            logits = self.forward.logits_for(context)[-1, :vocab_size]
            draft_probs = processed_probs(logits, config)
            # What people see: when greedy the sampled distribution is a one-hot, so show the softmax.
            shown_probs = torch.softmax(logits.float(), -1) if config.greedy else draft_probs
            if config.confidence_cutoff and tokens and float(shown_probs.max()) < config.confidence_cutoff:
                stop = DraftStop.CONFIDENCE
                break
            token = sample(draft_probs, self.generator)
            tokens.append(token)
            rows.append(draft_probs)
            shown.append(float(shown_probs[token]))
            context.append(token)
            if token in eos_token_ids:
                stop = DraftStop.EOS
                break
        probs = torch.stack(rows) if rows else torch.empty(0, vocab_size)
        return Draft(tuple(tokens), probs, tuple(shown), stop, time.perf_counter() - start)

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        pass  # rollback is implicit: the next propose() keeps only the cache prefix that still matches


class PromptLookupDrafter:
    """Copy the continuation of the latest earlier occurrence of the sequence's last n-gram
    (n = max_ngram down to min_ngram). No model: the proposal is deterministic, so each token's
    draft distribution is a one-hot, and the acceptance rule accepts it with probability target(x).

    min_ngram is 2: a single repeated token is usually a coincidence (about 10% of such copies were
    accepted on our prompt sets, against 30-60% after a 2- or 3-token match), and on a CPU checking
    even one drafted token costs the verifier over half a plain step (docs/performance.md)."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 2):
        self.name = "prompt lookup"
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def reset(self, seed: int) -> None:
        pass

    def prefill(self, ids: Sequence[int]) -> None:
        pass

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

    def propose(self, ids: Sequence[int], max_tokens: int, config: GenerationConfig, vocab_size: int,
                eos_token_ids: frozenset[int]) -> Draft:
        start = time.perf_counter()
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
        return Draft(tuple(tokens), probs, tuple(1.0 for _ in tokens), stop, time.perf_counter() - start)

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        pass

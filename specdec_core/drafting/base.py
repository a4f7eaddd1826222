"""What every drafter is: the contract the engine drafts through, and the draft it returns.

The contract (`Drafter`, after transformers' candidate generators): `attach` binds what the drafter drafts for
(DraftTarget: the verifier's forward pass, the ids it can produce, its ends of sequence, the reply's sampling
rules); `propose(ids, n)` then returns up to n tokens with the exact distribution each was sampled from, and
`observe` is told how many the verifier accepted (adaptive strategies may use it; rollback itself is implicit,
see kv.py). A drafter that can grow a tree of candidates (trees.py) says so with `grows_trees` and drafts one
with `propose_tree(ids, request)`. The other hooks (`prefill`, `reset`, `reset_cache`) have no-op defaults in
DrafterBase. `pick` and `autoregress` are the sampling steps the model drafters share.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from specdec_core.config import GenerationConfig
from specdec_core.drafting.trees import (
    DraftTree,
    TreeRequest,
)
from specdec_core.events import DraftStop
from specdec_core.verification.kv import CachedForward
from specdec_core.verification.sampling import processed_probs, sample, seen_tokens, shown_probs


@dataclass(frozen=True)
class Draft:
    token_ids: tuple[int, ...]
    draft_probs: torch.Tensor  # [k, V] the processed distribution each token was sampled from
    display_probs: tuple[float | None, ...]  # draft(x_i) for people (sampling.shown_probs); None: string match
    stop: DraftStop
    draft_s: float
    # A draft with another tokenizer (cross_vocab.py): the draft's own token(s) behind each proposed token.
    sources: tuple[str | None, ...] = ()
    copied: bool = False  # copied from earlier text (prompt lookup, the phrase store), not drafted by a model

    @classmethod
    def empty(cls, stop: DraftStop, vocab_size: int, start: float | None = None) -> Draft:
        """No tokens, and why; `start`: when drafting began (None: no time spent)."""
        return cls((), torch.empty(0, vocab_size), (), stop, 0.0 if start is None else time.perf_counter() - start)


@dataclass(frozen=True)
class DraftTarget:
    """What a drafter drafts for, bound at `attach` (the engine attaches before each reply)."""

    forward: CachedForward | None  # the verifier's forward pass (a draft head reads its hidden states through
    # it); None: drafting for no verifier (the draft alone, or a replay)
    vocab_size: int  # ids the verifier can produce: each proposal's distributions span them
    eos_token_ids: frozenset[int]  # the verifier's ends of sequence: a proposal ends at its first
    config: GenerationConfig = GenerationConfig()  # the reply's sampling rules, which a draft samples by too


class Drafter(Protocol):
    name: str
    reads_verifier: bool  # drafting needs the verifier's own passes (a head reads its hidden states)
    grows_trees: bool  # propose_tree drafts a tree (else the engine drafts chains with propose)

    def attach(self, target: DraftTarget) -> None:
        """What the drafter's proposals are for, until the next attach."""
        ...

    def propose(self, ids: Sequence[int], max_tokens: int) -> Draft:
        """Up to `max_tokens` tokens continuing `ids` (prompt + verified tokens), autoregressively; a proposal
        ends at its first end of sequence."""
        ...

    def propose_tree(self, ids: Sequence[int], request: TreeRequest) -> DraftTree:
        """Candidates continuing `ids`, best first, as `request` bounds them (trees.py)."""
        ...

    def copy(self, ids: Sequence[int], max_tokens: int) -> Draft | None:
        """Up to `max_tokens` tokens that cost no model step (a copy from the conversation or the phrase store),
        where this drafter would propose such a copy here; None where it would draft with its model. The planner
        prices copies apart: on a verifier whose check of k rows costs nearly k steps, a copy may still pay where
        the model's drafting does not."""
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

    def reset_cache(self) -> None:
        """Forget any cache of its own (the engine's caches were reset: they may hold a half-written step)."""
        ...


class DrafterBase:
    """The Drafter hooks' defaults: keep the target, no tree, nothing to read ahead, reseed or reset. A drafter is
    taken to read the verifier unless it says otherwise (`reads_verifier`): the engine then never drafts it on a
    thread of its own during the verifier's prefill."""

    reads_verifier = True
    grows_trees = False
    _target: DraftTarget | None = None

    @property
    def target(self) -> DraftTarget:
        """What the drafter drafts for (`attach`)."""
        assert self._target is not None, f"{type(self).__name__}.attach() was not called (the Engine does it)"
        return self._target

    def attach(self, target: DraftTarget) -> None:
        self._target = target

    def propose_tree(self, ids: Sequence[int], request: TreeRequest) -> DraftTree:
        return DraftTree.empty(DraftStop.NO_MATCH)  # grows_trees is False: the engine never asks

    def copy(self, ids: Sequence[int], max_tokens: int) -> Draft | None:
        return None  # every proposal of this drafter is its own drafting, priced as such

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        pass

    def prefill(self, ids: Sequence[int]) -> None:
        pass

    def reset(self, seed: int) -> None:
        pass

    def reset_cache(self) -> None:
        pass



def pick(logits: torch.Tensor, config: GenerationConfig, generator: torch.Generator, first: bool,
          seen: torch.Tensor | None = None) -> tuple[int, torch.Tensor, float] | None:
    """One drafted token from the draft's logits [V]: (token, the processed distribution it was sampled
    from, its probability as people read it), or None when the confidence cutoff ends the round.
    `seen`: the ids of the history so far, for the repetition penalty (sampling.seen_tokens)."""
    draft_probs = processed_probs(logits, config, seen)
    shown = shown_probs(logits, config, draft_probs)
    if config.confidence_cutoff and not first and float(shown.max()) < config.confidence_cutoff:
        return None
    token = sample(draft_probs, generator)
    return token, draft_probs, float(shown[token])


def in_verifier_ids(logits: torch.Tensor, known: int, vocab_size: int) -> torch.Tensor:
    """A draft's logits over its own ids [V_draft] placed into the verifier's id space [vocab_size].

    Ids `known` and past (tokens the draft's vocabulary lacks, or its padding rows) get -inf: zero draft
    probability. The draft never proposes them, and the acceptance rule's residual max(0, target - draft)
    keeps all of their verifier mass, so the verifier can still produce them: the output stays exact."""
    known = min(known, vocab_size, logits.shape[-1])
    if known == vocab_size:
        return logits[:vocab_size]
    placed = logits.new_full((vocab_size,), float("-inf"))
    placed[:known] = logits[:known]
    return placed


def autoregress(next_logits: Callable[[list[int]], torch.Tensor], start: float, max_tokens: int,
                 target: DraftTarget, generator: torch.Generator, ids: Sequence[int] = ()) -> Draft:
    """Draft up to `max_tokens` tokens, each from `next_logits(tokens drafted so far)` ([vocab_size] logits
    over the verifier's ids); `ids` is what they continue (the repetition penalty reads it)."""
    config, vocab_size, eos_token_ids = target.config, target.vocab_size, target.eos_token_ids
    tokens: list[int] = []
    rows: list[torch.Tensor] = []
    shown: list[float] = []
    stop = DraftStop.GAMMA if max_tokens > 0 else DraftStop.MAX_TOKENS
    while len(tokens) < max_tokens:
        logits = next_logits(tokens)
        seen = seen_tokens(config, ids, [tokens], vocab_size, logits.device)
        picked = pick(logits, config, generator, first=not tokens, seen=None if seen is None else seen[0])
        if picked is None:
            stop = DraftStop.CONFIDENCE
            break
        token, draft_probs, shown_prob = picked
        tokens.append(token)
        rows.append(draft_probs)
        shown.append(shown_prob)
        if token in eos_token_ids:
            stop = DraftStop.EOS
            break
    probs = torch.stack(rows) if rows else torch.empty(0, vocab_size)
    return Draft(tuple(tokens), probs, tuple(shown), stop, time.perf_counter() - start)

"""Prompt lookup first, a model where nothing matches (HybridDrafter)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import torch

from specdec_core.drafting.base import Draft, Drafter, DrafterBase, DraftTarget
from specdec_core.drafting.lookup_drafter import PromptLookupDrafter
from specdec_core.drafting.phrases import PhraseStore
from specdec_core.drafting.trees import (
    PHRASE_ACCEPTANCE,
    Copy,
    CopyRecord,
    DraftTree,
    TreeRequest,
)
from specdec_core.events import DraftStop


class HybridDrafter(DrafterBase):
    """Prompt lookup where the conversation has a match, the draft model everywhere else.

    Copying is free and, after a 2-3 token match, often long and right (names, code, quoted text);
    a model draft costs a step per token but proposes something at every position. Each round takes
    the lookup's proposal if it found one, else asks the model for at most `model_tokens` tokens (a
    cheaper verify of fewer rows may pay better than the full γ for a draft of modest acceptance).
    Which one drafts depends only on the sequence so far, so verification stays exact: each round's
    draft_probs are those of the drafter that proposed it."""

    def __init__(self, model_drafter: Drafter, model_tokens: int | None = None,
                 lookup: PromptLookupDrafter | None = None, phrases: PhraseStore | None = None):
        if model_tokens is not None and model_tokens < 1:
            from specdec_core.errors import ConfigError

            raise ConfigError(f"the draft model's tokens per round must be at least 1 (got {model_tokens})")
        self.model_drafter = model_drafter
        self.lookup = lookup or PromptLookupDrafter()
        self.model_tokens = model_tokens
        self.name = f"{model_drafter.name} + prompt lookup"
        self.phrases = phrases  # the verifier's own phrases (phrases.py): copied where the conversation has no match
        self.copies = CopyRecord()  # trees: how often copies were right here (chains take every copy anyway)
        self.phrase_copies = CopyRecord(PHRASE_ACCEPTANCE)  # the same for the store's copies
        # (the text before it, the copy, the record that judges it)
        self._last_copy: tuple[list[int], tuple[int, ...], CopyRecord] | None = None

    def reset(self, seed: int) -> None:
        self.model_drafter.reset(seed)
        self._last_copy = None  # a new reply: what follows the last copy is the chat template, not a verdict

    @property
    def grows_trees(self) -> bool:  # type: ignore[override]
        return self.model_drafter.grows_trees

    @property
    def reads_verifier(self) -> bool:  # type: ignore[override]
        return self.model_drafter.reads_verifier

    def reset_cache(self) -> None:
        self._last_copy = None
        self.model_drafter.reset_cache()

    def prefill(self, ids: Sequence[int]) -> None:
        self.model_drafter.prefill(ids)

    def attach(self, target: DraftTarget) -> None:
        super().attach(target)
        self.lookup.attach(target)
        self.model_drafter.attach(target)

    def copy(self, ids: Sequence[int], max_tokens: int) -> Draft | None:
        copied = self._copied(ids, max_tokens)
        return copied if copied.token_ids else None

    def _copied(self, ids: Sequence[int], max_tokens: int) -> Draft:
        """Prompt lookup's copy, else the phrase store's; empty (with the time spent looking) where neither has one."""
        copied = self.lookup.propose(ids, max_tokens)
        if not copied.token_ids and max_tokens > 0:
            copied = self._phrase_copy(ids, max_tokens, copied)
        return copied

    def propose(self, ids: Sequence[int], max_tokens: int) -> Draft:
        copied = self._copied(ids, max_tokens)
        if copied.token_ids or max_tokens <= 0:
            return copied
        budget = max_tokens if self.model_tokens is None else min(max_tokens, self.model_tokens)
        drafted = self.model_drafter.propose(ids, budget)
        # Drafting the whole budget below the round's length limit stopped at the model's cap, not at γ.
        stop = DraftStop.DRAFT_CAP if drafted.stop is DraftStop.GAMMA and budget < max_tokens else drafted.stop
        return dataclasses.replace(drafted, stop=stop, draft_s=drafted.draft_s + copied.draft_s)

    def propose_tree(self, ids: Sequence[int], request: TreeRequest) -> DraftTree:
        """The draft's tree with prompt lookup's copy as one more branch (the request's own where lookup finds
        none)."""
        ids = list(ids)
        if self._last_copy is not None:  # judge the last round's copy by what the verifier produced there
            before, copy, record = self._last_copy
            if len(ids) > len(before) and ids[:len(before)] == before:
                record.record(copy, ids[len(before):])
        found, record = self.lookup.propose(ids, request.max_depth), self.copies
        if not found.token_ids:
            found, record = self._phrase_copy(ids, request.max_depth, found), self.phrase_copies
        self._last_copy = (ids, found.token_ids, record) if found.token_ids else None
        if found.token_ids:
            request = dataclasses.replace(request, copied=Copy(found.token_ids, record.acceptance()))
        tree = self.model_drafter.propose_tree(ids, request)
        return dataclasses.replace(tree, draft_s=tree.draft_s + found.draft_s)

    def _phrase_copy(self, ids: Sequence[int], max_tokens: int, nothing: Draft) -> Draft:
        """The phrase store's continuation as a one-hot draft (`nothing`, the empty lookup, without a store)."""
        if self.phrases is None:
            return nothing
        start, vocab_size, eos_token_ids = time.perf_counter(), self.target.vocab_size, self.target.eos_token_ids
        tokens = [t for t in self.phrases.continuation(ids, max_tokens) if t < vocab_size]
        ending = next((i for i, t in enumerate(tokens) if t in eos_token_ids), None)
        if ending is not None:
            tokens = tokens[:ending + 1]
        if not tokens:
            return dataclasses.replace(nothing, draft_s=nothing.draft_s + time.perf_counter() - start)
        stop = (DraftStop.EOS if ending is not None else DraftStop.GAMMA if len(tokens) == max_tokens
                else DraftStop.NO_MATCH)
        probs = torch.nn.functional.one_hot(torch.tensor(tokens, dtype=torch.long), vocab_size).float()
        return Draft(tuple(tokens), probs, tuple(1.0 for _ in tokens), stop,
                     nothing.draft_s + time.perf_counter() - start, copied=True)

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        self.model_drafter.observe(n_drafted, n_accepted)

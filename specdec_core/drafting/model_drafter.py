"""The drafter that runs a small causal language model of its own (ModelDrafter)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from specdec_core.drafting.base import Draft, DrafterBase, autoregress, in_verifier_ids
from specdec_core.drafting.trees import (
    DraftTree,
    TreeRequest,
    level_as_tree,
    shared_ancestors,
)
from specdec_core.events import DraftStop
from specdec_core.verification.kv import CachedForward, supports_trees

if TYPE_CHECKING:
    from specdec_core.loading.models import LoadedModel


class ModelDrafter(DrafterBase):
    """A small causal LM with its own KV cache, sampling from the same processed distribution rule
    as the verifier (temperature, top-k, top-p) so that the acceptance ratio is exact.

    The draft may know fewer token ids than the verifier (the doctor has checked that the ids both know
    mean the same text). It proposes only ids it knows, and reads the verifier's other ids as its unknown
    token, or not at all when it has none: what the draft reads changes only how good its guesses are,
    never the output's distribution."""

    grows_trees = True
    reads_verifier = False

    def __init__(self, draft: LoadedModel):
        self.draft = draft
        self.name = draft.name
        self.forward = CachedForward(draft.model, draft.device)
        self.generator = torch.Generator(device=draft.device)
        self.known_ids = draft.producible_ids  # ids 0..known_ids-1 mean the same to both models
        self.unknown_id: int | None = getattr(draft.tokenizer, "unk_token_id", None)
        self._trees = supports_trees(draft.model)  # a tree level can run as one forward pass

    def _readable(self, ids: Sequence[int]) -> list[int]:
        """`ids` as the draft can read them (the same ids unless the verifier produced one it lacks)."""
        ids = list(ids)
        if not ids or max(ids) < self.known_ids:
            return ids
        unknown = self.unknown_id
        if unknown is None:
            return [t for t in ids if t < self.known_ids]
        return [t if t < self.known_ids else unknown for t in ids]

    def reset(self, seed: int) -> None:
        # Seeded apart from the verifier's generator so the two streams of draws never coincide.
        self.generator.manual_seed(seed * 2 + 1)

    def reset_cache(self) -> None:
        self.forward.reset()

    def prefill(self, ids: Sequence[int]) -> None:
        readable = self._readable(ids)
        if readable:
            self.forward.logits_for(readable)  # the first propose() then reuses these logits (kv.py)

    def propose(self, ids: Sequence[int], max_tokens: int) -> Draft:
        start, vocab_size = time.perf_counter(), self.target.vocab_size
        context = self._readable(ids)
        if not context:  # the draft can read nothing of this sequence: it has nothing to continue
            return Draft.empty(DraftStop.NO_MATCH, vocab_size, start)

        def next_logits(drafted: list[int]) -> torch.Tensor:
            # Token t of the round conditions on the prompt, the verified tokens and tokens 1..t-1.
            return in_verifier_ids(self.forward.logits_for(context + drafted)[-1], self.known_ids, vocab_size)

        return autoregress(next_logits, start, max_tokens, self.target, self.generator, ids)

    def propose_tree(self, ids: Sequence[int], request: TreeRequest) -> DraftTree:
        """Candidates as `request` bounds them (see trees.TreeGrowth).

        A level costs one draft forward pass, whatever its width: the level's paths run as a tree after the
        committed tokens and the ancestors all of them share, each node attending only to its own ancestors
        (kv.py's tree attention, as the verifier checks trees). The shared ancestors stay in the draft's cache
        and the branches are dropped at once, so a tree that grows along one path drafts as cheaply as a chain:
        each level feeds only its new tokens, and the next round keeps whatever of the path was accepted. A draft
        whose cache cannot hold a tree (sliding-window layers) runs each path in turn, moving between branches by
        the cache's prefix rule."""
        start, target = time.perf_counter(), self.target
        context = self._readable(ids)
        if not context or request.empty:
            return DraftTree.empty(DraftStop.MAX_TOKENS if context else DraftStop.NO_MATCH, start)

        def in_ids(row: torch.Tensor) -> torch.Tensor:
            return in_verifier_ids(row, self.known_ids, target.vocab_size)

        def logits_for(paths: list[list[int]], paths_tokens: list[list[int]]) -> tuple[torch.Tensor, None]:
            if len(paths) == 1:  # one path: a chain step, its tokens kept in the cache as a chain's are
                return in_ids(self.forward.logits_for(context + self._readable(paths_tokens[0]))[-1])[None], None
            shared = shared_ancestors(paths)
            tree = self._level_tree([path[shared:] for path in paths], [tokens[shared:] for tokens in paths_tokens])
            if tree is None:
                return torch.stack([in_ids(self.forward.logits_for(context + self._readable(path_tokens))[-1])
                                    for path_tokens in paths_tokens]), None
            tokens, parents, rows = tree
            logits = self.forward.logits_for_tree(context + self._readable(paths_tokens[0][:shared]), tokens, parents)
            self.forward.keep_path([])  # roll back the branches: the cache keeps the ancestors they share
            return torch.stack([in_ids(logits[row]) for row in rows]), None

        return request.grow(logits_for, start, target.config, target.eos_token_ids)

    def _level_tree(self, paths: list[list[int]], paths_tokens: list[list[int]]
                    ) -> tuple[list[int], list[int], list[int]] | None:
        if not self._trees:
            return None

        def readable(token: int) -> int | None:
            return token if token < self.known_ids else self.unknown_id

        return level_as_tree(paths, paths_tokens, readable)

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        pass  # rollback is implicit: the next propose() keeps only the cache prefix that still matches

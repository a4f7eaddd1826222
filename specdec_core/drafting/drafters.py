"""Drafters: whatever proposes tokens for the verifier to check.

The contract (`Drafter`, after transformers' candidate generators): `attach` binds what the drafter drafts for
(DraftTarget: the verifier's forward pass, the ids it can produce, its ends of sequence, the reply's sampling
rules); `propose(ids, n)` then returns up to n tokens with the exact distribution each was sampled from, and
`observe` is told how many the verifier accepted (adaptive strategies may use it; rollback itself is implicit,
see kv.py). A drafter that can grow a tree of candidates (trees.py) says so with `grows_trees` and drafts one
with `propose_tree(ids, request)`. The other hooks (`prefill`, `reset`, `reset_cache`) have no-op defaults in
DrafterBase.
A drafter need not be a model: prompt lookup copies from the conversation.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch

from specdec_core.config import GenerationConfig
from specdec_core.drafting.draft_head import HeadCache
from specdec_core.drafting.phrases import PhraseStore, shipped_store
from specdec_core.drafting.trees import (
    PHRASE_ACCEPTANCE,
    Copy,
    CopyRecord,
    DraftTree,
    TreeRequest,
    level_as_tree,
    shared_ancestors,
)
from specdec_core.events import DraftStop
from specdec_core.loading import quantised
from specdec_core.verification.kv import CachedForward, common_prefix_length, supports_trees
from specdec_core.verification.sampling import processed_probs, sample, seen_tokens, shown_probs

if TYPE_CHECKING:
    from specdec_core.loading.models import LoadedModel


@dataclass(frozen=True)
class Draft:
    token_ids: tuple[int, ...]
    draft_probs: torch.Tensor  # [k, V] the processed distribution each token was sampled from
    display_probs: tuple[float | None, ...]  # draft(x_i) for people (sampling.shown_probs); None: string match
    stop: DraftStop
    draft_s: float
    # A draft with another tokenizer (cross_vocab.py): the draft's own token(s) behind each proposed token.
    sources: tuple[str | None, ...] = ()

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



def _pick(logits: torch.Tensor, config: GenerationConfig, generator: torch.Generator, first: bool,
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


def _autoregress(next_logits: Callable[[list[int]], torch.Tensor], start: float, max_tokens: int,
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
        picked = _pick(logits, config, generator, first=not tokens, seen=None if seen is None else seen[0])
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
            self.forward.prefill(readable)  # the first propose() then reuses these logits (kv.py)

    def propose(self, ids: Sequence[int], max_tokens: int) -> Draft:
        start, vocab_size = time.perf_counter(), self.target.vocab_size
        context = self._readable(ids)
        if not context:  # the draft can read nothing of this sequence: it has nothing to continue
            return Draft.empty(DraftStop.NO_MATCH, vocab_size, start)

        def next_logits(drafted: list[int]) -> torch.Tensor:
            # Token t of the round conditions on the prompt, the verified tokens and tokens 1..t-1.
            return in_verifier_ids(self.forward.logits_for(context + drafted)[-1], self.known_ids, vocab_size)

        return _autoregress(next_logits, start, max_tokens, self.target, self.generator, ids)

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


class HeadDrafter(DrafterBase):
    """A draft head (draft_head.py, after EAGLE) that reads the verifier's final hidden states.

    Before each round the head catches up on the positions the verifier has verified since the last
    round, fed with the verifier's true hidden states; then it drafts autoregressively, each step
    feeding back its own prediction of the next hidden state with the token it just drafted. Its KV
    cache keeps the positions computed from true hidden states and drops the rest, so a rejected draft
    never leaves a predicted state behind.

    The engine calls `attach` with the verifier's CachedForward, which then records hidden states."""

    grows_trees = True

    def __init__(self, head: LoadedModel):
        self.draft = head
        self.name = head.name
        self.model = head.model
        self.generator = torch.Generator(device=head.device)
        self.cache = HeadCache()
        self._cache_ids: list[int] = []  # token ids x_0..x_m behind the head's cached positions 0..m-1
        self._true_positions = 0  # cached positions computed from the verifier's true hidden states
        self._next_state: torch.Tensor | None = None  # head's prediction of the state after its last true position
        self.verifier_forward: CachedForward | None = None
        self.forward_s = 0.0  # time inside the head and its output rows (benchmarks: engine overhead is the rest)

    def attach(self, target: DraftTarget) -> None:
        """Read the verifier's hidden states through the target's forward pass, and borrow its embeddings and
        output rows. Attaching to the one it already reads keeps the head's cache."""
        super().attach(target)
        verifier_forward = target.forward
        assert verifier_forward is not None, "a draft head reads the verifier's hidden states: it cannot draft alone"
        if verifier_forward is self.verifier_forward:
            return
        verifier = verifier_forward.model
        self.verifier_forward = verifier_forward
        verifier_forward.record_hidden_states(self.model.config.feature_layers)
        self.embed = verifier.get_input_embeddings()
        self.embed_device = quantised.device_of(self.embed)
        head_ids = self.model.head_ids
        output = verifier.get_output_embeddings()
        self.head_ids = head_ids[head_ids < quantised.row_count(output)].to(quantised.device_of(output))
        # The verifier's output rows of the head's ids, as a layer of their own: the one the loader made for the
        # head (on a CPU it takes the product form measured fastest here, as the models' layers do), else a plain one.
        rows = quantised.output_rows(output, self.head_ids).to(self.draft.device, self.draft.dtype)
        self.output = self.draft.head_output or torch.nn.Linear(rows.shape[1], rows.shape[0], bias=False,
                                                                device=rows.device, dtype=rows.dtype)
        self.output.weight = torch.nn.Parameter(rows, requires_grad=False)
        self.reset_cache()

    def reset(self, seed: int) -> None:
        self.generator.manual_seed(seed * 2 + 1)

    def reset_cache(self) -> None:
        self.cache = HeadCache()
        self._cache_ids, self._true_positions, self._next_state = [], 0, None

    @torch.inference_mode()
    def prefill(self, ids: Sequence[int]) -> None:
        self._catch_up(list(ids))

    def _step(self, states: torch.Tensor, tokens: Sequence[int], positions: int | Sequence[int],
              sees: torch.Tensor | None = None) -> torch.Tensor:
        """Run the head on (state f_i, token x_{i+1}) pairs; predicted states [n, d]. `positions`: the first
        of consecutive positions, or each pair's own; `sees` [n, cached + n]: which cached and new
        positions each pair attends to (default: all cached ones, and the new ones causally)."""
        device = self.draft.device
        token_ids = torch.tensor([list(tokens)], dtype=torch.long, device=self.embed_device)
        embeds = self.embed(token_ids).to(device, self.draft.dtype)
        if isinstance(positions, int):
            positions = range(positions, positions + len(tokens))
        start = time.perf_counter()
        predicted = self.model(states[None].to(device, self.draft.dtype), embeds,
                               torch.tensor(list(positions), device=device), self.cache, sees)[0]
        self.forward_s += time.perf_counter() - start
        return predicted

    def _catch_up(self, ids: list[int]) -> torch.Tensor | None:
        """Bring the head's cache up to the verifier's verified positions; the state to draft from."""
        assert self.verifier_forward is not None, "HeadDrafter.attach() was not called (Engine does it)"
        known = min(common_prefix_length(self.verifier_forward.cached_ids, ids), self.verifier_forward.hidden_len)
        if known < len(ids) - 1:
            return None  # the verifier has not read this sequence: nothing to draft from
        # Head position i reads (f_i, x_{i+1}): those with true states run from 0 to len(ids) - 2.
        stop = len(ids) - 1
        valid = min(self._true_positions, max(0, common_prefix_length(self._cache_ids, ids) - 1), stop)
        if not (valid == stop == self._true_positions and self._next_state is not None):
            valid = min(valid, max(0, stop - 1))  # rerun at least the last position: its prediction is needed
            self._next_state = None
        self.cache.crop(valid)  # also drops the positions the last round predicted
        if stop > valid:
            predicted = self._step(self.verifier_forward.hidden_states(valid, stop), ids[valid + 1:stop + 1], valid)
            self._next_state = predicted[-1]
        self._true_positions = stop
        self._cache_ids = ids[:stop + 1]
        if known >= len(ids):
            # The verifier's own final state, which scores its own next token: exact.
            return self.verifier_forward.hidden_states(len(ids) - 1, len(ids))[0, :self.model.config.hidden_size]
        return self._next_state

    def _scores(self, states: torch.Tensor) -> torch.Tensor:
        """The head's logits over its own ids [n, len(head_ids)] for predicted states [n, d]."""
        start = time.perf_counter()
        scores = self.output(states.to(self.output.weight.dtype))
        self.forward_s += time.perf_counter() - start
        return scores

    def _logits(self, states: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """The head's logits over the verifier's ids [n, vocab_size] for predicted states [n, d] (-inf outside
        its output rows)."""
        scores = self._scores(states)
        logits = scores.new_full((len(states), vocab_size), float("-inf"))
        return logits.index_copy_(1, self.head_ids.to(logits.device), scores)

    @torch.inference_mode()
    def propose(self, ids: Sequence[int], max_tokens: int) -> Draft:
        start, vocab_size = time.perf_counter(), self.target.vocab_size
        context = list(ids)
        state = self._catch_up(context) if max_tokens > 0 else None
        if state is None:  # no room left, or the verifier has not read `ids`: nothing to draft from
            stop = DraftStop.MAX_TOKENS if max_tokens <= 0 else DraftStop.NO_MATCH
            return Draft.empty(stop, vocab_size, start)
        current = [state]

        def next_logits(drafted: list[int]) -> torch.Tensor:
            if drafted:  # feed back the predicted state with the token drafted from it
                position = len(context) - 1 + len(drafted) - 1
                current[0] = self._step(current[0][None], drafted[-1:], position)[-1]
            return self._logits(current[0][None], vocab_size)[0]

        return _autoregress(next_logits, start, max_tokens, self.target, self.generator, ids)

    @torch.inference_mode()
    def propose_tree(self, ids: Sequence[int], request: TreeRequest) -> DraftTree:
        """Candidates as `request` bounds them (see trees.TreeGrowth).

        A level's nodes, all at depth d, run through the head in one call: each is fed at the position after
        the last true one plus d, with the state its parent predicted, and attends to the true positions,
        its ancestors (fed by earlier levels) and itself. The head's cache keeps those draft positions
        after the true ones until the next round cuts them off."""
        start, target = time.perf_counter(), self.target
        context = list(ids)
        root_state = None if request.empty else self._catch_up(context)
        if root_state is None:
            return DraftTree.empty(DraftStop.MAX_TOKENS if request.empty else DraftStop.NO_MATCH, start)
        first_position = len(context) - 1  # _catch_up left the cache at the true positions
        predicted: dict[int, torch.Tensor] = {}  # node -> the state the head predicts after it
        slot: dict[int, int] = {}  # node -> its position in the head's cache

        head_ids = self.head_ids.to(self.draft.device)
        unknown = head_ids >= target.vocab_size  # output rows past the verifier's tokenizer (padding): never proposed
        padded = bool(unknown.any())

        def scores(states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            rows = self._scores(states)
            return (rows.masked_fill(unknown, float("-inf")) if padded else rows), head_ids

        def logits_for(paths: list[list[int]], paths_tokens: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
            if paths == [[]]:
                return scores(root_state[None])
            nodes, past = [path[-1] for path in paths], len(self.cache)
            states = torch.stack([predicted[path[-2]] if len(path) > 1 else root_state for path in paths])
            sees = torch.zeros(len(paths), past + len(paths), dtype=torch.bool, device=self.draft.device)
            sees[:, :self._true_positions] = True
            for row, path in enumerate(paths):
                sees[row, [slot[n] for n in path[:-1]] + [past + row]] = True
            tokens = [path_tokens[-1] for path_tokens in paths_tokens]
            depth = len(paths[0]) - 1
            out = self._step(states, tokens, [first_position + depth] * len(paths), sees)
            for row, node in enumerate(nodes):
                predicted[node], slot[node] = out[row], past + row
            return scores(out)

        return request.grow(logits_for, start, target.config, target.eos_token_ids)

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        pass  # the next propose() keeps only the positions computed from true states


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
        return Draft(tuple(tokens), probs, tuple(1.0 for _ in tokens), stop, time.perf_counter() - start)


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
                     nothing.draft_s + time.perf_counter() - start)

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        self.model_drafter.observe(n_drafted, n_accepted)


def model_drafter_of(drafter: Drafter | None) -> Drafter | None:
    """The drafter that runs a model inside `drafter` (itself unless it is a hybrid)."""
    return drafter.model_drafter if isinstance(drafter, HybridDrafter) else drafter


def is_draft_head(draft: LoadedModel) -> bool:
    """A draft head (draft_head.py) reads the verifier's hidden states and cannot run on its own."""
    return getattr(draft.model.config, "model_type", None) == "specdec_head"


def drafter_for(draft: LoadedModel, *, with_lookup: bool = False, model_tokens: int | None = None) -> Drafter:
    """The drafter that runs this draft model: a HeadDrafter for a draft head, else a ModelDrafter;
    `with_lookup` wraps it in a HybridDrafter (prompt lookup first, at most `model_tokens` from the model), with
    the phrase store that ships in the draft's folder, if one does (phrases.py)."""
    runs = HeadDrafter(draft) if is_draft_head(draft) else ModelDrafter(draft)
    if not with_lookup:
        return runs
    return HybridDrafter(runs, model_tokens=model_tokens, phrases=shipped_store(draft_folder(draft)))


def draft_folder(draft: LoadedModel) -> str | None:
    """The local folder the draft's weights came from (where its phrase store would be), if it is one."""
    folder = getattr(draft.model, "name_or_path", None) or getattr(draft.model.config, "_name_or_path", None)
    return folder if folder and Path(folder).is_dir() else None

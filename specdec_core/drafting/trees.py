"""Draft trees: many candidate continuations per round, grown best first, checked in one verifier pass.

A drafter that can score several paths at once (a draft model or head, model_drafter.py and head_drafter.py;
a draft with another tokenizer, cross_vocab.py) grows a DraftTree with TreeGrowth, after EAGLE-2 (Li et al.
2024, "EAGLE-2: Faster Inference of Language Models with Dynamic Draft Trees"); prompt lookup's copy can join it
as one more branch (Copy, CopyRecord). The engine checks the tree with tree attention (kv.py) and the tree
acceptance rule (sampling.accept_tree), and keeps the accepted path (engine.Engine._check_tree).

The boundary: this module knows tokens, values and the draft's scores; it runs no model itself.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from specdec_core.config import GenerationConfig
from specdec_core.events import DraftStop
from specdec_core.verification.cost import PositionRecord
from specdec_core.verification.sampling import shown_probs

TREE_WIDTH = 4  # candidates considered under each expanded node (the tree keeps the best of them overall)


def path_to(parents: Sequence[int], node: int) -> list[int]:
    """Nodes from the root's child down to `node`, in a tree given by each node's parent (-1: the root)."""
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


@dataclass(frozen=True)
class DraftTree:
    """Candidate continuations as a tree: node i is token_ids[i] after node parents[i] (-1: after the last
    committed token). Nodes come best first, so every parent precedes its children and any prefix of the
    nodes is a tree too. Each candidate is chosen, not sampled: the verifier checks it as a one-hot
    proposal (sampling.accept_tree), which is exact whatever the draft's distribution."""

    token_ids: tuple[int, ...]
    parents: tuple[int, ...]
    values: tuple[float, ...]  # the chance that the whole path to the node is right (see Candidate.value)
    display_probs: tuple[float, ...]  # draft(x) given the path above it, as people read it
    stop: DraftStop
    draft_s: float
    expansions: int = 0  # draft steps taken to grow it (each scores one level of nodes' children)
    copied: tuple[bool, ...] = ()  # per node: proposed by prompt lookup's copy, not by the draft (empty: none)
    # Per node, a draft with another tokenizer (cross_vocab.py): the draft's own token(s) it came from (empty: none).
    sources: tuple[str | None, ...] = ()

    @classmethod
    def empty(cls, stop: DraftStop, start: float | None = None) -> DraftTree:
        """No candidates, and why; `start`: when drafting began (None: no time spent)."""
        return cls((), (), (), (), stop, 0.0 if start is None else time.perf_counter() - start)

    def __len__(self) -> int:
        return len(self.token_ids)

    def prefix(self, n: int) -> DraftTree:
        """The n best nodes (a tree, since parents come first)."""
        return dataclasses.replace(self, token_ids=self.token_ids[:n], parents=self.parents[:n],
                                   values=self.values[:n], display_probs=self.display_probs[:n],
                                   copied=self.copied[:n], sources=self.sources[:n])

    def is_copy(self, node: int) -> bool:
        return node < len(self.copied) and self.copied[node]

    def source(self, node: int) -> str | None:
        return self.sources[node] if node < len(self.sources) else None

    def path_to(self, node: int) -> list[int]:
        """Nodes from the root's child down to `node`."""
        return path_to(self.parents, node)

    def main_line(self, path: Sequence[int]) -> list[int]:
        """The accepted `path`, then the draft's best guess below it (each node's first child, as drafted):
        what a viewer reads as the round's chain."""
        line = list(path)
        while True:
            parent = line[-1] if line else -1
            child = next((node for node, p in enumerate(self.parents) if p == parent), None)
            if child is None:
                return line
            line.append(child)


# Prompt lookup's copies joined to a tree: the chance that a copied token is right given the copy was right so
# far (measured on the bundled prompts; docs/performance.md). The prior of CopyRecord, which learns the
# conversation's own rates.
LOOKUP_ACCEPTANCE = (0.54, 0.67, 0.81, 0.86)
# The same for the phrase store's copies (phrases.py), before any has been judged: from a replay of the embedded
# verifier's greedy replies to independent-heldout (docs/performance.md, "the verifier's own phrases").
PHRASE_ACCEPTANCE = (0.45, 0.55, 0.6, 0.6)


@dataclass(frozen=True)
class Copy:
    """Prompt lookup's continuation, joined to a tree as one more branch: its tokens, and the chance that
    each is right given that the ones before it were (the last rate holds for the positions past it)."""

    tokens: tuple[int, ...] = ()
    acceptance: tuple[float, ...] = LOOKUP_ACCEPTANCE

    def rate(self, position: int) -> float:
        return self.acceptance[min(position, len(self.acceptance) - 1)]


NO_COPY = Copy()  # a tree without prompt lookup's branch


class CopyRecord(PositionRecord):
    """How often prompt lookup's copies turned out right in this conversation, by position.

    A copy's worth depends on the text: a reply that rewrites a given text copies long runs that are
    right, a free answer copies short ones that are not. The record starts from LOOKUP_ACCEPTANCE (worth
    PRIOR_WEIGHT copies) and follows the recent copies (each older one counts DECAY times less), so a
    tree keeps a long copy where copies have been right, and prunes it where they have not."""

    PRIOR_WEIGHT = 4.0

    def __init__(self, prior: Sequence[float] = LOOKUP_ACCEPTANCE):
        super().__init__(prior)

    def acceptance(self) -> tuple[float, ...]:
        return self.rates()

    def record(self, copied: Sequence[int], verified: Sequence[int]) -> None:
        """A copy proposed after some text, and the tokens the verifier then produced there (only the
        positions they cover are judged)."""
        judged = min(len(copied), len(verified))
        if judged:
            right = next((i for i in range(judged) if copied[i] != verified[i]), judged)
            self.observe(judged, right)


# (paths, their tokens) -> the draft's scores [n, m] after each path, and the verifier id of each of the m
# columns (None: column i is id i). See TreeGrowth.
LevelLogits = Callable[[list[list[int]], list[list[int]]], tuple[torch.Tensor, torch.Tensor | None]]


class Worth(Protocol):
    """What a node is worth on this machine and to this verifier (cost.TreeSizer). See TreeGrowth."""

    def least_value(self, values: Sequence[float], expansions: int = 0, more: int = 0) -> float:
        """The least value the next node must have to pay for its checking and `more` further expansions,
        given the values of the best nodes so far and the `expansions` made."""
        ...

    def calibrated(self, prob: float) -> float:
        """The measured chance that a token the draft gives `prob` is right, given its path was."""
        ...


@dataclass(frozen=True)
class TreeRequest:
    """What a round asks of a drafter's tree (Drafter.propose_tree)."""

    max_nodes: int  # the most candidates
    max_depth: int  # the longest path
    copied: Copy = NO_COPY  # joins as one more branch (a hybrid's prompt lookup: see TreeGrowth)
    worth: Worth | None = None  # prices nodes while the tree grows (None: at the draft's word)

    @property
    def empty(self) -> bool:
        """Whether the request leaves room for no node at all."""
        return self.max_nodes <= 0 or self.max_depth <= 0

    def grow(self, logits_for: LevelLogits, start: float, config: GenerationConfig, eos_token_ids: frozenset[int]
             ) -> DraftTree:
        """The tree grown from `logits_for` as requested (grow_tree); `start`: when drafting began."""
        return grow_tree(logits_for, start, self.max_nodes, self.max_depth, config, eos_token_ids, self.copied,
                         self.worth)


@dataclass
class Candidate:
    """A node of a growing tree (its value rises if it is offered again with a higher one)."""

    token: int
    parent: int  # candidate index, -1: the root
    value: float  # the chance that the whole path to it is right: the product of its tokens' (calibrated) probs
    shown: float  # the draft's probability of the token given its path, as people read it
    depth: int  # 0: a child of the root
    copied: bool = False  # proposed by prompt lookup's copy (and not by the draft)


class TreeGrowth:
    """Grow a tree a level at a time, then keep its best nodes: EAGLE-2's expand and rerank steps.

    Expand: each level scores, in one call, the TREE_WIDTH likeliest candidates of the deepest level and
    offers each one's TREE_WIDTH likeliest children. `logits_for(paths, paths_tokens)` gives the draft's
    logits after each path of candidate indices ([[]] for the root's), [n, vocab] over the verifier's ids or
    [n, m] over the m ids it also returns (a head scores only its own ids; the others have no draft mass). A
    draft that can score several paths at once (the head) pays for a level about what one path costs.
    A candidate's value is the chance that its whole path is right: the product down the path of the draft's
    probabilities, each read through `worth.calibrated` (what such a probability has meant for this verifier
    lately, cost.Calibration), or at face value without `worth`.

    Rerank: the tree checked is the `max_nodes` candidates with the highest values; a child's value never
    exceeds its parent's, so they form a tree, parents first.

    `copied`: a continuation prompt lookup found; it joins the tree whole, as one more branch valued with its
    acceptance rates, so the verifier can take the copy, the draft's guess, or whichever is right.

    `worth.least_value(values, expansions, more)`: the least value the next node must have to pay for its
    checking and `more` further expansions, given the values of the best nodes so far and the `expansions`
    made (cost.TreeSizer.least_value). A candidate below it is not checked, and one whose own value could not pay
    for another level is not expanded (its children are worth less): an unsure draft costs one look at the
    root's distribution and nothing more."""

    def __init__(self, logits_for: LevelLogits, config: GenerationConfig, eos_token_ids: frozenset[int],
                 max_nodes: int, max_depth: int, copied: Copy = NO_COPY, worth: Worth | None = None):
        self.logits_for, self.config, self.eos_token_ids = logits_for, config, eos_token_ids
        self.max_nodes, self.max_depth, self.copied, self.worth = max_nodes, max_depth, copied, worth
        self.candidates: list[Candidate] = []
        self.expansions = 0
        self._index: dict[tuple[int, int], int] = {}  # (parent, token) -> candidate
        self._expanded: set[int] = set()

    def grown(self, start: float) -> DraftTree:
        """The tree: the root's children and the copy, then level after level while a level pays."""
        self.expand([-1])
        self.join_copy()
        for depth in range(self.max_depth - 1):
            level = self.next_level(depth)
            if not level:
                break
            self.expand(level)
        return self.tree(start)

    def offer(self, parent: int, token: int, value: float, shown: float, depth: int, copied: bool = False) -> int:
        """Add a candidate (or raise the value of the one already there: proposed by the draft and by the
        copy, it is as likely as the likelier says); its index."""
        held = self._index.get((parent, token))
        if held is None:
            held = self._index[(parent, token)] = len(self.candidates)
            self.candidates.append(Candidate(token, parent, value, shown, depth, copied))
        elif value > self.candidates[held].value:
            self.candidates[held].value = value
        return held

    def rank(self, limit: int) -> list[int]:
        """At most `limit` candidates by value, parents first."""
        order = sorted(range(len(self.candidates)), key=lambda i: (-self.candidates[i].value, i))
        kept: set[int] = set()
        chosen = []
        for i in order:
            if len(chosen) >= limit:
                break
            if self.candidates[i].parent < 0 or self.candidates[i].parent in kept:
                kept.add(i)
                chosen.append(i)
        return chosen

    def rerank(self) -> tuple[list[int], bool]:
        """The candidates that would be checked now: the best that pay for their rows (all of the best,
        without `worth`); and whether one was priced out."""
        chosen: list[int] = []
        for i in self.rank(self.max_nodes):
            if self.worth is not None and self.candidates[i].value < self.worth.least_value(self._values(chosen),
                                                                                            self.expansions, 0):
                return chosen, True
            chosen.append(i)
        return chosen, False

    def expand(self, parents: list[int]) -> None:
        """Score these candidates' children in one draft call and offer each one's likeliest."""
        self.expansions += 1
        self._expanded.update(parents)
        paths = [path_to([c.parent for c in self.candidates], node) if node >= 0 else [] for node in parents]
        paths_tokens = [[self.candidates[n].token for n in path] for path in paths]
        rows, ids = self.logits_for(paths, paths_tokens)
        # Greedy: rank by the softmax (the sampled one-hot says nothing); sampling: by the processed probs.
        probs = shown_probs(rows, self.config)
        top = torch.topk(probs, min(TREE_WIDTH, probs.shape[-1]), dim=-1)
        tokens = top.indices if ids is None else ids[top.indices]
        for row, (parent, path_tokens) in enumerate(zip(parents, paths_tokens)):
            value = self.candidates[parent].value if parent >= 0 else 1.0
            for prob, token in zip(top.values[row].tolist(), tokens[row].tolist()):
                if prob > 0:
                    trust = self.worth.calibrated(prob) if self.worth is not None else prob
                    self.offer(parent, token, value * trust, prob, len(path_tokens))

    def join_copy(self) -> None:
        """Offer the copy whole under the root: it costs no drafting (shown as lookup proposes it: p = 1)."""
        node, value = -1, 1.0
        for depth, token in enumerate(self.copied.tokens[:self.max_depth]):
            value *= self.copied.rate(depth)
            node = self.offer(node, token, value, 1.0, depth, copied=True)

    def next_level(self, depth: int) -> list[int]:
        """The candidates at `depth` worth expanding: among those checked now, the likeliest that are not an
        end of sequence, can pay for another level, and whose parent was expanded (a node is scored with its
        ancestors' states, so a copied node deep in the copy waits until the copy above it was expanded)."""
        chosen, _ = self.rerank()
        return [i for i in chosen if self.candidates[i].depth == depth
                and self.candidates[i].token not in self.eos_token_ids
                and (self.candidates[i].parent < 0 or self.candidates[i].parent in self._expanded)
                and self._pays_to_expand(i, chosen)][:TREE_WIDTH]

    def _pays_to_expand(self, node: int, chosen: list[int]) -> bool:
        """Whether `node`'s likeliest child could pay for its row and the expansion that scores it. The child
        is worth at most `node`'s value, and it would be checked before every node worth less: those weigh
        nothing against it (a sibling worth 0.01, checked because its row was nearly free, must not make a
        child worth 0.9 look as if it needed a dearer row; ranking puts the child first, rerank then drops
        the sibling if its row no longer pays)."""
        if self.worth is None:
            return True
        value = self.candidates[node].value
        ahead = [v for v in self._values(chosen) if v >= value]
        return value >= self.worth.least_value(ahead, self.expansions, 1)

    def tree(self, start: float) -> DraftTree:
        """The candidates checked now, as a DraftTree (its nodes renumbered best first)."""
        chosen, priced_out = self.rerank()
        position = {node: k for k, node in enumerate(chosen)}
        picked = [self.candidates[i] for i in chosen]
        stop = DraftStop.TREE if chosen else DraftStop.COST if priced_out else DraftStop.NO_MATCH
        return DraftTree(tuple(c.token for c in picked),
                         tuple(position[c.parent] if c.parent >= 0 else -1 for c in picked),
                         tuple(c.value for c in picked), tuple(c.shown for c in picked), stop,
                         time.perf_counter() - start, self.expansions, tuple(c.copied for c in picked))

    def _values(self, nodes: list[int]) -> list[float]:
        return [self.candidates[n].value for n in nodes]


def grow_tree(logits_for: LevelLogits, start: float, max_nodes: int, max_depth: int, config: GenerationConfig,
              eos_token_ids: frozenset[int], copied: Copy = NO_COPY, worth: Worth | None = None) -> DraftTree:
    """A tree of at most `max_nodes` candidates, `max_depth` deep, grown from `logits_for` (see TreeGrowth);
    `start`: when drafting began."""
    return TreeGrowth(logits_for, config, eos_token_ids, max_nodes, max_depth, copied, worth).grown(start)


def shared_ancestors(paths: Sequence[Sequence[int]]) -> int:
    """How many leading candidates every path of a level shares, leaving each path at least its last one
    (a level's pass runs those after the shared ones: the draft keeps the shared ones in its cache)."""
    most = min(len(path) for path in paths) - 1
    shared = 0
    while shared < most and all(path[shared] == paths[0][shared] for path in paths):
        shared += 1
    return shared


def level_as_tree(paths: list[list[int]], paths_tokens: list[list[int]], readable: Callable[[int], int | None]
                  ) -> tuple[list[int], list[int], list[int]] | None:
    """A tree level's paths (candidate indices, root's child first) as one tree a draft model can run in one
    pass (kv.CachedForward.logits_for_tree): its nodes' tokens in the draft's ids (`readable`: None where the
    draft cannot read a token, and then None for the whole level), each node's parent (-1: after the
    committed tokens), and the logits row after each path's last node. Ancestors come first on every path."""
    local: dict[int, int] = {}  # candidate -> node of this pass
    tokens: list[int] = []
    parents: list[int] = []
    for path, path_tokens in zip(paths, paths_tokens):
        for depth, (candidate, token) in enumerate(zip(path, path_tokens)):
            if candidate in local:
                continue
            own = readable(token)
            if own is None:
                return None
            local[candidate] = len(tokens)
            tokens.append(own)
            parents.append(local[path[depth - 1]] if depth else -1)
    return tokens, parents, [1 + local[path[-1]] for path in paths]

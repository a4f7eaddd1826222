"""Logits -> the processed distributions both models sample from, and the acceptance rule.

Pure tensor functions, no model and no state: every random draw takes an explicit torch.Generator.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from specdec_core.config import GenerationConfig
from specdec_core.errors import NonFiniteError


def seen_tokens(config: GenerationConfig, ids: Sequence[int], continuations: Sequence[Sequence[int]],
                vocab_size: int, device: torch.device | str = "cpu") -> torch.Tensor | None:
    """Which ids each row's history holds, for the repetition penalty; None when it is off (no cost then).

    Row i's history is `ids` followed by `continuations[i]` (the drafts before that row). -> bool [rows, V]."""
    if config.repetition_penalty == 1.0:
        return None
    seen = torch.zeros(len(continuations), vocab_size, dtype=torch.bool, device=device)
    known = [t for t in ids if 0 <= t < vocab_size]
    seen[:, known] = True
    for row, tokens in enumerate(continuations):
        extra = [t for t in tokens if 0 <= t < vocab_size]
        if extra:
            seen[row, extra] = True
    return seen


def penalize_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """transformers' repetition penalty: a seen id's logit is divided by `penalty` when positive and
    multiplied by it when negative (either way less likely for a penalty above 1). [..., V] -> [..., V]."""
    penalized = torch.where(logits < 0, logits * penalty, logits / penalty)
    return torch.where(seen.to(logits.device), penalized, logits)


def processed_probs(logits: torch.Tensor, config: GenerationConfig, seen: torch.Tensor | None = None
                    ) -> torch.Tensor:
    """The distribution actually sampled from: the repetition penalty (with `seen`, see seen_tokens), then
    temperature, then top-k, then top-p (transformers' order).

    logits: [..., V] -> probs [..., V] in float32. Greedy (temperature 0) is the one-hot of the argmax, so
    the acceptance rule below reduces to exact greedy verification with no special case.
    """
    logits = logits.float()
    if seen is not None:
        logits = penalize_repeats(logits, seen, config.repetition_penalty)
    if config.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    logits = _tempered(logits, config)
    if config.top_k and config.top_k < logits.shape[-1]:
        kth_best = torch.topk(logits, config.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth_best, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if config.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs
        # Keep the smallest set of most likely tokens whose mass reaches top_p (the first always stays).
        sorted_probs = sorted_probs.masked_fill(mass_before >= config.top_p, 0.0)
        probs = torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def shown_probs(logits: torch.Tensor, config: GenerationConfig, processed: torch.Tensor | None = None
                ) -> torch.Tensor:
    """The distribution people read (tooltips, tree views, a tree's ranking): the processed one (`processed`,
    computed here when not given), except when greedy, where that is a one-hot and says nothing, so the
    softmax at temperature 1 instead. Display only: the acceptance rule reads the processed one. [..., V]."""
    if config.greedy:
        return torch.softmax(logits.float(), -1)
    return processed_probs(logits, config) if processed is None else processed


def _tempered(logits: torch.Tensor, config: GenerationConfig) -> torch.Tensor:
    """logits / T, with the limits where that leaves float32: greedy as T -> 0, uniform as T -> inf.

    A finite T can still overflow: 1e-38 sends a logit of 50 to inf (and 1e-300 is 0 in float32, so
    every logit becomes +-inf), 1e39 is inf in float32 (0 * -inf is NaN for a masked logit). softmax of
    such a row is NaN, and NaN compares false in the acceptance test, so every draft would be accepted.
    A row whose tempered softmax is not finite takes the limit instead: the one-hot of its argmax when
    T < 1, else the uniform distribution over its finite logits (-inf logits stay ruled out). Rows that
    stay finite are exactly logits / T, as before.
    """
    top = logits.amax(-1, keepdim=True)
    # amax alone may skip a NaN on some devices (MPS has), so NaN is looked for on its own.
    if not bool(torch.isfinite(top).all()) or bool(logits.isnan().any()):
        raise NonFiniteError("the model's logits are not finite (NaN or infinity): its weights or "
                             "dtype overflow; try --dtype float32")
    tempered = logits / config.temperature
    # softmax is finite exactly when each row's maximum is: dividing by T > 0 keeps the order (rounding
    # included), so that is the row's maximum divided by T, with no second pass over the row. A temperature
    # that is 0 or inf in float32 has lost the logits' order even where the quotient is finite (1e39: every
    # logit becomes 0).
    overflowed = ~torch.isfinite(top / config.temperature)
    scale = _as_float32(config.temperature)
    if scale == 0.0 or math.isinf(scale):
        overflowed = torch.ones_like(overflowed)
    if not bool(overflowed.any()):
        return tempered
    if config.temperature < 1.0:  # the limit T -> 0: all mass on the argmax (ties: the first, as greedy)
        limit = torch.full_like(logits, float("-inf"))
        limit.scatter_(-1, logits.argmax(-1, keepdim=True), 0.0)
    else:  # the limit T -> inf keeps the order, so top-k is taken on the logits themselves
        kept = torch.isfinite(logits)
        if config.top_k and config.top_k < logits.shape[-1]:
            kept &= logits >= torch.topk(logits, config.top_k, dim=-1).values[..., -1:]
        limit = torch.zeros_like(logits).masked_fill(~kept, float("-inf"))
    return torch.where(overflowed, limit, tempered)


@functools.lru_cache(maxsize=64)
def _as_float32(value: float) -> float:
    """`value` as float32 holds it (0 or inf beyond float32's range), worked out once per temperature."""
    return float(torch.tensor(value, dtype=torch.float32))


def _check_finite(value: float, what: str) -> None:
    if not math.isfinite(value):
        raise NonFiniteError(f"{what} is not finite ({value}): the model's output overflowed; "
                             "try --dtype float32")


def sample(probs: torch.Tensor, generator: torch.Generator) -> int:
    """One token id from a [V] distribution (a one-hot gives its argmax, so greedy needs no branch).

    Inverse CDF: the first id whose cumulative mass exceeds u * total, for one uniform u in [0, 1).
    A zero-probability id adds nothing to the sum, so it can never be the first to exceed it.
    (torch.multinomial draws V exponentials per call: ~1 ms for V = 49,152 on a CPU core, where
    one cumulative sum in float64 costs ~0.06 ms.)
    """
    if probs.device != generator.device:
        probs = probs.to(generator.device)
    cdf = probs.double().cumsum(-1)
    total = float(cdf[-1])  # NaN or inf anywhere in probs reaches the total
    _check_finite(total, "the distribution sampled from")
    if total <= 0:
        raise NonFiniteError("the distribution sampled from has no mass")
    u = torch.rand(1, generator=generator, device=generator.device, dtype=torch.float64) * cdf[-1]
    return min(int(torch.searchsorted(cdf, u, right=True)), probs.shape[-1] - 1)


@dataclass(frozen=True)
class Acceptance:
    n_accepted: int  # drafted tokens accepted, a prefix of the draft
    next_token: int  # the correction (if a token was rejected) or the bonus token (if all were accepted)
    accept_probs: tuple[float, ...]  # min(1, target/draft) of each drafted token
    draft_token_probs: tuple[float, ...]  # draft(x_i)
    target_token_probs: tuple[float, ...]  # target(x_i)


def accept_drafts(draft_tokens: torch.Tensor, draft_probs: torch.Tensor, target_probs: torch.Tensor,
                  generator: torch.Generator) -> Acceptance:
    """The speculative sampling acceptance rule (Leviathan, Kalman & Matias 2023, Algorithm 1;
    also Chen et al. 2023, "Accelerating LLM Decoding with Speculative Sampling", Algorithm 2).

    draft_tokens: [k] ids the draft proposed; draft_probs: [k, V] the processed distribution each was
    sampled from; target_probs: [k+1, V] the verifier's processed distribution at each drafted position
    plus one more (for the bonus token). Both are over the same shared vocabulary.

    For i = 1..k: accept x_i with probability min(1, target_i(x_i) / draft_i(x_i)). At the first
    rejection, sample the correction from norm(max(0, target_i - draft_i)) and stop. If all k are
    accepted, sample a bonus token from target_{k+1}. The emitted tokens are then distributed exactly
    as the verifier's own samples. With one-hot distributions (greedy) this is: accept while the draft
    equals the verifier's argmax, then emit the verifier's argmax.
    """
    k = draft_tokens.shape[0]
    rows = torch.arange(k, device=draft_tokens.device)
    draft_token_probs = draft_probs[rows, draft_tokens]
    target_token_probs = target_probs[rows, draft_tokens]
    accept_probs = torch.clamp(target_token_probs / draft_token_probs.clamp_min(1e-30), max=1.0)
    # NaN compares false with every uniform, so a NaN ratio would accept its draft whatever it is.
    _check_finite(float(accept_probs.sum()), "an acceptance probability")
    uniforms = torch.rand(k, generator=generator, device=generator.device).to(accept_probs.device)
    rejected = uniforms >= accept_probs  # u in [0, 1): a ratio of 1 is always accepted, 0 never
    n_accepted = int(rejected.int().argmax()) if bool(rejected.any()) else k
    if n_accepted < k:
        residual = torch.clamp(target_probs[n_accepted] - draft_probs[n_accepted], min=0.0)
        total = float(residual.sum())
        # The residual is empty only when target == draft, where rejection has probability 0;
        # guard against float round-off all the same.
        residual = residual / total if total > 0 else target_probs[n_accepted]
        next_token = sample(residual, generator)
    else:
        next_token = sample(target_probs[k], generator)
    return Acceptance(
        n_accepted=n_accepted,
        next_token=next_token,
        accept_probs=tuple(accept_probs.tolist()),
        draft_token_probs=tuple(draft_token_probs.tolist()),
        target_token_probs=tuple(target_token_probs.tolist()),
    )


@dataclass(frozen=True)
class TreeAcceptance:
    path: tuple[int, ...]  # indices of the accepted nodes, from the root's child down
    next_token: int  # the correction (no child accepted) or the bonus token (the path ended at a leaf)
    accept_probs: tuple[float | None, ...]  # per node: the probability it was accepted when checked, None if never


def accept_tree(node_tokens: Sequence[int], parents: Sequence[int], target_probs: torch.Tensor,
                generator: torch.Generator) -> TreeAcceptance:
    """The acceptance rule for a tree of deterministic candidates (SpecInfer, Miao et al. 2024, Algorithm 2,
    "multi-step speculative sampling", with each candidate a one-hot proposal).

    node_tokens: [n] candidate ids; parents: [n] the parent node of each (-1: the last committed token);
    target_probs: [n+1, V] the verifier's processed distribution after the last committed token (row 0)
    and after each node (row i+1).

    At a node with verifier distribution P, its children are checked one at a time in the order given.
    A child x, proposed with draft probability 1 (the drafter chose it, it did not sample it), is accepted
    with probability min(1, P(x)/1) = P(x); when rejected, x is removed from P (the residual
    norm(max(0, P - onehot(x)))) before the next child is checked. If one is accepted the walk goes down
    into it; if all are rejected the correction is sampled from what is left of P; at a leaf the bonus
    token is sampled from its P. Each emitted token is then distributed exactly as the verifier's own
    sample: P(child_j) = prod_{i<j}(1 - P_i(c_i)) * P(c_j) / prod_{i<j}(1 - P_i(c_i)) = P(c_j), and the
    rest keeps P's proportions. Prompt lookup's one-hot chain is the special case of one child per node.
    Greedy (one-hot P): accept the child that is the verifier's argmax, else emit the argmax.
    """
    children: list[list[int]] = [[] for _ in range(len(node_tokens) + 1)]
    for node, parent in enumerate(parents):
        children[parent + 1].append(node)
    accept_probs: list[float | None] = [None] * len(node_tokens)
    path: list[int] = []
    row = 0  # target_probs row of the current node: 0 for the root, node + 1 otherwise
    while True:
        probs = target_probs[row].double()
        accepted = None
        for node in children[row]:
            token = node_tokens[node]
            total = float(probs.sum())
            _check_finite(total, "the verifier's distribution")
            prob = min(1.0, float(probs[token]) / total) if total > 0 else 0.0
            accept_probs[node] = prob
            u = float(torch.rand(1, generator=generator, device=generator.device))
            if u < prob:
                accepted = node
                break
            probs = probs.clone()
            probs[token] = 0.0  # the residual: the verifier's distribution without the rejected candidate
        if accepted is None:
            if float(probs.sum()) <= 0:  # round-off after removing near-all mass: fall back to P itself
                probs = target_probs[row].double()
            return TreeAcceptance(path=tuple(path), next_token=sample(probs, generator),
                                  accept_probs=tuple(accept_probs))
        path.append(accepted)
        row = accepted + 1

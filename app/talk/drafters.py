"""A deliberately poor drafter, to show what low acceptance costs (Qt-free).

`WeakenedDrafter` keeps another drafter's cost and replaces its proposals: every round it drafts the
full γ tokens, and each is, with probability `corrupt`, swapped for a random token. A swapped token
is declared with a one-hot draft distribution, which is exactly how it was drawn, so speculative
sampling stays exact: the reply is unchanged, only slower. The random tokens are drawn from the
token ids seen in the prompt, so they look plausible but rarely fit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from specdec_core.drafting.drafters import Draft, Drafter, DrafterBase, DraftTarget
from specdec_core.events import DraftStop


class WeakenedDrafter(DrafterBase):
    def __init__(self, inner: Drafter | None, corrupt: float = 0.8, seed: int = 0) -> None:
        self.inner = inner
        self.corrupt = corrupt
        self.name = f"weakened ({corrupt:.0%} of drafts random)"
        self._generator = torch.Generator().manual_seed(seed)
        self._pool: list[int] = []

    @property
    def reads_verifier(self) -> bool:  # type: ignore[override]
        """As the drafter it wraps (a draft head reads the verifier's hidden states)."""
        return self.inner is None or self.inner.reads_verifier

    def reset(self, seed: int) -> None:
        self._generator.manual_seed(seed + 7919)
        if self.inner is not None:
            self.inner.reset(seed)

    def prefill(self, ids: Sequence[int]) -> None:
        self._pool = sorted(set(ids))
        if self.inner is not None:
            self.inner.prefill(ids)

    def attach(self, target: DraftTarget) -> None:
        super().attach(target)
        if self.inner is not None:
            self.inner.attach(target)  # a wrapped draft head reads this engine's verifier

    def propose(self, ids: Sequence[int], max_tokens: int) -> Draft:
        start, vocab_size, eos_token_ids = time.perf_counter(), self.target.vocab_size, self.target.eos_token_ids
        if max_tokens <= 0:
            return Draft((), torch.empty(0, vocab_size), (), DraftStop.MAX_TOKENS, 0.0)
        inner = self.inner.propose(ids, max_tokens) if self.inner is not None else None
        pool = [t for t in (self._pool or list(ids)) if t < vocab_size and t not in eos_token_ids] or [0]
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        for i in range(max_tokens):
            keep = inner is not None and i < len(inner.token_ids) and \
                float(torch.rand((), generator=self._generator)) >= self.corrupt
            if keep:
                assert inner is not None
                tokens.append(int(inner.token_ids[i]))
                rows.append(inner.draft_probs[i].to(torch.float32).cpu())
                if tokens[-1] in eos_token_ids:
                    break
                continue
            # Once a proposal is swapped, the inner drafter's later tokens were conditioned on a token
            # that is not in the sequence any more: draw the rest at random too.
            inner = None
            tok = pool[int(torch.randint(len(pool), (), generator=self._generator))]
            tokens.append(tok)
            rows.append(torch.nn.functional.one_hot(torch.tensor(tok), vocab_size).float())
        probs = torch.stack(rows)
        shown = tuple(float(r[t]) for r, t in zip(rows, tokens))
        return Draft(tuple(tokens), probs, shown, DraftStop.GAMMA, time.perf_counter() - start)

    def observe(self, n_drafted: int, n_accepted: int) -> None:
        if self.inner is not None:
            self.inner.observe(n_drafted, n_accepted)

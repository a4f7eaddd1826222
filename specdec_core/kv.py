"""The one narrow seam through which the engine touches a model: a forward pass over a token sequence
that reuses the KV cache for the longest prefix it already holds, and drops the rest.

Rollback lives here and nowhere else. The cache remembers which token ids it holds; when the caller
asks for logits of a sequence, the cache is cut back to the longest common prefix with that sequence
(rejected draft tokens, or the part of a previous chat turn that no longer matches) and only the new
suffix is run. This one rule covers rejection rollback, the draft's missing last token after a fully
accepted round, and reusing the conversation prefix from one chat turn to the next.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch
from transformers import DynamicCache


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):  # the usual case: one C-level comparison
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class CachedForward:
    """A causal LM plus its KV cache and the token ids that cache holds (batch size 1)."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        self.model = model
        self.device = device
        self.cached_ids: list[int] = []
        self.cache = DynamicCache(config=getattr(model, "config", None))
        # Computing the LM head only for the rows we read saves a [n, V] matmul per call.
        params = inspect.signature(model.forward).parameters
        self._logits_to_keep = "logits_to_keep" in params
        # transformers is renaming `past_key_values` to `cache`; pass whichever this model takes.
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"

    def reset(self) -> None:
        self.cached_ids = []
        self.cache = DynamicCache(config=getattr(self.model, "config", None))

    def roll_back(self, keep: int) -> None:
        """Drop cached positions from `keep` on (rejected drafts, or a conversation that diverged)."""
        drop = len(self.cached_ids) - keep
        if drop > 0:
            self.cache.crop(-drop)  # transformers >= 5.2x: a negative count removes that many positions
            del self.cached_ids[keep:]

    @torch.inference_mode()
    def logits_for(self, ids: Sequence[int], n_last: int = 1) -> torch.Tensor:
        """Logits [n_last, V] predicting the tokens after each of the last `n_last` positions of `ids`.

        Runs the model only on the part of `ids` the cache does not hold (at least `n_last` tokens).
        """
        keep = min(common_prefix_length(self.cached_ids, ids), len(ids) - n_last)
        self.roll_back(keep)
        new_ids = ids[keep:]
        input_ids = torch.tensor([list(new_ids)], dtype=torch.long, device=self.device)
        extra = {"logits_to_keep": n_last} if self._logits_to_keep else {}
        extra[self._cache_kwarg] = self.cache  # updated in place
        out = self.model(input_ids=input_ids, use_cache=True, **extra)
        self.cached_ids.extend(new_ids)
        return out.logits[0, -n_last:]

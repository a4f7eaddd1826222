"""The one narrow seam through which the engine touches a model: a forward pass over a token sequence
that reuses the KV cache for the longest prefix it already holds, and drops the rest.

Rollback lives here and nowhere else. The cache remembers which token ids it holds; when the caller
asks for logits of a sequence, the cache is cut back to the longest common prefix with that sequence
(rejected draft tokens, or the part of a previous chat turn that no longer matches) and only the new
suffix is run. This one rule covers rejection rollback, the draft's missing last token after a fully
accepted round, and reusing the conversation prefix from one chat turn to the next.

The logits of the last position run are kept as well: when the next call starts exactly there (a
prefill of the whole prompt, then the first round), that distribution is reused rather than
recomputed by feeding the last token again, so a reply costs one verifier call less. So is the distribution
after a prompt (`prefill`), while the cache still holds that prompt: the same prompt again (a reply regenerated,
a sampling test's thousand seeds) then costs no forward pass either.

On request (`record_hidden_states`) it also keeps the model's final hidden state at every cached
position (and, if asked, some decoder layers' outputs beside it), cut back with the cache: a draft head
(draft_head.py) reads the verifier's through it.
"""

from __future__ import annotations

import inspect
import threading
import time
import weakref
from collections.abc import Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if list(a[:n]) == list(b[:n]):  # the usual case: one C-level comparison
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class GrowingLayer(DynamicLayer):
    """A DynamicLayer that writes new keys and values into buffers with room to spare.

    transformers' DynamicLayer concatenates the whole past with each new token, which copies the
    cache once per layer per call: 5-10 % of a batch-1 CPU forward pass at a few hundred tokens,
    growing with the conversation. Here the buffers grow geometrically, a call copies only its new
    positions, and `crop` (rollback) just shortens the views. `keys`/`values` stay [batch, heads,
    length, dim] views, so everything that reads a DynamicLayer reads this one the same way.
    """

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self.length = 0
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.length
        self._make_room(key_states.shape[-2], key_states, value_states)
        self._key_buffer[..., start:self.length, :] = key_states
        self._value_buffer[..., start:self.length, :] = value_states
        return self.keys, self.values

    def reserve(self, rows: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, int] | None:
        """Room for `rows` new positions, for a caller that writes their keys and values itself (the quantised
        layers' one-call step, lean_layers.py): the key and value buffers [heads, capacity, dim] of batch 0 and the
        first new position, the views already covering the new positions. None (and nothing reserved) before the
        first update, where the batch is not 1, or where the buffers do not hold `dtype` (can_reserve)."""
        if not self.can_reserve(dtype):
            return None
        start = self.length
        self._make_room(rows)
        return self._key_buffer[0], self._value_buffer[0], start

    def can_reserve(self, dtype: torch.dtype) -> bool:
        """Whether `reserve` gives room here: buffers made by a first update, for batch 1, holding `dtype`."""
        buffer = getattr(self, "_key_buffer", None) if self.is_initialized else None
        return buffer is not None and buffer.shape[0] == 1 and buffer.dtype == dtype

    def _make_room(self, rows: int, key_like: torch.Tensor | None = None,
                   value_like: torch.Tensor | None = None) -> None:
        """Grow the buffers (shaped as key_like, value_like; as they are, where they exist and none is given) to hold
        `rows` more positions, and the views over them."""
        end = self.length + rows
        if self._key_buffer is None or end > self._key_buffer.shape[-2]:
            self._key_buffer = self._grown(self._key_buffer, self._key_buffer if key_like is None else key_like, end)
            self._value_buffer = self._grown(self._value_buffer,
                                             self._value_buffer if value_like is None else value_like, end)
        self.length = end
        self.keys = self._key_buffer.narrow(-2, 0, end)
        self.values = self._value_buffer.narrow(-2, 0, end)

    def _grown(self, buffer: torch.Tensor | None, new: torch.Tensor, end: int) -> torch.Tensor:
        grown = new.new_empty((*new.shape[:-2], max(256, 2 * end), new.shape[-1]))
        if buffer is not None and self.length:
            grown[..., :self.length, :] = buffer[..., :self.length, :]
        return grown

    def crop(self, tokens_to_remove: int) -> None:
        super().crop(tokens_to_remove)  # validates and shortens the views
        if self.is_initialized:
            self.length = self.keys.shape[-2] if self.keys.numel() else 0

    def reset(self) -> None:
        super().reset()
        self._key_buffer = self._value_buffer = None
        self.length = 0


def new_cache(model: torch.nn.Module) -> DynamicCache:
    """A DynamicCache for `model` whose full-attention layers are GrowingLayers (sliding ones stay)."""
    cache = DynamicCache(config=getattr(model, "config", None))
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    if getattr(cache, "layer_class_to_replicate", None) is DynamicLayer:
        cache.layer_class_to_replicate = GrowingLayer
    return cache


def _compact(layer, start: int, rows: torch.Tensor) -> None:
    """Move a cache layer's positions `rows` to `start`, `start + 1`, ... and cut it after them."""
    if isinstance(layer, GrowingLayer):
        end = start + len(rows)
        layer._key_buffer[..., start:end, :] = layer._key_buffer[..., rows, :]
        layer._value_buffer[..., start:end, :] = layer._value_buffer[..., rows, :]
        layer.length = end
        layer.keys, layer.values = layer._key_buffer[..., :end, :], layer._value_buffer[..., :end, :]
    elif type(layer) is DynamicLayer:
        layer.keys = torch.cat([layer.keys[..., :start, :], layer.keys[..., rows, :]], dim=-2)
        layer.values = torch.cat([layer.values[..., :start, :], layer.values[..., rows, :]], dim=-2)
    else:
        raise NotImplementedError(f"draft trees need full-attention cache layers, not {type(layer).__name__}")


def supports_trees(model: torch.nn.Module) -> bool:
    """Whether `model`'s cache layers can be compacted after a tree pass (no sliding-window layers)."""
    return all(type(layer) in (GrowingLayer, DynamicLayer) for layer in new_cache(model).layers)


class CachedForward:
    """A causal LM plus its KV cache and the token ids that cache holds (batch size 1)."""

    def __init__(self, model: torch.nn.Module, device: torch.device):
        self.model = model
        self.device = device
        self.cached_ids: list[int] = []
        self.cache = new_cache(model)
        self._next_logits: torch.Tensor | None = None  # [V] predicting the token after cached_ids, if known
        self._prefilled: tuple[int, torch.Tensor] | None = None  # a prompt's length and [V] after it (`prefill`)
        self.last_run = 0  # tokens the last logits_for() call fed to the model
        # Computing the LM head only for the rows we read saves a [n, V] matmul per call.
        params = inspect.signature(model.forward).parameters
        self._logits_to_keep = "logits_to_keep" in params
        # transformers is renaming `past_key_values` to `cache`; pass whichever this model takes.
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        # Running totals for benchmarks: time spent inside the model's forward (engine overhead is the
        # rest of a round). On CPU this is exact; on a GPU set `synchronize_timing` to wait for the kernels.
        self.forward_s = 0.0
        self.forward_calls = 0
        self.synchronize_timing = False
        self.hidden_len = 0  # positions of `_hidden` that are valid (== len(cached_ids) when recording)
        self._hidden: torch.Tensor | None = None  # [capacity, d]
        self._hook = None
        self._last_hidden: torch.Tensor | None = None
        self._layers: tuple[int, ...] = ()  # decoder layers recorded beside the final state
        self._last_layers: list[torch.Tensor | None] = []
        self._running: int | None = None  # the thread inside _run: the layer hooks record only its run
        self._tree_base = 0  # committed tokens before the nodes of the last logits_for_tree call

    def record_hidden_states(self, layers: Sequence[int] = ()) -> None:
        """From now on keep the final (post-norm) hidden state of every position this cache holds, followed
        (columns d.. of each row) by the outputs of the decoder `layers` named (0-based), in that order."""
        layers = tuple(int(layer) for layer in layers)
        if self._hook is not None and layers == self._layers:
            return
        base = getattr(self.model, "base_model", None)
        if base is None or base is self.model:
            raise ValueError("this model does not expose its decoder, so its hidden states cannot be read")
        decoder_layers = getattr(base, "layers", None)
        if layers and (decoder_layers is None or max(layers) >= len(decoder_layers) or min(layers) < 0):
            raise ValueError(f"this model has no decoder layers {list(layers)} to read hidden states from")
        self._remove_hooks()

        owner = weakref.ref(self)  # the hook must not keep this cache (and its KV tensors) alive

        def keep(module, args, output) -> None:
            me = owner()
            if me is not None:
                me._last_hidden = output[0] if isinstance(output, tuple) else output.last_hidden_state

        def keep_layer(index: int):
            def hook(module, args, output) -> None:
                me = owner()
                # Only this cache's own runs, on their thread: online adaptation runs the decoder too.
                if me is not None and me._running == threading.get_ident():
                    me._last_layers[index] = output[0] if isinstance(output, tuple) else output
            return hook

        self._hooks = [base.register_forward_hook(keep)]
        self._hooks += [decoder_layers[layer].register_forward_hook(keep_layer(i)) for i, layer in enumerate(layers)]
        self._hook, self._layers = self._hooks[0], layers
        self._last_layers = [None] * len(layers)
        self.reset()  # positions cached so far have no hidden states

    def _remove_hooks(self) -> None:
        for hook in getattr(self, "_hooks", ()):
            hook.remove()
        self._hooks, self._hook = [], None

    def __del__(self) -> None:
        self._remove_hooks()

    def hidden_states(self, start: int, stop: int) -> torch.Tensor:
        """[stop - start, d * (1 + layers)] hidden states of cached positions start..stop-1 (the final state,
        then each recorded layer's; see record_hidden_states)."""
        assert self._hidden is not None and stop <= self.hidden_len
        return self._hidden[start:stop]

    def reset(self) -> None:
        self.cached_ids = []
        self.cache = new_cache(self.model)
        self._next_logits = None
        self._prefilled = None
        self.hidden_len = 0

    def roll_back(self, keep: int) -> None:
        """Drop cached positions from `keep` on (rejected drafts, or a conversation that diverged)."""
        drop = len(self.cached_ids) - keep
        if drop > 0:
            # A negative count removes that many positions in every transformers 5.x (5.0 called the
            # argument max_length and read a negative value the same way; 5.2x refuses positive ones).
            self.cache.crop(-drop)
            del self.cached_ids[keep:]
            self._next_logits = None
            self.hidden_len = min(self.hidden_len, keep)
            if self._prefilled is not None and keep < self._prefilled[0]:
                self._prefilled = None  # the prompt it followed is no longer all held

    @torch.inference_mode()
    def logits_for(self, ids: Sequence[int], n_last: int = 1) -> torch.Tensor:
        """Logits [n_last, V] predicting the tokens after each of the last `n_last` positions of `ids`.

        Runs the model only on the part of `ids` the cache does not hold (at least `n_last` tokens, or
        one fewer when the first row wanted is the kept distribution after the cached tokens).
        """
        held = common_prefix_length(self.cached_ids, ids)
        first_row = len(ids) - n_last  # position whose logits predict the first token asked for
        if self._next_logits is not None and held == len(self.cached_ids) == first_row + 1:
            known = self._next_logits[None]
            if n_last == 1:
                self.last_run = 0
                return known
            return torch.cat([known, self._run(ids[held:], n_last - 1)])
        if n_last == 1 and self._prefilled is not None and self._prefilled[0] == len(ids) == held:
            # The prefilled prompt again, with more after it in the cache: cut back to the prompt, whose
            # distribution was kept, instead of feeding its last token again.
            self.roll_back(held)
            self._next_logits = self._prefilled[1]
            self.last_run = 0
            return self._next_logits[None]
        keep = min(held, first_row)
        self.roll_back(keep)
        return self._run(ids[keep:], n_last)

    @torch.inference_mode()
    def prefill(self, ids: Sequence[int]) -> torch.Tensor:
        """`logits_for(ids)` [1, V] for a prompt, whose distribution is then kept while the cache holds the prompt:
        asked for again after a reply (the same prompt once more), it costs no forward pass."""
        logits = self.logits_for(ids)
        # A copy: the row may be a view of every position's logits (a model that computes them all).
        self._prefilled = (len(ids), logits[-1].clone())
        return logits

    @torch.inference_mode()
    def logits_for_tree(self, ids: Sequence[int], node_tokens: Sequence[int], parents: Sequence[int]
                        ) -> torch.Tensor:
        """Logits [1 + n, V]: after the last of `ids`, and after each of a tree of n candidate tokens that
        follows `ids` (node i hangs under node parents[i]; -1 is the last of `ids`), in one forward pass.

        Each node sits at the position after its parent and attends to `ids` and its own ancestors only
        (a tree attention mask, as in SpecInfer). The cache then holds every node: `keep_path` must be
        called before anything else runs on this cache, to keep the accepted nodes and drop the rest.
        """
        if not node_tokens:
            return self.logits_for(ids)
        ids = list(ids)
        held = common_prefix_length(self.cached_ids, ids)
        reuse_root = self._next_logits is not None and held == len(self.cached_ids) == len(ids)
        keep = len(ids) if reuse_root else min(held, len(ids) - 1)
        root = self._next_logits[None] if reuse_root else None
        self.roll_back(keep)
        chain = ids[keep:]  # committed tokens the cache lacks: an ordinary causal run
        depth: list[int] = []
        for parent in parents:
            depth.append(0 if parent < 0 else depth[parent] + 1)
        positions = list(range(keep, len(ids))) + [len(ids) + d for d in depth]
        # allowed[q, j]: may query q (chain then nodes) attend to new position j? Everything cached is visible.
        n, m = len(chain), len(node_tokens)
        allowed = torch.zeros(n + m, n + m, dtype=torch.bool)
        allowed[:n, :n] = torch.ones(n, n, dtype=torch.bool).tril()
        allowed[n:, :n] = True
        for node, parent in enumerate(parents):
            if parent >= 0:
                allowed[n + node, n:] = allowed[n + parent, n:]
            allowed[n + node, n + node] = True
        dtype = next(self.model.parameters()).dtype
        mask = torch.zeros(1, 1, n + m, keep + n + m, dtype=dtype)
        mask[0, 0, :, keep:] = torch.zeros(n + m, n + m, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
        logits = self._run(chain + list(node_tokens), n_last=m + (0 if reuse_root else 1),
                           attention_mask=mask.to(self.device),
                           position_ids=torch.tensor([positions], device=self.device))
        self._next_logits = None  # the last row belongs to a node, not to a sequence the cache holds
        self._tree_base = len(ids)
        return logits if root is None else torch.cat([root, logits])

    @torch.inference_mode()
    def keep_path(self, path: Sequence[int]) -> None:
        """After `logits_for_tree`: keep the accepted nodes `path` (root's child down) and drop the others.

        Rollback, once more: the accepted nodes' keys and values move to the rows right after the committed
        tokens, in path order, and the cache is cut there; from then on the one prefix rule above applies."""
        base = self._tree_base
        rows = torch.tensor([base + node for node in path], dtype=torch.long, device=self.device)
        for layer in self.cache.layers:
            _compact(layer, base, rows)
        tokens = self.cached_ids[base:]
        del self.cached_ids[base:]
        if self._prefilled is not None and base < self._prefilled[0]:
            self._prefilled = None
        self.cached_ids.extend(tokens[node] for node in path)
        if self._hidden is not None and self.hidden_len > base:
            self._hidden[base:base + len(path)] = self._hidden[rows]
            self.hidden_len = base + len(path)
        self._next_logits = None

    def _run(self, new_ids: Sequence[int], n_last: int, **extra) -> torch.Tensor:
        """Feed `new_ids` after the cached tokens; logits [n_last, V] of the last n_last positions."""
        input_ids = torch.tensor([list(new_ids)], dtype=torch.long, device=self.device)
        if self._logits_to_keep:
            extra["logits_to_keep"] = n_last
        extra[self._cache_kwarg] = self.cache  # updated in place
        start = time.perf_counter()
        self._running = threading.get_ident()
        try:
            out = self.model(input_ids=input_ids, use_cache=True, **extra)
        finally:
            self._running = None
        if self.synchronize_timing and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.forward_s += time.perf_counter() - start
        self.forward_calls += 1
        self.last_run = len(new_ids)
        if self._hook is not None:
            self._store_hidden(torch.cat([self._last_hidden[0], *(out[0] for out in self._last_layers)], -1)
                               if self._layers else self._last_hidden[0])
        self.cached_ids.extend(new_ids)
        logits = out.logits[0, -n_last:]
        self._next_logits = logits[-1]
        return logits

    def _store_hidden(self, new: torch.Tensor) -> None:
        """Append [n, d] hidden states, growing the buffer geometrically (no copy of the whole past per call)."""
        end = self.hidden_len + new.shape[0]
        if self._hidden is None or end > self._hidden.shape[0] or self._hidden.dtype != new.dtype:
            grown = new.new_empty((max(256, 2 * end), new.shape[-1]))
            if self._hidden is not None and self.hidden_len:
                grown[:self.hidden_len] = self._hidden[:self.hidden_len]
            self._hidden = grown
        self._hidden[self.hidden_len:end] = new
        self.hidden_len = end

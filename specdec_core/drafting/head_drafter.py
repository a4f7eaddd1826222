"""The drafter that runs a draft head on the verifier's hidden states (HeadDrafter; the head itself: draft_head.py)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from specdec_core.drafting.base import Draft, DrafterBase, DraftTarget, autoregress
from specdec_core.drafting.trees import (
    DraftTree,
    TreeRequest,
)
from specdec_core.events import DraftStop
from specdec_core.loading import quantised
from specdec_core.loading.draft_head import HeadCache
from specdec_core.verification.kv import CachedForward, common_prefix_length

if TYPE_CHECKING:
    from specdec_core.loading.models import LoadedModel


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
        self._lib = None  # the quantised kernel, where the head runs its layers in it (attach)
        self._loaded_weights = head.weights  # what the head's layers hold as loaded (floats)
        self._fast: tuple[tuple, torch.nn.Module] | None = None  # (the head's weight versions, its 8-bit copy)

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
        # The verifier's output rows of the head's ids, as a layer of their own. A verifier that runs its GGUF's
        # quantisation on the CPU lends them in it, for the kernel's products: a third of the bytes of floats to read
        # at every drafted token. Else the layer the loader made for the head (on a CPU it takes the product form
        # measured fastest here, as the models' layers do), or a plain one, holds them as floats.
        if isinstance(output, quantised.QuantLinear) and self.draft.device.type == "cpu" and \
                output.storage.data.device.type == "cpu":
            self.output = quantised.QuantLinear(output.storage.select(self.head_ids), None, output._lib)
            self._output_dtype = torch.float32
            # And its own layers in 8 bits, in groups of 32, from the same kernel (_runner); the head's format says so.
            self._lib = output._lib if self.draft.dtype == torch.float32 else None
            self.draft.weights = "int8" if self._lib is not None else self._loaded_weights
        else:
            rows = quantised.output_rows(output, self.head_ids).to(self.draft.device, self.draft.dtype)
            self.output = self.draft.head_output or torch.nn.Linear(rows.shape[1], rows.shape[0], bias=False,
                                                                    device=rows.device, dtype=rows.dtype)
            self.output.weight = torch.nn.Parameter(rows, requires_grad=False)
            self._output_dtype = rows.dtype
            self._lib = None
            self.draft.weights = self._loaded_weights
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
        predicted = self._runner()(states[None].to(device, self.draft.dtype), embeds,
                                   torch.tensor(list(positions), device=device), self.cache, sees)[0]
        self.forward_s += time.perf_counter() - start
        return predicted

    def _runner(self) -> torch.nn.Module:
        """The module that runs the head: beside a verifier in the quantised kernel, a copy of the head with its linear
        layers quantised to 8 bits in groups of 32 (Q8_0's form), a quarter of the bytes to read at every drafted
        token; made again whenever the head's float weights change (adaptation copies new ones in place, which bumps
        their version counters). Elsewhere the head itself. Drafts may come from any head: the verifier decides."""
        if self._lib is None:
            return self.model
        versions = tuple((p.data_ptr(), p._version) for p in self.model.parameters())
        if self._fast is None or self._fast[0] != versions:
            fast = type(self.model)(self.model.config)
            fast.load_state_dict(self.model.state_dict())
            quantised.quantise_linears(fast, bits=8, lib=self._lib)
            self._fast = (versions, fast.eval().requires_grad_(False))
        return self._fast[1]

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
        scores = self.output(states.to(self._output_dtype))
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

        return autoregress(next_logits, start, max_tokens, self.target, self.generator, ids)

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

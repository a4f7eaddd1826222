"""A leaner forward for the decoder layers of a quantised llama-family model (Llama, Qwen2, Qwen3, Mistral).

transformers' decoder layer is written for every device and option: each step passes through module calls,
decorators and keyword handling. For a small quantised model on a CPU that Python costs more than the products do,
so `streamline(model)` gives each decoder layer a forward of its own that does the same maths in fewer steps:

- the projections that read the same input (q, k and v; gate and up) multiply in one kernel call when their weights
  share a layout (their rows are joined once, and each layer keeps a view of its part, so nothing is copied twice);
- RMSNorm is one op;
- attention goes to the attention function the model runs (row by row for a quantised model, cpu_attention.py),
  through the same KV cache, so rollback, trees and hidden-state hooks see what they saw before.

Every step computes each row alone (the kernel's products, row-wise norms, elementwise RoPE and activation), so a
check of k tokens still computes each token bit for bit as a one-token step does. The layer modules stay in place
(their weights, hooks and names): only their `forward` is bound anew.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from specdec_core.loading import cpu_attention, qkernel
from specdec_core.loading.quantised import QuantLinear, QuantStorage

_LAYERS = {"LlamaDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer", "MistralDecoderLayer"}
_ACTIVATIONS = {"silu": F.silu}


def streamline(model: nn.Module) -> int:
    """Bind the lean forward to every decoder layer of `model` that it fits; the number of layers bound. A layer it
    does not fit (another architecture, a float projection, another activation) keeps transformers' forward."""
    bound = 0
    for module in model.modules():
        if type(module).__name__ in _LAYERS and _fits(module):
            module.forward = _LeanLayer(module).forward
            bound += 1
    return bound


def _fits(layer: nn.Module) -> bool:
    attention, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
    projections = [getattr(attention, name, None) for name in ("q_proj", "k_proj", "v_proj", "o_proj")]
    projections += [getattr(mlp, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    activation = getattr(getattr(mlp, "config", None), "hidden_act", None)
    return all(isinstance(p, QuantLinear) for p in projections) and activation in _ACTIVATIONS


class _Joined:
    """Linear layers that read the same input, multiplied in as few kernel calls as their layouts allow."""

    def __init__(self, layers: Sequence[QuantLinear]):
        self.sizes = [layer.out_features for layer in layers]
        self.calls: list[tuple[QuantStorage, torch.Tensor | None]] = []  # one storage and its joined bias a call
        run: list[QuantLinear] = []
        for layer in layers:
            if run and not _same_layout(run[0].storage, layer.storage):
                self.calls.append(_join(run))
                run = []
            run.append(layer)
        self.calls.append(_join(run))
        self.lib = layers[0]._lib

    def __call__(self, rows: torch.Tensor) -> list[torch.Tensor]:
        """rows [n, in] float32 contiguous -> each layer's output [n, out_i] (views of the joined outputs)."""
        parts = []
        for storage, bias in self.calls:
            out = storage.product(self.lib, rows)
            if bias is not None:
                out += bias
            parts.append(out)
        joined = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
        return list(joined.split(self.sizes, dim=-1))


def _same_layout(a: QuantStorage, b: QuantStorage) -> bool:
    return (a.kind, a.group, a.shape[1], a.data.shape[1], a.scales.shape[1]) == \
        (b.kind, b.group, b.shape[1], b.data.shape[1], b.scales.shape[1])


def _join(layers: list[QuantLinear]) -> tuple[QuantStorage, torch.Tensor | None]:
    """One storage holding the rows of `layers` in order; each layer's storage becomes a view of its rows."""
    if len(layers) == 1:
        only = layers[0]
        return only.storage, (None if only.bias is None else only.bias.detach())
    storage = QuantStorage.joined([layer.storage for layer in layers])
    biases = [layer.bias for layer in layers]
    bias = None
    if any(b is not None for b in biases):
        bias = torch.cat([b.detach() if b is not None else torch.zeros(layer.out_features)
                          for b, layer in zip(biases, layers)])
    return storage, bias


class _LeanLayer:
    """The forward of one decoder layer, with its parts looked up once."""

    def __init__(self, layer: nn.Module):
        attention, mlp = layer.self_attn, layer.mlp
        self.attention = attention
        self.qkv = _Joined([attention.q_proj, attention.k_proj, attention.v_proj])
        self.gate_up = _Joined([mlp.gate_proj, mlp.up_proj])
        self.o_proj, self.down_proj = attention.o_proj.storage, mlp.down_proj.storage
        self.o_bias, self.down_bias = attention.o_proj.bias, mlp.down_proj.bias
        self.lib = attention.o_proj._lib
        self.input_norm, self.post_norm = _Norm(layer.input_layernorm), _Norm(layer.post_attention_layernorm)
        self.q_norm = _Norm(attention.q_norm) if hasattr(attention, "q_norm") else None
        self.k_norm = _Norm(attention.k_norm) if hasattr(attention, "k_norm") else None
        config = attention.config
        self.head_dim, self.layer_idx, self.config = attention.head_dim, attention.layer_idx, config
        self.heads = config.num_attention_heads
        self.activation: Callable[[torch.Tensor], torch.Tensor] = _ACTIVATIONS[mlp.config.hidden_act]
        if hasattr(attention, "sliding_window"):
            self.window = attention.sliding_window
        else:
            self.window = getattr(config, "sliding_window", None) if type(layer).__name__ == "MistralDecoderLayer" \
                else None
        self.extra = {"sliding_window": self.window} if type(layer).__name__ != "LlamaDecoderLayer" else {}

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache=None, use_cache: bool | None = False,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None, past_key_values=None,
                **kwargs) -> torch.Tensor:
        cache = cache if cache is not None else past_key_values
        batch, length, width = hidden_states.shape
        rows = hidden_states.reshape(-1, width).to(torch.float32).contiguous()
        attended = self._attend(self.input_norm(rows), batch, length, attention_mask, cache,
                                position_embeddings, kwargs)
        rows = rows + self._product(self.o_proj, self.o_bias, attended)
        gate, up = self.gate_up(self.post_norm(rows))
        rows = rows + self._product(self.down_proj, self.down_bias, (self.activation(gate) * up).contiguous())
        return rows.view(batch, length, width)

    def _attend(self, rows: torch.Tensor, batch: int, length: int, mask: torch.Tensor | None, cache,
                position_embeddings: tuple[torch.Tensor, torch.Tensor], kwargs: dict) -> torch.Tensor:
        query, key, value = self.qkv(rows)  # [n, heads * dim] views of one product
        if self.q_norm is not None:
            query, key = self.q_norm.per_head(query, self.head_dim), self.k_norm.per_head(key, self.head_dim)
        cos, sin = position_embeddings
        rotary = batch == 1 and cos.dtype == torch.float32 and cos.shape[-1] == self.head_dim
        if rotary:
            cos, sin = cos.reshape(length, -1).contiguous(), sin.reshape(length, -1).contiguous()
            qkernel.rope_(self.lib, query, cos, sin, self.heads, self.head_dim)
            qkernel.rope_(self.lib, key, cos, sin, key.shape[1] // self.head_dim, self.head_dim)
        query_states, key_states, value_states = (
            part.view(batch, length, -1, self.head_dim).transpose(1, 2) for part in (query, key, value))
        if not rotary:
            query_states, key_states = (_rotate(x, cos.unsqueeze(1), sin.unsqueeze(1))
                                        for x in (query_states, key_states))
        if cache is not None:
            key_states, value_states = cache.update(key_states, value_states, self.layer_idx, kwargs=kwargs)
        keys = key_states.shape[2]
        if rotary and self._row_by_row(length, keys) and key_states.stride(-1) == 1 \
                and key_states.dtype == torch.float32 and key_states.stride() == value_states.stride():
            return qkernel.attend(self.lib, query, self.heads, key_states[0], value_states[0],
                                  _visible_bytes(mask, length, keys), self.attention.scaling)
        attend = ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
        out, _ = attend(self.attention, query_states.contiguous(), key_states, value_states, mask, dropout=0.0,
                        scaling=self.attention.scaling, **self.extra, **kwargs)
        return out.reshape(batch * length, -1).contiguous()

    def _row_by_row(self, length: int, keys: int) -> bool:
        """Whether this pass attends row by row (cpu_attention's rule), with no sliding window cutting the keys."""
        return self.config._attn_implementation == cpu_attention.ROW_BY_ROW \
            and length <= cpu_attention.ROW_BY_ROW_MAX and (self.window is None or keys <= self.window)

    def _product(self, storage: QuantStorage, bias: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor:
        out = storage.product(self.lib, rows)
        if bias is not None:
            out += bias
        return out


def _visible_bytes(mask: torch.Tensor | None, rows: int, keys: int) -> torch.Tensor | None:
    """cpu_attention's visible keys as [rows, keys] uint8, or None (no mask) for causal rows that end the keys."""
    if mask is None:
        return None
    return cpu_attention.visible_keys(mask, 1, rows, keys)[0].to(torch.uint8).contiguous()


class _Norm:
    """An RMSNorm module's weight and epsilon, applied row by row in the kernel library."""

    def __init__(self, norm: nn.Module):
        self.weight = norm.weight.detach().to(torch.float32).contiguous()
        self.eps = float(getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6)))
        self.lib = qkernel.library()

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        return qkernel.rms_norm(self.lib, rows, self.weight, self.eps)

    def per_head(self, rows: torch.Tensor, dim: int) -> torch.Tensor:
        """Each head's `dim` values of rows [n, heads * dim] normed alone (Qwen3's q and k norms)."""
        n = rows.shape[0]
        return self(rows.reshape(-1, dim).contiguous()).view(n, -1)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding, as transformers' llama applies it (halves rotated, not interleaved pairs)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin

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

import dataclasses
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.modules import module as torch_module
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from specdec_core.loading import cpu_attention, qkernel
from specdec_core.loading.quantised import QuantLinear, QuantStorage

_LAYERS = {"LlamaDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer", "MistralDecoderLayer"}
_ACTIVATIONS = {"silu"}  # the MLP activations the kernel library computes (specdec_silu_mul)


def streamline(model: nn.Module) -> int:
    """Bind the lean forward to every decoder layer of `model` that it fits; the number of layers bound. A layer it
    does not fit (another architecture, a float projection, another activation) keeps transformers' forward. Where
    every layer of the decoder fits and fuses, the decoder's own forward runs them all in one call (_LeanStack)."""
    bound = 0
    leans: dict[int, _LeanLayer] = {}
    for module in model.modules():
        if type(module).__name__ in _LAYERS and _fits(module):
            lean = _LeanLayer(module)
            module.forward = lean.forward
            leans[id(module)] = lean
            bound += 1
    decoder = getattr(model, "base_model", None)
    layers = getattr(decoder, "layers", None)
    if decoder is not None and decoder is not model and layers is not None and len(layers) \
            and all(id(layer) in leans and leans[id(layer)].fusable for layer in layers) \
            and all(hasattr(decoder, name) for name in ("embed_tokens", "rotary_emb", "norm")):
        decoder.forward = _LeanStack(decoder, [leans[id(layer)] for layer in layers]).forward
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
        return list(self.joined(rows).split(self.sizes, dim=-1))

    def joined(self, rows: torch.Tensor) -> torch.Tensor:
        """The layers' outputs side by side, [n, sum of out_i], contiguous."""
        parts = []
        for storage, bias in self.calls:
            out = storage.product(self.lib, rows)
            if bias is not None:
                out += bias
            parts.append(out)
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def _same_layout(a: QuantStorage, b: QuantStorage) -> bool:
    return (a.kind, a.group, a.tables, a.shape[1], a.data.shape[1], a.scales.shape[1]) == \
        (b.kind, b.group, b.tables, b.shape[1], b.data.shape[1], b.scales.shape[1])


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
    """The forward of one decoder layer, with its parts looked up once. Where its weights allow (one joined q/k/v
    product, one joined gate/up product), the layer runs as two calls into the kernel library around the KV cache's
    update (qkernel.layer_qkv, layer_rest): the Python between its dozen steps cost a small model more than its
    products. Both ways compute the same bits."""

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
        if hasattr(attention, "sliding_window"):
            self.window = attention.sliding_window
        else:
            self.window = getattr(config, "sliding_window", None) if type(layer).__name__ == "MistralDecoderLayer" \
                else None
        self.extra = {"sliding_window": self.window} if type(layer).__name__ != "LlamaDecoderLayer" else {}
        self._layer: qkernel.Layer | None = None  # the fused form (_fused), built on first use
        self._layer_at: tuple[int, ...] = ()  # the weights' addresses it was built for
        self.fusable = len(self.qkv.calls) == 1 and len(self.gate_up.calls) == 1 \
            and self.gate_up.sizes[0] == self.gate_up.sizes[1] and self.input_norm.eps == self.post_norm.eps \
            and (self.q_norm is None or self.q_norm.eps == self.k_norm.eps)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache=None, use_cache: bool | None = False,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None, past_key_values=None,
                **kwargs) -> torch.Tensor:
        cache = cache if cache is not None else past_key_values
        batch, length, width = hidden_states.shape
        rows = hidden_states.reshape(-1, width)
        if rows.dtype != torch.float32 or not rows.is_contiguous():
            rows = rows.to(torch.float32).contiguous()
        cos, sin = position_embeddings
        rotary = batch == 1 and cos.dtype == torch.float32 and cos.shape[-1] == self.head_dim
        if rotary:
            cos, sin = cos.reshape(length, -1).contiguous(), sin.reshape(length, -1).contiguous()
        fused = self._fused() if rotary else None
        threads, fine = qkernel.threads(), self.o_proj.activation_bytes == 2
        if fused is not None and cache is not None:
            out = self._step(fused, rows, cos, sin, cache, attention_mask, length, threads, fine)
            if out is not None:
                return out.view(batch, length, width)
        if fused is not None:
            qkv = qkernel.layer_qkv(self.lib, fused, rows, cos, sin, threads, fine)
            query, key, value = qkv.split(self.qkv.sizes, dim=-1)
        else:
            query, key, value = self._qkv(self.input_norm(rows), cos, sin, rotary)
        query_states, key_states, value_states = (
            part.view(batch, length, -1, self.head_dim).transpose(1, 2) for part in (query, key, value))
        if not rotary:
            query_states, key_states = (_rotate(x, cos.unsqueeze(1), sin.unsqueeze(1))
                                        for x in (query_states, key_states))
        if cache is not None:
            key_states, value_states = cache.update(key_states, value_states, self.layer_idx, kwargs=kwargs)
        keys = key_states.shape[2]
        by_rows = rotary and self._row_by_row(length, keys) and key_states.stride(-1) == 1 \
            and key_states.dtype == torch.float32 and key_states.stride() == value_states.stride()
        visible = _visible_bytes(attention_mask, length, keys) if by_rows else None
        if by_rows and fused is not None:
            out = qkernel.layer_rest(self.lib, fused, rows, query, key_states[0], value_states[0], visible, threads,
                                     fine)
            return out.view(batch, length, width)
        if by_rows:
            attended = qkernel.attend(self.lib, query, self.heads, key_states[0], value_states[0], visible,
                                      self.attention.scaling)
        else:
            attend = ALL_ATTENTION_FUNCTIONS[self.config._attn_implementation]
            out, _ = attend(self.attention, query_states.contiguous(), key_states, value_states, attention_mask,
                            dropout=0.0, scaling=self.attention.scaling, **self.extra, **kwargs)
            attended = out.reshape(batch * length, -1).contiguous()
        return self._rest(rows, attended).view(batch, length, width)

    def _step(self, fused: qkernel.Layer, rows: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache,
              attention_mask: torch.Tensor | None, length: int, threads: int, fine: bool) -> torch.Tensor | None:
        """The layer in one kernel call (qkernel.layer_step), its keys and values written straight into the cache's
        buffers, where the cache keeps this layer in a GrowingLayer with float32 buffers and the pass attends row by
        row; None where not (then the two calls run around cache.update). Per token of the embedded model this
        saves about 30 small torch operations a layer (docs/log/2026-12.md, session 38)."""
        layers = getattr(cache, "layers", None)
        layer = layers[self.layer_idx] if layers is not None and self.layer_idx < len(layers) else None
        reserve = getattr(layer, "reserve", None)  # kv.GrowingLayer's (loading does not import verification)
        if reserve is None or getattr(cache, "offloading", False) \
                or not self._row_by_row(length, layer.get_seq_length() + length):
            return None
        slot = reserve(length, torch.float32)
        if slot is None:
            return None
        key, value, start = slot
        visible = _visible_bytes(attention_mask, length, start + length)
        return qkernel.layer_step(self.lib, fused, rows, cos, sin, key, value, start, visible, threads, fine)

    def _qkv(self, normed: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary: bool
             ) -> list[torch.Tensor]:
        """The query, key and value rows [n, heads * dim] (views of one product), normed per head where the layer
        says so, and rotated when `rotary` (else the caller rotates them)."""
        query, key, value = self.qkv(normed)
        if self.q_norm is not None:
            query, key = self.q_norm.per_head(query, self.head_dim), self.k_norm.per_head(key, self.head_dim)
        if rotary:
            qkernel.rope_(self.lib, query, cos, sin, self.heads, self.head_dim)
            qkernel.rope_(self.lib, key, cos, sin, key.shape[1] // self.head_dim, self.head_dim)
        return [query, key, value]

    def _rest(self, rows: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """rows plus the attention's output projected, plus the MLP on that sum."""
        rows = rows + self._product(self.o_proj, self.o_bias, attended)
        hidden = qkernel.silu_mul(self.lib, self.gate_up.joined(self.post_norm(rows)))
        return rows + self._product(self.down_proj, self.down_bias, hidden)

    def _fused(self) -> qkernel.Layer | None:
        """The layer as the kernel library's layer functions take it; None where its weights do not allow."""
        if not self.fusable:
            return None
        storages = (self.qkv.calls[0][0], self.o_proj, self.gate_up.calls[0][0], self.down_proj)
        at = tuple(storage._buffers["data"].data_ptr() for storage in storages)
        if self._layer is None or at != self._layer_at:  # first use, or the weights moved (`.to`)
            self._layer, self._layer_at = self._build(storages), at
        return self._layer

    def _build(self, storages: tuple[QuantStorage, ...]) -> qkernel.Layer:
        biases = (self.qkv.calls[0][1], self.o_bias, self.gate_up.calls[0][1], self.down_bias)
        qkv, o, gate_up, down = (_weight(storage, bias) for storage, bias in zip(storages, biases))
        kv_heads = self.qkv.sizes[1] // self.head_dim
        return qkernel.Layer(
            self.o_proj.shape[0], self.heads, kv_heads, self.head_dim, self.gate_up.sizes[0], self.input_norm.eps,
            self.q_norm.eps if self.q_norm is not None else 0.0, self.attention.scaling,
            _address(self.input_norm), _address(self.post_norm), _address(self.q_norm), _address(self.k_norm),
            qkv, o, gate_up, down)

    def _row_by_row(self, length: int, keys: int) -> bool:
        """Whether this pass attends row by row (cpu_attention's rule), with no sliding window cutting the keys."""
        return self.config._attn_implementation == cpu_attention.ROW_BY_ROW \
            and length <= cpu_attention.ROW_BY_ROW_MAX and (self.window is None or keys <= self.window)

    def _product(self, storage: QuantStorage, bias: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor:
        out = storage.product(self.lib, rows)
        if bias is not None:
            out += bias
        return out


class _LeanStack:
    """The decoder's forward for a one-token step or a check of a few tokens, where every layer is a fused lean layer:
    the embedding, the rotary angles, then every layer in one kernel call (qkernel.stack_step), each layer's keys and
    values written straight into the cache's buffers, then the final norm. Per token of the embedded model this saves
    the Python around thirty layer calls and transformers' mask building, which cost it a fifth of its step
    (docs/log/2026-12.md, session 40). The layers compute the same bits as one at a time. Anything else (a long
    prompt, hooks on a layer, another cache, outputs asked for) runs the decoder's own forward."""

    _ARGUMENTS = {"input_ids", "inputs_embeds", "attention_mask", "position_ids", "cache", "past_key_values",
                  "use_cache"}

    def __init__(self, decoder: nn.Module, leans: list[_LeanLayer]):
        self.decoder, self.leans = decoder, leans
        self.original = decoder.forward
        self.lib = leans[0].lib
        self.head_dim = leans[0].head_dim
        self._stack: qkernel.Stack | None = None
        self._stack_at: tuple[int, ...] = ()  # the weights' addresses the stack was built for
        self._precision = 0
        # Each weight's buffers, whose addresses _fused_stack checks (a move replaces the tensors in these dicts)
        self._watched = [storage._buffers for lean in leans for storage in
                         (lean.qkv.calls[0][0], lean.o_proj, lean.gate_up.calls[0][0], lean.down_proj)]
        fields = {field.name for field in dataclasses.fields(BaseModelOutputWithPast)}
        self._cache_field = "cache" if "cache" in fields else "past_key_values"

    def forward(self, *args, **kwargs):
        out = self._step(kwargs) if not args and kwargs.keys() <= self._ARGUMENTS else None
        return out if out is not None else self.original(*args, **kwargs)

    def _step(self, kwargs: dict) -> BaseModelOutputWithPast | None:
        """The whole decoder in one call, or None (nothing changed) where that path does not apply."""
        input_ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
        cache = kwargs.get("cache", kwargs.get("past_key_values"))
        if input_ids is None or input_ids.dim() != 2 or input_ids.shape[0] != 1 or cache is None \
                or kwargs.get("inputs_embeds") is not None:
            return None
        length = input_ids.shape[1]
        slots = self._cache_layers(cache, length)
        if slots is None:
            return None
        start = slots[0].length
        keys = start + length
        if mask is not None and tuple(mask.shape) != (1, 1, length, keys):
            return None
        stack = self._fused_stack()
        if stack is None or not all(lean._row_by_row(length, keys) for lean in self.leans) or _hooked(self.decoder):
            return None
        hidden = self.decoder.embed_tokens(input_ids)
        position_ids = kwargs.get("position_ids")
        if position_ids is None:
            position_ids = torch.arange(start, keys).unsqueeze(0)
        cos, sin = self.decoder.rotary_emb(hidden, position_ids)
        if cos.dtype != torch.float32 or cos.shape[-1] != self.head_dim or hidden.dtype != torch.float32:
            return None
        cos, sin = cos.reshape(length, -1).contiguous(), sin.reshape(length, -1).contiguous()
        for i, slot in enumerate(slots):
            key, value, _ = slot.reserve(length, torch.float32)
            stack.keys[i], stack.values[i] = key.data_ptr(), value.data_ptr()
            stack.head_strides[i], stack.pos_strides[i] = key.stride(0), key.stride(1)
        lean = self.leans[0]
        rows = qkernel.stack_step(self.lib, stack, hidden.reshape(length, -1).contiguous(), cos, sin, start,
                                  _visible_bytes(mask, length, keys), qkernel.threads(),
                                  lean.o_proj.activation_bytes == 2)
        hidden = self.decoder.norm(rows.view(1, length, -1))
        return BaseModelOutputWithPast(last_hidden_state=hidden, **{self._cache_field: cache})

    def _cache_layers(self, cache, length: int) -> list | None:
        """The cache's layers where each is a GrowingLayer (kv.py) already holding float32 keys and values for batch 1,
        all of one length, so that each can give room for `length` more; None otherwise."""
        layers = getattr(cache, "layers", None)
        if layers is None or len(layers) != len(self.leans) or getattr(cache, "offloading", False):
            return None
        if not all(getattr(layer, "can_reserve", None) is not None and layer.can_reserve(torch.float32)
                   for layer in layers) or len({layer.length for layer in layers}) != 1:
            return None
        return list(layers)

    def _fused_stack(self) -> qkernel.Stack | None:
        """The layers' fused forms as one Stack, rebuilt only where a weight's tensors moved (their addresses are read
        straight from the storages' buffers: through each layer's _fused, thirty layers cost a quarter of a
        millisecond a step) or the activations' precision changed."""
        at = tuple(buffers["data"].data_ptr() for buffers in self._watched)
        precision = self.leans[0].o_proj.activation_bytes
        if not all(lean.fusable for lean in self.leans):
            return None
        if self._stack is None or at != self._stack_at or precision != self._precision:
            fused = [lean._fused() for lean in self.leans]
            if any(layer is None for layer in fused) \
                    or len({lean.o_proj.activation_bytes for lean in self.leans}) != 1:
                return None
            self._stack, self._stack_at, self._precision = qkernel.Stack(fused), at, precision
        return self._stack


def _hooked(decoder: nn.Module) -> bool:
    """Whether anything watches a decoder layer's forward (a hidden-state recorder): then the layers run one by one."""
    if torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks:
        return True
    return any(layer._forward_hooks or layer._forward_pre_hooks for layer in decoder.layers)


def _address(norm: _Norm | None) -> int | None:
    return None if norm is None else norm.weight.data_ptr()


def _weight(storage: QuantStorage, bias: torch.Tensor | None) -> qkernel.QWeight:
    buffers = storage._buffers
    return qkernel.QWeight(storage.kind, storage.shape[0], storage.shape[1], storage.group, storage.tables,
                           buffers["data"].data_ptr(), buffers["scales"].data_ptr(), storage.offsets_address(),
                           None if bias is None else bias.data_ptr())


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

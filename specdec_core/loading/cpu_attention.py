"""Grouped-query attention on the CPU without a copy of the keys and values for every query head.

transformers' SDPA attention hands grouped-query heads to the kernel (`enable_gqa`) only when no mask is
given, since CUDA's fast kernels need that; with a mask it repeats each key and value head once per query
head it serves. Every verify pass over k tokens has a mask (a tree its own, SpecInfer-style), so on the CPU
each such call copied every layer's keys and values. PyTorch's CPU kernel reads grouped heads with a mask
as well, bit-identical and without the copies (docs/performance.md, "Checking k tokens on a CPU").

`keep_grouped_heads(model)` switches one loaded model from "sdpa" to an attention function of our own,
registered with transformers under `NAME` (its AttentionInterface, with SDPA's masks): CPU tensors with a
mask go to the kernel with grouped heads, everything else to transformers' SDPA function as it is. No
transformers function is replaced; other models keep "sdpa". The model loader applies it (models.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import sdpa_attention_forward

if TYPE_CHECKING:
    from transformers import PreTrainedModel

NAME = "specdec_cpu_sdpa"  # the attention implementation's name in transformers' registries
ROW_BY_ROW = "specdec_row_by_row"  # batch-invariant attention for models whose every layer is (quantised.py)
# A pass over more rows than this (a prompt) attends in one call: it is the same in every mode of decoding, and
# row by row it would cost a kernel call per row and layer.
ROW_BY_ROW_MAX = 64


def grouped_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                 **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, except that with a mask on CPU tensors the kernel reads the grouped
    heads itself. query [B, heads, q, d], key and value [B, kv_heads, kv, d]; returns ([B, q, heads, d], None)."""
    grouped = getattr(module, "num_key_value_groups", 1) > 1  # an attention layer's attribute, when it groups heads
    plain = kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None \
        or kwargs.get("output_attentions", False)
    if attention_mask is None or key.device.type != "cpu" or not grouped or plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    # With a mask, transformers' function never asks the kernel for a causal mask: neither do we.
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=dropout,
                                         scale=scaling, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def row_by_row_sdpa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                    **kwargs) -> tuple[torch.Tensor, None]:
    """Attention computed for each query row alone, over exactly the keys it may see, gathered in order.

    A one-token step and a check of k drafted tokens (a chain or a tree) then make, for each token, the same kernel
    call on the same numbers: attention is batch-invariant, so a model whose other layers are too (quantised linear
    layers, row-wise norms) computes each drafted token's logits bit for bit as decoding it alone would. The fused
    kernel's result otherwise depends on how many rows share a call and on the masked tail of each row.
    query [B, heads, q, d], key and value [B, kv_heads, kv, d]; returns ([B, q, heads, d], None)."""
    rows = query.shape[2]
    if rows > ROW_BY_ROW_MAX or key.device.type != "cpu" or kwargs.get("softcap") is not None:
        return grouped_sdpa(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    grouped = query.shape[1] != key.shape[1]
    visible = visible_keys(attention_mask, query.shape[0], rows, key.shape[2])
    out = query.new_empty(query.shape[0], rows, query.shape[1], query.shape[3])
    for batch in range(query.shape[0]):
        for row in range(rows):
            keys, values = _seen(key[batch], value[batch], None if visible is None else visible[batch, row])
            attended = F.scaled_dot_product_attention(query[batch:batch + 1, :, row:row + 1], keys[None], values[None],
                                                      scale=scaling, enable_gqa=grouped)
            out[batch, row] = attended[0, :, 0]
    return out, None


def visible_keys(mask: torch.Tensor | None, batch: int, rows: int, keys: int) -> torch.Tensor | None:
    """[B, rows, keys] bool of what each query row may attend to; None: every row sees every key up to its own
    position (causal, the new rows last)."""
    if mask is None:
        return None if rows == 1 else torch.ones(rows, keys, dtype=torch.bool).tril(keys - rows).expand(batch, -1, -1)
    seen = mask if mask.dtype == torch.bool else mask == 0
    return seen[:, 0].expand(batch, rows, keys)


def _seen(key: torch.Tensor, value: torch.Tensor, visible: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """A row's keys and values [kv_heads, n, d], in order: a prefix as a view of it (the kernel reads rows through
    their strides, in the same order either way), any other set gathered."""
    if visible is None:
        return key, value
    index = visible.nonzero().flatten()
    count = int(index.numel())
    if count and int(index[-1]) == count - 1:  # a prefix
        return key[:, :count], value[:, :count]
    return key.index_select(1, index), value.index_select(1, index)


def attend_row_by_row(model: PreTrainedModel) -> bool:
    """Give `model` the row-by-row attention above (a model running "sdpa" or our grouped SDPA)."""
    if model.config._attn_implementation not in ("sdpa", NAME) or not model._can_set_attn_implementation():
        return False
    _register()
    model.set_attn_implementation(ROW_BY_ROW)
    return model.config._attn_implementation == ROW_BY_ROW


def keep_grouped_heads(model: PreTrainedModel) -> bool:
    """Give `model`, when it runs "sdpa", the attention above (no-op otherwise, and for a model whose code
    cannot switch attention). Returns whether it now runs it."""
    if model.config._attn_implementation != "sdpa" or not model._can_set_attn_implementation():
        return False
    _register()
    model.set_attn_implementation(NAME)
    return model.config._attn_implementation == NAME


def _register() -> None:
    """Add NAME to transformers' attention and mask registries (once; the same entries every time). Adding a
    name changes nothing for the implementations already there."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    AttentionInterface.register(NAME, grouped_sdpa)
    AttentionMaskInterface.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    AttentionInterface.register(ROW_BY_ROW, row_by_row_sdpa)
    AttentionMaskInterface.register(ROW_BY_ROW, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])

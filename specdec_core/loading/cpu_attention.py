"""Grouped-query attention on the CPU without a copy of the keys and values for every query head.

transformers' SDPA attention hands grouped-query heads to the kernel (`enable_gqa`) only when no mask is
given, since CUDA's fast kernels need that; with a mask it repeats each key and value head once per query
head it serves. Every verify pass over k tokens has a mask (a tree its own, SpecInfer-style), so on the CPU
each such call copied every layer's keys and values. PyTorch's CPU kernel reads grouped heads with a mask
as well: the output is bit-identical, and a verify took 10-15 ms less on the embedded pair (see
docs/performance.md, "Checking k tokens on a CPU").

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

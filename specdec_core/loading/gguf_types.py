"""Every GGUF quantisation type the `gguf` package can read, for transformers' GGUF loader.

transformers (5.x) dequantises GGUF blocks with torch kernels of its own and refuses every type it has no
kernel for, among them Q5_0 and Q5_1, which llama.cpp writes into many "Q4_K_M" files (Qwen2.5-Coder-0.5B's
GGUF mixes Q4_K, Q5_0, Q6_K and Q8_0 tensors). The `gguf` package, llama.cpp's own Python reader, dequantises
those too. `readable_types()` lends transformers, for the length of one conversion, the block layout and a
numpy dequantiser from `gguf` for each type it lacks; its own kernels keep the types they handle.

Nothing here changes transformers outside that `with` block, and the blocks take turns (a lock), so two
conversions never lend and take back the same entries under each other's feet.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numpy as np
import torch

_LENDING = threading.RLock()


def gguf_dequantisable() -> dict[int, tuple[int, int]]:
    """ggml type id -> (values per block, bytes per block), for every block type `gguf` can dequantise."""
    from gguf import quants
    from gguf.constants import GGML_QUANT_SIZES

    traits = getattr(quants, "_type_traits", {})
    return {int(qtype): GGML_QUANT_SIZES[qtype] for qtype in traits
            if GGML_QUANT_SIZES[qtype][0] > 1}  # block types only: float types are read as they are


def _with_gguf(qtype: int, block_values: int):
    """A dequantiser in transformers' shape: blocks [n, bytes] uint8 -> values [n, block_values]."""
    from gguf import quants
    from gguf.constants import GGMLQuantizationType

    kind = GGMLQuantizationType(qtype)

    def dequantise(blocks: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        values = quants.dequantize(np.ascontiguousarray(blocks.cpu().numpy()), kind)
        return torch.from_numpy(np.ascontiguousarray(values)).reshape(-1, block_values).to(blocks.device, dtype)

    return dequantise


@contextlib.contextmanager
def readable_types() -> Iterator[list[str]]:
    """Within the block, transformers' GGUF loader reads every block type `gguf` can dequantise.

    Yields the names of the types lent (empty when transformers has none of these tables: a version that
    reads GGUF another way keeps its own behaviour)."""
    try:
        from transformers.integrations.gguf import dequant
    except ImportError:
        yield []
        return
    blocks, names, kernels = (getattr(dequant, name, None) for name in ("GGML_BLOCK", "GGML_NAME", "_DEQUANT"))
    if not all(isinstance(table, dict) for table in (blocks, names, kernels)):
        yield []
        return
    from gguf.constants import GGMLQuantizationType

    with _LENDING:
        lent = {qtype: size for qtype, size in gguf_dequantisable().items() if qtype not in blocks}
        for qtype, size in lent.items():
            blocks[qtype] = size
            names[qtype] = GGMLQuantizationType(qtype).name
            kernels[qtype] = _with_gguf(qtype, size[0])
        try:
            yield [names[qtype] for qtype in lent]
        finally:
            for qtype in lent:
                blocks.pop(qtype, None)
                names.pop(qtype, None)
                kernels.pop(qtype, None)

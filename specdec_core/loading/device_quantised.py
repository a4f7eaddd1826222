"""A quantised GGUF's weights on a GPU: its 4-bit tensors in torch's packed int4 form, the rest in bfloat16.

On a CPU a quantised GGUF runs in the kernel library's own products (quantised.py, kernels/qmatmul.c). A GPU has
torch's: `_weight_int4pack_mm` (tinygemm on CUDA, compute capability 8.0 and up; MPS where torch has it) multiplies
bfloat16 rows by 4-bit weights in groups of 32 with a scale and a zero point per group, w = (q - 8) * scale + zero.
A 4-bit GGUF block type is exactly that form: the decoded storage holds w = d * q + m per group of 32
(QuantStorage.integers), so scale = d and zero = m + 8 d; only the bfloat16 rounding of d and m is lost. Q4_0,
Q4_1 and Q4_K map this way; Q5_0, Q5_1, Q6_K and Q8_0 have no 4-bit form and run as bfloat16 weights (the file's
values, rounded to bfloat16).

Exact where every matrix is 4-bit: torch's int4 product computes each row alone (on the CPU it is batch-invariant,
tested), so a check of k tokens gives each the logits a one-token step gives it, if the GPU's product does the same.
A layer run in bfloat16 is not batch-invariant (bfloat16 F.linear differs from 3 rows on): with a Q6_K output
layer, as in a Q4_K_M file, a check may round a near-tie otherwise than a one-token step, and greedy speculation
may then part from the verifier alone at that token.

UNTESTED ON A GPU: no GPU was lent while this was written. The CPU test runs the same module through torch's CPU
form of the op (`_weight_int4pack_mm_for_cpu`); the CUDA and MPS calls differ in the packing call and the op's name
only. Every step that needs the GPU's op is tried once at load, and a failure (an older GPU, a torch without the
op) turns the model's 4-bit layers into bfloat16 ones with a note saying why; never a crash.
"""

from __future__ import annotations

import torch
from torch import nn

from specdec_core.loading.quantised import QuantEmbedding, QuantLinear, QuantStorage, shares

GROUP = 32  # the group size of every 4-bit GGUF type once decoded (QuantStorage.group)
_INNER_K_TILES = (8, 4, 2)  # the packing's tiles along the input, largest that divides it first


def moves_to(device: torch.device) -> bool:
    """Whether a quantised GGUF loaded for `device` takes this module's form (a GPU) rather than the CPU kernel's."""
    return device.type in ("cuda", "mps")


def int4_form(storage: QuantStorage) -> tuple[torch.Tensor, torch.Tensor] | None:
    """A 4-bit storage as torch's int4 product takes it: the integers q [out, in] (int32, 0..15) and the scales and
    zero points [in / 32, out, 2] (float32) with w = (q - 8) * scale + zero; None where the storage has no such form
    (8-bit values, another group size, shapes the packing cannot take)."""
    out_features, in_features = storage.shape
    if storage.kind != 0 or storage.group != GROUP or out_features % 8 or _tiles(in_features) is None:
        return None
    q, scales, offsets = storage.integers()
    scale_and_zero = torch.stack([scales, offsets + 8 * scales], dim=-1).transpose(0, 1).contiguous()
    return q.to(torch.int32), scale_and_zero


def _tiles(in_features: int) -> int | None:
    return next((tiles for tiles in _INNER_K_TILES if in_features % (tiles * 16) == 0), None)


class Int4Linear(nn.Module):
    """y = x @ W.T + b with W in torch's packed int4 form on `device`; bfloat16 in and out."""

    def __init__(self, storage: QuantStorage, bias: torch.Tensor | None, device: torch.device) -> None:
        super().__init__()
        form = int4_form(storage)
        if form is None:
            raise ValueError(f"a {storage.source_type} weight of shape {storage.shape} has no int4 form")
        q, scale_and_zero = form
        self.out_features, self.in_features = storage.shape
        self.source_type = storage.source_type
        tiles = _tiles(self.in_features)
        if device.type == "cpu":
            packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, tiles)
        else:  # two values a byte, the even one in the high nibble, as the GPU packing reads them
            pairs = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
            packed = torch.ops.aten._convert_weight_to_int4pack(pairs.to(device), tiles)
        self.register_buffer("packed", packed, persistent=False)
        self.register_buffer("scale_and_zero", scale_and_zero.to(device=device, dtype=torch.bfloat16),
                             persistent=False)
        self.bias = None if bias is None else nn.Parameter(bias.to(device=device, dtype=torch.bfloat16),
                                                           requires_grad=False)

    @property
    def weight(self) -> torch.Tensor:
        """The weight as bfloat16 [out, in] (a new tensor, for the few readers that need it once: a draft head's
        output rows, the doctor's fingerprint): the product of the identity, whose one term a sum is exact."""
        eye = torch.eye(self.in_features, device=self.packed.device, dtype=torch.bfloat16)
        return self._product(eye).t().contiguous()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self._product(x.reshape(-1, self.in_features))
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.out_features)

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.to(torch.bfloat16).contiguous()
        product = torch.ops.aten._weight_int4pack_mm_for_cpu if rows.device.type == "cpu" else \
            torch.ops.aten._weight_int4pack_mm
        return product(rows, self.packed, GROUP, self.scale_and_zero)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, {self.source_type} as int4"


def to_device(model: nn.Module, device: torch.device) -> tuple[int, int, str | None]:
    """Move a model whose layers are quantised (packed_gguf.build) onto `device`: each 4-bit linear layer as an
    Int4Linear, every other quantised layer as bfloat16 floats, the rest of the model in bfloat16. Returns the
    number of int4 layers, the number of bfloat16 ones, and why a 4-bit layer runs as bfloat16 (the first that
    could not be built or run here; after one, the rest are not tried)."""
    why = None
    int4 = floats = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, QuantLinear):
                layer = None
                if why is None and int4_form(child.storage) is not None:
                    layer, why = _int4_layer(child, device)
                if layer is None:
                    layer = _float_linear(child, device)
                    floats += 1
                else:
                    int4 += 1
                setattr(parent, name, layer)
            elif isinstance(child, QuantEmbedding):
                weight = child.storage.rows(torch.arange(child.num_embeddings))
                setattr(parent, name, nn.Embedding.from_pretrained(weight.to(device=device, dtype=torch.bfloat16)))
    model.to(device=device, dtype=torch.bfloat16)
    return int4, floats, why


def _int4_layer(layer: QuantLinear, device: torch.device) -> tuple[Int4Linear | None, str | None]:
    """The layer as an Int4Linear that has run one product on `device`, or None and why not."""
    try:
        packed = Int4Linear(layer.storage, layer.bias, device)
        packed(torch.zeros(1, layer.in_features, device=device, dtype=torch.bfloat16))
    except (RuntimeError, NotImplementedError, AttributeError) as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return None, f"torch's int4 product does not run on {device} here ({reason})"
    return packed, None


def _float_linear(layer: QuantLinear, device: torch.device) -> nn.Linear:
    linear = nn.Linear(layer.in_features, layer.out_features, bias=layer.bias is not None, device="meta")
    linear.weight = nn.Parameter(layer.weight.to(device=device, dtype=torch.bfloat16), requires_grad=False)
    if layer.bias is not None:
        linear.bias = nn.Parameter(layer.bias.detach().to(device=device, dtype=torch.bfloat16), requires_grad=False)
    return linear


def weight_format(model: nn.Module) -> str:
    """What a model moved by to_device runs: "Q4_K as int4 72 %, bfloat16 28 %", or "bfloat16"."""
    counts: dict[str, int] = {}
    for module in model.modules():
        if isinstance(module, Int4Linear):
            kind = f"{module.source_type} as int4"
        elif isinstance(module, nn.Linear):
            kind = "bfloat16"
        else:
            continue
        counts[kind] = counts.get(kind, 0) + module.in_features * module.out_features
    return shares(counts) if counts else "bfloat16"

"""Linear and embedding layers that keep their weights quantised (gguf_blocks.Grouped) and multiply with qkernel.

`QuantLinear` stands in for an `nn.Linear`: it takes float rows of any leading shape and gives float32 rows, each row
computed by the same operations whatever the number of rows (see kernels/qmatmul.c), so a verify pass over k tokens
gives every token the logits a one-token step gives it. `QuantEmbedding` looks up rows of the same storage, so a
model whose output layer is tied to its embeddings keeps one quantised copy. Both can give their weight back as
floats (`weight`, `rows`) for the few readers that need them (a draft head's output rows, the doctor's fingerprint).

`quantise_linears` turns a float model's linear layers into QuantLinear (4 or 8 bits in groups of 32): the opt-in
quantisation of a model that comes in float weights.
"""

from __future__ import annotations

import ctypes

import numpy as np
import torch
from torch import nn

from specdec_core.loading import qkernel
from specdec_core.loading.gguf_blocks import Grouped, requantise


class QuantStorage(nn.Module):
    """One quantised matrix [rows, cols] in the kernel's layout, shared by the layers that read it."""

    def __init__(self, grouped: Grouped, source_type: str) -> None:
        super().__init__()
        rows, cols = grouped.q.shape
        self.shape = (rows, cols)
        self.group = grouped.group
        self.kind = 0 if grouped.nibbles else 1
        self.source_type = source_type  # the GGUF type it came from ("Q4_K"), or "int4"/"int8" when quantised here
        lib = qkernel.library()
        self.layout = qkernel.layout(lib)  # the kernel's layout of `data` (qkernel.layout): decoded by that kernel
        natural = torch.from_numpy(qkernel.pack_rows(grouped.q, nibbles=grouped.nibbles))
        self.register_buffer("data", qkernel.relayout(lib, natural, self.kind, self.group) if self.layout else natural,
                             persistent=False)
        self.register_buffer("scales", torch.from_numpy(qkernel.kernel_order(grouped.d, grouped.group)),
                             persistent=False)
        self.register_buffer("offsets", torch.from_numpy(qkernel.kernel_order(grouped.m, grouped.group)),
                             persistent=False)
        natural = qkernel.kernel_order(np.arange(cols // grouped.group, dtype=np.float32)[None, :], grouped.group)
        self.register_buffer("_natural", torch.from_numpy(natural[0]).long().argsort(), persistent=False)

    # 0: `scales` and `offsets` a float per group; 1: `scales` a K-quant's own tables (qkernel.compact_tables); 2: a
    # half-precision float per group (qkernel.table_form)
    tables = 0

    @classmethod
    def of_tensors(cls, data: torch.Tensor, scales: torch.Tensor, offsets: torch.Tensor, *, cols: int, group: int,
                   nibbles: bool, source_type: str, tables: int = 0) -> QuantStorage:
        """A storage over tensors already in the kernel's layout (qkernel.decode_into)."""
        storage = cls.__new__(cls)
        nn.Module.__init__(storage)
        storage.layout, storage.tables = qkernel.layout(qkernel.library()), tables
        storage.shape, storage.group, storage.kind = (data.shape[0], cols), group, 0 if nibbles else 1
        storage.source_type = source_type
        data = data if nibbles else data.view(torch.int8)  # signed values (the kernel reads either as bytes)
        for name, tensor in (("data", data), ("scales", scales), ("offsets", offsets)):
            storage.register_buffer(name, tensor, persistent=False)
        natural = qkernel.kernel_order(np.arange(cols // group, dtype=np.float32)[None, :], group)
        storage.register_buffer("_natural", torch.from_numpy(natural[0]).long().argsort(), persistent=False)
        return storage

    def part(self, start: int, stop: int, source_type: str) -> QuantStorage:
        """Rows start..stop-1 as a storage of their own that shares this one's tensors (`home`: this storage, for
        `joined` to find again)."""
        piece = QuantStorage.of_tensors(self.data[start:stop], self.scales[start:stop], self.offsets[start:stop],
                                        cols=self.shape[1], group=self.group, nibbles=self.kind == 0,
                                        source_type=source_type, tables=self.tables)
        piece.home = (self, start)
        return piece

    def select(self, index: torch.Tensor) -> QuantStorage:
        """Rows `index` (1-D) as a storage of their own (copies, in this one's layout): a draft head's output rows, the
        verifier's own for the head's tokens."""
        index = index.to(self.data.device).long()
        piece = QuantStorage.of_tensors(self.data[index].contiguous(), self.scales[index].contiguous(),
                                        self.offsets[index].contiguous(), cols=self.shape[1], group=self.group,
                                        nibbles=self.kind == 0, source_type=self.source_type, tables=self.tables)
        piece.layout, piece.activation_bytes = self.layout, self.activation_bytes
        return piece

    @classmethod
    def joined(cls, parts: list[QuantStorage]) -> QuantStorage:
        """One storage with the rows of `parts` (all of one layout) in order, for one product over all of them;
        each part's tensors become views of their rows in it, so the weights are held once."""
        first = parts[0]
        home = getattr(first, "home", (None, 0))[0]
        start = 0
        for part in parts:  # parts of one storage, in order and covering it: that storage is the join
            if getattr(part, "home", (None, -1)) != (home, start):
                break
            start += part.shape[0]
        else:
            if home is not None and start == home.shape[0]:
                return home
        whole = cls.__new__(cls)
        nn.Module.__init__(whole)
        whole.shape = (sum(part.shape[0] for part in parts), first.shape[1])
        whole.group, whole.kind, whole.layout, whole.tables = first.group, first.kind, first.layout, first.tables
        whole.source_type = "+".join(sorted({part.source_type for part in parts}))
        for name in ("data", "scales", "offsets"):
            joined = torch.cat([getattr(part, name) for part in parts])
            whole.register_buffer(name, joined, persistent=False)
            start = 0
            for part in parts:
                stop = start + part.shape[0]
                setattr(part, name, joined[start:stop])
                start = stop
        whole.register_buffer("_natural", first._natural, persistent=False)
        whole.activation_bytes = first.activation_bytes
        start = 0
        for part in parts:
            part.home = (whole, start)  # for set_activation_bytes, and a later join of the same parts
            start += part.shape[0]
        return whole

    def narrowed(self, lib: ctypes.CDLL) -> QuantStorage:
        """This signed-byte weight requantised to 4 bits with a minimum per group of 32 (narrow_to_4_bits)."""
        buffers = self._buffers
        offsets = buffers["offsets"] if self.tables != 1 and self.offsets_address() is not None else None
        q4, d4, m4 = qkernel.narrow(lib, buffers["data"], buffers["scales"], offsets, group=self.group,
                                    tables=self.tables, layout=self.layout, cols=self.shape[1])
        tables = qkernel.table_form(lib, "Q4_1")
        if tables == 2:
            d4, m4 = d4.half(), m4.half()  # exact: narrow rounds them to halves
        storage = QuantStorage.of_tensors(qkernel.relayout(lib, q4, 0, 32), d4, m4, cols=self.shape[1], group=32,
                                          nibbles=True, source_type="int4", tables=tables)
        storage.activation_bytes = self.activation_bytes
        return storage

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.data, self.scales, self.offsets))

    def rows(self, index: torch.Tensor) -> torch.Tensor:
        """Rows `index` (any shape) as float32 [..., cols], exactly w = d * q + m."""
        q, scales, offsets = self.integers(index.reshape(-1))
        groups = self.shape[1] // self.group
        values = q.to(torch.float32).reshape(-1, groups, self.group) * scales.unsqueeze(-1) + offsets.unsqueeze(-1)
        return values.reshape(*index.shape, self.shape[1])

    def integers(self, index: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Rows `index` (1-D; None: all) as the integers q [n, cols] (0..15, or signed 8-bit values) and the scales
        d and offsets m [n, cols / group] of w = d * q + m, all in the weight's own column order."""
        flat = torch.arange(self.shape[0]) if index is None else index
        flat = flat.to(self.data.device)
        raw = self.data[flat]
        if self.layout:
            raw = qkernel.relayout(qkernel.library(), raw.cpu(), self.kind, self.group, to_natural=True).to(raw.device)
        if self.kind == 0:
            halves = torch.stack([raw & 0x0F, raw >> 4], dim=-2)  # [n, 2, cols / 2]: values j and j + 16 of a group
            q = halves.reshape(flat.shape[0], 2, -1, 16).transpose(1, 2).reshape(flat.shape[0], -1)
        else:
            q = raw
        scales, offsets = self.scales[flat], self.offsets[flat]
        if self.tables == 1:
            scales, offsets = qkernel.k_tables_as_floats(scales.cpu(), self.group)
            scales, offsets = scales.to(raw.device), offsets.to(raw.device)
        elif self.tables == 2:  # halves, widened exactly
            scales, offsets = scales.float(), offsets.float()
        return q, scales[:, self._natural], offsets[:, self._natural]

    activation_bytes = 2  # how finely each product quantises its input rows (set_activation_bytes)

    def offsets_address(self) -> int | None:
        """The offsets' address for the kernel, or None where every offset is zero (Q4_0, Q5_0, Q6_K and Q8_0 have
        none): the kernel then reads no offsets, a sixth of a Q6_K weight's bytes. Looked at once per tensor."""
        offsets = self._buffers["offsets"]
        if self.tables == 1:  # a K-quant's own tables: offsets for groups of 32 (Q4_K, Q5_K), none for Q6_K's 16
            return self._buffers["scales"].data_ptr() if self.group == 32 else None
        known = self.__dict__.get("_offsets_at")
        if known is None or known[0] != offsets.data_ptr():
            address = offsets.data_ptr()
            known = self.__dict__["_offsets_at"] = (address, address if bool(offsets.any()) else None)
        return known[1]

    def product(self, lib: ctypes.CDLL, x: torch.Tensor) -> torch.Tensor:
        buffers = self._buffers  # read directly: nn.Module's attribute lookup costs more than the product's setup
        data, scales, offsets = buffers["data"], buffers["scales"], buffers["offsets"]
        key = (data.data_ptr(), scales.data_ptr(), offsets.data_ptr())
        weight = self.__dict__.get("_weight")
        if weight is None or weight[7] != key:  # first use, or the tensors moved (a join, `.to`)
            weight = self.__dict__["_weight"] = (self.kind, key[0], key[1], self.offsets_address(), self.shape[0],
                                                 self.group, self.tables, key)
        return qkernel.product(lib, weight, x, qkernel.threads(), self.activation_bytes)


class QuantLinear(nn.Module):
    """y = x @ W.T + b with W quantised; float32 out."""

    def __init__(self, storage: QuantStorage, bias: torch.Tensor | None, lib: ctypes.CDLL) -> None:
        super().__init__()
        self.storage = storage
        self.out_features, self.in_features = storage.shape
        self.bias = nn.Parameter(bias.to(torch.float32), requires_grad=False) if bias is not None else None
        self._lib = lib

    @property
    def weight(self) -> torch.Tensor:
        """The weight as floats (a new tensor of out x in float32: for readers that need it once)."""
        return self.storage.rows(torch.arange(self.out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(-1, self.in_features).to(torch.float32).contiguous()
        out = self.storage.product(self._lib, rows)
        if self.bias is not None:
            out += self.bias
        return out.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, {self.storage.source_type}"


class QuantEmbedding(nn.Module):
    """Token embeddings looked up from quantised rows."""

    def __init__(self, storage: QuantStorage) -> None:
        super().__init__()
        self.storage = storage
        self.num_embeddings, self.embedding_dim = storage.shape

    @property
    def weight(self) -> torch.Tensor:
        return self.storage.rows(torch.arange(self.num_embeddings))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.storage.rows(ids)


def quantise_linears(model: nn.Module, *, bits: int, lib: ctypes.CDLL) -> int:
    """Replace every nn.Linear whose input width is a multiple of 32 by a QuantLinear of `bits` (4: asymmetric, 8:
    symmetric, groups of 32); the number replaced. A tied output layer gets its own quantised copy."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and child.in_features % 32 == 0:
                grouped = requantise(child.weight.detach().to(torch.float32).numpy(), bits=bits)
                storage = QuantStorage(grouped, f"int{bits}")
                bias = child.bias.detach() if child.bias is not None else None
                setattr(parent, name, QuantLinear(storage, bias, lib))
                replaced += 1
    return replaced


def narrow_to_4_bits(model: nn.Module) -> int:
    """Requantise the layers of `model` held in more than 4 bits (Q5_0, Q6_K, Q8_0 ...: signed bytes in the kernel) to
    4 bits with a minimum per group of 32 (as Q4_1): about half the bytes each step reads. For a draft only, whose
    precision moves how often its tokens are accepted, never what the verifier outputs. Layers that shared a storage
    share the new one; embeddings keep theirs. The number of layers requantised."""
    lib = qkernel.library()
    narrowed: dict[int, QuantStorage] = {}
    count = 0
    for module in model.modules():
        if not isinstance(module, QuantLinear) or module.storage.kind != 1 or module.in_features % 32:
            continue
        old = module.storage
        if id(old) not in narrowed:
            narrowed[id(old)] = old.narrowed(lib)
        module.storage, module._lib = narrowed[id(old)], lib
        count += 1
    return count


class OutputSubset(nn.Module):
    """A draft's output layer over part of its vocabulary: the ids below `KEEP` (in a BPE vocabulary the earlier
    merges, the frequent tokens), the special tokens, and every token the draft has read since (the conversation's
    own rarer tokens, a code fence among them). The other tokens' logits are -inf, so the draft never proposes them;
    the verifier's distribution is untouched, since rejection sampling takes any draft distribution (Leviathan et al.
    2023, Algorithm 1), and greedy verification any guess. As FR-Spec (Zhao et al. 2025) does for its drafts. The
    output layer is most of a small draft's bytes a token beside a large vocabulary (the 0.5B Qwen's 151,936 rows: 27
    % of its narrowed step)."""

    KEEP = 32768

    def __init__(self, full: QuantLinear, keep: torch.Tensor) -> None:
        super().__init__()
        self.full = full
        self.out_features, self.in_features = full.out_features, full.in_features
        self._kept = set(int(i) for i in keep.tolist())
        self._pending: set[int] = set()
        self._build()

    def _build(self) -> None:
        self._kept |= self._pending
        self._pending = set()
        keep = torch.tensor(sorted(self._kept), dtype=torch.long)
        bias = None if self.full.bias is None else self.full.bias.detach()[keep]
        # not a submodule: the model's format and its layers count the full layer once
        self.__dict__["_inner"] = QuantLinear(self.full.storage.select(keep), bias, self.full._lib)
        self.__dict__["_keep"] = keep

    def read(self, ids: torch.Tensor) -> None:
        """Tokens the draft read (an input embedding's pre-hook): from now on it may propose them too."""
        new = {int(i) for i in ids.reshape(-1).tolist()} - self._kept
        self._pending |= {i for i in new if 0 <= i < self.out_features}

    @property
    def kept(self) -> int:
        return len(self._kept) + len(self._pending)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._pending:
            self._build()
        part = self.__dict__["_inner"](x)
        out = part.new_full((*part.shape[:-1], self.out_features), float("-inf"))
        out.index_copy_(out.dim() - 1, self.__dict__["_keep"], part)
        return out


def keep_frequent_outputs(model: nn.Module, special_ids, keep_below: int = OutputSubset.KEEP) -> OutputSubset | None:
    """Give a draft model's quantised output layer an OutputSubset (ids below `keep_below`, `special_ids`, and what it
    reads, through a pre-hook on its input embeddings), where its vocabulary is more than twice that: the subset, or
    None where nothing changed."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if not isinstance(head, QuantLinear) or embeddings is None or head.out_features <= 2 * keep_below:
        return None
    keep = torch.cat([torch.arange(keep_below), torch.tensor([i for i in special_ids if 0 <= i < head.out_features],
                                                             dtype=torch.long)])
    subset = OutputSubset(head, keep)
    model.set_output_embeddings(subset)
    embeddings.register_forward_pre_hook(lambda _module, args: subset.read(args[0]))
    return subset


def set_activation_bytes(model: nn.Module, size: int) -> int:
    """Quantise the rows every quantised layer of `model` multiplies to `size` bytes per value: 2 (about 15 bits, the
    default) or 1 (as llama.cpp does: faster, and a small model's replies may change). The layers set."""
    if size not in (1, 2):
        raise ValueError(f"activations are quantised to 1 or 2 bytes, not {size}")
    storages = {id(m.storage): m.storage for m in model.modules() if isinstance(m, (QuantLinear, QuantEmbedding))}
    for module in model.modules():  # joined storages of the lean layers hang off their parts
        home = getattr(module, "home", None)
        if home is not None:
            storages[id(home[0])] = home[0]
    for storage in storages.values():
        storage.activation_bytes = size
    return len(storages)


def activation_bytes(model: nn.Module) -> int | None:
    """How finely a quantised model's layers quantise their input rows (None: no quantised layer)."""
    sizes = {m.storage.activation_bytes for m in model.modules() if isinstance(m, QuantLinear)}
    return min(sizes) if sizes else None


def weight_format(model: nn.Module) -> str:
    """What a model's linear layers hold: "float32" etc. for float weights, or the quantised types with their
    share of the weights, largest first ("Q4_K 88 %, Q6_K 12 %")."""
    counts: dict[str, int] = {}
    for module in model.modules():
        if isinstance(module, QuantLinear):
            kind = module.storage.source_type
            counts[kind] = counts.get(kind, 0) + module.in_features * module.out_features
    if not counts:
        first = next((p for p in model.parameters()), None)
        return str(first.dtype).removeprefix("torch.") if first is not None else "float32"
    return shares(counts)


def runs_gguf_types(weights: str) -> bool:
    """Whether a weight format (weight_format's, or device_quantised's) leads with a GGUF block type the kernel
    library runs as it is in the file: not float weights, nor weights quantised at load (int8, int4)."""
    return weights.split(" ", 1)[0] in qkernel.DECODED


def shares(counts: dict[str, int]) -> str:
    """Weight formats by their count of weights, as each one's share, largest first ("Q4_K 88 %, Q6_K 12 %"), or
    the one format alone."""
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda item: -item[1])
    if len(ranked) == 1:
        return ranked[0][0]
    return ", ".join(f"{kind} {100 * count / total:.0f} %" for kind, count in ranked)


def _holder(layer: nn.Module) -> nn.Module:
    """The layer that holds an output layer's rows: a draft's OutputSubset reads them from its full layer."""
    return layer.full if isinstance(layer, OutputSubset) else layer


def output_rows(layer: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Rows `ids` of a layer's weight as floats, without dequantising the rest of a quantised one."""
    layer = _holder(layer)
    if isinstance(layer, (QuantLinear, QuantEmbedding)):
        return layer.storage.rows(ids)
    weight = layer.weight.detach()
    return weight[ids.to(weight.device)]


def device_of(layer: nn.Module) -> torch.device:
    """Where a layer's weights are (a quantised layer's `weight` would be a dequantised copy)."""
    layer = _holder(layer)
    if isinstance(layer, (QuantLinear, QuantEmbedding)):
        return layer.storage.data.device
    return layer.weight.device


def row_count(layer: nn.Module) -> int:
    """A layer's output rows (an embedding's: its tokens)."""
    layer = _holder(layer)
    if isinstance(layer, (QuantLinear, QuantEmbedding)):
        return layer.storage.shape[0]
    return int(layer.weight.shape[0])

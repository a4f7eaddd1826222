"""Faster batch-1 forward passes on the CPU (float32, exact; or bfloat16 where oneDNN packs it), chosen by
measuring this machine.

Speculation pays only when verifying k tokens costs little more than decoding one. On the CPU a
forward pass of batch 1 is a series of few-row products `x @ W.T` (x: k rows, W: a weight matrix),
and BLAS libraries pick their kernels by shape. On the CPUs measured here (docs/performance.md, "Checking k
tokens on a CPU"), `F.linear` on a few rows takes well over one row's time (the opposite of what a
memory-bound product should do). Two other forms of the same product do better:

- "columns": `W @ x.T`, the weight times a few columns, runs near the memory floor for 1-2 rows (a
  single row is passed as two equal rows: BLAS has a fast kernel for two columns and a slow
  matrix-vector path on some CPUs);
- "packed": oneDNN's inner product on a copy of the weight reordered once, at load, into the blocked
  layout its kernels read. From 3 rows on it stays close to one row's cost where MKL's grows: this is what
  makes checking a tree of drafts cheap on a CPU. A layer whose packed form wins at every row count timed
  holds its weight only in that layout (`hold_packed`: the packed copy replaces the weight, so memory does not
  grow; every large layer of the Qwen2.5 pair did on an AVX-512 EPYC, a prefill's rows included:
  docs/log/2026-12.md). Any other
  layer may keep a packed copy beside its weight, which costs memory, so only while the machine and the
  model's share allow it.

Which form wins differs per CPU and BLAS, so `speed_up` times the forms on the model's own weights
(a cold pass over them, as a forward pass makes) for row counts up to `MAX_ROWS`, and gives each
`nn.Linear` the fastest one per row count. All forms compute the same fp32 dot products; only the
summation order inside the kernels differs, as it already does between 1-row and k-row calls. See
docs/performance.md, "Checking k tokens on a CPU".

This is a backend of the model loader: models.py applies it to a model it loads whole onto the CPU in
fp32, and to a draft head's output layer (see LoadedModel.head_output), with cpu_attention.py beside it. A
model loaded without it computes the same, only slower. Nothing here changes anything outside the layers
it is given, but for the plan file it keeps in the cache folder.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import platform
import time
import types
import weakref
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from specdec_core.loading import kept_files, memory

# Row counts timed: every count a chain of γ ≤ 8 feeds, then steps up to a tree of 32 nodes plus its
# root. A pass over r rows uses the plan of the smallest timed count ≥ r; longer passes (a prefill)
# keep F.linear, which is what BLAS is best at.
ROW_COUNTS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 17, 24, 33)
MAX_ROWS = ROW_COUNTS[-1]
FORMS = ("linear", "columns", "packed")
_SAMPLE_BYTES = 64 * 2**20  # weights timed per shape: more than a CPU's last-level cache, so timing is cold
_MIN_GAIN = 0.05  # another form must be this much faster than F.linear to be used
_PACKED_SHARE_OF_FREE_MEMORY = 0.5  # packed copies may take at most this share of the memory available
# ... and at most this share of the model's own weights, or _PACKED_FLOOR if that is more: a packed copy is a
# second copy of a weight, and a large model must stay within about 1.3x its weights (a 1.5B verifier whose
# every layer was packed peaked at twice its weights). Small models keep every copy that pays.
_PACKED_SHARE_OF_WEIGHTS = 0.2
_PACKED_FLOOR = 2**30
_DISABLE = "SPECDEC_CPU_MATMUL"  # "off": keep F.linear everywhere
_PLAN_VERSION = 3  # part of the plan file's name: a new way of measuring measures again


@dataclasses.dataclass(frozen=True)
class RowPlan:
    """For one weight shape: the fastest form per timed row count, and the timings (ms per form)."""

    shape: tuple[int, int]
    forms: dict[int, str]
    ms: dict[str, dict[int, float]]

    def form_for(self, rows: int) -> str:
        """The form for a pass over `rows` rows: that of the smallest timed count at or above it."""
        for count in ROW_COUNTS:
            if count >= rows:
                return self.forms.get(count, "linear")
        return "linear"

    def uses(self, form: str) -> bool:
        return form in self.forms.values()


def columns_product(x_rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """[M, in] rows times weight.T as `weight @ rows.T` ([out, M]), returned as contiguous [M, out].

    A single row is sent as two equal rows: BLAS has a fast kernel for two columns and a slow one
    for a matrix-vector product on some CPUs.
    """
    rows = x_rows.shape[0]
    operand = x_rows.repeat(2, 1) if rows == 1 else x_rows
    return torch.mm(weight, operand.t())[:, :rows].t().contiguous()


def native_bfloat16() -> bool:
    """Whether this CPU has bfloat16 instructions (AVX512-BF16 or AMX). oneDNN also runs bfloat16 on a plain
    AVX-512 CPU, emulated, and slower than float32 there (docs/log/2026-12.md, "Review fixes (session 14)")."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return torch.ops.mkldnn._is_mkldnn_bf16_supported() and any(
        bool(getattr(torch.cpu, name, lambda: False)()) for name in probes)


@functools.cache
def packing_available(dtype: torch.dtype = torch.float32) -> bool:
    """Whether this torch build has oneDNN's reordered-weight inner product on the CPU for `dtype` (and it runs:
    for bfloat16, only on CPUs with native bfloat16 instructions)."""
    try:
        if not torch.backends.mkldnn.is_available():
            return False
        if dtype == torch.bfloat16 and not native_bfloat16():
            return False
        weight, x = torch.randn(8, 4, dtype=dtype), torch.randn(3, 4, dtype=dtype)
        got = packed_product(x, pack(weight))
        tolerance = 1e-4 if dtype == torch.float32 else 2e-2
        return bool(torch.allclose(got.float(), F.linear(x, weight).float(), rtol=tolerance, atol=tolerance))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


def pack(weight: torch.Tensor) -> torch.Tensor:
    """A copy of `weight` in oneDNN's blocked layout, for `packed_product`."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach())


def packed_product(x_rows: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """[..., in] rows times the packed weight's transpose (plus bias): F.linear through oneDNN."""
    return torch.ops.mkldnn._linear_pointwise(x_rows, packed, bias, "none", [], "")


def _packed_weight(module: torch.nn.Linear, weight: torch.Tensor) -> torch.Tensor:
    """The module's packed copy of `weight`, made again if it was replaced or changed in place since (a new
    tensor may reuse a freed one's memory, so the tensor itself is compared too, not only its address)."""
    stamp = (weight.data_ptr(), weight._version)
    held = vars(module).get("_specdec_packed")
    if held is None or held[0]() is not weight or held[1] != stamp:
        held = (weakref.ref(weight), stamp, _Packed(pack(weight)))
        vars(module)["_specdec_packed"] = held
    return held[2].tensor


def _planned_forward(plan: RowPlan):
    by_rows = [plan.form_for(rows) for rows in range(MAX_ROWS + 1)]

    def forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        form = by_rows[rows] if 0 < rows <= MAX_ROWS else "linear"
        weight, bias = self.weight, self.bias  # each read goes through nn.Module.__getattr__: once per call
        if form == "linear" or x.dtype != weight.dtype or x.device.type != "cpu" or torch.is_autocast_enabled("cpu"):
            return F.linear(x, weight, bias)
        if form == "packed":
            if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
                return F.linear(x, weight, bias)  # oneDNN's op has no gradient here
            return packed_product(x, _packed_weight(self, weight), bias)
        out = columns_product(x.reshape(rows, x.shape[-1]), weight)
        if bias is not None:
            out = out + bias
        return out.reshape(*x.shape[:-1], out.shape[-1])

    return forward


def _best_ms(forms: dict[str, Callable[[], object]], repeats: int = 3) -> dict[str, float]:
    """Best time of each form over `repeats` runs, alternating the forms so that all see the same
    moments of machine load; the minimum discards runs slowed by other work."""
    for fn in forms.values():
        fn()  # warm: first-call allocations and kernel set-up
    best = dict.fromkeys(forms, float("inf"))
    for _ in range(repeats):
        for name, fn in forms.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], (time.perf_counter() - start) * 1e3)
    return best


def _fastest(timings: dict[str, float]) -> str:
    """F.linear unless another form is at least _MIN_GAIN faster; then the fastest."""
    name = min(timings, key=timings.get)
    return name if timings[name] < (1 - _MIN_GAIN) * timings["linear"] else "linear"


@torch.inference_mode()
def measure_plan(weights: list[torch.Tensor], row_counts: tuple[int, ...] = ROW_COUNTS) -> RowPlan:
    """Time every form over `weights` (same shape, used in turn) for each of `row_counts`."""
    shape = tuple(weights[0].shape)
    packed = [pack(w) for w in weights] if packing_available(weights[0].dtype) else None
    ms: dict[str, dict[int, float]] = {name: {} for name in FORMS if name != "packed" or packed}
    for rows in row_counts:
        x = torch.randn(rows, shape[1], dtype=weights[0].dtype)
        forms = {"linear": lambda x=x: [F.linear(x, w) for w in weights],
                 "columns": lambda x=x: [columns_product(x, w) for w in weights]}
        if packed:
            forms["packed"] = lambda x=x: [packed_product(x, p) for p in packed]
        for name, took in _best_ms(forms).items():
            ms[name][rows] = took
    forms_by_rows = {rows: _fastest({name: ms[name][rows] for name in ms}) for rows in row_counts}
    return RowPlan(shape=shape, forms=forms_by_rows, ms=ms)


def _sample(weights: list[torch.Tensor]) -> list[torch.Tensor]:
    """Distinct weights of one shape, up to _SAMPLE_BYTES, at least one."""
    seen: dict[int, torch.Tensor] = {}
    for weight in weights:
        seen.setdefault(weight.data_ptr(), weight)
    picked, total = [], 0
    for weight in seen.values():
        picked.append(weight)
        total += weight.numel() * weight.element_size()
        if total >= _SAMPLE_BYTES:
            break
    return picked


def applies_to(model: torch.nn.Module) -> bool:
    """A model that lies wholly on the CPU in float32, or in bfloat16 where oneDNN packs it (a CPU with native
    bfloat16), unless $SPECDEC_CPU_MATMUL is "off"."""
    if os.environ.get(_DISABLE, "").strip().lower() in ("off", "0", "false", "no"):
        return False
    params = list(model.parameters())
    if not params or any(p.device.type != "cpu" or p.dtype != params[0].dtype for p in params):
        return False
    return params[0].dtype == torch.float32 or (params[0].dtype == torch.bfloat16 and packing_available(torch.bfloat16))


def speed_up(model: torch.nn.Module, cache_dir: Path | None = None,
             on_measure: Callable[[], None] | None = None, *, hold_packed: bool = False) -> list[RowPlan]:
    """Give each nn.Linear of a CPU fp32 `model` the faster few-row forms measured here (no-op otherwise).

    Measuring takes about ten seconds for a 135M model; with `cache_dir` the plans are kept in a JSON
    file per CPU, thread count and torch version (<cache>/cpu-plans/; delete it to measure again, say
    after a measurement disturbed by other work), so later loads reuse them; `on_measure` is called
    once before measuring, when the file does not have them. `hold_packed`: see `apply_plans` (only for a
    model whose weights nothing trains or reads directly). Returns the plans (one per weight shape) as
    applied, so callers can report what was chosen.
    """
    if not applies_to(model):
        return []
    by_shape = _linears_by_shape(model)
    dtype = next(model.parameters()).dtype
    known = _read_plans(cache_dir, dtype)
    if on_measure is not None and any(shape not in known for shape in by_shape):
        on_measure()
    plans = [known.get(shape) or measure_plan(_sample([m.weight.detach() for m in modules]))
             for shape, modules in by_shape.items()]
    if any(plan.shape not in known for plan in plans):
        _write_plans(cache_dir, dtype, {**known, **{plan.shape: plan for plan in plans}})
    return apply_plans(model, plans, hold_packed=hold_packed)


def _linears_by_shape(model: torch.nn.Module) -> dict[tuple[int, int], list[torch.nn.Linear]]:
    by_shape: dict[tuple[int, int], list[torch.nn.Linear]] = defaultdict(list)
    for module in model.modules():
        # Subclasses (quantised layers...) keep their own forward; a layer already held packed is done.
        if type(module) is torch.nn.Linear and _HELD not in vars(module):
            by_shape[tuple(module.weight.shape)].append(module)
    return by_shape


def without_packing(plan: RowPlan) -> RowPlan:
    """The plan with each packed row count given the better of the other two forms."""
    def unpacked(rows: int, form: str) -> str:
        if form != "packed":
            return form
        timings = {name: plan.ms[name][rows] for name in ("linear", "columns") if rows in plan.ms.get(name, {})}
        return _fastest(timings) if "linear" in timings else "linear"

    return dataclasses.replace(plan, forms={rows: unpacked(rows, form) for rows, form in plan.forms.items()})


def packing_budget(model: torch.nn.Module) -> int:
    """Bytes of packed copies `model` may hold: a share of its weights (at least _PACKED_FLOOR), and no more
    than a share of the memory available now."""
    from specdec_core.loading.resources import weight_bytes

    weights = weight_bytes(model)
    free = memory.available_memory()
    room = _PACKED_SHARE_OF_FREE_MEMORY * (free if free is not None else 2 * 2**30)
    return int(min(room, max(_PACKED_SHARE_OF_WEIGHTS * weights, _PACKED_FLOOR)))


def _packing_gain(plan: RowPlan) -> float:
    """Milliseconds the packed form saves over the better other form, summed over the row counts using it
    (0 for a plan that was not timed)."""
    if "packed" not in plan.ms:
        return 0.0
    return sum(min(plan.ms[name][rows] for name in ("linear", "columns") if rows in plan.ms.get(name, {}))
               - plan.ms["packed"][rows] for rows, form in plan.forms.items() if form == "packed")


def apply_plans(model: torch.nn.Module, plans: list[RowPlan], *, hold_packed: bool = False) -> list[RowPlan]:
    """Route each nn.Linear whose shape has a plan through its chosen form per row count.

    With `hold_packed`, a layer whose plan is packed at every row count, and whose weight no other module
    shares or reads (tied embeddings, the output layer a draft head borrows rows of), keeps its weight in
    the packed layout only (`_hold_packed`). The other packed copies are made now, so that the first verify
    is not slowed by them, within the model's packing budget (`packing_budget`): the layers whose shapes
    gain most per byte get them first, and the others take the better of the other forms at the packed row
    counts. Returns the plans as applied (a shape with some layers packed and others not is listed with its
    packed plan).
    """
    by_shape = _linears_by_shape(model)
    parameter = next(model.parameters(), None)
    packs = packing_available(parameter.dtype if parameter is not None else torch.float32)
    budget = packing_budget(model) if packs else 0
    if hold_packed and packs:
        _hold_where_packed_wins(model, plans, by_shape)
    packed: set[torch.nn.Linear] = set()
    ranked = sorted((plan for plan in plans if plan.uses("packed")),
                    key=lambda plan: -_packing_gain(plan) / (plan.shape[0] * plan.shape[1]))
    for plan in ranked:
        for module in by_shape.get(plan.shape, []):
            nbytes = module.weight.numel() * module.weight.element_size()
            if nbytes <= budget:
                packed.add(module)
                budget -= nbytes
    held = {tuple(m.weight.shape) for m in model.modules() if _HELD in vars(m)}  # packed, with no plain form left
    applied = []
    for plan in plans:
        modules = by_shape.get(plan.shape, [])
        plain = without_packing(plan)
        applied.append(plan if plan.shape in held or any(m in packed for m in modules) else plain)
        forwards = {id(plan): _planned_forward(plan), id(plain): _planned_forward(plain)}
        for module in modules:
            chosen = plan if module in packed else plain
            if all(form == "linear" for form in chosen.forms.values()):
                continue
            module.forward = types.MethodType(forwards[id(chosen)], module)
            if chosen.uses("packed"):
                _packed_weight(module, module.weight)
    return applied


_HELD = "_specdec_held_packed"  # a layer's attribute: its weight, in the packed layout only (a _Packed)


class _Packed:
    """A weight held in oneDNN's layout. Deep copies of its layer share it: nothing writes to it, and a tensor
    in that layout cannot be copied (transformers' sampling path is given a deep copy of a draft model)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def __deepcopy__(self, memo: dict) -> _Packed:
        return self


def _hold_where_packed_wins(model: torch.nn.Module, plans: list[RowPlan],
                            by_shape: dict[tuple[int, int], list[torch.nn.Linear]]) -> None:
    """Hold packed (`_hold_packed`) every layer whose plan is packed at every row count and whose weight nothing
    else shares or reads; `by_shape` keeps only the layers left to the packing budget."""
    shared = _shared_or_read_elsewhere(model)
    for plan in plans:
        if all(plan.forms.get(rows) == "packed" for rows in ROW_COUNTS):
            modules = by_shape.get(plan.shape, [])
            for module in modules:
                if module not in shared:
                    _hold_packed(module)
            by_shape[plan.shape] = [module for module in modules if module in shared]


def _shared_or_read_elsewhere(model: torch.nn.Module) -> set[torch.nn.Linear]:
    """Linear layers whose weight must stay a plain tensor: one whose storage another parameter shares (tied
    input and output embeddings), and a language model's output layer (a draft head reads rows of it)."""
    owners: dict[int, int] = defaultdict(int)
    for _, parameter in model.named_parameters(remove_duplicate=False):
        owners[parameter.untyped_storage().data_ptr()] += 1
    out = {m for m in model.modules() if type(m) is torch.nn.Linear
           and owners[m.weight.untyped_storage().data_ptr()] > 1}
    for module in model.modules():
        output = getattr(module, "get_output_embeddings", None)
        layer = output() if callable(output) else None
        if isinstance(layer, torch.nn.Linear):
            out.add(layer)
    return out


def _hold_packed(module: torch.nn.Linear) -> None:
    """Keep `module`'s weight only as its packed copy: the plain weight is freed and `module.weight` becomes a
    zero-strided stand-in of the same shape and dtype (4 bytes), so the model still reports its sizes but
    holds each weight once (a mapped file's pages of it are given back). Every pass, a prefill's too, goes
    through the packed product."""
    weight = module.weight
    vars(module)[_HELD] = _Packed(pack(weight))
    module.weight = _StandIn.like(weight)
    module.forward = types.MethodType(_held_packed_forward, module)
    module._register_state_dict_hook(_held_weight_in_state_dict)
    memory.drop_file_pages(weight)  # a weight mapped from its file would otherwise stay resident beside its copy


class _StandIn(torch.nn.Parameter):
    """The zero-strided weight of a layer that holds its weight packed: the shape and dtype, in 4 bytes. A deep copy
    of it is another stand-in (a Parameter's own deep copy would allocate the full weight, as zeros)."""

    @classmethod
    def like(cls, weight: torch.Tensor) -> _StandIn:
        return cls(torch.zeros((), dtype=weight.dtype, device=weight.device).expand(weight.shape), requires_grad=False)

    def __deepcopy__(self, memo: dict) -> _StandIn:
        copied = memo[id(self)] = _StandIn.like(self)
        return copied


def _held_weight_in_state_dict(module: torch.nn.Module, state_dict: dict, prefix: str, local_metadata) -> None:
    """A saved layer that holds its weight packed saves the weight itself, not the zero stand-in."""
    held = vars(module).get(_HELD)
    if held is not None and prefix + "weight" in state_dict:
        state_dict[prefix + "weight"] = held.tensor.to_dense()


def _held_packed_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    packed = vars(self)[_HELD].tensor
    dtype = packed.dtype  # the packed weight's own (a `.to(dtype)` changes only the stand-in)
    if x.dtype != dtype or x.device.type != "cpu" or torch.is_autocast_enabled("cpu"):
        raise RuntimeError(f"this layer holds its weight packed for {str(dtype).removeprefix('torch.')} on the CPU "
                           f"(a {x.dtype} input on {x.device.type} cannot use it): load the model again for another "
                           f"dtype or device")
    if x.requires_grad and torch.is_grad_enabled():
        raise RuntimeError("this layer holds its weight packed for inference: no gradient flows through it "
                           "(load the model with SPECDEC_CPU_MATMUL=off to train through it)")
    return packed_product(x, packed, self.bias)


def _plan_file(cache_dir: Path | None, dtype: torch.dtype) -> Path | None:
    if cache_dir is None:
        return None
    kind = "" if dtype == torch.float32 else "-" + str(dtype).removeprefix("torch.")  # float32's name as it was
    return measurement_file(cache_dir, "cpu-plans", f"v{_PLAN_VERSION}-{machine_key()}-r{MAX_ROWS}{kind}")


def machine_key() -> str:
    """This machine as a measured speed depends on it: architecture, CPU model, torch's threads and version."""
    return f"{platform.machine()}-{cpu_name()}-t{torch.get_num_threads()}-torch{torch.__version__}"


def measurement_file(cache_dir: Path, folder: str, key: str) -> Path:
    """Where a measurement keyed by `key` is kept in the cache folder (the key made safe as a file name)."""
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in key)
    return Path(cache_dir) / folder / f"{safe}.json"


def write_measurement(path: Path, data: object) -> None:
    """Write `data` as JSON to `path` whole or not at all (processes may write it at once); a cache folder that
    cannot be written only costs measuring again next time."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(json.dumps(data, indent=1))
        os.replace(partial, path)
    except OSError:
        pass


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _read_plans(cache_dir: Path | None, dtype: torch.dtype) -> dict[tuple[int, int], RowPlan]:
    path = _plan_file(cache_dir, dtype)
    try:
        raw = (kept_files.kept_json(path, kept_files.instance_of(list), "plans are timed again") or []) if path else []
        plans = [RowPlan(shape=tuple(item["shape"]),
                         forms={int(rows): str(form) for rows, form in item["forms"].items()},
                         ms={str(name): {int(rows): float(took) for rows, took in by_rows.items()}
                             for name, by_rows in item["ms"].items()}) for item in raw]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}  # missing or damaged: measure again
    if any(set(plan.forms) != set(ROW_COUNTS) or not set(plan.forms.values()) <= set(plan.ms) <= set(FORMS)
           for plan in plans):
        return {}
    return {plan.shape: plan for plan in plans}


def _write_plans(cache_dir: Path | None, dtype: torch.dtype, plans: dict[tuple[int, int], RowPlan]) -> None:
    path = _plan_file(cache_dir, dtype)
    if path is None:
        return
    write_measurement(path, [{"shape": list(p.shape), "forms": p.forms, "ms": p.ms} for p in plans.values()])


def describe(plans: list[RowPlan]) -> str:
    """One line per shape: which form each range of row counts uses, and the 9-row timings."""
    lines = []
    for plan in plans:
        spans: list[list] = []  # [form, first, last]
        for rows in ROW_COUNTS:
            form = plan.forms.get(rows, "linear")
            if spans and spans[-1][0] == form:
                spans[-1][2] = rows
            else:
                spans.append([form, rows, rows])
        text = ", ".join(f"{form} {a}" + (f"-{b}" if b != a else "") for form, a, b in spans)
        nine = " ".join(f"{name} {by_rows[9]:.1f}" for name, by_rows in plan.ms.items() if 9 in by_rows)
        lines.append(f"{plan.shape[0]}x{plan.shape[1]}: {text}" + (f" (9 rows, ms: {nine})" if nine else ""))
    return "\n".join(lines)

"""Faster batch-1 forward passes on the CPU, in exact fp32, chosen by measuring this machine.

Speculation pays only when verifying k tokens costs little more than decoding one. On the CPU a
forward pass of batch 1 is a series of few-row products `x @ W.T` (x: k rows, W: a weight matrix),
and BLAS libraries pick their kernels by shape: on the 2-core AMD EPYC with MKL where this project
is measured, `F.linear` on 2 rows took 1.5x as long as on 1 (the opposite of what a memory-bound
product should do), while `W @ x.T` on 2 rows ran near the memory floor, faster than 1 row through
either call. Passing a single row as two equal rows makes plain decoding faster too. See
docs/performance.md, "Few-row products on the CPU".

Which form wins differs per CPU and BLAS, so `speed_up` times both forms on the model's own weights
(a cold pass over them, as a forward pass makes) for each row count up to `MAX_ROWS`, and gives each
`nn.Linear` the faster one. Both forms compute the same fp32 dot products; only the summation order
inside the BLAS differs, as it already does between 1-row and k-row calls.

It also lets transformers' SDPA attention handle grouped-query heads inside the kernel when a mask is
present, for CPU tensors only (transformers does that only without a mask, since CUDA's fast kernels
need one): on the CPU that skips copying the keys and values for every query head on each k-token
call (bit-identical output, 10-15 ms less per verify here).
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import time
import types
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

MAX_ROWS = 9  # a verify of γ ≤ 8 drafts feeds γ + 1 rows
_SAMPLE_BYTES = 64 * 2**20  # weights timed per shape: more than a CPU's last-level cache, so timing is cold
_MIN_GAIN = 0.05  # the columns form must be this much faster to be used
_DISABLE = "SPECDEC_CPU_MATMUL"  # "off": keep F.linear everywhere
_PLAN_VERSION = 2  # part of the plan file's name: a new way of measuring measures again


@dataclasses.dataclass(frozen=True)
class RowPlan:
    """For one weight shape: the row counts (1..MAX_ROWS) computed as `W @ x.T`, and the timings."""

    shape: tuple[int, int]
    column_rows: frozenset[int]
    linear_ms: dict[int, float]
    columns_ms: dict[int, float]


def columns_product(x_rows: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """[M, in] rows times weight.T as `weight @ rows.T` ([out, M]), returned as contiguous [M, out].

    A single row is sent as two equal rows: BLAS has a fast kernel for two columns and a slow one
    for a matrix-vector product on some CPUs.
    """
    rows = x_rows.shape[0]
    operand = x_rows.repeat(2, 1) if rows == 1 else x_rows
    return torch.mm(weight, operand.t())[:, :rows].t().contiguous()


def _planned_forward(plan_rows: frozenset[int]):
    def forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
        if (rows not in plan_rows or x.dtype != self.weight.dtype or x.device.type != "cpu"
                or torch.is_autocast_enabled("cpu")):
            return F.linear(x, self.weight, self.bias)
        out = columns_product(x.reshape(rows, x.shape[-1]), self.weight)
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], out.shape[-1])

    return forward


def _best_ms(forms: dict[str, Callable[[], object]], repeats: int = 3) -> dict[str, float]:
    """Best time of each form over `repeats` runs, alternating the forms so that both see the same
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


@torch.inference_mode()
def measure_plan(weights: list[torch.Tensor], max_rows: int = MAX_ROWS) -> RowPlan:
    """Time both forms over `weights` (same shape, used in turn) for 1..max_rows rows."""
    shape = tuple(weights[0].shape)
    linear_ms: dict[int, float] = {}
    columns_ms: dict[int, float] = {}
    for rows in range(1, max_rows + 1):
        x = torch.randn(rows, shape[1], dtype=weights[0].dtype)
        best = _best_ms({"linear": lambda x=x: [F.linear(x, w) for w in weights],
                         "columns": lambda x=x: [columns_product(x, w) for w in weights]})
        linear_ms[rows], columns_ms[rows] = best["linear"], best["columns"]
    faster = frozenset(r for r in linear_ms if columns_ms[r] < (1 - _MIN_GAIN) * linear_ms[r])
    return RowPlan(shape=shape, column_rows=faster, linear_ms=linear_ms, columns_ms=columns_ms)


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
    """A float32 model that lies wholly on the CPU, unless $SPECDEC_CPU_MATMUL is "off"."""
    if os.environ.get(_DISABLE, "").strip().lower() in ("off", "0", "false", "no"):
        return False
    params = list(model.parameters())
    return bool(params) and all(p.device.type == "cpu" and p.dtype == torch.float32 for p in params)


def speed_up(model: torch.nn.Module, max_rows: int = MAX_ROWS, cache_dir: Path | None = None,
             on_measure: Callable[[], None] | None = None) -> list[RowPlan]:
    """Give each nn.Linear of a CPU fp32 `model` the faster few-row form measured here (no-op otherwise).

    Measuring takes a few seconds for a 135M model; with `cache_dir` the plans are kept in a JSON
    file per CPU, thread count and torch version (<cache>/cpu-plans/; delete it to measure again, say
    after a measurement disturbed by other work), so later loads reuse them; `on_measure` is called
    once before measuring, when the file does not have them. Returns the plans (one per weight shape)
    so callers can report what was chosen.
    """
    if not applies_to(model):
        return []
    _grouped_heads_in_cpu_attention()
    by_shape = _linears_by_shape(model)
    known = _read_plans(cache_dir, max_rows)
    if on_measure is not None and any(shape not in known for shape in by_shape):
        on_measure()
    plans = [known.get(shape) or measure_plan(_sample([m.weight.detach() for m in modules]), max_rows)
             for shape, modules in by_shape.items()]
    if any(plan.shape not in known for plan in plans):
        _write_plans(cache_dir, max_rows, {**known, **{plan.shape: plan for plan in plans}})
    apply_plans(model, plans)
    return plans


def _grouped_heads_in_cpu_attention() -> None:
    """Make transformers' SDPA path pass grouped-query heads to the kernel for CPU tensors even with a
    mask (its `use_gqa_in_sdpa` says no whenever a mask is given). Other devices keep its answer. If a
    transformers release moves that function, this does nothing and attention repeats heads as before."""
    try:
        from transformers.integrations import sdpa_attention
    except ImportError:
        return
    original = getattr(sdpa_attention, "use_gqa_in_sdpa", None)
    if original is None or getattr(original, "_specdec_cpu", False):
        return

    def use_gqa_in_sdpa(attention_mask, key, *args, **kwargs):
        if key.device.type == "cpu":
            return True
        return original(attention_mask, key, *args, **kwargs)

    use_gqa_in_sdpa._specdec_cpu = True
    sdpa_attention.use_gqa_in_sdpa = use_gqa_in_sdpa


def _linears_by_shape(model: torch.nn.Module) -> dict[tuple[int, int], list[torch.nn.Linear]]:
    by_shape: dict[tuple[int, int], list[torch.nn.Linear]] = defaultdict(list)
    for module in model.modules():
        if type(module) is torch.nn.Linear:  # subclasses (quantised layers...) keep their own forward
            by_shape[tuple(module.weight.shape)].append(module)
    return by_shape


def apply_plans(model: torch.nn.Module, plans: list[RowPlan]) -> None:
    """Route each nn.Linear whose shape has a plan through the columns form for the plan's row counts."""
    by_shape = _linears_by_shape(model)
    for plan in plans:
        if plan.column_rows:
            forward = _planned_forward(plan.column_rows)
            for module in by_shape.get(plan.shape, []):
                module.forward = types.MethodType(forward, module)


def _plan_file(cache_dir: Path | None, max_rows: int) -> Path | None:
    if cache_dir is None:
        return None
    machine = (f"v{_PLAN_VERSION}-{platform.machine()}-{_cpu_name()}-t{torch.get_num_threads()}"
               f"-torch{torch.__version__}-r{max_rows}")
    safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in machine)
    return Path(cache_dir) / "cpu-plans" / f"{safe}.json"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def _read_plans(cache_dir: Path | None, max_rows: int) -> dict[tuple[int, int], RowPlan]:
    path = _plan_file(cache_dir, max_rows)
    try:
        raw = json.loads(path.read_text()) if path else []
        plans = [RowPlan(shape=tuple(item["shape"]), column_rows=frozenset(item["column_rows"]),
                         linear_ms={int(k): v for k, v in item["linear_ms"].items()},
                         columns_ms={int(k): v for k, v in item["columns_ms"].items()}) for item in raw]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}  # missing or damaged: measure again
    return {plan.shape: plan for plan in plans}


def _write_plans(cache_dir: Path | None, max_rows: int, plans: dict[tuple[int, int], RowPlan]) -> None:
    path = _plan_file(cache_dir, max_rows)
    if path is None:
        return
    items = [{"shape": list(p.shape), "column_rows": sorted(p.column_rows), "linear_ms": p.linear_ms,
              "columns_ms": p.columns_ms} for p in plans.values()]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(json.dumps(items, indent=1))
        os.replace(partial, path)
    except OSError:
        pass  # a read-only cache only costs the measurement next time


def describe(plans: list[RowPlan]) -> str:
    """One line per shape: which row counts use the columns form, and the time it saves."""
    lines = []
    for plan in plans:
        rows = ",".join(str(r) for r in sorted(plan.column_rows)) or "none"
        saved = {r: plan.linear_ms[r] - plan.columns_ms[r] for r in plan.column_rows}
        gain = " ".join(f"{r}:{plan.linear_ms[r]:.1f}->{plan.columns_ms[r]:.1f}ms" for r in sorted(saved))
        lines.append(f"{plan.shape[0]}x{plan.shape[1]}: W@x.T for rows {rows} {gain}".rstrip())
    return "\n".join(lines)

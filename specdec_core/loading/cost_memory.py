"""What checking k tokens cost this verifier on this machine, kept between processes.

The engine sizes each round's draft from measured verifier passes (verification/cost.py). A new engine knows
none: its first round checks every drafted node, and its next three are plain steps that time the reference
every tree is weighed against. So a new engine made more verifier calls per reply than one that had already
replied (docs/log/2026-12.md, "The cost model remembers this machine (session 19)"), and every `specdec
generate` process, race lane and first reply after a load started that way. So an engine recalls the figures
the last engine over the same verifier measured here, and writes its own after each reply; fresh timings
replace the recalled ones as they come (VerifyCost.recall).

One small JSON file per machine, verifier and precision, in the cache folder beside the CPU's product plans
(<cache>/verify-costs/). `SPECDEC_COST_MEMORY=off` turns it off (the test suite does, so that no test depends
on what an earlier one measured). A missing or unwritable file only means measuring afresh; a damaged one is
set aside first (kept_files.py).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from specdec_core.loading.cpu_speed import machine_key, measurement_file, write_measurement
from specdec_core.loading.kept_files import kept_json

if TYPE_CHECKING:
    from specdec_core.loading.models import LoadedModel

OFF_ENV = "SPECDEC_COST_MEMORY"  # "off": recall nothing, write nothing
_VERSION = 1  # part of the file's name: a new way of timing starts afresh


def memory_file(model: LoadedModel) -> Path | None:
    """Where `model`'s verify costs on this machine are kept, or None when nothing is to be kept."""
    key = _key(model)
    return None if key is None else measurement_file(model.cache_dir, "verify-costs", key)


def memory_off() -> bool:
    """Whether OFF_ENV turns this machine's memory of measurements off (here, and llama_cpp_figures.py's)."""
    return os.environ.get(OFF_ENV, "").lower() in ("off", "0", "no")


def _key(model: LoadedModel) -> str | None:
    if memory_off() or model.cache_dir is None:
        return None
    params = sum(p.numel() for p in model.model.parameters())
    kind = ("" if model.device.type == "cpu" else f"-{model.device.type}-{_device_name(model.device)}")
    # The CPU's product plans change the curve (cpu_speed.py): whether they are on is part of the key.
    plans = "-plain" if os.environ.get("SPECDEC_CPU_MATMUL", "").lower() == "off" else ""
    # So do quantised weights and how finely their products quantise activations ("Q4_K 72 %, ..., 8-bit ...").
    weights = f"-{hashlib.sha256(model.weights.encode()).hexdigest()[:8]}" if model.weights else ""
    if model.weights and model.device.type == "cpu":  # and which build of the kernel runs them: a new one starts afresh
        from specdec_core.loading import qkernel

        weights += f"-k{qkernel.build_id()[:8]}-t{qkernel.threads()}"
    return (f"v{_VERSION}-{machine_key()}{kind}-{model.name}-{params}-{str(model.dtype).removeprefix('torch.')}{plans}"
            f"{weights}")


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


def recalled(model: LoadedModel) -> dict[int, float]:
    """Seconds of a verifier pass by the rows it fed, as the last engine over `model` left them here ({}: none)."""
    path = memory_file(model)
    if path is None:
        return {}
    seconds = kept_json(path, costs_in, "the costs are measured afresh")
    return seconds or {}


def costs_in(raw: object) -> dict[int, float]:
    """The figures of a cost memory file's content; ValueError (or a lookup's error) when this module did not
    write them."""
    seconds = {int(rows): float(took) for rows, took in raw["seconds"].items()}  # type: ignore[index]
    if any(rows < 1 or not 0 < took < 3600 for rows, took in seconds.items()):
        raise ValueError("a figure is out of range")
    return seconds


def remember(model: LoadedModel, seconds: dict[int, float]) -> None:
    """Keep `seconds` (rows -> seconds of a pass) for the next engine over `model` on this machine."""
    path = memory_file(model)
    if path is not None and seconds:  # whole or not at all: the app and its decoding process may both write
        write_measurement(path, {"seconds": {str(rows): took for rows, took in sorted(seconds.items())}})


# A draft's time per drafting step beside the same verifier on this machine: with it, a new engine can tell at once
# that a draft cannot pay here (DraftPlanner._hopeless), instead of checking its first trees to learn it. Beside it,
# how often the draft's tokens were accepted by position: a new engine starts from what this pair usually achieves,
# not from prompt lookup's rates (DraftPlanner.start_reply).


def draft_file(verifier: LoadedModel, drafter: str) -> Path | None:
    """Where the time per step of the drafter described by `drafter` beside `verifier` is kept (None: nowhere)."""
    key = _key(verifier)
    if key is None or not drafter:
        return None
    digest = hashlib.sha256(drafter.encode()).hexdigest()[:12]
    return measurement_file(verifier.cache_dir, "draft-costs", f"{key}-{digest}")


def recalled_draft(verifier: LoadedModel, drafter: str) -> float | None:
    """Seconds per drafting step the last engine measured for this drafter beside `verifier` here (None: none)."""
    path = draft_file(verifier, drafter)
    return None if path is None else kept_json(path, step_in, "the draft's cost is measured afresh")


def step_in(raw: object) -> float:
    """The figure of a draft cost file's content; ValueError (or a lookup's error) when this module did not write it."""
    seconds = float(raw["seconds_per_step"])  # type: ignore[index]
    if not 0 < seconds < 3600:
        raise ValueError("the figure is out of range")
    return seconds


def recalled_rates(verifier: LoadedModel, drafter: str) -> tuple[float, ...] | None:
    """How often the last engine saw this drafter's tokens accepted beside `verifier`, by position (None: unknown)."""
    path = draft_file(verifier, drafter)
    return None if path is None else kept_json(path, rates_in, "the draft's acceptance is learned afresh")


def rates_in(raw: object) -> tuple[float, ...] | None:
    """The rates of a draft cost file's content (None where it keeps none); ValueError when out of range."""
    step_in(raw)
    rates = raw.get("accepted_by_position")  # type: ignore[union-attr]
    if rates is None:
        return None
    rates = tuple(float(rate) for rate in rates)
    if not rates or any(not 0.0 <= rate <= 1.0 for rate in rates):
        raise ValueError("a rate is out of range")
    return rates


def remember_draft(verifier: LoadedModel, drafter: str, seconds: float, rates: tuple[float, ...] = ()) -> None:
    """Keep the draft's time per step (and, where given, how often its tokens were accepted by position)."""
    path = draft_file(verifier, drafter)
    if path is not None and seconds > 0:
        kept: dict = {"seconds_per_step": seconds}
        if rates:
            kept["accepted_by_position"] = [round(rate, 4) for rate in rates]
        write_measurement(path, kept)

"""What llama.cpp decoded on a GGUF file on this machine, kept from the last `specdec bench --llama-cpp` over it.

Users compare absolute speed: a speedup over our own verifier alone says nothing of how that verifier stands beside
llama.cpp on the same file. The bench measures both in one run (llama_cpp.py); it leaves llama.cpp's figures here,
with ours from the same run, so that the app can show them beside the model they describe (app/models_line.py).

One small JSON file per machine (CPU, threads: cpu_speed.machine_key), GGUF file (its name and size) in the cache
folder (<cache>/llama-cpp-figures/). Nothing is measured here: a file without a bench run has no figure.
`SPECDEC_COST_MEMORY=off` (cost_memory.py) recalls nothing and writes nothing here either. A damaged file is set
aside (kept_files.py) and only means no figure.
"""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specdec_core.loading.cost_memory import memory_off
from specdec_core.loading.cpu_speed import machine_key, measurement_file, write_measurement
from specdec_core.loading.kept_files import kept_json

FOLDER = "llama-cpp-figures"
_VERSION = 1


@dataclass(frozen=True)
class LlamaCppFigure:
    """llama.cpp's decoding speed on one GGUF file here, and ours alone in the same bench run (tokens/s)."""

    alone_tokens_per_s: float  # llama.cpp alone: new tokens over decoding time, as the bench's lanes count them
    ours_alone_tokens_per_s: float | None  # specdec's verifier alone in the same run
    with_draft_tokens_per_s: float | None  # llama.cpp with the bench's draft GGUF, where it ran
    draft: str | None  # that draft's file name
    threads: int
    version: str  # llama.cpp's, as its server reports it
    measured: str  # when, ISO 8601 (UTC)
    prompts: int
    max_new_tokens: int

    @property
    def ours_over_llama_cpp(self) -> float | None:
        return self.ours_alone_tokens_per_s / self.alone_tokens_per_s if self.ours_alone_tokens_per_s else None


def figure_file(cache_dir: Path | None, gguf: Path | None) -> Path | None:
    """Where llama.cpp's figure for `gguf` on this machine is kept (None: nowhere, or the memory is off)."""
    if cache_dir is None or gguf is None or memory_off():
        return None
    try:
        size = Path(gguf).stat().st_size
    except OSError:
        return None
    return measurement_file(cache_dir, FOLDER, f"v{_VERSION}-{machine_key()}-{Path(gguf).name}-{size}")


def recalled(cache_dir: Path | None, gguf: Path | None) -> LlamaCppFigure | None:
    """The figure the last bench here left for `gguf` at this process's thread count (None: none)."""
    path = figure_file(cache_dir, gguf)
    return None if path is None else kept_json(path, figure_in, "llama.cpp's figure is not shown")


def figure_in(raw: Any) -> LlamaCppFigure:
    """A figure file's content; ValueError (or a lookup's error) when this module did not write it."""
    figure = LlamaCppFigure(**raw)
    rates = [figure.alone_tokens_per_s, figure.ours_alone_tokens_per_s, figure.with_draft_tokens_per_s]
    if any(rate is not None and not 0 < float(rate) < 1e6 for rate in rates) or figure.threads < 1:
        raise ValueError("a figure is out of range")
    return figure


def remember(cache_dir: Path | None, gguf: Path | None, llama_cpp: dict, ours_alone: float | None,
             prompts: int, max_new_tokens: int) -> LlamaCppFigure | None:
    """Keep a bench run's llama.cpp lanes (llama_cpp.run_llama_cpp's result) for `gguf`; the figure kept, or None
    when llama.cpp alone did not run."""
    from specdec_core.measuring.llama_cpp import ALONE, WITH_DRAFT

    lanes = {lane.get("lane"): lane for lane in llama_cpp.get("lanes", [])}
    drafted = lanes.get(WITH_DRAFT, {})
    # llama.cpp alone at its best, where it ran at more than one thread count (run_llama_cpp's alone_threads)
    alone = max((lane for name, lane in lanes.items() if name and (name == ALONE or name.startswith(ALONE + ","))
                 and lane.get("tokens_per_s")), key=lambda lane: lane["tokens_per_s"], default={})
    if not alone.get("tokens_per_s"):
        return None
    with_draft = drafted.get("tokens_per_s")
    figure = LlamaCppFigure(
        alone_tokens_per_s=float(alone["tokens_per_s"]),
        ours_alone_tokens_per_s=float(ours_alone) if ours_alone else None,
        with_draft_tokens_per_s=float(with_draft) if with_draft else None,
        draft=Path(drafted["draft"]).name if with_draft and drafted.get("draft") else None,
        threads=int(alone.get("threads") or llama_cpp.get("threads") or 1),
        version=str(llama_cpp.get("version") or "?").removeprefix("version:").strip(),  # "version: 6969 (abc)"
        measured=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        prompts=prompts, max_new_tokens=max_new_tokens)
    path = figure_file(cache_dir, gguf)
    if path is not None:
        write_measurement(path, asdict(figure))
    return figure

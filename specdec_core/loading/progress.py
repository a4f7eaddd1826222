"""Load progress: the events a load reports (download, convert, tune, load) and the callbacks that show them."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LoadProgress:
    stage: str  # "resolve" | "download" | "convert" | "load" | "tune" | "done"
    fraction: float | None  # 0..1 within the stage when known, None when indeterminate
    message: str  # human text, e.g. "Converting GGUF weights (first load only)"


ProgressCallback = Callable[[LoadProgress], None]


class ProgressError(Exception):
    """An exception raised by the caller's progress callback (e.g. to cancel); re-raised unchanged."""

    def __init__(self, original: BaseException):
        super().__init__(str(original))
        self.original = original


class Reporter:
    """Sends LoadProgress to the caller's callback; keeps the callback's own errors apart from ours."""

    def __init__(self, callback: ProgressCallback | None):
        self.callback = callback
        self._last: tuple[str, float] = ("", -1.0)

    def __call__(self, stage: str, fraction: float | None, message: str, *, throttle: bool = False) -> None:
        if self.callback is None:
            return
        if throttle and fraction is not None:
            # Per-tensor and per-chunk updates would flood a GUI queue: pass on whole-percent steps only.
            last_stage, last_fraction = self._last
            if last_stage == stage and fraction - last_fraction < 0.01 and fraction < 1.0:
                return
        if fraction is not None:
            fraction = min(1.0, max(0.0, fraction))
            self._last = (stage, fraction)
        try:
            self.callback(LoadProgress(stage, fraction, message))
        except BaseException as error:  # handed back to the caller untouched
            raise ProgressError(error) from error


class Discard(io.TextIOBase):
    """A stream that swallows tqdm's drawing: we report through LoadProgress instead."""

    def write(self, text: str) -> int:
        return len(text)


def tqdm_progress(file=None) -> ProgressCallback:
    """A progress callback that draws load progress with tqdm, one bar per stage (for the CLI)."""
    from tqdm.auto import tqdm

    state: dict[str, Any] = {"bar": None, "stage": None}

    def render(progress: LoadProgress) -> None:
        bar = state["bar"]
        if progress.stage != state["stage"]:
            if bar is not None:
                bar.close()
            state["stage"] = progress.stage
            bar = state["bar"] = None
            if progress.stage == "done":
                tqdm.write(progress.message, file=file)
                return
            # A stage that starts without a fraction (resolve, load) never has one: show elapsed time only.
            layout = ("{desc} ({elapsed})" if progress.fraction is None
                      else "{desc}: {percentage:3.0f}%|{bar}| {elapsed}")
            bar = state["bar"] = tqdm(total=1000, desc=progress.message, file=file, leave=False, bar_format=layout)
        if bar is None:
            return
        bar.set_description_str(progress.message, refresh=False)
        if progress.fraction is not None:
            bar.n = round(progress.fraction * 1000)
        bar.refresh()

    return render


@contextlib.contextmanager
def quiet_transformers_bars() -> Iterator[None]:
    """transformers draws its own bars ("Loading weights", "Writing model shards"); ours replace them."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()

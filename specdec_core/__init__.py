"""specdec_core: an exact speculative decoding engine, Qt-free.

The engine is a ladder of verbs: load -> prefill -> draft -> verify -> accept -> roll back -> emit.
Generation is a Python generator of frozen event dataclasses (``events.py``); the CLI, the benchmarks
and the desktop app all consume that stream. Nothing in this package imports Qt.
"""

from specdec_core.config import GenerationConfig
from specdec_core.events import (
    DraftStop,
    Event,
    Finished,
    Prefilled,
    RoundVerified,
    StopReason,
    TokenCommitted,
    TokenRejected,
    TokenState,
    Verdict,
)

__all__ = [
    "GenerationConfig",
    "DraftStop",
    "Event",
    "Finished",
    "Prefilled",
    "RoundVerified",
    "StopReason",
    "TokenCommitted",
    "TokenRejected",
    "TokenState",
    "Verdict",
]
__version__ = "0.1.0"

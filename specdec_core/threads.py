"""CPU threads for PyTorch: how many, and how idle ones wait.

Batch-1 decoding runs hundreds of small parallel regions per forward pass. PyTorch's OpenMP threads
spin between regions by default; when another process holds one of the cores, a spinning thread
waits for a descheduled sibling at every barrier and a forward pass can become 5-20x slower
(measured in docs/performance.md). Letting idle threads sleep (OMP_WAIT_POLICY=PASSIVE) removes that
cliff. OpenMP reads the setting once, when PyTorch loads, so `prefer_passive_waiting` must run before
the first `import torch`; the `specdec` commands call it first thing.
"""

from __future__ import annotations

import os
import sys


def prefer_passive_waiting() -> bool:
    """Ask OpenMP to let idle threads sleep, unless the user chose a policy. True if it can take effect."""
    if "torch" in sys.modules:
        return False
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return True


def set_threads(threads: int | None) -> int:
    """Use `threads` intra-op threads (None: PyTorch's default). Returns the number in use."""
    import torch

    if threads is not None:
        if threads < 1:
            from specdec_core.errors import ConfigError

            raise ConfigError(f"--threads must be at least 1 (got {threads})")
        torch.set_num_threads(threads)
    return torch.get_num_threads()

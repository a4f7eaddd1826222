"""CPU threads for PyTorch: how many, and how idle ones wait.

Batch-1 decoding runs hundreds of small parallel regions per forward pass. PyTorch's OpenMP threads
spin between regions by default; when another process (or the app's GUI thread) takes one of the
cores, the spinning threads wait for a descheduled sibling at every barrier and a forward pass
becomes many times slower. On a 2-core CPU (docs/performance.md, "Threads"): 1 thread is near the best
setting when the machine is quiet and the best one when it is busy; 2 spinning threads win only when nothing
else runs; 2 sleeping (OMP_WAIT_POLICY=PASSIVE) threads never beat 1 thread.

So, before torch loads, `prefer_passive_waiting` sets two defaults the user can override:
OMP_WAIT_POLICY=PASSIVE (idle threads sleep), and on machines with 2 logical CPUs or fewer
OMP_NUM_THREADS=1. $SPECDEC_THREADS, or `--threads` on the bench commands, picks another count.
OpenMP reads these once, when PyTorch loads, so the `specdec` commands call this first thing.
"""

from __future__ import annotations

import os
import sys

from specdec_core.defaults import available_cpus

# More threads than this many per logical CPU only wait for each other; OpenMP asked for 100,000 crashed.
THREADS_PER_CPU = 4


def max_threads() -> int:
    return THREADS_PER_CPU * available_cpus()


def default_threads() -> int | None:
    """$SPECDEC_THREADS (at most max_threads()), else 1 on a machine with at most 2 logical CPUs, else None
    (PyTorch decides)."""
    chosen = os.environ.get("SPECDEC_THREADS", "").strip()
    if chosen.isdigit() and int(chosen) > 0:
        return min(int(chosen), max_threads())
    return 1 if available_cpus() <= 2 else None


def prefer_passive_waiting() -> bool:
    """Set the CPU thread defaults above unless the user chose them. True if they can take effect
    (PyTorch is not loaded yet)."""
    if "torch" in sys.modules:
        return False
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    threads = default_threads()
    if threads is not None:
        os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    return True


def set_threads(threads: int | None) -> int:
    """Use `threads` intra-op threads (None: keep the default). Returns the number in use."""
    import torch

    if threads is not None:
        if not 1 <= threads <= max_threads():
            from specdec_core.errors import ConfigError

            raise ConfigError(f"--threads must be from 1 to {max_threads()}, {THREADS_PER_CPU} per logical CPU "
                              f"here (got {threads})")
        torch.set_num_threads(threads)
        os.environ["SPECDEC_THREADS"] = str(threads)  # the quantised kernel's products follow it (qkernel.threads)
    return torch.get_num_threads()

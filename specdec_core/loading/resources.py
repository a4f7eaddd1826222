"""Where the shipped files are: the draft head and the prompt sets, installed as `specdec_core.assets`
(the checkout's assets/ folder, mapped in pyproject.toml), so a checkout and an installed wheel find them
the same way; and where specdec's own cache is."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path


def default_cache_dir() -> Path:
    """Where specdec keeps what it makes (converted GGUF models, facts of found models): $SPECDEC_CACHE_DIR, else
    the platform's user cache dir."""
    override = os.environ.get("SPECDEC_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("specdec", appauthor=False))


def assets_dir() -> Path:
    """The assets folder: the checkout's assets/ in an editable install, the package's copy in a wheel.

    A real folder either way (models load from folders; pip installs wheels unzipped)."""
    return Path(str(files("specdec_core.assets")))


def peak_rss_bytes() -> int | None:
    """This process's peak resident memory so far (Linux: VmHWM; elsewhere ru_maxrss), None when unknown."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # bytes on macOS, KiB elsewhere
    except (ImportError, OSError, ValueError):
        return None


def weight_bytes(model) -> int:
    """Bytes of a torch module's parameters and buffers, each storage counted once (tied weights share one); a
    weight the CPU backend holds packed (cpu_speed._hold_packed: a zero-strided stand-in) counts its full size,
    which its packed copy takes."""
    storages, held = {}, 0
    for tensor in [*model.parameters(), *model.buffers()]:
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        if tensor.dim() and not any(tensor.stride()):
            held += tensor.numel() * tensor.element_size()
    return sum(storages.values()) + held

"""What a known model takes on this disk, for the Models dialog: its download before it is installed; once it is,
the GGUF file it is loaded from, plus the converted copy where one was made. Qt-free.

A quantised GGUF is loaded from the file as it is, so the file is what an installed model takes; a model converted
into the cache (an older install, or a format that needs it) also keeps that folder, and then both are counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specdec_core.loading import catalog


@dataclass(frozen=True)
class DiskUse:
    gguf: int  # bytes of the installed GGUF file
    converted: int  # bytes of its converted folder in the cache (0: none)

    @property
    def total(self) -> int:
        return self.gguf + self.converted


def _gb(size: int) -> str:
    return f"{size / 1e9:.2f} GB"


def folder_bytes(folder: Path) -> int:
    """The bytes of the files under `folder` (0 when it is not there)."""
    total = 0
    for path in folder.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
        except OSError:
            continue
    return total


def disk_use(model: catalog.KnownModel, cache_dir: Path) -> DiskUse | None:
    """What an installed downloadable model takes here; None when it is not installed (or comes with specdec)."""
    path, damage = catalog.install_state(model, cache_dir)  # a damaged file is listed as such, not raised here
    if path is None or damage or model.download is None:
        return None
    converted = Path(cache_dir) / "gguf" / model.download.sha256
    return DiskUse(path.stat().st_size, folder_bytes(converted) if converted.is_dir() else 0)


def size_cell(model: catalog.KnownModel, cache_dir: Path) -> tuple[str, str]:
    """The Models dialog's size cell and its tooltip."""
    if model.download is None:
        return "comes with specdec", "Installed with specdec itself"
    download = f"Download: {_gb(model.download.size)} (one GGUF file, fetched in parts)."
    use = disk_use(model, cache_dir)
    if use is None:
        return f"{_gb(model.download.size)} download", download + " Installed, it takes about as much on disk."
    if not use.converted:
        return (f"{_gb(use.total)} on disk",
                f"On disk: the GGUF file itself ({_gb(use.gguf)}), which the model is loaded from. {download}")
    return (f"{_gb(use.total)} on disk",
            f"On disk: the GGUF file ({_gb(use.gguf)}) and its converted copy in the cache ({_gb(use.converted)}). "
            + download)

"""Where the shipped files are: the draft head and the prompt sets, installed as `specdec_core.assets`
(the checkout's assets/ folder, mapped in pyproject.toml), so a checkout and an installed wheel find them
the same way."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def assets_dir() -> Path:
    """The assets folder: the checkout's assets/ in an editable install, the package's copy in a wheel.

    A real folder either way (models load from folders; pip installs wheels unzipped)."""
    return Path(str(files("specdec_core.assets")))

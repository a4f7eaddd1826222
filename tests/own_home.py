"""An empty home for the test run (torch-free: tests/conftest.py uses it before anything loads)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# Where discovery.py looks for models besides HOME: each follows HOME once unset.
PLACES = ("HF_HUB_CACHE", "HF_HOME", "OLLAMA_MODELS", "XDG_CACHE_HOME", "XDG_DATA_HOME", "LOCALAPPDATA", "APPDATA",
          "SPECDEC_MODEL_DIRS")
# And where specdec keeps its cache, conversations and settings.
_OURS = ("SPECDEC_CACHE_DIR", "SPECDEC_DATA_DIR", "XDG_CONFIG_HOME")
_MARK = "SPECDEC_TEST_HOME"  # the home this file made, inherited by the test processes


def use_own_home() -> None:
    """A home of the run's own, empty, as a newcomer's machine has: no test reads the models, caches or settings of
    the machine it runs on. On a machine with models installed, the app found them after every tiny pair it loaded
    and read their tokenizers to offer them as drafts (21 % of the app tests' time, with two Qwen models installed),
    and a result could depend on what the machine holds. specdec's cache (compiled kernels, CPU timings) starts empty
    too, as it does in CI. What locates models or caches besides HOME is unset, so that each follows HOME; tests that
    need one set it themselves. The first process (make test's main one) makes it, removed at its exit; the test
    processes inherit it."""
    if os.environ.get(_MARK) is not None and os.environ.get("HOME") == os.environ[_MARK]:
        return
    home = tempfile.mkdtemp(prefix="specdec-test-home-")
    atexit.register(shutil.rmtree, home, True)
    os.environ["HOME"] = os.environ["USERPROFILE"] = os.environ[_MARK] = home
    for name in (*PLACES, *_OURS):
        os.environ.pop(name, None)

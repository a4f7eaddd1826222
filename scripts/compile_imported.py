"""Write the bytecode of what specdec, its app and its tests import, once, at set-up.

`make setup` installs packages with `pip --no-compile`: pip would otherwise compile every file of every package
(torch alone is thousands that nothing here imports), about a minute of a fresh machine's set-up. This imports what
the app, the CLI and the tests load, with bytecode writing on, so that each later process reads it instead of
compiling its imports again. It is on even where PYTHONDONTWRITEBYTECODE is set (as pip's compile was); a module
nothing here imports is compiled when something first imports it, as Python always does.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time

sys.dont_write_bytecode = False

# The third-party modules the tests and the app load beyond what importing our own modules pulls in: the test
# stack, and the transformers model classes of the architectures the tests build (tests/tiny.py) and the loaders
# map GGUF files onto (specdec_core/loading).
THIRD_PARTY = [
    "pytest", "xdist", "xdist.remote", "pytestqt.plugin", "hypothesis", "fontTools.ttLib", "fontTools.fontBuilder",
    "transformers.models.llama.modeling_llama", "transformers.models.qwen2.modeling_qwen2",
    "transformers.models.gpt2.modeling_gpt2", "transformers.models.gpt2.tokenization_gpt2",
    "transformers.generation.utils", "transformers.generation.candidate_generator",
    "transformers.modeling_gguf_pytorch_utils", "transformers.integrations.ggml",
]
OURS = ["specdec_core", "app", "distill"]


def _import(name: str, failed: list[str]) -> None:
    try:
        importlib.import_module(name)
    except Exception as error:  # noqa: BLE001 - an optional part (Qt without a display library): compiled later
        failed.append(f"{name}: {type(error).__name__}: {error}")


def main() -> int:
    started = time.perf_counter()
    failed: list[str] = []
    for name in THIRD_PARTY:
        _import(name, failed)
    for package_name in OURS:
        _import(package_name, failed)
        package = sys.modules.get(package_name)
        if package is None:
            continue
        for module in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}."):
            if not module.name.endswith("__main__"):
                _import(module.name, failed)
    for line in failed:
        print(f"note: not compiled ahead: {line}", file=sys.stderr)
    print(f"compiled the imports of specdec, its app and its tests: {len(sys.modules)} modules in "
          f"{time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

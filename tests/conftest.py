import faulthandler
import os
import sys
from pathlib import Path

import pytest

# Before torch loads: idle OpenMP threads sleep instead of spinning, so a busy core elsewhere (another
# test process, the GUI thread) does not make every forward pass wait at its barriers.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _threads_per_test_process() -> int:
    """The CPUs this machine gives each of the test processes `make test` runs (pytest-xdist), at least one."""
    from specdec_core.defaults import available_cpus  # torch-free (the threads must be set before torch loads)

    processes = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    return max(1, available_cpus() // max(1, processes))


# Each test process (and the app and CLI processes tests start, which inherit it) runs PyTorch on its share of the
# CPUs, as specdec_core/commands/threads.py does on a 2-core machine: two processes of two threads each on two cores
# wait for descheduled siblings at every barrier, which made a real-model forward pass about three times slower.
# Tests that need another count set it themselves. pytest-xdist's workers inherit the environment of the main
# process, which loaded this file first (and runs no test): what it set here they set again for their share.
_OURS = "SPECDEC_TEST_THREADS"  # the count this file set, so that it is not taken for the user's choice
if os.environ.get("OMP_NUM_THREADS") in (None, os.environ.get(_OURS)):
    os.environ["OMP_NUM_THREADS"] = os.environ[_OURS] = str(_threads_per_test_process())
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never download anything
# No test depends on verify costs an earlier test (or run) measured (specdec_core/loading/cost_memory.py);
# the tests of that memory turn it on in a folder of their own.
os.environ["SPECDEC_COST_MEMORY"] = "off"

sys.path.insert(0, str(Path(__file__).parent))  # for `import tiny`

# `tiny` (torch, transformers) is imported where a fixture needs it, not here: make test's main process, which only
# hands files to the test processes, then starts them ~9 s sooner.
import frozen  # noqa: E402 - torch-free
import made_fonts  # noqa: E402 - torch-free
import own_home  # noqa: E402 - torch-free

own_home.use_own_home()  # before anything reads HOME: no test sees the machine's models, caches or settings

made_fonts.use_made_fonts()  # before Qt loads: every test draws with fonts it made, whatever the machine has

# A test that runs this long is hung, not slow (the slowest, on the real model, take well under a
# minute on 2 cores). faulthandler's watchdog is a C thread that needs no GIL, so it also fires on a
# deadlock that holds the GIL: it prints every thread's stack and ends the run, which CI then shows,
# instead of waiting out CI's own limit in silence.
HUNG_TEST_S = float(os.environ.get("SPECDEC_HUNG_TEST_S", "600"))
_real_stderr = None  # the terminal's stderr, kept before pytest captures fd 2 during each test


def pytest_configure(config):
    global _real_stderr
    _real_stderr = os.fdopen(os.dup(sys.stderr.fileno()), "w")


def pytest_collection_modifyitems(config, items):
    """Files with a real-model (`slow`) test run first, wherever they are (tests/app has one): they are the longest,
    and `make test`'s processes take whole files in this order, so run early they leave the short files to even out
    the processes' ends. The order within each group is kept."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.fixture(scope="session", autouse=True)
def modules_frozen():
    """As the app does before its window opens (app/gc_pin.py): the modules' objects are frozen, here with torch's
    and transformers' too, so that the full collection each window makes when it closes walks what the tests made
    (~50k objects), not every module (~450k: 0.3 s a window)."""
    import torch  # noqa: F401
    import transformers  # noqa: F401

    try:
        import app.window  # noqa: F401 - Qt's and pyqtgraph's modules, frozen with the rest
    except ImportError:  # no Qt here: the core's tests only
        pass
    frozen.freeze_what_is_alive()


@pytest.fixture(autouse=True)
def modules_stay_frozen(modules_frozen):
    """Frozen again after a test, once its garbage is collected: when a window that opened a saved conversation
    thawed everything as it closed (app/gc_pin.py), or when the collector's oldest generation has grown past
    REFREEZE_AT (modules the first tests of a process import: ~180k objects). Each window's collection at close then
    walks about what its own test made. Objects alive now that become cyclic garbage later are never collected: the
    fixtures' tiny models, and windows already closed."""
    yield
    frozen.refreeze_if_needed(collect=False)


@pytest.fixture(autouse=True)
def hung_test_watchdog():
    faulthandler.dump_traceback_later(HUNG_TEST_S, exit=True, file=_real_stderr)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def quantised_kernel():
    """The compiled quantised kernel, or the test skipped with why there is none. Asked for when a test runs, not
    when its file is collected: every test process collects every file, and only those that run such a test need
    the kernel (the first builds it into the run's cache, the others wait for it: qkernel.py)."""
    from specdec_core.loading import qkernel

    lib = qkernel.library()
    if lib is None:
        pytest.skip(f"no quantised kernel here: {qkernel.unavailable_reason()}")
    return lib


@pytest.fixture(scope="session")
def tiny_tokenizer():
    import tiny

    return tiny.make_tokenizer()


@pytest.fixture(scope="session")
def tiny_models_dir(tmp_path_factory, tiny_tokenizer):
    """Folders of tiny random models in transformers format: verifiers and drafts of three architectures."""
    import tiny

    root = tmp_path_factory.mktemp("tiny_models")
    out = {}
    for arch in ("llama", "qwen2", "gpt2"):
        out[f"{arch}-verifier"] = tiny.save_model(root / f"{arch}-verifier", arch, tiny_tokenizer, seed=1,
                                                  logit_scale=8.0)
        out[f"{arch}-draft"] = tiny.save_model(root / f"{arch}-draft", arch, tiny_tokenizer, seed=2,
                                               layers=1, hidden=16, logit_scale=8.0)
    return out


@pytest.fixture(scope="session")
def embedded_pair():
    """The real embedded default pair (verifier + shipped draft head as a hybrid), loaded once for every
    slow test that only reads it; tests that build engines of their own use its models. Offline:
    HF_HUB_OFFLINE is set above."""
    from specdec_core.pairs.pairing import LoadOptions, load_pair

    return load_pair(options=LoadOptions(device="cpu"))

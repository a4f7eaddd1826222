"""Fixtures for the GUI tests: a main window on tiny random models, in a temporary data directory."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

LOAD_TIMEOUT_MS = 60_000
REPLY_TIMEOUT_MS = 60_000


@pytest.fixture(autouse=True)
def _garbage_collected_on_the_gui_thread(qapp):
    """The app collects cyclic garbage on the GUI thread only while its window is open (app/gc_pin.py), because a
    collection on another thread finalises Qt objects there. Tests make widgets without a window, and a collection
    started by a test's reply or loading thread crashed the GUI thread's painting (a segfault in pyqtgraph's
    GraphicsView.paintEvent, 3 suite runs in about 15). So through each test automatic collection is off, and what the
    test leaves is collected here, on the GUI thread. What was alive before it is frozen, so that the collection walks
    only the test's own objects. Where the test thawed them (a window that opened a chat), they are collected and
    frozen again here, in one walk (tests/frozen.py)."""
    import gc

    import frozen

    enabled = gc.isenabled()
    gc.disable()
    gc.freeze()
    yield
    frozen.refreeze_if_needed(collect=True)
    if enabled:
        gc.enable()


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    d = tmp_path / "data"
    monkeypatch.setenv("SPECDEC_DATA_DIR", str(d))
    return d


@pytest.fixture
def make_window(qtbot, data_dir, tiny_models_dir):
    """make_window(**settings) -> a shown MainWindow with its models loaded (tiny llama pair by default)."""
    from app.settings import Settings
    from app.store import ConversationStore
    from app.window import MainWindow

    windows = []

    def make(load: bool = True, **overrides):
        settings = Settings(verifier=str(tiny_models_dir["llama-verifier"]),
                            draft=str(tiny_models_dir["llama-draft"]), drafter="model", device="cpu",
                            dtype="float32", max_new_tokens=24, calibrate=False,
                            # The tiny pair decodes in about a millisecond, where the cost model may find that
                            # no draft pays (auto: trees when greedy); tests that need trees ask for them.
                            tree_nodes=0)
        for k, v in overrides.items():
            setattr(settings, k, v)
        w = MainWindow(settings, ConversationStore(data_dir))
        qtbot.addWidget(w)
        w.show()
        windows.append(w)
        if load:
            with qtbot.waitSignal(w.models_loaded, timeout=LOAD_TIMEOUT_MS):
                w.loader.load()
            qtbot.waitUntil(lambda: w.busy in ("", "measure"), timeout=5000)  # measure: after the load (calibrate)
        return w

    yield make
    for w in windows:
        w.close()


@pytest.fixture
def send_and_wait(qtbot):
    """send_and_wait(window, text) -> the finished reply's ReplyTrace (typed into the composer, Enter)."""

    def send(window, text: str, timeout: int = REPLY_TIMEOUT_MS):
        with qtbot.waitSignal(window.reply_finished, timeout=timeout) as blocker:
            window.composer.setPlainText(text)
            window.send_from_composer()
        return blocker.args[0]

    return send

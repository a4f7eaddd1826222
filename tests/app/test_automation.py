"""`specdec-chat` automation flags, run as a user (or CI) would: a real process, offscreen."""

from __future__ import annotations

import os
import subprocess
import sys

from PySide6.QtGui import QImage


def run_app(args, tmp_path, timeout=180):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", HF_HUB_OFFLINE="1")
    return subprocess.run([sys.executable, "-m", "app.main", "--data-dir", str(tmp_path / "data"), *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_prompt_screenshot_and_quit(tiny_models_dir, tmp_path):
    shot = tmp_path / "window.png"
    r = run_app(["--verifier", str(tiny_models_dir["llama-verifier"]), "--draft",
                 str(tiny_models_dir["llama-draft"]), "--prompt", "Hello", "--max-new-tokens", "16",
                 "--size", "1480x900", "--screenshot", str(shot), "--quit-when-done", "--timeout", "150"], tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    img = QImage(str(shot))
    assert img.width() >= 1000 and img.height() >= 600
    from app.store import ConversationStore

    assert len(ConversationStore(tmp_path / "data").list()) == 1


def test_a_model_that_fails_to_load_exits_non_zero_with_the_reason(tmp_path):
    r = run_app(["--verifier", str(tmp_path / "no-such-model"), "--prompt", "Hi", "--quit-when-done",
                 "--timeout", "120"], tmp_path)
    assert r.returncode == 1
    assert "Could not load the models" in r.stderr and "no-such-model" in r.stderr

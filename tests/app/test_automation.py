"""`specdec-chat` automation flags, run as a user (or CI) would: a real process, offscreen."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
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


@pytest.mark.parametrize("flag, value, says", [
    ("--timeout", "inf", "must be from 0"), ("--timeout", "1e10", "must be from 0"),
    ("--timeout", "nan", "must be from 0"), ("--timeout", "-1", "must be from 0"),
    ("--max-new-tokens", "0", "must be at least 1"),
])
def test_a_bad_flag_is_refused_with_its_reason_and_no_traceback(flag, value, says, capsys):
    from app.main import parse_args

    with pytest.raises(SystemExit) as exit_info:
        parse_args([flag, value])
    assert exit_info.value.code == 2
    assert says in capsys.readouterr().err


def test_a_prompt_that_is_not_utf8_is_refused_before_a_window_opens(tmp_path):
    result = subprocess.run([sys.executable, "-m", "app.main", "--data-dir", str(tmp_path / "data"), "--prompt",
                             b"caf\xe9", "--quit-when-done"],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert result.returncode == 2
    assert "is not valid UTF-8 text" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()  # nothing was created that could never be saved


def test_quit_when_done_never_exits_0_having_lost_the_chat(tiny_models_dir, tmp_path):
    """Issue 25: when the database refuses every write and the recovery file cannot be written either, the
    window refused to close, and --quit-when-done exited 0 all the same: the chat was gone, the status said
    success. Now the status is 1 and stderr says what was lost."""
    import sqlite3

    from app.store import DB_NAME, ConversationStore

    data = tmp_path / "data"
    ConversationStore(data).close()
    with sqlite3.connect(data / DB_NAME) as db:  # the finished reply's save refused, as a failing disk would
        db.execute("CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN NEW.role = 'assistant' AND NEW.content "
                   "!= '' BEGIN SELECT RAISE(ABORT, 'refused'); END")
    (data / "conversations").write_text("a file where the recovery folder goes")
    r = run_app(["--verifier", str(tiny_models_dir["llama-verifier"]), "--draft", str(tiny_models_dir["llama-draft"]),
                 "--prompt", "Hello", "--max-new-tokens", "4", "--quit-when-done", "--timeout", "150"], tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "could not be saved (refused) nor kept in a recovery file" in r.stderr
    assert "Traceback" not in r.stderr

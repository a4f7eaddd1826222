"""Issue 25 in the app: hostile chat templates, and a store that never loses a chat."""

from __future__ import annotations

import json
import shutil
import time

import pytest

from specdec_core import chat

LONG_STRING_LOOP = "{% for a in 'x'*1000 %}{% for c in 'x'*10000000 %}{% endfor %}{% endfor %}"
HUGE_ALLOCATION = "{{ ('x'*3000000000)[:10] }}"


@pytest.mark.parametrize("template", [LONG_STRING_LOOP, HUGE_ALLOCATION])
def test_a_hostile_chat_template_ends_in_a_clear_message_and_the_window_goes_on(
        make_window, qtbot, tiny_models_dir, tmp_path, monkeypatch, template):
    monkeypatch.setattr(chat, "TEMPLATE_TIME_LIMIT_S", 2.0)
    folder = tmp_path / "hostile"
    shutil.copytree(tiny_models_dir["llama-verifier"], folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    for extra in folder.glob("chat_template.*"):
        extra.unlink()
    start = time.monotonic()
    w = make_window(verifier=str(folder))
    with qtbot.waitSignal(w.error_shown, timeout=30_000) as shown:
        w.composer.setPlainText("hi")
        w.send_from_composer()
    assert "chat template" in shown.args[0] and "Traceback" not in shown.args[0]
    qtbot.waitUntil(lambda: w.busy == "", timeout=10_000)
    assert time.monotonic() - start < 30

"""The app on the real embedded verifier (smollm2-135m-instruct): one reply and a race."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")


@pytest.mark.slow
def test_embedded_default_chats_and_races(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_DATA_DIR", str(tmp_path))
    from app.store import ConversationStore, Settings
    from app.window import MainWindow

    w = MainWindow(Settings(max_new_tokens=48), ConversationStore(tmp_path), persist_settings=False)
    qtbot.addWidget(w)
    w.show()
    with qtbot.waitSignal(w.models_loaded, timeout=300_000) as loaded:
        w.loader.load()
    session = loaded.args[0]
    assert session.verdict_ok and session.baseline_tps and session.baseline_tps > 0
    qtbot.waitUntil(lambda: w.busy == "", timeout=10_000)
    with qtbot.waitSignal(w.reply_finished, timeout=300_000) as done:
        w.send("Repeat exactly: the cat sat on the mat. the cat sat on the mat.")
    trace = done.args[0]
    assert trace.error is None and trace.text.strip()
    assert w.chat.bubbles[-1].body.toPlainText()
    with qtbot.waitSignal(w.race_finished, timeout=300_000) as raced:
        w.racer.race()
    assert "identical" in raced.args[0]  # greedy: speculation changed nothing
    w.close()

"""Generation controls in the app: repetition penalty, stop sequences and each chat's own system prompt."""

from __future__ import annotations

import json

from app.settings import Settings
from app.store import ConversationStore


def test_the_repetition_penalty_and_stop_sequences_reach_the_reply(make_window, send_and_wait):
    w = make_window(max_new_tokens=24)
    plain = send_and_wait(w, "Tell me a story")
    text = plain.text
    stop = next(text[i:i + 3] for i in range(4, len(text) - 3) if "\n" not in text[i:i + 3] and text[i:i + 3].strip())
    w.new_chat()
    w.settings_panel.stops.setPlainText(f"never written\\nat all\n{stop}")
    assert w.settings.stop_sequences == ["never written\nat all", stop]
    stopped = send_and_wait(w, "Tell me a story")  # greedy: the same reply, up to the stop sequence
    assert stopped.config["stop_strings"] == ("never written\nat all", stop)
    assert stopped.stop_reason == "stop_string" and w.conv.messages[-1].content == text[:text.index(stop)]
    w.settings_panel.repetition.setValue(1.3)
    assert send_and_wait(w, "Tell me a story").config["repetition_penalty"] == 1.3


def test_generation_settings_are_saved_and_a_bad_penalty_falls_back(tmp_path):
    s = Settings(repetition_penalty=1.2, stop_sequences=["###", "\nUser:"])
    s.save(tmp_path)
    back = Settings.load(tmp_path)
    assert back.repetition_penalty == 1.2 and back.stop_sequences == ["###", "\nUser:"]
    data = json.loads((tmp_path / "settings.json").read_text())
    data["repetition_penalty"] = -1
    (tmp_path / "settings.json").write_text(json.dumps(data))
    bad = Settings.load(tmp_path)
    assert bad.repetition_penalty == 1.0 and "repetition penalty" in " ".join(bad.notices)


def test_each_chat_keeps_its_own_system_prompt(make_window, send_and_wait, data_dir, qtbot):
    w = make_window(max_new_tokens=6)
    w.settings_panel.system.setPlainText("Answer like a pirate.")
    first = send_and_wait(w, "Hello")
    first_id = w.conv.id
    w.new_chat()
    assert w.settings_panel.system.toPlainText() == "Answer like a pirate."  # new chats start with the last one
    w.settings_panel.system.setPlainText("")
    second = send_and_wait(w, "Hello")
    assert second.prompt_tokens < first.prompt_tokens  # the models saw the system prompt only in the first chat
    w.conversations.open(first_id)
    qtbot.waitUntil(lambda: w.conv.id == first_id, timeout=10_000)  # read on the store's thread
    assert w.settings_panel.system.toPlainText() == "Answer like a pirate."
    w.store.save(w.conv)
    assert ConversationStore(data_dir).load(first_id).system == "Answer like a pirate."

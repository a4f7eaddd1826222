"""The window starts and opens conversations whatever the data directory holds, and says what it refused."""

from __future__ import annotations

import json

import pytest


def test_bad_files_are_reported_in_the_window_never_fatal(qtbot, data_dir, monkeypatch):
    from app.settings import Settings
    from app.store import ConversationStore
    from app.window import MainWindow

    (data_dir / "conversations").mkdir(parents=True)
    (data_dir / "conversations" / "x.json").write_text("[]")
    newer = {"format": 2, "id": "from-the-future", "title": "Future chat", "created": 1.0, "updated": 2.0,
             "messages": [{"role": "user", "content": "Hi", "created": 1.0, "mood": "curious"}]}
    (data_dir / "conversations" / "future.json").write_text(json.dumps(newer))
    (data_dir / "settings.json").write_text('{"gamma": -5, "temperature": 1e999}')
    shown: list[str] = []
    monkeypatch.setattr(MainWindow, "show_info", lambda self, text: shown.append(text))

    store = ConversationStore()
    w = MainWindow(Settings.load(store.root), store, persist_settings=False)
    qtbot.addWidget(w)
    assert w.settings.gamma == Settings().gamma and w.settings.temperature == Settings().temperature
    assert any("gamma" in t for t in shown) and any("x.json" in t for t in shown)
    # the window's own new (unsaved) chat, then the one readable saved conversation
    assert [w.conv_list.item(i).text() for i in range(w.conv_list.count())] == ["New chat", "Future chat"]

    shown.clear()
    w.conversations.open("from-the-future")
    qtbot.waitUntil(lambda: w.conv.id == "from-the-future", timeout=10_000)  # read on the store's thread
    assert w.conv.read_only and any("read-only" in t for t in shown)
    w.conversations.save()  # a reply in it would save: refused, the stored document stays as it was
    assert ConversationStore().load("from-the-future").messages[0].extra == {"mood": "curious"}


@pytest.mark.parametrize("temperature", [1e39, 3.0])
def test_a_temperature_the_settings_panel_cannot_show_is_refused_with_a_notice(qtbot, data_dir, monkeypatch,
                                                                               temperature):
    """Issue 25: settings.json's temperature 1e39 sampled the replies while the panel showed 2.00, and the next
    edit of any setting silently made it 2.0."""
    from app.settings import Settings
    from app.store import ConversationStore
    from app.window import MainWindow

    data_dir.mkdir(parents=True)
    (data_dir / "settings.json").write_text(json.dumps({"temperature": temperature, "seed": 4}))
    shown: list[str] = []
    monkeypatch.setattr(MainWindow, "show_info", lambda self, text: shown.append(text))
    store = ConversationStore()
    w = MainWindow(Settings.load(store.root), store, persist_settings=False)
    qtbot.addWidget(w)
    assert w.settings.temperature == 0.0 == w.settings_panel.temperature.value() and w.settings.seed == 4
    assert any("temperature" in t and "settings panel" in t for t in shown), shown
    w.settings_panel.seed.setValue(5)  # an edit writes every field back from the panel
    assert w.settings.temperature == 0.0

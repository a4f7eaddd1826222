"""Saved conversations and settings: atomic writes, round trips, exports. Qt-free."""

from __future__ import annotations

import json
import os

import pytest

from app.store import Conversation, ConversationStore, Message, Settings, to_html, to_json, to_markdown
from app.trace import ReplyTrace, RoundRecord, TokenRecord


def sample_trace() -> ReplyTrace:
    tokens = [
        TokenRecord(5, "Hello", "accepted", 0, 0, 0.9, 0.8, 0.89, [("Hello", 0.8), ("Hi", 0.1)], 0.01),
        TokenRecord(6, " wrld", "rejected", 0, 1, 0.6, 0.05, 0.08, [(" world", 0.7)], 0.01),
        TokenRecord(7, " world", "corrected", 0, 1, None, 0.7, None, [(" world", 0.7)], 0.01),
        TokenRecord(8, "!", "bonus", 1, 2, None, 0.9, None, [], 0.02),
    ]
    rounds = [RoundRecord(0, 2, 1, "corrected", "gamma", 2, 0.002, 0.006, 0.001, 0.009, 2),
              RoundRecord(1, 2, 2, "bonus", "gamma", 2, 0.002, 0.006, 0.001, 0.018, 5)]
    return ReplyTrace(tokens=tokens, rounds=rounds, stats={"new_tokens": 5, "tokens_per_s": 120.0},
                      stop_reason="eos", verifier="v", drafter="d", baseline_tps=80.0)


def test_conversation_round_trips_with_its_trace(tmp_path):
    store = ConversationStore(tmp_path)
    conv = Conversation(messages=[Message("user", "Say hello"), Message("assistant", "Hello world!", sample_trace())])
    conv.auto_title()
    store.save(conv)
    back = store.load(conv.id)
    assert back.title == "Say hello"
    assert back.messages[1].trace == conv.messages[1].trace
    assert back.messages[1].trace.text == "Hello world!"
    assert back.messages[1].trace.speedup() == pytest.approx(1.5)
    assert [c.id for c in store.list()] == [conv.id]


def test_a_failed_write_leaves_the_previous_save_intact(tmp_path, monkeypatch):
    store = ConversationStore(tmp_path)
    conv = Conversation(messages=[Message("user", "one")])
    store.save(conv)
    before = store.path(conv.id).read_text()
    conv.messages.append(Message("user", "two"))

    def disk_full(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", disk_full)
    with pytest.raises(OSError):
        store.save(conv)
    assert store.path(conv.id).read_text() == before
    assert [p.name for p in store.folder.iterdir()] == [f"{conv.id}.json"]  # no temp file left


def test_unreadable_files_are_skipped_in_the_list(tmp_path):
    store = ConversationStore(tmp_path)
    store.save(Conversation(messages=[Message("user", "ok")]))
    (store.folder / "broken.json").write_text("{not json")
    assert len(store.list()) == 1


def test_settings_persist_and_ignore_bad_values(tmp_path):
    s = Settings(gamma=7, temperature=0.7, drafter="model", draft="/models/d")
    s.save(tmp_path)
    assert Settings.load(tmp_path) == s
    (tmp_path / "settings.json").write_text(json.dumps({"gamma": "many", "seed": 3}))
    loaded = Settings.load(tmp_path)
    assert loaded.gamma == Settings().gamma and loaded.seed == 3


def test_exports_keep_text_colours_and_trace():
    conv = Conversation(title="Greeting", messages=[Message("user", "Say hello"),
                                                    Message("assistant", "Hello world!", sample_trace())])
    md = to_markdown(conv)
    assert "Hello world!" in md and "**You:**" in md
    page = to_html(conv)
    assert "line-through" in page and "rgba(46,160,67" in page and "wrld" in page
    assert "round 1, position 2" in page  # per-token hover titles
    data = json.loads(to_json(conv))
    assert data["messages"][1]["trace"]["tokens"][1]["state"] == "rejected"


def test_the_apps_default_draft_is_the_one_the_cli_uses():
    from app import store
    from specdec_core.pairing import DEFAULT_VERIFIER, default_draft

    shipped = default_draft(None)
    assert store.DEFAULT_VERIFIER == DEFAULT_VERIFIER
    assert (store.DEFAULT_DRAFT, store.DEFAULT_DRAFTER, store.DEFAULT_DRAFT_TOKENS) == (
        shipped.spec, shipped.kind, shipped.draft_tokens or 0)

"""Issue 25: a store that never loses a chat: locks, damage inside the file, long chats. Qt-free."""

from __future__ import annotations

import contextlib
import sqlite3
import typing

import pytest

from app import store as store_module
from app.store import Conversation, ConversationStore, Message
from app.trace import ReplyTrace, RoundRecord, TokenRecord


def long_trace(tokens: int = 64) -> ReplyTrace:
    records = [TokenRecord(i, " t", "accepted", i // 3, i % 3, 0.5, 0.5, 1.0, [(" x", 0.2), (" y", 0.1)], i * 0.01)
               for i in range(tokens)]
    rounds = [RoundRecord(r, 3, 3, "bonus", "gamma", 3, 0.002, 0.02, 0.001, r * 0.03, 3 * r + 3)
              for r in range(tokens // 3)]
    return ReplyTrace(tokens=records, rounds=rounds, stats={"new_tokens": tokens, "tokens_per_s": 30.0},
                      stop_reason="max_tokens", verifier="v", drafter="d", baseline_tps=20.0)


def chat_of(replies: int) -> Conversation:
    conv = Conversation(title="long chat")
    for i in range(replies):
        conv.messages += [Message("user", f"question {i}"), Message("assistant", " t" * 64, long_trace())]
    return conv


def test_opening_a_long_chat_resolves_each_records_type_hints_once(tmp_path, monkeypatch):
    """Issue 25: typing.get_type_hints ran for every token record (68,801 calls for 200 replies, 75 % of
    an 11-16 s open); the hints are now resolved once per record type."""
    store = ConversationStore(tmp_path)
    conv = chat_of(20)
    store.save(conv)
    calls = []
    real = typing.get_type_hints
    monkeypatch.setattr(typing, "get_type_hints", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    back = store.load(conv.id)
    assert back.messages == conv.messages
    assert len(calls) <= 5, len(calls)


@contextlib.contextmanager
def write_lock(db_path):
    """Another process's `BEGIN IMMEDIATE`: it holds the database's write lock until the block ends."""
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


@pytest.fixture
def short_lock_waits(monkeypatch):
    monkeypatch.setattr(store_module, "BUSY_TIMEOUT_S", 0.1)


def test_a_chat_the_locked_database_refuses_goes_to_a_recovery_file_and_comes_back(tmp_path, short_lock_waits):
    store = ConversationStore(tmp_path)
    conv = chat_of(2)
    store.save(conv)
    conv.messages.append(Message("user", "one more"))
    with write_lock(store.db_path):
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            store.save(conv)
        assert store.save_failed(conv.id)
        recovered = store.save_or_recover(conv)
    assert recovered is not None and recovered.exists() and "locked" in store.recovery_reason
    store.close()
    again = ConversationStore(tmp_path)
    assert again.load(conv.id).messages == conv.messages
    assert any("could not be saved" in n and conv.title in n for n in again.notices)

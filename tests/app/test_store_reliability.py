"""Issue 25: a store that never loses a chat: locks, damage inside the file, long chats. Qt-free."""

from __future__ import annotations

import typing

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

"""Issue 25: a store that never loses a chat: locks, damage inside the file, long chats. Qt-free."""

from __future__ import annotations

import contextlib
import json
import random
import shutil
import sqlite3
import typing
import zlib

import pytest

from app import store as store_module
from app import store_schema
from app.conversation import FORMAT_VERSION, Conversation, Message
from app.store import ConversationStore
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


def saved_store(root, n: int = 6) -> list[Conversation]:
    store = ConversationStore(root)
    convs = [chat_of(3) for _ in range(n)]
    for i, conv in enumerate(convs):
        conv.id = f"20250101-00000{i}-abcdef"
        conv.title = f"chat {i}"
        store.save(conv)
    store.close()
    return convs


def test_closing_the_store_checkpoints_the_wal_so_the_file_alone_holds_every_chat(tmp_path):
    convs = saved_store(tmp_path / "a", 2)
    copy = tmp_path / "b"
    copy.mkdir()
    shutil.copy(tmp_path / "a" / store_module.DB_NAME, copy / store_module.DB_NAME)
    assert {c.id for c in ConversationStore(copy).list()} == {c.id for c in convs}


@pytest.mark.parametrize("table", ["conversations", "messages", "traces"])
def test_a_dropped_table_is_recreated_and_saves_work_again(tmp_path, table):
    """Issue 25: with a table dropped every save failed, under a message that said earlier saves were intact."""
    convs = saved_store(tmp_path)
    with sqlite3.connect(tmp_path / store_module.DB_NAME) as other:
        other.execute("PRAGMA foreign_keys=OFF")
        other.execute(f"DROP TABLE {table}")
    store = ConversationStore(tmp_path)
    assert any("damaged inside" in n and f"{table} is missing" in n for n in store.notices), store.notices
    assert list(tmp_path.glob(f"{store_module.DB_NAME}.damaged-*"))
    fresh = chat_of(1)
    store.save(fresh)
    assert store.load(fresh.id).messages == fresh.messages
    if table == "traces":  # the text of every chat survives; the traces are gone
        assert [m.content for m in store.load(convs[0].id).messages] == [m.content for m in convs[0].messages]


def test_damaged_pages_are_found_at_open_and_what_can_be_read_is_recovered(tmp_path):
    """Issue 25: a damaged page made every conversation unreadable and every save fail."""
    convs = saved_store(tmp_path, 12)
    path = tmp_path / store_module.DB_NAME
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 6 * page
    rng = random.Random(1)
    for start in (3 * page, len(data) - 2 * page):  # one page in the middle, one near the end
        data[start:start + page] = bytes(rng.randrange(256) for _ in range(page))
    path.write_bytes(bytes(data))
    store = ConversationStore(tmp_path)
    assert any("damaged inside" in n and "recovered" in n for n in store.notices), store.notices
    listed = store.list()
    for info in listed:
        store.load(info.id)  # every listed conversation opens
    fresh = chat_of(1)
    store.save(fresh)
    assert store.load(fresh.id).messages == fresh.messages
    assert len(listed) >= 1 and len(convs) == 12


# --------------------------------------------------------------------------- issue 25, item 7: smaller ones


def store_with_trace_blob(root, blob: bytes) -> tuple[ConversationStore, str]:
    store = ConversationStore(root)
    conv = chat_of(1)
    store.save(conv)
    with sqlite3.connect(store.db_path) as other:
        other.execute("UPDATE traces SET data = ? WHERE conversation_id = ?", (blob, conv.id))
    return store, conv.id


def test_a_trace_of_deeply_nested_brackets_is_dropped_not_a_recursion_error(tmp_path):
    store, conv_id = store_with_trace_blob(tmp_path, zlib.compress(b"[" * 100_000))
    conv = store.load(conv_id)
    assert conv.messages[1].trace is None and [m.role for m in conv.messages] == ["user", "assistant"]
    assert any("trace of message 2 was dropped" in n for n in conv.notices)


def test_a_zlib_bomb_in_a_trace_is_refused_without_inflating_it(tmp_path, monkeypatch):
    monkeypatch.setattr(store_schema, "TRACE_SIZE_LIMIT", 1 << 20)
    store, conv_id = store_with_trace_blob(tmp_path, zlib.compress(b" " * (8 << 20), 9))
    conv = store.load(conv_id)
    assert conv.messages[1].trace is None
    assert any("larger than 1 MB" in n for n in conv.notices), conv.notices


@pytest.mark.parametrize("column, value, what", [("title", b"\xff", "title"), ("updated", "yesterday", "date"),
                                                 ("format", "one", "format"), ("id", "../evil", "id")])
def test_a_row_that_cannot_be_listed_is_named_not_hidden(tmp_path, column, value, what):
    store = ConversationStore(tmp_path)
    conv = chat_of(1)
    store.save(conv)
    with sqlite3.connect(store.db_path) as other:
        other.execute("PRAGMA foreign_keys=OFF")
        other.execute(f"UPDATE conversations SET {column} = ?", (value,))
    assert store.list() == []
    assert any("is not listed" in n and what in n for n in store.notices), store.notices


def test_a_full_disk_during_a_save_says_so(tmp_path, monkeypatch):
    """Issue 25: on a full disk SQLite rolls the transaction back by itself; the store's own ROLLBACK then
    said 'cannot rollback - no transaction is active' instead of the real reason."""
    store = ConversationStore(tmp_path)
    conv = chat_of(1)
    store.save(conv)
    real_connect = store._connect

    class FullDisk:  # what SQLite does on SQLITE_FULL: roll back, then report it
        def __init__(self, conn):
            self.conn = conn

        def execute(self, sql, *args):
            if sql.startswith("INSERT OR REPLACE INTO messages"):
                self.conn.execute("ROLLBACK")
                raise sqlite3.OperationalError("database or disk is full")
            return self.conn.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self.conn, name)

    monkeypatch.setattr(store, "_connect", lambda: FullDisk(real_connect()))
    conv.messages.append(Message("user", "more"))
    with pytest.raises(sqlite3.OperationalError, match="disk is full"):
        store.save(conv)


@pytest.mark.parametrize("reason", ["database or disk is full", "attempt to write a readonly database"])
def test_a_store_that_cannot_be_written_at_start_still_shows_its_conversations(tmp_path, monkeypatch, reason):
    """Issue 25: with a full disk or a read-only data folder at start, no saved conversation was shown."""
    convs = saved_store(tmp_path, 3)
    real_connect = sqlite3.connect

    def connect(database, *args, **kwargs):
        if not kwargs.get("uri"):  # every connection that may write fails, as on a full disk
            raise sqlite3.OperationalError(reason)
        return real_connect(database, *args, **kwargs)

    monkeypatch.setattr(store_module.sqlite3, "connect", connect)
    store = ConversationStore(tmp_path)
    assert store.read_only and any("shown read-only" in n and reason in n for n in store.notices)
    assert {info.id for info in store.list()} == {c.id for c in convs}
    assert store.load(convs[0].id).messages == convs[0].messages
    with pytest.raises(store_module.StoreReadOnlyError):
        store.save(chat_of(1))


@pytest.mark.parametrize("damage", ["PRAGMA user_version = 0", "PRAGMA user_version = -5",
                                    "ALTER TABLE messages RENAME COLUMN content TO contents"])
def test_a_damaged_schema_version_or_column_is_recovered_not_a_crash(tmp_path, damage):
    """Found by the fuzz tier: a zeroed or negative schema version raised out of the store's constructor
    ('table conversations already exists', KeyError), and a renamed column made every save fail."""
    convs = saved_store(tmp_path, 3)
    with sqlite3.connect(tmp_path / store_module.DB_NAME) as other:
        other.execute(damage)
    store = ConversationStore(tmp_path)
    assert any("damaged inside" in n and "3 conversations" in n for n in store.notices), store.notices
    assert store.load(convs[0].id).messages == convs[0].messages
    fresh = chat_of(1)
    store.save(fresh)
    assert store.load(fresh.id).messages == fresh.messages


# ---- two app instances editing one conversation ----------------------------------------------------


def contents(conv: Conversation) -> list[str]:
    return [m.content for m in conv.messages]


def test_two_instances_saving_one_conversation_keep_both_versions(tmp_path):
    """Issue 25: the last writer won (the other instance's turns were overwritten). The second save finds a
    revision it did not read and is refused; its version is kept as a conversation of its own."""
    from app.store import SaveConflict

    first, second = ConversationStore(tmp_path), ConversationStore(tmp_path)
    original = chat_of(2)
    first.save(original)
    in_first, in_second = first.load(original.id), second.load(original.id)
    for turn in range(2):  # saving again in the same instance is no conflict
        in_first.messages.append(Message("user", f"asked in the first window ({turn})"))
        first.save_in_background(in_first)
    first.save(in_first)
    in_second.messages.append(Message("user", "asked in the second window"))
    with pytest.raises(SaveConflict, match="changed by another specdec window"):
        second.save(in_second)
    assert contents(ConversationStore(tmp_path).load(original.id)) == contents(in_first)  # nothing written
    told = second.keep_both(in_second, SaveConflict(original.id, original.title, deleted=False))
    second.save(in_second)
    assert in_second.id != original.id and "Both are kept" in told and in_second.title in told
    reader = ConversationStore(tmp_path)
    assert contents(reader.load(original.id)) == contents(in_first)
    assert contents(reader.load(in_second.id)) == contents(in_second)  # whole, not only the changed turn
    assert len(reader.list()) == 2


def test_a_save_after_another_instance_deleted_the_conversation_is_no_fragment(tmp_path):
    """Issue 25: a delete in one instance followed by a save in the other left a 1-message fragment (only
    the changed message was written under the deleted id). Now the save is refused, the deletion stands,
    and the saving side's whole version is kept as a new conversation."""
    from app.store import SaveConflict

    first, second = ConversationStore(tmp_path), ConversationStore(tmp_path)
    original = chat_of(3)
    first.save(original)
    in_second = second.load(original.id)
    first.delete(original.id)
    in_second.messages.append(Message("user", "one more question"))
    with pytest.raises(SaveConflict, match="deleted by another specdec window") as conflict:
        second.save(in_second)
    assert ConversationStore(tmp_path).list() == []  # not resurrected as a fragment
    second.keep_both(in_second, conflict.value)
    second.save(in_second)
    reader = ConversationStore(tmp_path)
    assert [c.id for c in reader.list()] == [in_second.id]
    assert contents(reader.load(in_second.id)) == contents(in_second) and len(in_second.messages) == 7


def test_a_conflict_at_close_keeps_both_instead_of_a_recovery_file(tmp_path):
    first, second = ConversationStore(tmp_path), ConversationStore(tmp_path)
    original = chat_of(1)
    first.save(original)
    in_second = second.load(original.id)
    first.delete(original.id)
    in_second.messages.append(Message("user", "written while closing"))
    assert second.save_or_recover(in_second) is None
    assert in_second.id != original.id and "deleted in another specdec window" in second.notices[-1]
    assert contents(ConversationStore(tmp_path).load(in_second.id)) == contents(in_second)



def test_a_store_that_cannot_open_still_lists_the_chats_kept_in_recovery_files(tmp_path):
    """Issue 56: while the database's path is a directory, a chat kept at close is listed all the same."""
    first = ConversationStore(tmp_path / "data")
    first.db_path.unlink()
    first.db_path.mkdir()
    stuck = ConversationStore(tmp_path / "data")
    conv = chat_of(1)
    with pytest.raises(store_module.StoreReadOnlyError, match="read-only"):
        stuck.save(conv)
    assert stuck.save_failed(conv.id)
    assert stuck.save_or_recover(conv).name == f"{conv.id}{store_module.RECOVERED_SUFFIX}"
    again = ConversationStore(tmp_path / "data")
    assert [c.id for c in again.list()] == [conv.id]
    assert again.load(conv.id).messages == conv.messages


def test_what_was_added_to_a_newer_versions_chat_is_kept_beside_it(tmp_path):
    store = ConversationStore(tmp_path)
    conv = chat_of(1)
    conv.format = FORMAT_VERSION + 1
    conv.read_only = True
    conv.messages.append(Message("user", "added here"))
    path = store.save_or_recover(conv)
    kept = Conversation.from_dict(json.loads(path.read_text()))
    assert kept.id != conv.id and "this window's copy" in kept.title
    assert kept.messages[-1].content == "added here"

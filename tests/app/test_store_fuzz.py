"""Property tests: no file in the data directory, whatever its shape, crashes opening, listing or loading."""

from __future__ import annotations

import json
import math
import sqlite3
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.settings import Settings
from app.store import ConversationStore
from app.validate import InvalidData

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats() | st.text(max_size=12)
any_json = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


def maybe(value_strategy):
    return st.one_of(value_strategy, any_json)


# Documents shaped like conversations, with any field replaced by any JSON: the deep checks get exercised.
token = st.fixed_dictionaries({}, optional={
    "token_id": maybe(st.integers(0, 500)), "text": maybe(st.text(max_size=5)),
    "state": maybe(st.sampled_from(["accepted", "rejected", "bonus", "plain"])), "round": maybe(st.integers(0, 9)),
    "position": maybe(st.integers(0, 9)), "draft_prob": maybe(st.floats(0, 1)), "target_prob": maybe(st.none()),
    "accept_prob": maybe(st.floats(0, 1)), "alternatives": maybe(st.lists(st.tuples(st.text(max_size=3),
                                                                                      st.floats(0, 1)))),
    "t": maybe(st.floats(0, 9))})
trace = st.fixed_dictionaries({}, optional={
    "tokens": maybe(st.lists(token, max_size=3)), "rounds": maybe(st.lists(any_json, max_size=2)),
    "stats": maybe(st.dictionaries(st.sampled_from(["new_tokens", "tokens_per_s", "drafted", "c"]),
                                   st.integers(0, 9) | st.floats(), max_size=3)),
    "stop_reason": maybe(st.text(max_size=5)), "baseline_tps": maybe(st.floats())})
message = st.fixed_dictionaries({}, optional={
    "role": maybe(st.sampled_from(["user", "assistant"])), "content": maybe(st.text(max_size=10)),
    "created": maybe(st.floats()), "trace": maybe(trace)})
conversation = st.fixed_dictionaries({}, optional={
    "format": maybe(st.integers(0, 3)), "id": maybe(st.text(min_size=1, max_size=8)),
    "title": maybe(st.text(max_size=10)), "created": maybe(st.floats()), "updated": maybe(st.floats()),
    "system": maybe(st.text(max_size=5)), "messages": maybe(st.lists(message, max_size=3))})


def open_list_and_load_everything(root: Path, also: tuple[str, ...] = ()) -> None:
    store = ConversationStore(root)
    for conv_id in [info.id for info in store.list()] + list(also):
        try:
            conv = store.load(conv_id)
        except InvalidData:  # an unreadable conversation is reported by the window, not a crash
            continue
        conv.to_dict()
        for m in conv.messages:
            if m.trace is not None:
                m.trace.summary()
        if not conv.read_only and not store.read_only:
            store.save(conv)  # what was read back can be written again
    store.close()


@FUZZ
@given(documents=st.lists(conversation | any_json, min_size=1, max_size=3))
def test_any_conversation_files_open_list_and_load(documents):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "conversations"
        folder.mkdir()
        for i, document in enumerate(documents):
            (folder / f"{i}.json").write_text(json.dumps(document))
        open_list_and_load_everything(Path(tmp))
        open_list_and_load_everything(Path(tmp))  # and again, from the database


@FUZZ
@given(raw=st.binary(max_size=64))
def test_any_bytes_as_a_conversation_file(raw):
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "conversations").mkdir()
        (Path(tmp) / "conversations" / "x.json").write_bytes(raw)
        open_list_and_load_everything(Path(tmp))


@FUZZ
@given(rows=st.lists(st.tuples(*[scalars] * 4), min_size=1, max_size=3))
def test_any_values_in_database_rows_list_and_load(rows):
    """SQLite keeps whatever type a value had: a row edited by hand or by another tool must not crash us."""
    with tempfile.TemporaryDirectory() as tmp:
        ConversationStore(Path(tmp)).close()
        conn = sqlite3.connect(Path(tmp) / "conversations.sqlite3")
        for i, (title, updated, count, fmt) in enumerate(rows):
            conn.execute("INSERT INTO conversations VALUES (?, ?, 0, ?, '', ?, '{}', ?, NULL)",
                         (f"c{i}", _sql(title), _sql(updated), _sql(fmt), _sql(count)))
            conn.execute("INSERT INTO messages VALUES (?, 0, ?, ?, 0, ?)", (f"c{i}", _sql(title), _sql(count),
                                                                          _sql(fmt)))
        conn.commit()
        conn.close()
        open_list_and_load_everything(Path(tmp), also=tuple(f"c{i}" for i in range(len(rows))))


def _sql(value):
    """A value SQLite can bind (no lists, no NULL here, 64-bit integers), keeping its type where it can."""
    if isinstance(value, int) and not isinstance(value, bool) and not -2**63 <= value < 2**63:
        return str(value)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return b"\x00"  # the columns are NOT NULL: a blob is the other type nobody expects
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return value


@FUZZ
@given(document=any_json | st.dictionaries(st.sampled_from(["gamma", "temperature", "top_p", "seed", "drafter",
                                                              "recent_specs", "draft_tokens", "speculate"]),
                                            any_json, max_size=4))
def test_any_settings_file_loads_valid_settings(document):
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "settings.json").write_text(json.dumps(document))
        s = Settings.load(Path(tmp))
        from specdec_core.config import GenerationConfig

        GenerationConfig(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, seed=s.seed,
                         max_new_tokens=s.max_new_tokens, gamma=s.gamma, gamma_max=max(16, s.gamma),
                         confidence_cutoff=s.confidence_cutoff).validate()
        assert isinstance(s.recent_specs, list) and all(isinstance(x, str) for x in s.recent_specs)
        s.save(Path(tmp))


# ---- issue 25: damage inside the database file, locks, concurrent writers -----------------------------


def _populated(root: Path, n: int = 8) -> None:
    from app.conversation import Conversation, Message

    store = ConversationStore(root)
    for i in range(n):
        messages = [Message("user", f"question {i} " * 40), Message("assistant", "answer " * 60)]
        store.save(Conversation(id=f"20250101-00000{i}-abcdef", title=f"chat {i}", messages=messages))
    store.close()


@FUZZ
@given(damage=st.lists(st.tuples(st.integers(0, 10**6), st.binary(min_size=1, max_size=512)), min_size=1,
                       max_size=4))
def test_any_damage_inside_the_database_file_opens_lists_loads_and_saves(damage):
    from app.conversation import Conversation, Message
    from app.store import DB_NAME

    with tempfile.TemporaryDirectory() as tmp:
        _populated(Path(tmp))
        path = Path(tmp) / DB_NAME
        data = bytearray(path.read_bytes())
        for offset, garbage in damage:
            offset %= len(data)
            data[offset:offset + len(garbage)] = garbage
        path.write_bytes(bytes(data[:max(len(data), 1)]))
        open_list_and_load_everything(Path(tmp))
        store = ConversationStore(Path(tmp))
        if not store.read_only:  # a damaged store is set aside or recovered: saving works again
            conv = Conversation(messages=[Message("user", "after the damage")])
            store.save(conv)
            assert store.load(conv.id).messages == conv.messages
        store.close()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(writes=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 3)), min_size=2, max_size=12),
       lock_s=st.sampled_from([0.0, 0.05, 0.3]))
def test_two_stores_writing_one_database_under_a_lock_lose_nothing(writes, lock_s):
    """Two app instances (two stores) saving their own conversations while a third process holds the
    write lock for a moment: every save lands (the busy timeout and retries wait the lock out)."""
    import threading

    from app.conversation import Conversation, Message
    from app.store import DB_NAME

    with tempfile.TemporaryDirectory() as tmp:
        stores = [ConversationStore(Path(tmp)), ConversationStore(Path(tmp))]
        convs = [[Conversation(id=f"20250101-00000{s}-{c:06d}") for c in range(4)] for s in range(2)]
        other = sqlite3.connect(Path(tmp) / DB_NAME, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        threading.Timer(lock_s, lambda: other.execute("ROLLBACK")).start()
        futures = []
        for s, c in writes:
            conv = convs[s][c]
            conv.messages.append(Message("user", f"turn {len(conv.messages)}"))
            futures.append(stores[s].save_in_background(conv))
        for future in futures:
            future.result()
        reader = ConversationStore(Path(tmp))
        for s in range(2):
            for conv in convs[s]:
                if conv.messages:
                    assert [m.content for m in reader.load(conv.id).messages] == [m.content for m in conv.messages]
        for store in (*stores, reader):
            store.close()
        other.close()


@FUZZ
@given(steps=st.lists(st.tuples(st.integers(0, 1), st.sampled_from(["say", "say", "delete", "reopen"])),
                      min_size=1, max_size=12))
def test_two_instances_editing_one_conversation_never_lose_a_version_nor_leave_a_fragment(steps):
    """Two app instances (two stores) open one conversation and, in any order, add turns, delete it or open
    it again. Every conversation in the database is a whole version one of them saved (no fragment of a
    deleted one), and each one's last version is stored unless the other deleted it afterwards."""
    from app.conversation import Conversation, Message
    from app.store import SaveConflict

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        seed = Conversation(title="shared", messages=[Message("user", "first question")])
        ConversationStore(root).save(seed)
        stores = [ConversationStore(root), ConversationStore(root)]
        open_convs: list = [store.load(seed.id) for store in stores]
        saved_versions = {("first question",)}
        last_saved: list = [None, None]  # (id, contents) of each one's last save, until the other deletes it
        for n, (s, action) in enumerate(steps):
            store, conv = stores[s], open_convs[s]
            if conv is None:
                continue
            if action == "say":
                conv.messages.append(Message("user", f"turn {n} in window {s}"))
                try:
                    store.save(conv)
                except SaveConflict as conflict:
                    store.keep_both(conv, conflict)
                    store.save(conv)
                saved_versions.add(tuple(m.content for m in conv.messages))
                last_saved[s] = (conv.id, tuple(m.content for m in conv.messages))
            elif action == "delete":
                store.delete(conv.id)
                open_convs[s] = None
                last_saved = [None if saved and saved[0] == conv.id else saved for saved in last_saved]
            elif conv.id in {info.id for info in store.list()}:
                open_convs[s] = store.load(conv.id)
        reader = ConversationStore(root)
        stored = {info.id: tuple(m.content for m in reader.load(info.id).messages) for info in reader.list()}
        assert set(stored.values()) <= saved_versions, "a stored conversation is no version anyone saved"
        for saved in last_saved:  # kept, or grown by the other after it opened this version
            if saved is not None:
                assert stored[saved[0]][:len(saved[1])] == saved[1]
        for store in (*stores, reader):
            store.close()

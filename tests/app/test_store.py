"""Saved conversations and settings: transactions, round trips, validation of what is read, exports. Qt-free."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest

from app.conversation import Conversation, Message
from app.export_formats import to_html, to_json, to_markdown
from app.settings import Settings
from app.store import ConversationStore, StoreReadOnlyError
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


def failing_connection(store, monkeypatch, statement: str):
    """Make the store's writer fail on `statement` as a full disk would, mid-transaction."""
    real_connect = store._connect

    class Failing:
        def __init__(self, conn):
            self.conn = conn

        def execute(self, sql, *args):
            if sql.startswith(statement):
                raise sqlite3.OperationalError("database or disk is full")
            return self.conn.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self.conn, name)

    monkeypatch.setattr(store, "_connect", lambda: Failing(real_connect()))


def test_a_failed_write_leaves_the_previous_save_intact(tmp_path, monkeypatch):
    store = ConversationStore(tmp_path)
    conv = Conversation(messages=[Message("user", "one")])
    store.save(conv)
    conv.messages += [Message("assistant", "two", sample_trace()), Message("user", "three")]
    with monkeypatch.context() as m:
        failing_connection(store, m, "INSERT OR REPLACE INTO traces")
        with pytest.raises(sqlite3.OperationalError):
            store.save(conv)
    assert [m.content for m in ConversationStore(tmp_path).load(conv.id).messages] == ["one"]
    store.save(conv)  # after a failure the next save writes everything again
    assert ConversationStore(tmp_path).load(conv.id) == conv


def legacy_file(store_root, name: str, document) -> None:
    folder = store_root / "conversations"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(document if isinstance(document, str) else json.dumps(document))


def legacy_conversation(conv_id="20250101-000000-abcdef", **extra) -> dict:
    return {"format": 1, "id": conv_id, "title": "Old chat", "created": 1.0, "updated": 2.0, "system": "",
            "messages": [{"role": "user", "content": "Hi", "created": 1.0},
                         {"role": "assistant", "content": "Hello world!", "created": 1.5,
                          "trace": sample_trace().to_dict()}], **extra}


@pytest.mark.parametrize("bad", ["{not json", "[]", "null", "42", '{"id": 7}', '{"id": "x", "messages": {}}',
                                 b"\xff\xfe".decode("latin-1"), '{"id": "../../etc", "messages": []}'])
def test_bad_conversation_files_are_skipped_and_reported(tmp_path, bad):
    legacy_file(tmp_path, "good.json", legacy_conversation())
    legacy_file(tmp_path, "broken.json", bad)
    store = ConversationStore(tmp_path)
    assert [c.title for c in store.list()] == ["Old chat"]
    assert any("broken.json" in n for n in store.notices)
    assert ConversationStore(tmp_path).notices == []  # reported once, not at every start


def test_json_files_are_imported_once_with_their_traces(tmp_path):
    legacy_file(tmp_path, "a.json", legacy_conversation("a"))
    legacy_file(tmp_path, "b.json", legacy_conversation("b"))
    store = ConversationStore(tmp_path)
    assert sorted(c.id for c in store.list()) == ["a", "b"]
    assert store.load("a").messages[1].trace == sample_trace()
    store.delete("a")
    assert [c.id for c in ConversationStore(tmp_path).list()] == ["b"]  # not imported again


def test_damaged_messages_and_traces_are_dropped_not_fatal(tmp_path):
    doc = legacy_conversation()
    doc["messages"][1]["trace"]["tokens"][0]["text"] = 5  # a token whose text is a number
    doc["messages"].append("not a message")
    doc["messages"].append({"role": "wizard", "content": "?"})
    legacy_file(tmp_path, "x.json", doc)
    store = ConversationStore(tmp_path)
    conv = store.load(doc["id"])
    assert [m.content for m in conv.messages] == ["Hi", "Hello world!"]
    assert conv.messages[1].trace is None
    assert any("trace" in n for n in store.notices) and any("message 3" in n for n in store.notices)


def test_a_newer_format_opens_read_only_and_is_never_overwritten(tmp_path):
    doc = legacy_conversation(format=2, future_field={"kept": True})
    legacy_file(tmp_path, "new.json", doc)
    store = ConversationStore(tmp_path)
    (info,) = store.list()
    assert info.read_only
    conv = store.load(doc["id"])
    assert conv.read_only and "newer version" in conv.notices[0]
    assert conv.extra["future_field"] == {"kept": True}
    conv.messages.append(Message("user", "more"))
    with pytest.raises(StoreReadOnlyError):
        store.save(conv)
    again = ConversationStore(tmp_path).load(doc["id"])
    assert again.to_dict()["format"] == 2 and len(again.messages) == 2
    assert again.extra["future_field"] == {"kept": True}


def test_unknown_fields_survive_a_save(tmp_path):
    doc = legacy_conversation(tags=["work"])
    doc["messages"][0]["rating"] = 5
    legacy_file(tmp_path, "x.json", doc)
    store = ConversationStore(tmp_path)
    conv = store.load(doc["id"])
    conv.messages.append(Message("user", "and then?"))
    store.save(conv)
    saved = ConversationStore(tmp_path).load(doc["id"]).to_dict()
    assert saved["tags"] == ["work"] and saved["messages"][0]["rating"] == 5


def test_a_save_writes_only_what_changed(tmp_path, monkeypatch):
    store = ConversationStore(tmp_path)
    conv = Conversation()
    for i in range(50):
        conv.messages += [Message("user", f"q{i}"), Message("assistant", f"a{i}", sample_trace())]
    store.save(conv)
    written = []
    real = store._write
    monkeypatch.setattr(store, "_write", lambda job, conn=None: (written.append(len(job.changed)),
                                                                  real(job, conn)))
    conv.messages += [Message("user", "one more"), Message("assistant", "reply", sample_trace())]
    store.save(conv)
    conv.messages[-1].content = "reply, edited"
    store.save(conv)
    del conv.messages[-2:]  # edit and resend drops the tail
    store.save(conv)
    assert written == [2, 1, 0]
    assert ConversationStore(tmp_path).load(conv.id) == conv
    # a conversation loaded in another session saves O(reply) too
    other = ConversationStore(tmp_path)
    loaded = other.load(conv.id)
    monkeypatch.setattr(other, "_write", lambda job, conn=None: (written.append(len(job.changed)),
                                                                  ConversationStore._write(other, job, conn)))
    loaded.messages.append(Message("user", "later"))
    other.save(loaded)
    assert written[-1] == 1


def test_background_saves_are_listed_before_they_land_and_written_in_order(tmp_path):
    store = ConversationStore(tmp_path)
    conv = Conversation(messages=[Message("user", "one")])
    conv.auto_title()
    futures = [store.save_in_background(conv)]
    assert [c.title for c in store.list()] == ["one"]
    conv.title = "renamed"
    futures.append(store.save_in_background(conv))
    for f in futures:
        f.result()
    assert ConversationStore(tmp_path).load(conv.id).title == "renamed"


def test_a_save_that_lands_while_the_list_reads_the_database_is_still_listed(tmp_path, monkeypatch):
    import threading

    store = ConversationStore(tmp_path)
    gate = threading.Event()
    store._writer.submit(gate.wait)  # the write below waits until the list has read the rows
    conv = Conversation(messages=[Message("user", "one")])
    conv.auto_title()
    future = store.save_in_background(conv)
    real = store._connect()

    class ReadThenLand:
        def execute(self, sql, *args):
            rows = real.execute(sql, *args).fetchall()  # the database as it was: without the save
            gate.set()
            future.result()  # now it lands (and leaves the queue) before the list goes on
            return type("Rows", (), {"fetchall": lambda self: rows})()

    monkeypatch.setattr(store, "_connect", lambda: ReadThenLand())
    assert [c.title for c in store.list()] == ["one"]


def test_a_damaged_database_is_kept_aside_and_a_new_one_started(tmp_path):
    (tmp_path / "conversations.sqlite3").write_bytes(b"this is not a database" * 100)
    store = ConversationStore(tmp_path)
    assert store.list() == [] and any("damaged" in n or "kept" in n for n in store.notices)
    store.save(Conversation(messages=[Message("user", "ok")]))
    assert len(ConversationStore(tmp_path).list()) == 1
    assert list(tmp_path.glob("conversations.sqlite3.damaged-*"))


def test_a_database_from_a_newer_version_is_read_only(tmp_path):
    store = ConversationStore(tmp_path)
    store.save(Conversation(messages=[Message("user", "ok")]))
    store.close()
    conn = sqlite3.connect(tmp_path / "conversations.sqlite3")
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    newer = ConversationStore(tmp_path)
    assert newer.read_only and any("newer version" in n for n in newer.notices)
    assert len(newer.list()) == 1
    with pytest.raises(StoreReadOnlyError):
        newer.save(Conversation(messages=[Message("user", "lost?")]))


def test_settings_persist_and_ignore_bad_values(tmp_path):
    s = Settings(gamma=7, temperature=0.7, drafter="model", draft="/models/d")
    s.save(tmp_path)
    assert Settings.load(tmp_path) == s
    (tmp_path / "settings.json").write_text(json.dumps({"gamma": "many", "seed": 3}))
    loaded = Settings.load(tmp_path)
    assert loaded.gamma == Settings().gamma and loaded.seed == 3


@pytest.mark.parametrize("text, field", [
    ("null", None), ("[]", None), ("{not json", None), ('{"gamma": 1e999}', "gamma"),
    ('{"gamma": -5}', "gamma"), ('{"temperature": NaN}', "temperature"), ('{"top_p": Infinity}', "top_p"),
    ('{"confidence_cutoff": 2}', "confidence_cutoff"), ('{"seed": 9223372036854775808}', "seed"),
    ('{"drafter": "telepathy"}', "drafter"), ('{"recent_specs": [1, 2]}', "recent_specs"),
    ('{"draft_tokens": -1}', "draft_tokens"),
])
def test_bad_settings_fall_back_to_defaults_with_a_notice(tmp_path, text, field):
    (tmp_path / "settings.json").write_text(text)
    loaded = Settings.load(tmp_path)
    assert loaded == Settings() and loaded.notices
    if field:
        assert field in loaded.notices[0]


def test_whole_numbers_written_as_floats_still_load(tmp_path):
    (tmp_path / "settings.json").write_text('{"gamma": 5.0, "temperature": 1}')
    loaded = Settings.load(tmp_path)
    assert (loaded.gamma, loaded.temperature, loaded.notices) == (5, 1.0, [])


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
    from app.settings import Settings
    from specdec_core.pairs.pairing import default_draft

    shipped, settings = default_draft(None), Settings()
    assert default_draft(settings.verifier) is shipped
    assert (settings.draft, settings.drafter, settings.draft_tokens) == (
        shipped.spec, shipped.kind, shipped.draft_tokens or 0)


def test_a_conversation_with_nan_times_imports_with_a_notice(tmp_path):
    """SQLite stores NaN as NULL: such a file once stopped the whole import (found by the fuzz tier)."""
    legacy_file(tmp_path, "nan.json", '{"id": "n", "title": "t", "created": NaN, "updated": NaN, "messages": '
                                      '[{"role": "user", "content": "hi", "created": Infinity}]}')
    store = ConversationStore(tmp_path)
    conv = store.load("n")
    assert conv.messages[0].content == "hi" and math.isfinite(conv.created)
    assert any("created" in n for n in store.notices)


def test_implausible_trace_records_drop_the_trace(tmp_path):
    """The graphs grow a histogram up to the largest γ they see: a stored γ of 10**12 must not reach them."""
    doc = legacy_conversation()
    doc["messages"][1]["trace"]["rounds"][0]["gamma"] = 10**12
    legacy_file(tmp_path, "x.json", doc)
    assert ConversationStore(tmp_path).load(doc["id"]).messages[1].trace is None
